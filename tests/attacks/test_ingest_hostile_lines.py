"""Attack: hostile lines in an ingest feed, and hostile sidecars in a folder source.

A careless exporter or a hostile one writes lines that Python's JSON reader and the stores
treat leniently or crash on: deep nesting, integers of thousands of digits, lone surrogate
escapes, invalid UTF-8, NaN/Infinity, repeated keys (``"acl"`` twice: which one wins?),
timestamps without a zone, and bidi-override or control characters that make two ids look
alike. The promise: each such line is reported as ``file:line: ...`` naming the field and the
fix, and skipped; every good line of the same file lands; nothing raises, nothing is partial.
A filesystem source's sidecars get the same treatment, and a bad ``_access.json`` never
widens access: its files keep their last stored rights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from govrag.harvest.connector import ConnectorKind, JsonlConnector, SourceSpec
from govrag.harvest.filesystem import FilesystemConnector
from govrag.harvest.harvester import harvest
from govrag.harvest.ingest import IngestReport, ingest_jsonl
from govrag.store.protocol import KnowledgeStore
from govrag.store.sqlite import SQLiteStore

from conftest import make_store, principal

ANA = "ana@bank.example"


def document(external_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "document",
        "source_system": "sp",
        "external_id": external_id,
        "corpus": "main",
        "text": f"wire limit memo {external_id}",
        "acl": ["G-1"],
        "classification": "internal",
        **extra,
    }


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def spliced(obj: dict[str, Any], key: str, raw: str) -> bytes:
    """``obj`` as JSON with ``key``'s value replaced by the literal ``raw`` (not JSON-valid
    in Python's sense: NaN, huge literals, repeated keys)."""
    text = json.dumps({**obj, key: "@@"})
    return text.replace('"@@"', raw).encode()


@dataclass(frozen=True)
class Line:
    name: str
    raw: bytes
    #: ``None``: a good line (it must land); else a fragment of its error message.
    error: str | None = None
    #: The document a good line stores, if any.
    doc: str | None = None


GOOD = [
    Line(
        "identity",
        line({"type": "identity", "email": ANA, "source_system": "sp", "account_id": "S-1"}),
    ),
    Line(
        "group",
        line({"type": "group", "source_system": "sp", "group_id": "G-1", "members": ["S-1"]}),
    ),
    Line("plain", line(document("plain")), doc="plain"),
    Line(
        "unicode ids",
        line(
            document(
                "café-ü-דוח-تقرير",
                title="דוח שנתי",
                text="Ünïcödé 😀 text with \u202e inside the text",
            )
        ),
        doc="café-ü-דוח-تقرير",
    ),
    Line(
        "offset time",
        line(document("offset", updated_at="2026-07-01T09:00:00+02:00")),
        doc="offset",
    ),
    Line("zulu time", line(document("zulu", updated_at="2026-07-01T00:00:00Z")), doc="zulu"),
    Line(
        "64-bit bounds",
        line(
            document(
                "bounds", metadata={"max": 2**63 - 1, "min": -(2**63), "f": 1.5e308, "neg": -0.0}
            )
        ),
        doc="bounds",
    ),
    Line("nested 8", line(document("nested", metadata={"k": [[[[[[[1]]]]]]]})), doc="nested"),
    Line("BOM", b"\xef\xbb\xbf" + line(document("bom")), doc="bom"),
    Line("NUL stripped", line(document("nul", text="a\x00b wire")), doc="nul"),
]

