"""The typed audit events themselves: strict in both directions, versioned, and writing back
exactly what they read (so the payload a reader parses is the one the chain hashed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from govrag.audit.events import (
    KNOWN_VERSIONS,
    ErrorEvent,
    PackSource,
    PepDecisionEvent,
    ProposalEvent,
    kind_of,
    parse_event,
    write,
)
from govrag.store.audit import canonical

DECISION: dict[str, Any] = {
    "verdict": "ALLOW", "reason": "allowed", "policy_version": "p/1", "resource": "c",
    "resource_type": "corpus", "action": "retrieve_documents", "kind": "retrieve",
    "tool": "retrieve_documents", "query": "q", "sub": "ana", "route_id": "qa",
    "downstream_called": False,
}  # fmt: skip


class Sink:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, dict[str, Any], str, str]] = []

    def append_audit(
        self, tenant: str, kind: str, payload: dict[str, Any], *, request_id: str, session_id: str
    ) -> int:
        self.rows.append((tenant, kind, payload, request_id, session_id))
        return len(self.rows)


def test_a_writer_cannot_add_or_forget_a_field() -> None:
    with pytest.raises(ValidationError, match="extra"):
        ErrorEvent(stage="s", error_type="E", message="m", secret="x")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="message"):
        ErrorEvent(stage="s", error_type="E")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="frozen"):
        ErrorEvent(stage="s", error_type="E", message="m").stage = "other"  # type: ignore[misc]


def test_write_stores_the_kind_in_its_column_and_version_1_unwritten() -> None:
    sink = Sink()
    decision = PepDecisionEvent.model_validate(DECISION)
    assert write(sink, "t1", decision, request_id="r", session_id="s") == 1
    ((tenant, kind, payload, request_id, session_id),) = sink.rows
    assert (tenant, kind, request_id, session_id) == ("t1", "pep_decision", "r", "s")
    # The proposal's kind keeps its stored name; the discriminator and v=1 are not written.
    assert payload == DECISION and decision.proposal_kind == "retrieve"
    assert parse_event(kind, payload) == decision


def test_unset_optional_fields_are_not_written() -> None:
    refused = ProposalEvent(tool="t", accepted=False, error="no such tool", arguments="{x")
    assert refused.payload() == {"tool": "t", "accepted": False, "error": "no such tool",
                                 "arguments": "{x"}  # fmt: skip
    accepted = ProposalEvent(tool="t", accepted=True, arguments={}, corpus=None)
    assert accepted.payload() == {"tool": "t", "accepted": True, "arguments": {}, "corpus": None}
    memory = PackSource(doc_id="d", chunk_id="c", source_system="writeback", score=1.0,
                        origin="session_memory", writeback={"writeback.gate": "G"})  # fmt: skip
    source = PackSource(doc_id="d", chunk_id="c", source_system="sp", score=1.0)
    assert "writeback" in memory.model_dump(mode="json")
    assert "writeback" not in source.model_dump(mode="json")


@pytest.mark.parametrize("score", [float("nan"), float("inf"), -float("inf"), 0.5])
def test_non_finite_numbers_read_back_as_written(score: float) -> None:
    stored = canonical({**DECISION, "query": {"sha256": None, "chars": None, "prefix": "x"}})
    assert canonical(parse_event("pep_decision", json.loads(stored)).payload()) == stored
    source = {"doc_id": "d", "chunk_id": "c", "source_system": "s", "score": score}
    pack = {"context_pack_id": "p", "corpus": "c", "retrieve_proposal": None,
            "pep_verdict": "ALLOW", "pep_audit_id": "a", "policy_version": "v",
            "ranker_version": "r", "pack_token_count": 1, "token_budget": 2,
            "dropped_for_budget": 0, "sources": [source]}  # fmt: skip
    text = canonical(pack)
    assert canonical(parse_event("context_pack", json.loads(text)).payload()) == text


def test_every_known_kind_is_a_member_of_the_union() -> None:
    for kind in KNOWN_VERSIONS:
        with pytest.raises(Exception, match=f"kind {kind!r} does not match"):
            parse_event(kind, {"not": "a field"})
    assert kind_of(PepDecisionEvent) == "pep_decision"


def test_a_version_is_written_only_past_1_and_refused_when_unknown() -> None:
    with pytest.raises(Exception, match="version 2 is not known"):
        parse_event("error", {"v": 2, "stage": "s", "error_type": "E", "message": "m"})
    for forged in ("1", True, 1.0):  # a version is an int; none of these was ever written
        with pytest.raises(Exception, match=f"version {forged!r} is not known"):
            parse_event("error", {"v": forged, "stage": "s", "error_type": "E", "message": "m"})
    explicit = parse_event("error", {"v": 1, "stage": "s", "error_type": "E", "message": "m"})
    assert "v" not in explicit.payload()
