"""Admission rules of seed 001, one at a time and in order; the deterministic id."""

from __future__ import annotations

import hashlib
import itertools
import struct
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from wb_helpers import AGENT, SCOPE, T0, Clock, candidate, every_tenant, make_store

from govrag.errors import ConfigError
from govrag.writeback import (
    AdmissionGate,
    AdmissionReason,
    ControlledWriteBackStore,
    RetrievalScope,
    WriteBackCandidate,
    writeback_id,
)

R = AdmissionReason
G = AdmissionGate
NAIVE = datetime(2027, 1, 1, 0, 0)
WEST = timezone(-timedelta(hours=1))

#: (expected reason, field overridden, value): each breaks exactly one rule of a valid
#: candidate. Rows are in check order, which the pairwise order test relies on.
VIOLATIONS: list[tuple[AdmissionReason, str, Any]] = [
    (R.AGENT_NOT_ALLOWED, "agent_id", "intruder"),
    (R.AGENT_NOT_ALLOWED, "agent_id", AGENT.upper()),
    (R.AGENT_NOT_ALLOWED, "agent_id", f" {AGENT}"),
    (R.AGENT_NOT_ALLOWED, "agent_id", None),
    (R.AGENT_NOT_ALLOWED, "agent_id", ["agent-memory"]),
    (R.RAW_MODEL_OUTPUT, "gate", G.RAW_MODEL_OUTPUT),
    (R.RAW_MODEL_OUTPUT, "gate", "RAW_MODEL_OUTPUT"),
    (R.GATE_NOT_ADMITTED, "gate", None),
    (R.GATE_NOT_ADMITTED, "gate", "user_confirmed"),
    (R.GATE_NOT_ADMITTED, "gate", "USER_CONFIRMED"),  # text is not a gate: no promotion
    (R.GATE_NOT_ADMITTED, "gate", 1),
    (R.CONTENT_BLANK, "content", ""),
    (R.CONTENT_BLANK, "content", " \n\t\u3000"),
    (R.CONTENT_BLANK, "content", None),
    (R.CONTENT_BLANK, "content", b"bytes are not text"),
    (R.TEXT_NOT_UTF8, "content", "lone \ud800 surrogate"),
    (R.CONTENT_TOO_LARGE, "content", "x" * 16_385),
    (R.CONTENT_TOO_LARGE, "content", "é" * 8_193),  # 8,193 characters, 16,386 bytes
    (R.IDENTITY_BLANK, "source_turn_id", ""),
    (R.IDENTITY_BLANK, "source_turn_id", "   "),
    (R.IDENTITY_BLANK, "source_turn_id", 7),
    (R.TEXT_NOT_UTF8, "source_turn_id", "turn-\udfff"),
    (R.IDENTITY_TOO_LONG, "source_turn_id", "t" * 257),
    (R.SCOPE_BLANK, "scope", None),
    (R.SCOPE_BLANK, "scope", ("acme", "session-1")),
    (R.SCOPE_BLANK, "scope", RetrievalScope("", "session-1")),
    (R.SCOPE_BLANK, "scope", RetrievalScope("acme", " ")),
    (R.SCOPE_BLANK, "scope", RetrievalScope(None, "session-1")),
    (R.SCOPE_BLANK, "scope", RetrievalScope("acme", 5)),
    (R.TEXT_NOT_UTF8, "scope", RetrievalScope("acme\ud800", "session-1")),
    (R.SCOPE_TOO_LONG, "scope", RetrievalScope("a" * 257, "session-1")),
    (R.SCOPE_TOO_LONG, "scope", RetrievalScope("acme", "s" * 257)),
    (R.CONFIDENCE_INVALID, "confidence", float("nan")),
    (R.CONFIDENCE_INVALID, "confidence", float("inf")),
    (R.CONFIDENCE_INVALID, "confidence", float("-inf")),
    (R.CONFIDENCE_INVALID, "confidence", -0.01),
    (R.CONFIDENCE_INVALID, "confidence", 1.0000001),
    (R.CONFIDENCE_INVALID, "confidence", 2),
    (R.CONFIDENCE_INVALID, "confidence", 10**400),
    (R.CONFIDENCE_INVALID, "confidence", True),
    (R.CONFIDENCE_INVALID, "confidence", "0.9"),
    (R.CONFIDENCE_INVALID, "confidence", None),
    (R.CONFIDENCE_INVALID, "confidence", Decimal("0.5")),
    (R.EXPIRES_AT_INVALID, "expires_at", NAIVE),
    (R.EXPIRES_AT_INVALID, "expires_at", None),
    (R.EXPIRES_AT_INVALID, "expires_at", "2027-01-01T00:00:00Z"),
    (R.EXPIRES_AT_INVALID, "expires_at", date(2027, 1, 1)),
    (R.EXPIRES_AT_INVALID, "expires_at", 1_900_000_000.0),
    (R.EXPIRES_AT_INVALID, "expires_at", datetime.max.replace(tzinfo=WEST)),  # no UTC instant
    (R.EXPIRED, "expires_at", T0),  # not strictly in the future
    (R.EXPIRED, "expires_at", T0 - timedelta(microseconds=1)),
    (R.EXPIRED, "expires_at", T0.astimezone(timezone(timedelta(hours=2)))),  # same instant
    (R.SUPERSEDES_NOT_IN_SCOPE, "supersedes", "writeback:" + "0" * 64),
    (R.SUPERSEDES_NOT_IN_SCOPE, "supersedes", ""),
    (R.SUPERSEDES_NOT_IN_SCOPE, "supersedes", 5),
    (R.SUPERSEDES_NOT_IN_SCOPE, "supersedes", ["writeback:x"]),
]  # fmt: skip


