"""Every admission decision is audited; content only as a hash; audit failure = not indexed."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from wb_helpers import AGENT, SCOPE, T0, AuditLog, Clock, candidate, every_tenant, make_store

from govrag.writeback import (
    MAX_ENTRIES_PER_SCOPE,
    PAYLOAD_KEYS,
    AdmissionGate,
    AdmissionReason,
    ControlledWriteBackStore,
    RetrievalScope,
    WriteBackCandidate,
    writeback_id,
)

R = AdmissionReason
CANARY = "canary-7f3e wire limit secret 12345"


def test_an_admission_is_audited_before_it_is_searchable() -> None:
    seen_before_index: list[int] = []
    store: ControlledWriteBackStore

    def audit(tenant: str, session: str, payload: dict[str, Any]) -> None:
        calls.append((tenant, session, payload))
        # At audit time the entry is not yet searchable (decide -> audit -> index).
        seen_before_index.append(len(store.search(SCOPE, "canary")))

    calls: list[tuple[str, str, dict[str, Any]]] = []
    store = ControlledWriteBackStore.enabled(
        allowed_agents=[AGENT], tenants=every_tenant, clock=Clock(), audit=audit
    )
    result = store.admit(candidate(content=CANARY, confidence=0.5))
    assert result.admitted and seen_before_index == [0]
    assert len(store.search(SCOPE, "canary")) == 1
    ((tenant, session, payload),) = calls
    assert (tenant, session) == ("acme", "session-1")
    assert payload == {
        "admitted": True,
        "reason": "admitted",
        "id": result.id,
        "tenant": "acme",
        "session": "session-1",
        "agent_id": AGENT,
        "gate": "USER_CONFIRMED",
        "source_turn_id": "turn-1",
        "content_sha256": hashlib.sha256(CANARY.encode()).hexdigest(),
        "confidence": 0.5,
        "expires_at": "2026-06-02T12:00:00Z",
        "supersedes": None,
    }


def test_every_decision_is_audited_with_its_reason_and_never_the_content() -> None:
    clock = Clock()
    audit = AuditLog()
    store = make_store(clock, audit)
    first = store.admit(candidate(content=CANARY))
    attempts = [
        candidate(content=CANARY),  # re-admission
        candidate(content=CANARY, agent_id="intruder"),
        candidate(content=CANARY, gate=AdmissionGate.RAW_MODEL_OUTPUT),
        candidate(content=CANARY, confidence=float("nan")),
        candidate(content=CANARY, expires_at=T0),
        candidate(content=CANARY, scope=RetrievalScope("", "")),
        candidate(content=CANARY + " v2", source_turn_id="turn-2", supersedes=first.id),
        candidate(content=CANARY, supersedes="writeback:nope"),
        None,
    ]
    results = [first] + [store.admit(c) for c in attempts]
    assert len(audit.calls) == len(results)
    for result, (_, _, payload) in zip(results, audit.calls, strict=True):
        assert tuple(payload) == PAYLOAD_KEYS
        assert (payload["admitted"], payload["reason"]) == (result.admitted, result.reason.value)
        if result.admitted:
            assert payload["id"] == result.id
        text = json.dumps(payload, allow_nan=False)
        assert "canary" not in text and "secret" not in text
    shas = {p["content_sha256"] for _, _, p in audit.calls[:-1]}
    assert hashlib.sha256(CANARY.encode()).hexdigest() in shas
    assert audit.calls[-1][2]["content_sha256"] is None  # not a candidate: nothing to hash
    # A rejection records the id the candidate would have had, to relate it to other records.
    assert audit.calls[2][2]["id"] == writeback_id("acme", "session-1", "turn-1", "intruder",
                                                   CANARY)  # fmt: skip
    assert audit.calls[7][2]["supersedes"] == first.id


def test_disabled_and_capped_decisions_are_audited_too() -> None:
    audit = AuditLog()
    ControlledWriteBackStore.disabled(audit=audit).admit(candidate())
    assert [p["reason"] for _, _, p in audit.calls] == ["disabled"]
    audit = AuditLog()
    store = make_store(Clock(), audit)
    for n in range(MAX_ENTRIES_PER_SCOPE + 1):
        store.admit(candidate(source_turn_id=f"t{n}"))
    assert [p["reason"] for _, _, p in audit.calls][-2:] == ["admitted", "entry_cap"]
    assert len(audit.calls) == MAX_ENTRIES_PER_SCOPE + 1


def test_audit_failure_rejects_and_nothing_is_indexed() -> None:
    audit = AuditLog(fail=True)
    store = make_store(Clock(), audit)
    result = store.admit(candidate())
    assert (result.admitted, result.id, result.reason) == (False, None, R.AUDIT_FAILED)
    assert store.search(SCOPE, "wire") == []
    # A supersession whose audit fails leaves the prior entry in place.
    audit.fail = False
    prior = store.admit(candidate())
    audit.fail = True
    replacement = candidate(source_turn_id="turn-2", supersedes=prior.id)
    assert store.admit(replacement).reason is R.AUDIT_FAILED
    assert [h.id for h in store.search(SCOPE, "wire")] == [prior.id]
    # Once the sink works again, the same candidate is admitted normally.
    audit.fail = False
    assert store.admit(replacement).admitted


def test_a_failing_audit_does_not_change_a_rejection_reason() -> None:
    store = make_store(Clock(), AuditLog(fail=True))
    assert store.admit(candidate(agent_id="intruder")).reason is R.AGENT_NOT_ALLOWED
    assert store.admit(candidate(confidence=7)).reason is R.CONFIDENCE_INVALID


def test_unusable_scopes_are_audited_with_what_exists() -> None:
    audit = AuditLog()
    store = make_store(Clock(), audit)
    store.admit(candidate(scope=RetrievalScope("acme", None)))
    store.admit(candidate(scope=None))
    store.admit(candidate(scope=RetrievalScope(7, "  ")))
    store.admit(candidate(scope=RetrievalScope("t" * 1000, "\ud800")))
    routed = [(t, s) for t, s, _ in audit.calls]
    assert routed[:3] == [("acme", ""), ("", ""), ("", "  ")]
    long_tenant, bad_session = routed[3]
    assert long_tenant.startswith("t" * 256) and len(long_tenant) < 300  # bounded
    assert bad_session == "?"  # no lone surrogate reaches the audit log
    for tenant, session, payload in audit.calls:
        json.dumps([tenant, session, payload], ensure_ascii=False).encode("utf-8")


def test_garbage_is_recorded_json_safe() -> None:
    audit = AuditLog()
    store = make_store(Clock(), audit)
    store.admit(
        WriteBackCandidate(
            scope=RetrievalScope(["x"], {"y": 1}),
            source_turn_id=b"bytes",
            agent_id=AGENT,
            gate=object(),
            content="x\ud800" * 10,
            confidence=float("-inf"),
            expires_at=(T0 + timedelta(days=1)).replace(tzinfo=None),
            supersedes=3.5,
        )
    )
    ((tenant, session, payload),) = audit.calls
    assert (tenant, session) == ("", "")
    assert payload["reason"] == "gate_not_admitted"
    assert payload["source_turn_id"] is None and payload["gate"] is None
    assert payload["supersedes"] is None
    assert payload["confidence"] == "-inf"
    assert payload["expires_at"] == "2026-06-02T12:00:00"  # naive: recorded without "Z"
    assert (
        payload["content_sha256"]
        == hashlib.sha256(("x\ud800" * 10).encode("utf-8", "surrogatepass")).hexdigest()
    )
    json.dumps(payload, allow_nan=False, ensure_ascii=False).encode("utf-8")
