"""Pack validation: sufficiency and abstention, scope violations, attribution, audit."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.errors import StoreError
from govrag.settings import ValidationSettings
from govrag.store.sqlite import SQLiteStore
from govrag.types import ContextPack, PackChunk
from govrag.validation import ValidationReport, Validator

from conftest import principal

QUESTION = "What is the wire limit for corporate clients?"  # terms: wire, limit, corpor, client
ON_TOPIC = "The wire transfer limit for corporate clients is EUR 50,000 per day."
OFF_TOPIC = "The cafeteria serves lunch at noon on weekdays."
ALICE = principal("alice@example.com", tenant="t1")
SCOPE = ("policy", "hr")  # the pinned route's scope
ALLOWED = ("policy",)  # what the PDP allowed alice in this request


def chunk(n: int, text: str = ON_TOPIC, *, corpus: str = "policy", score: float = 1.0) -> PackChunk:
    return PackChunk(doc_id=f"d{n}", chunk_id=f"sp:d{n}#0", corpus=corpus, source_system="sp",
                     text=text, score=score, token_count=len(text.split()))  # fmt: skip


def pack(pack_id: str, corpus: str, chunks: list[PackChunk]) -> ContextPack:
    return ContextPack(context_pack_id=pack_id, corpus=corpus, chunks=tuple(chunks),
                       policy_version="pgar.retrieval.corpus/v1", ranker_version="det-1",
                       token_counter="words", token_budget=1000,
                       pack_token_count=sum(c.token_count for c in chunks))  # fmt: skip


@dataclass
class RecordingSink:
    """An in-memory audit sink; ``fail_on`` names an event kind whose append raises."""

    events: list[tuple[str, str, dict[str, Any], str, str]] = field(default_factory=list)
    fail_on: str | None = None
    error: Exception = field(default_factory=lambda: StoreError("audit write failed: disk full"))

    def append_audit(
        self, tenant: str, kind: str, payload: dict[str, Any], *, request_id: str, session_id: str
    ) -> int:
        if kind == self.fail_on:
            raise self.error
        self.events.append((tenant, kind, payload, request_id, session_id))
        return len(self.events)

    @property
    def kinds(self) -> list[str]:
        return [e[1] for e in self.events]


def validate(
    packs: list[ContextPack],
    question: str = QUESTION,
    audit: RecordingSink | SQLiteStore | None = None,
    **thresholds: Any,
) -> ValidationReport:
    validator = Validator(ValidationSettings(**thresholds), audit=audit)
    return validator.validate(ALICE, question, packs, scope=SCOPE, allowed_corpora=ALLOWED,
                              request_id="r1", session_id="s1")  # fmt: skip


# --- sufficiency and abstention --------------------------------------------------------------

THRESHOLD_CASES = {
    "one on-topic chunk passes": ({}, [chunk(1)], None),
    "no pack at all": ({}, [], "no_evidence"),
    "min_chunks 0 still needs evidence": ({"min_chunks": 0}, [], "no_evidence"),
    "fewer chunks than min_chunks": ({"min_chunks": 2}, [chunk(1)], "thin_evidence"),
    "exactly min_chunks": ({"min_chunks": 2}, [chunk(1), chunk(2)], None),
    "best score below min_top_score": (
        {"min_top_score": 0.5}, [chunk(1, score=0.2), chunk(2, score=0.49)], "thin_evidence",
    ),
    "best score at min_top_score": ({"min_top_score": 0.5}, [chunk(1, score=0.5)], None),
    "no finite score": ({}, [chunk(1, score=math.nan)], "thin_evidence"),
    "off-topic pack": ({}, [chunk(1, OFF_TOPIC)], "off_topic"),
    "coverage 1/4 below 0.3": ({}, [chunk(1, "Wire instructions.")], "off_topic"),
    # A word shared is not an answer (the answerability gate, tests/validation/
    # test_answerability.py); with that gate off, the coverage threshold alone decides.
    "coverage 1/4 at 0.25": (
        {"min_query_coverage": 0.25, "min_answer_coverage": 0.0}, [chunk(1, "Wire.")], None,
    ),
    "coverage 1/4 at 0.25, not an answer": (
        {"min_query_coverage": 0.25}, [chunk(1, "Wire.")], "unanswered",
    ),
    "coverage pooled over chunks": (
        {"min_answer_coverage": 0.0}, [chunk(1, "wire"), chunk(2, "corporate limits")], None,
    ),
    "thin beats off-topic": ({"min_chunks": 2}, [chunk(1, OFF_TOPIC)], "thin_evidence"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("thresholds", "chunks", "reason"), THRESHOLD_CASES.values(), ids=THRESHOLD_CASES.keys()
)
def test_sufficiency_thresholds_decide_abstention(
    thresholds: dict[str, Any], chunks: list[PackChunk], reason: str | None
) -> None:
    packs = [pack("pk1", "policy", chunks)] if chunks else []
    report = validate(packs, **thresholds)
    assert (report.reason, report.validation_passed, report.abstain) == (
        reason, reason is None, reason is not None,
    )  # fmt: skip
    assert report.sufficiency.sufficient is (reason is None)
    assert report.scope_violations == ()


def test_sufficiency_figures() -> None:
    chunks = [chunk(1, "wire limit", score=0.25), chunk(2, OFF_TOPIC, score=0.75)]
    s = validate(
        [pack("pk1", "policy", chunks)], min_chunks=2, min_top_score=0.1, min_answer_coverage=0.0
    ).sufficiency
    assert (s.chunks, s.top_score, s.query_coverage) == (2, 0.75, 0.5)
    assert (s.min_chunks, s.min_top_score, s.min_query_coverage, s.sufficient) == (
        2, 0.1, 0.3, True,
    )  # fmt: skip
    empty = validate([pack("pk1", "policy", [])]).sufficiency
    assert (empty.chunks, empty.top_score, empty.query_coverage, empty.sufficient) == (
        0, None, 0.0, False,
    )  # fmt: skip


def test_a_question_without_terms_is_fully_covered() -> None:
    report = validate([pack("pk1", "policy", [chunk(1, OFF_TOPIC)])], question="What is it?")
    assert report.sufficiency.query_coverage == 1.0 and report.validation_passed
    # With nothing to cover and no chunk minimum, an empty pack set is still no evidence.
    nothing = validate([], question="What is it?", min_chunks=0, min_query_coverage=0.0)
    assert (nothing.reason, nothing.sufficiency.sufficient) == ("no_evidence", False)


# --- scope violations ------------------------------------------------------------------------

INJECTED = {
    # pack corpus, injected chunk corpus, expected reason
    "corpus outside the route scope": ("legal", "legal", "outside_route_scope"),
    "corpus in scope but not allowed": ("hr", "hr", "not_entitled"),
    "chunk of another corpus than its pack": ("policy", "hr", "corpus_mismatch"),
    "mismatch outside scope": ("policy", "legal", "corpus_mismatch"),
}


@pytest.mark.parametrize(("pack_corpus", "corpus", "why"), INJECTED.values(), ids=INJECTED.keys())
def test_an_injected_chunk_is_a_scope_violation_and_an_incident(
    pack_corpus: str, corpus: str, why: str
) -> None:
    good = pack("pk1", "policy", [chunk(1), chunk(2)])
    injected = chunk(9, corpus=corpus)
    bad = pack("pk2", pack_corpus, [injected] if pack_corpus != "policy" else [chunk(3), injected])
    sink = RecordingSink()
    report = validate([good, bad], audit=sink)

    assert not report.validation_passed and report.abstain  # synthesis is blocked
    assert report.reason == "scope_violation"
    assert report.scope_violation_count == 1
    v = report.scope_violations[0]
    assert (v.context_pack_id, v.chunk_id, v.corpus, v.reason) == ("pk2", "sp:d9#0", corpus, why)

    assert sink.kinds == ["incident", "validation"]  # the incident is on record first
    tenant, _, incident, request_id, session_id = sink.events[0]
    assert (tenant, request_id, session_id) == ("t1", "r1", "s1")
    assert incident == {
        "kind": "scope_violation", "sub": "alice",
        "violations": [{"context_pack_id": "pk2", "chunk_id": "sp:d9#0", "corpus": corpus,
                        "reason": why}],
    }  # fmt: skip
    validation = sink.events[1][2]
    assert (validation["validation_passed"], validation["scope_violations"]) == (False, 1)
    assert (validation["abstain"], validation["reason"]) == (True, "scope_violation")


def test_a_scope_violation_outranks_every_other_reason() -> None:
    report = validate([pack("pk1", "legal", [chunk(1, OFF_TOPIC, corpus="legal", score=0.0)])],
                      min_chunks=5, min_top_score=1.0)  # fmt: skip
    assert report.reason == "scope_violation"


def test_a_clean_pass_records_only_the_validation_event() -> None:
    sink = RecordingSink()
    report = validate([pack("pk1", "policy", [chunk(1)]), pack("pk2", "policy", [])], audit=sink)
    assert report.validation_passed and report.reason is None
    assert sink.events == [("t1", "validation", {
        "validation_passed": True, "scope_violations": 0, "abstain": False, "reason": None,
        "context_pack_ids": ["pk1", "pk2"], "sufficiency": report.sufficiency.model_dump(),
        "question": QUESTION,
    }, "r1", "s1")]  # fmt: skip


# --- attribution -----------------------------------------------------------------------------

CORPORA = ["policy", "hr", "legal"]


@st.composite
def request_packs(draw: st.DrawFn) -> list[ContextPack]:
    packs, n = [], 0
    for p in range(draw(st.integers(0, 4))):
        pack_corpus = draw(st.sampled_from(CORPORA))
        chunks = []
        for _ in range(draw(st.integers(0, 5))):
            n += 1
            corpus = draw(st.sampled_from([pack_corpus, *CORPORA]))
            text = draw(st.sampled_from([ON_TOPIC, OFF_TOPIC, ""]))
            chunks.append(chunk(n, text, corpus=corpus, score=draw(st.floats(0, 1))))
        packs.append(pack(f"pk{p}", pack_corpus, chunks))
    return packs


@settings(max_examples=200, deadline=None)
@given(packs=request_packs())
def test_attribution_covers_every_chunk_and_violations_match_a_reference(
    packs: list[ContextPack],
) -> None:
    report = validate(packs)
    everything = [(p, c) for p in packs for c in p.chunks]
    assert [(a.context_pack_id, a.chunk_id, a.doc_id, a.corpus, a.source_system)
            for a in report.attribution] == [
        (p.context_pack_id, c.chunk_id, c.doc_id, c.corpus, c.source_system) for p, c in everything
    ]  # fmt: skip
    expected = [
        (p.context_pack_id, c.chunk_id)
        for p, c in everything
        if c.corpus != p.corpus or c.corpus not in SCOPE or c.corpus not in ALLOWED
    ]
    assert [(v.context_pack_id, v.chunk_id) for v in report.scope_violations] == expected
    assert report.validation_passed is (not expected and report.sufficiency.sufficient)
    assert report.abstain is not report.validation_passed
    assert (report.reason == "scope_violation") is bool(expected)
    assert report.as_dict()["scope_violation_count"] == len(expected)


# --- fail-closed -----------------------------------------------------------------------------


@pytest.mark.parametrize("fail_on", ["validation", "incident"])
@pytest.mark.parametrize("error", [StoreError("disk full"), RuntimeError("connection reset")])
def test_a_failed_audit_write_is_not_recorded_never_an_exception(
    fail_on: str, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    sink = RecordingSink(fail_on=fail_on, error=error)
    packs = [pack("pk1", "policy", [chunk(1)])]
    if fail_on == "incident":
        packs.append(pack("pk2", "legal", [chunk(2, corpus="legal")]))
    with caplog.at_level(logging.ERROR, logger="govrag.validation"):
        report = validate(packs, audit=sink)
    assert (report.validation_passed, report.abstain, report.reason) == (
        False, True, "not_recorded",
    )  # fmt: skip
    assert len(report.attribution) == len(packs)  # the findings are still reported
    assert sink.events == []  # nothing after the failed write
    assert "audit write failed" in caplog.text


@pytest.mark.parametrize(
    ("packs", "scope"),
    [([None], SCOPE), ([pack("pk1", "policy", [chunk(1)])], "policy")],
    ids=["not a pack", "scope given as one string"],
)
def test_an_unexpected_fault_fails_closed(
    packs: list[Any], scope: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sink = RecordingSink()
    with caplog.at_level(logging.ERROR, logger="govrag.validation"):
        report = Validator(audit=sink).validate(ALICE, QUESTION, packs, scope=scope,
                                                allowed_corpora=ALLOWED, request_id="r1",
                                                session_id="s1")  # fmt: skip
    assert (report.validation_passed, report.abstain, report.reason) == (
        False, True, "validation_error",
    )  # fmt: skip
    assert not report.sufficiency.sufficient
    assert "validation failed unexpectedly" in caplog.text


def test_the_report_as_json() -> None:
    report = validate([pack("pk1", "hr", [chunk(1, corpus="hr")])])
    out = report.as_dict()
    assert out["scope_violation_count"] == 1 and out["reason"] == "scope_violation"
    assert out["scope_violations"] == [{"context_pack_id": "pk1", "chunk_id": "sp:d1#0",
                                        "corpus": "hr", "reason": "not_entitled"}]  # fmt: skip
    assert out["attribution"] == [{"chunk_id": "sp:d1#0", "doc_id": "d1", "corpus": "hr",
                                   "source_system": "sp", "context_pack_id": "pk1"}]  # fmt: skip
    del out["scope_violation_count"]
    assert ValidationReport.model_validate(out) == report


# --- a real store ----------------------------------------------------------------------------


def test_incident_and_validation_events_land_in_the_sqlite_audit_chain(
    sqlite_store: SQLiteStore,
) -> None:
    packs = [pack("pk1", "policy", [chunk(1)]), pack("pk2", "policy", [chunk(2, corpus="legal")])]
    report = validate(packs, audit=sqlite_store)
    assert report.reason == "scope_violation" and not report.validation_passed

    events = sqlite_store.audit_events("t1", request_id="r1")
    assert [e.kind for e in events] == ["incident", "validation"]
    assert all(e.session_id == "s1" for e in events)
    assert events[0].payload["violations"] == [{"context_pack_id": "pk2", "chunk_id": "sp:d2#0",
                                                "corpus": "legal",
                                                "reason": "corpus_mismatch"}]  # fmt: skip
    assert events[1].payload["scope_violations"] == 1
    assert events[1].payload["validation_passed"] is False
    assert events[1].payload["context_pack_ids"] == ["pk1", "pk2"]
    assert sqlite_store.verify_audit("t1").ok