HOSTILE = [
    Line(
        "deep nesting",
        b'{"type":"document","metadata":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nested too deeply",
    ),
    Line(
        "deep metadata",
        line(document("bad-deep", metadata={"k": [[[[[[[[[1]]]]]]]]]})),
        "value 'k[0][0][0][0][0][0][0][0]' nests deeper than 8 levels",
    ),
    Line(
        "huge integer",
        spliced(document("bad-int"), "authority_tier", "9" * 5000),
        "field 'authority_tier': an integer of 5000 digits is too large",
    ),
    Line(
        "65-bit integer",
        line(document("bad-65", metadata={"n": 2**64})),
        "value 'n': the integer 184467440737... is beyond 64 bits; send it as a string",
    ),
    Line(
        "float overflow",
        spliced(document("bad-inf"), "metadata", '{"x": 1e400}'),
        "field 'metadata.x': the number 1e400 is too large for a float",
    ),
    Line(
        "NaN",
        spliced(document("bad-nan"), "metadata", '{"x": NaN}'),
        "field 'metadata.x': NaN is not a JSON number",
    ),
    Line(
        "Infinity",
        spliced(document("bad-infinity"), "authority_tier", "-Infinity"),
        "field 'authority_tier': -Infinity is not a JSON number",
    ),
    Line(
        "surrogate text",
        line(document("bad-sur-text", text="bad \ud800 text")),
        "field 'text': holds an unpaired surrogate ('\\ud800' at character 4)",
    ),
    Line(
        "surrogate title",
        line(document("bad-sur-title", title="\udfff")),
        "field 'title': holds an unpaired surrogate",
    ),
    Line(
        "surrogate metadata",
        line(document("bad-sur-meta", metadata={"k": ["\udc80"]})),
        "value 'k[0]' holds an unpaired surrogate",
    ),
    Line("surrogate id", line(document("bad-\ud83d")), "field 'external_id': holds an unpaired"),
    Line(
        "surrogate email",
        line(
            {
                "type": "identity",
                "email": "m\ud800@x.example",
                "source_system": "sp",
                "account_id": "S-9",
            }
        ),
        "field 'email'",
    ),
    Line(
        "invalid UTF-8",
        line(document("bad-utf8")).replace(b"wire", b"w\xffre"),
        "is not valid UTF-8 (byte",
    ),
    Line(
        "repeated acl",
        spliced(document("bad-dup"), "acl", '["G-1"], "acl": ["*"]'),
        "key 'acl' appears twice in one JSON object",
    ),
    Line(
        "naive time",
        line(document("bad-naive", updated_at="2026-07-01T00:00:00")),
        "field 'updated_at': '2026-07-01T00:00:00' has no time zone; add 'Z'",
    ),
    Line(
        "naive date",
        line(document("bad-date", updated_at="2026-07-01")),
        "field 'updated_at': '2026-07-01T00:00:00' has no time zone",
    ),
    Line(
        "bidi override id",
        line(document("bad-\u202eexe.txt")),
        "contains U+202E (right-to-left override); ids must be printable",
    ),
    Line(
        "bidi isolate acl",
        line(document("bad-iso", acl=["G-1\u2066"])),
        "field 'acl': 'G-1\\u2066' contains U+2066 (left-to-right isolate)",
    ),
    Line(
        "zero-width account",
        line(
            {
                "type": "identity",
                "email": "m@x.example",
                "source_system": "sp",
                "account_id": "S\u200d1",
            }
        ),
        "field 'account_id'",
    ),
    Line(
        "C1 control group",
        line({"type": "group", "source_system": "sp", "group_id": "G\x851", "members": []}),
        "field 'group_id'",
    ),
    Line(
        "line separator source",
        line(document("bad-ls", source_system="s\u2028p")),
        "field 'source_system'",
    ),
    Line(
        "escape in email",
        line(
            {
                "type": "identity",
                "email": "m\x1b[2J@x.example",
                "source_system": "sp",
                "account_id": "S-9",
            }
        ),
        "field 'email'",
    ),
    Line("not an object", b"[1, 2]", "must be a JSON object"),
]
GOOD_DOCS = [g.doc for g in GOOD if g.doc]


def write_file(path: Path, lines: list[Line]) -> Path:
    path.write_bytes(b"".join(item.raw + b"\n" for item in lines))
    return path


def via_ingest_jsonl(store: KnowledgeStore, path: Path, tenant: str) -> IngestReport:
    return ingest_jsonl(store, path, tenant)


def via_harvest(store: KnowledgeStore, path: Path, tenant: str) -> IngestReport:
    return harvest(JsonlConnector(path, max_text_bytes=100_000), store, tenant)


def check(
    store: KnowledgeStore, path: Path, lines: list[Line], report: IngestReport, tenant: str
) -> None:
    """Every good line landed; every bad one is reported once, by its line number."""
    bad = [(n, item) for n, item in enumerate(lines, start=1) if item.error]
    assert report.errors == len(bad), report.messages
    assert len(report.messages) == len(bad)
    for message, (number, item) in zip(report.messages, bad, strict=True):
        assert message.startswith(f"{path}:{number}: "), (item.name, message)
        assert item.error in message, (item.name, message)
        assert "Traceback" not in message and "\n" not in message
    docs = [item.doc for item in lines if item.doc]
    stored = store.stored_hashes(tenant, [("sp", d) for d in docs])
    assert sorted(d for _, d in stored) == sorted(docs)
    assert report.added == len(docs)
    hostile_ids = [f"bad-{i}" for i in ("deep", "int", "65", "inf", "nan", "dup", "naive")]
    assert store.stored_hashes(tenant, [("sp", d) for d in hostile_ids]) == {}
    if any(item.name == "identity" for item in lines) and any(i.name == "group" for i in lines):
        reader = principal(ANA, tenant=tenant)
        assert store.readable_documents(reader, "sp", docs) == set(docs)