def test_the_base_candidate_is_admitted() -> None:
    result = make_store().admit(candidate())
    assert result.admitted and result.reason is R.ADMITTED and result.id is not None


@pytest.mark.parametrize(
    ("reason", "field", "value"), VIOLATIONS, ids=[f"{r.value}-{i}" for i, (r, _, _) in
                                                    enumerate(VIOLATIONS)]
)  # fmt: skip
def test_each_rule_alone_rejects(reason: AdmissionReason, field: str, value: Any) -> None:
    store = make_store()
    result = store.admit(candidate(**{field: value}))
    assert (result.admitted, result.id, result.reason) == (False, None, reason)
    # Nothing of it is searchable.
    assert store.search(SCOPE, "wire transfer limit", top_k=100) == []


ACCEPTED_EDGES: list[tuple[str, Any]] = [
    ("content", "x" * 16_384),
    ("content", "é" * 8_192),
    ("content", "  padded content is kept as is  "),
    ("source_turn_id", "t" * 256),
    ("scope", RetrievalScope("a" * 256, "s" * 256)),
    ("confidence", 0),
    ("confidence", 1),
    ("confidence", 0.0),
    ("confidence", -0.0),
    ("confidence", 1.0),
    ("confidence", 5e-324),
    ("expires_at", T0 + timedelta(microseconds=1)),
    ("expires_at", (T0 + timedelta(hours=1)).astimezone(timezone(timedelta(hours=-11)))),
    ("expires_at", datetime.max.replace(tzinfo=UTC)),
    ("gate", G.TOOL_VERIFIED),
    ("gate", G.EVAL_GATED),
]


@pytest.mark.parametrize(("field", "value"), ACCEPTED_EDGES, ids=[f for f, _ in ACCEPTED_EDGES])
def test_values_at_the_edges_are_admitted(field: str, value: Any) -> None:
    assert make_store().admit(candidate(**{field: value})).reason is R.ADMITTED


def test_disabled_store_rejects_everything_first() -> None:
    store = ControlledWriteBackStore.disabled()
    assert not store.is_enabled
    for c in (candidate(), candidate(gate=G.RAW_MODEL_OUTPUT), None):
        assert store.admit(c).reason is R.DISABLED
    assert store.search(SCOPE, "wire") == []


@pytest.mark.parametrize(
    "garbage", [None, "text", 42, {"scope": SCOPE, "content": "x"}, object(), [candidate()]]
)
def test_non_candidates_are_rejected(garbage: object) -> None:
    assert make_store().admit(garbage).reason is R.NOT_A_CANDIDATE


def test_a_look_alike_is_not_a_candidate() -> None:
    @dataclass
    class LookAlike:
        scope: Any = SCOPE
        source_turn_id: Any = "turn-1"
        agent_id: Any = AGENT
        gate: Any = G.USER_CONFIRMED
        content: Any = "wire limits"
        confidence: Any = 0.9
        expires_at: Any = T0 + timedelta(days=1)
        supersedes: Any = None

    assert make_store().admit(LookAlike()).reason is R.NOT_A_CANDIDATE


def _pairs() -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, j in itertools.combinations(range(len(VIOLATIONS)), 2)
        if VIOLATIONS[i][1] != VIOLATIONS[j][1]
    ]


def test_the_earlier_rule_names_the_reason() -> None:
    store = make_store()
    checked = 0
    for i, j in _pairs():
        (first, f1, v1), (_, f2, v2) = VIOLATIONS[i], VIOLATIONS[j]
        result = store.admit(candidate(**{f1: v1, f2: v2}))
        assert result.reason is first, (VIOLATIONS[i], VIOLATIONS[j], result.reason)
        checked += 1
    assert checked > 1000


def test_disabled_comes_before_every_other_rule() -> None:
    store = ControlledWriteBackStore.disabled()
    for reason, field, value in VIOLATIONS:
        assert store.admit(candidate(**{field: value})).reason is R.DISABLED, reason


def test_unexpected_errors_are_rejections() -> None:
    def broken() -> datetime:
        raise RuntimeError("clock down")

    for clock in (broken, lambda: NAIVE, lambda: "now"):
        store = ControlledWriteBackStore.enabled(
            allowed_agents=[AGENT],
            tenants=every_tenant,
            clock=clock,  # type: ignore[arg-type]
        )
        assert store.admit(candidate()).reason is R.UNEXPECTED_ERROR
        # A rule broken before the clock is read still names its own reason.
        assert store.admit(candidate(confidence=2.0)).reason is R.CONFIDENCE_INVALID


