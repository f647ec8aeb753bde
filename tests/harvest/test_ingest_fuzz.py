"""Fuzz the JSONL record parser: untrusted bytes give InputError or a valid record, nothing else."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.errors import InputError
from govrag.harvest.ingest import parse_record
from govrag.harvest.records import RECORD_TYPES

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["type", "source_system", "external_id", "corpus", "title", "text", "author", "acl",
          "classification", "updated_at", "authority_tier", "metadata", "email", "account_id",
          "group_id", "members"]  # fmt: skip


def _check(raw: bytes) -> None:
    try:
        record = parse_record(raw, max_text_bytes=10_000)
    except InputError as exc:
        assert str(exc) and "Traceback" not in str(exc)
    else:
        assert type(record) in RECORD_TYPES.values()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(raw: bytes) -> None:
    _check(raw)


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from([*RECORD_TYPES, "other"]),
    fields=st.dictionaries(st.sampled_from(FIELDS), values, max_size=10),
)
def test_random_records(kind: str, fields: dict[str, object]) -> None:
    _check(json.dumps({**fields, "type": kind}).encode())