@pytest.mark.parametrize("ingest", [via_ingest_jsonl, via_harvest])
def test_every_good_line_lands_and_every_bad_line_is_named(
    store: KnowledgeStore,
    tmp_path: Path,
    ingest: Callable[[KnowledgeStore, Path, str], IngestReport],
) -> None:
    lines = [x for pair in zip(GOOD, HOSTILE, strict=False) for x in pair]
    lines += HOSTILE[len(GOOD) :]
    lines.insert(0, lines.pop(lines.index(GOOD[-2])))  # a BOM only ever opens a file
    path = write_file(tmp_path / "feed.jsonl", lines)
    report = ingest(store, path, "t1")
    check(store, path, lines, report, "t1")


_examples = iter(range(10**6))


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> SQLiteStore:
    return make_store(tmp_path_factory.mktemp("hostile"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations([g for g in GOOD if g.name != "BOM"] + HOSTILE))
def test_any_mix_of_good_and_hostile_lines(
    shared_store: SQLiteStore, tmp_path_factory: pytest.TempPathFactory, order: list[Line]
) -> None:
    tenant = f"t{next(_examples)}"  # a fresh tenant per example: the store is shared
    path = write_file(tmp_path_factory.mktemp("feed") / "feed.jsonl", order)
    report = ingest_jsonl(shared_store, path, tenant)
    check(shared_store, path, order, report, tenant)


def test_the_cli_reports_hostile_lines_without_a_traceback(tmp_path: Path) -> None:
    init = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "init", "dep", "--embedder", "hash"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert init.returncode == 0, init.stderr
    path = write_file(tmp_path / "feed.jsonl", [*GOOD, *HOSTILE])
    done = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "ingest", str(path), "--json", "-d", "dep"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    out = json.loads(done.stdout)
    assert (out["added"], out["errors"]) == (len(GOOD_DOCS), len(HOSTILE))


# -- the filesystem connector's sidecars ---------------------------------------------------------
def put(root: Path, rel: str, data: bytes | str | dict[str, Any]) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, dict):
        data = json.dumps(data)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def folder_run(store: KnowledgeStore, root: Path, state: Path) -> Any:
    spec = SourceSpec(
        name="kb",
        connector=ConnectorKind.FILESYSTEM,
        path=root,
        source_system="kb",
        state_path=state,
    )
    return harvest(FilesystemConnector(spec, "t1", max_text_bytes=100_000), store, "t1")


HOSTILE_SIDECARS: dict[str, tuple[bytes, str]] = {
    "dup": (b'{"acl": ["S-1"], "acl": ["*"]}', "key 'acl' appears twice"),
    "nan": (b'{"acl": ["S-1"], "metadata": {"x": NaN}}', "field 'metadata.x': NaN"),
    "deep": (
        b'{"acl": ["S-1"], "metadata": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        "nested too deeply",
    ),
    "bidi": ('{"acl": ["S-1\u202e"]}'.encode(), "U+202E (right-to-left override)"),
    "utf8": (b'{"acl": ["S-\xff"]}', "is not valid UTF-8 (byte 0xff at offset 12"),
    "surrogate": (
        b'{"acl": ["S-1", "\\ud800"]}',
        "'\\ud800' contains U+D800 (an unpaired surrogate)",
    ),
    "bigint": (b'{"acl": ["S-1"], "metadata": {"n": 18446744073709551616}}', "beyond 64 bits"),
    "corpus": (b'{"acl": ["S-1"], "corpus": "bad corpus!"}', "field 'corpus'"),
}
HOSTILE_FRONT: dict[str, tuple[str, str]] = {
    "bidi-acl": ("acl: [S-1\u202e]", "front matter: field 'acl': 'S-1\\u202e' contains U+202E"),
    "bad-time": ("updated_at: yesterday", "field 'updated_at'"),
    "bigint": ("n: " + "9" * 20, "value 'n': the integer 999999999999... is beyond 64 bits"),
    "hugenumber": ("n: " + "9" * 5000, "front matter line 2: the number 999999999999... has 5000"),
    "repeated": ("acl: [S-1]\nacl: ['*']", "front matter line 3: key 'acl' appears twice"),
    "surrogate": ("title: x\udc80", "not valid UTF-8"),
}
HOSTILE_IDENTITIES = [
    (
        b'{"type":"identity","email":"m@x.example","account_id":"S-9","account_id":"S-1"}',
        "key 'account_id' appears twice",
    ),
    (b'{"type":"identity","email":"m@x.example","account_id":"S-\xff"}', "is not valid UTF-8"),
    ('{"type":"identity","email":"m@x.example","account_id":"S\u202e9"}'.encode(), "U+202E"),
    (b'{"type":"identity","email":"m\\ud800@x.example","account_id":"S-9"}', "field 'email'"),
    (
        b'{"type":"group","group_id":"G-9","members":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nested too deeply",
    ),
    (b'{"type":"group","group_id":"G-9","members":[],"x":NaN}', "NaN is not a JSON number"),
]


