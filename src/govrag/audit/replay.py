"""Examiner replay: answer the six questions about a request from its audit records alone.

Seed 003's table: who asked (sub, session), what was proposed, which policy decided, the
verdict before search, what the model saw, what was delivered, and, for a request that
failed, how it ended (its ``error`` event: where, and which error). No chat transcript, no
store tables besides the audit log: every answer here is read from events of the hash-chained
log, and the chain is verified as part of the replay.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from govrag.errors import NotFoundError
from govrag.store.audit import AuditEvent, ChainReport


class AuditReader(Protocol):
    def audit_events(self, tenant: str, *, request_id: str | None = None) -> list[AuditEvent]: ...
    def verify_audit(self, tenant: str) -> ChainReport: ...


@dataclass
class Replay:
    request_id: str
    tenant: str
    #: Who: ``sub``, ``session_id``, ``route_id`` and the route's pinned retrieval.
    who: dict[str, Any]
    #: What was proposed: every tool proposal (accepted or refused) and retrieve decided.
    proposed: list[dict[str, Any]]
    #: Which policy decided, and the verdict: one entry per PEP decision.
    decisions: list[dict[str, Any]]
    #: Every pack was searched only after a committed ALLOW that precedes it in the chain.
    verdict_before_search: bool
    #: What the model saw: the packs (chunk ids, scores, each chunk's origin and, for session
    #: memory, its ``writeback.*`` metadata), the chunks no source checked, and whether
    #: validation passed.
    model_saw: list[dict[str, Any]]
    #: The LLM calls (payload hashes): what was sent, never the text itself, and each call's
    #: outcome (``result``: status, finish reason, token usage, latency, reply hash, or the
    #: fault class and message; ``None`` when the request ended before the call returned).
    llm_calls: list[dict[str, Any]]
    #: What was delivered: cited documents and the answer's hash (or the abstention); cited
    #: session memory under ``cited_memory`` with its ``writeback.*`` metadata.
    delivered: dict[str, Any] | None
    chain_ok: bool
    incidents: list[dict[str, Any]] = field(default_factory=list)
    #: How a request that failed ended: its ``error`` event (stage, error type, message).
    error: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def replay(log: AuditReader, tenant: str, request_id: str) -> Replay:
    """Rebuild what happened in ``request_id`` of ``tenant`` from the audit log."""
    events = log.audit_events(tenant, request_id=request_id)
    if not events:
        raise NotFoundError(
            f"no audit events for request {request_id!r} in tenant {tenant!r}; check the id "
            "(printed by `govrag ask`/`search` on stderr and in --json) and --tenant"
        )
    session_id = events[0].session_id
    pinned = next((e for e in log.audit_events(tenant) if e.kind == "route_pinned"
                   and e.session_id == session_id), None)  # fmt: skip
    by_kind: dict[str, list[AuditEvent]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    decisions = [{"audit_id": e.event_id, "seq": e.seq, **_pick(e.payload, "resource",
                  "verdict", "reason", "policy_version", "action", "kind", "tool", "query")}
                 for e in by_kind.get("pep_decision", [])]  # fmt: skip
    allow_seq = {d["audit_id"]: d["seq"] for d in decisions if d["verdict"] == "ALLOW"}
    passed: dict[str, bool] = {}
    for e in by_kind.get("validation", []):
        for pack_id in e.payload.get("context_pack_ids", []):
            passed[pack_id] = bool(e.payload.get("validation_passed"))
    packs = by_kind.get("context_pack", [])
    markers = {e.payload.get("context_pack_id"): _pick(e.payload, "shown", "reason", "sources")
               for e in by_kind.get("hidden_marker", [])}  # fmt: skip
    model_saw = [
        {"context_pack_id": e.payload["context_pack_id"], "corpus": e.payload["corpus"],
         "origin": e.payload.get("origin", "source"),
         "policy_version": e.payload["policy_version"],
         "ranker_version": e.payload["ranker_version"],
         "chunks": [_chunk(s) for s in e.payload["sources"]],
         "withheld": e.payload.get("withheld"),
         "hidden_marker": markers.get(e.payload["context_pack_id"]),
         "unchecked": e.payload.get("unchecked", []),
         "validation_passed": passed.get(e.payload["context_pack_id"], False)}
        for e in packs
    ]  # fmt: skip
    memory = {c["chunk_id"]: c for p in model_saw for c in p["chunks"]
              if c["origin"] == "session_memory"}  # fmt: skip
    before = all(
        e.payload.get("pep_audit_id") in allow_seq and allow_seq[e.payload["pep_audit_id"]] < e.seq
        for e in packs
    )
    response = by_kind.get("response", [])
    first = (pinned.payload if pinned else {}) | {"session_id": session_id}
    sub = first.get("sub") or next((e.payload.get("sub") for e in events
                                    if e.payload.get("sub")), None)  # fmt: skip
    return Replay(
        request_id=request_id,
        tenant=tenant,
        who={
            "sub": sub,
            "session_id": session_id,
            "route_id": first.get("route_id"),
            "retrieval": first.get("retrieval"),
        },
        proposed=[
            _pick(e.payload, "tool", "accepted", "arguments", "corpus", "error", "calls")
            for e in by_kind.get("proposal", [])
        ]
        or [{"tool": d["tool"], "corpus": d["resource"], "query": d["query"]} for d in decisions],
        decisions=[{k: v for k, v in d.items() if k != "seq"} for d in decisions],
        verdict_before_search=before,
        model_saw=model_saw,
        llm_calls=_llm_calls(by_kind.get("llm_call", []), by_kind.get("llm_result", [])),
        delivered=_delivered(response[-1].payload, memory) if response else None,
        chain_ok=log.verify_audit(tenant).ok,
        # A refused attempt to change a pinned session is how such a request ended.
        incidents=[e.payload for e in by_kind.get("incident", [])]
        + [{"kind": "pin_violation", **e.payload} for e in by_kind.get("pin_violation", [])],
        error=errors[-1].payload if (errors := by_kind.get("error")) else None,
    )


def _llm_calls(calls: list[AuditEvent], results: list[AuditEvent]) -> list[dict[str, Any]]:
    """Each model call with its outcome, matched by step (the call's number in the request)."""
    outcome = {e.payload.get("step"): e.payload for e in results}
    return [
        {**_pick(e.payload, "stage", "step", "model", "payload_hash", "tools"),
         "result": _pick(r, "status", "fault", "error", "finish_reason", "prompt_tokens",
                         "completion_tokens", "latency_ms", "reply_hash", "tool_calls")
         if (r := outcome.get(e.payload.get("step"))) is not None else None}
        for e in calls
    ]  # fmt: skip


def _chunk(source: dict[str, Any]) -> dict[str, Any]:
    """One packed chunk as the examiner sees it (records before origins existed: sources)."""
    out = {"chunk_id": source["chunk_id"], "doc_id": source["doc_id"], "score": source["score"],
           "origin": source.get("origin", "source")}  # fmt: skip
    if "writeback" in source:
        out["writeback"] = source["writeback"]
    return out


def _delivered(payload: dict[str, Any], memory: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = _pick(payload, "answer_hash", "cited_doc_ids", "cited_chunk_ids", "abstained",
                "reason", "grounded", "pattern", "flagged", "unsupported_claims")  # fmt: skip
    out["cited_memory"] = [
        {"chunk_id": cid, "writeback": memory[cid].get("writeback")}
        for cid in payload.get("cited_chunk_ids") or []
        if cid in memory
    ]
    return out


def _pick(payload: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: payload.get(k) for k in keys}