def test_str_subclasses_are_read_once_as_plain_text() -> None:
    class Shifty(str):
        """Equal to everything, hashing like the allowed agent: must not sneak past."""

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return hash(AGENT)

        def strip(self, chars: str | None = None) -> str:
            return "non-blank"

    store = make_store()
    assert store.admit(candidate(agent_id=Shifty("intruder"))).reason is R.AGENT_NOT_ALLOWED
    assert store.admit(candidate(content=Shifty("   "))).reason is R.CONTENT_BLANK
    result = store.admit(candidate(source_turn_id=Shifty("turn-9")))
    assert result.admitted
    hit = store.search(SCOPE, "wire transfer")[0]
    assert type(hit.metadata["writeback.sourceTurnId"]) is str


def test_allow_list_is_validated_when_the_store_is_built() -> None:
    with pytest.raises(ConfigError, match="single string"):
        ControlledWriteBackStore.enabled(allowed_agents=AGENT, tenants=every_tenant)
    for bad in ("", "  ", "a" * 257, "\ud800", None):
        with pytest.raises(ConfigError):
            ControlledWriteBackStore.enabled(allowed_agents=[bad], tenants=every_tenant)  # type: ignore[list-item]
    with pytest.raises(ConfigError):
        ControlledWriteBackStore.enabled(allowed_agents=[AGENT], tenants=every_tenant, clock="now")  # type: ignore[arg-type]
    empty = ControlledWriteBackStore.enabled(allowed_agents=[], tenants=every_tenant)
    assert empty.admit(candidate()).reason is R.AGENT_NOT_ALLOWED
    assert make_store(agents=["a", "b"]).allowed_agents == frozenset({"a", "b"})


def test_default_clock_is_utc_now() -> None:
    store = ControlledWriteBackStore.enabled(allowed_agents=[AGENT], tenants=every_tenant)
    now = datetime.now(UTC)
    assert store.admit(candidate(expires_at=now + timedelta(minutes=5))).admitted
    assert store.admit(candidate(expires_at=now - timedelta(seconds=1))).reason is R.EXPIRED


# -- the deterministic id --------------------------------------------------------------------------
def test_id_vector_computed_by_hand() -> None:
    fields = ("acme", "session-1", "turn-1", AGENT, "Zürich: limit 10 000 €")
    raw = b""
    for text in fields:
        data = text.encode("utf-8")
        raw += struct.pack(">I", len(data)) + data
    # The length prefix counts UTF-8 bytes, not characters ("ü" and "€" are multi-byte).
    assert raw.count(struct.pack(">I", len("Zürich: limit 10 000 €".encode()))) == 1
    expected = "writeback:" + hashlib.sha256(raw).hexdigest()
    assert writeback_id(*fields) == expected

    c = candidate(content=fields[4])
    assert make_store().admit(c).id == expected
    # The same fields hashed without length prefixes would give another id.
    assert expected != "writeback:" + hashlib.sha256("".join(fields).encode()).hexdigest()


def test_id_fields_cannot_run_into_each_other() -> None:
    assert writeback_id("ab", "c", "t", "a", "x") != writeback_id("a", "bc", "t", "a", "x")
    assert writeback_id("t", "s", "turn", "agent", "x") != writeback_id(
        "t", "s", "turnagent", "", "x"
    )


def test_id_ignores_gate_confidence_expiry_and_supersedes() -> None:
    store = make_store()
    first = store.admit(candidate())
    again = store.admit(
        candidate(gate=G.EVAL_GATED, confidence=0.1, expires_at=T0 + timedelta(days=9))
    )
    assert first.id == again.id


def test_readmission_is_idempotent() -> None:
    clock = Clock()
    store = make_store(clock)
    c = candidate()
    results = [store.admit(c) for _ in range(5)]
    assert {r.id for r in results} == {results[0].id} and all(r.admitted for r in results)
    hits = store.search(SCOPE, "wire transfer limit", top_k=100)
    assert [h.id for h in hits] == [results[0].id]
    # A re-admission is a fresh decision: its expiry (and metadata) replace the old one's.
    store.admit(replace(c, expires_at=T0 + timedelta(days=3), confidence=0.5))
    clock.advance(days=2)
    (hit,) = store.search(SCOPE, "wire transfer limit")
    assert hit.metadata["writeback.confidence"] == "0.5"
    assert hit.metadata["writeback.expiresAt"] == "2026-06-04T12:00:00Z"


def test_candidate_construction_never_validates() -> None:
    c = WriteBackCandidate(None, None, None, None, None, float("nan"), None, object())
    assert make_store().admit(c).reason is R.AGENT_NOT_ALLOWED
    assert RetrievalScope([], {}).tenant == []