def test_hostile_sidecars_are_reported_fail_closed_and_the_rest_lands(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    root, state = tmp_path / "kb", tmp_path / "state.json"
    good_ids = [
        b'{"type":"identity","email":"ana@bank.example","account_id":"S-1"}',
        b'{"type":"identity","email":"ben@bank.example","account_id":"S-2"}',
    ]
    ids = put(root, "_identities.jsonl", b"\n".join(good_ids))
    put(root, "_access.json", {"acl": ["S-2"]})
    put(root, "good/a.md", "---\nupdated_at: 2026-07-01\n---\nquarterly wire memo")
    for name in HOSTILE_SIDECARS:  # valid at first: S-1 only
        put(root, f"{name}/_access.json", {"acl": ["S-1"]})
        put(root, f"{name}/x.txt", f"quarterly {name} memo")
    first = folder_run(store, root, state)
    assert first.errors == 0, first.messages[:3]
    ben, ana = principal("ben@bank.example"), principal(ANA)
    held = [f"{name}/x.txt" for name in HOSTILE_SIDECARS]
    assert store.readable_documents(ana, "kb", held) == set(held)
    assert store.readable_documents(ben, "kb", held) == set()

    # Now every sidecar turns hostile; front matter and identities lines too.
    for name, (raw, _) in HOSTILE_SIDECARS.items():
        put(root, f"{name}/_access.json", raw)
    for name, (front, _) in HOSTILE_FRONT.items():
        put(root, f"front/{name}.md", f"---\n{front}\n---\nbody".encode("utf-8", "surrogatepass"))
    put(root, "good/b.txt", "another quarterly memo")
    put(
        root,
        "_identities.jsonl",
        b"\n".join([good_ids[0], *(raw for raw, _ in HOSTILE_IDENTITIES), good_ids[1]]),
    )
    report = folder_run(store, root, state)  # never raises

    messages = "\n".join(report.messages)
    for name, (_, fragment) in HOSTILE_SIDECARS.items():
        sidecar = root / name / "_access.json"
        assert any(m.startswith(f"{sidecar}: ") and fragment in m for m in report.messages), (
            name,
            messages,
        )
        assert f"{root / name / 'x.txt'}: not ingested: its rights file {sidecar} is invalid" in (
            report.messages
        )
    for name, (_, fragment) in HOSTILE_FRONT.items():
        md = root / "front" / f"{name}.md"
        assert any(m.startswith(f"{md}: ") and fragment in m for m in report.messages), (
            name,
            messages,
        )
    for number, (_, fragment) in enumerate(HOSTILE_IDENTITIES, start=2):
        assert any(m.startswith(f"{ids}:{number}: ") and fragment in m for m in report.messages), (
            number,
            messages,
        )
    expected = len(HOSTILE_SIDECARS) * 2 + len(HOSTILE_FRONT) + len(HOSTILE_IDENTITIES)
    assert report.errors == expected, messages
    assert "Traceback" not in messages

    # Fail closed: the held files keep their last rights (S-1), never the hostile "*".
    assert store.readable_documents(ben, "kb", held) == set()
    assert store.readable_documents(ana, "kb", held) == set(held)
    # The rest landed: good files, the good identity lines (both sides of the bad ones).
    assert store.readable_documents(ben, "kb", ["good/a.md", "good/b.txt"]) == {
        "good/a.md",
        "good/b.txt",
    }
    assert store.source_accounts("t1", "ben@bank.example", "kb") == ["S-2"]
    assert store.source_accounts("t1", ANA, "kb") == ["S-1"]
    assert store.stored_hashes("t1", [("kb", f"front/{n}.md") for n in HOSTILE_FRONT]) == {}
