"""Examiner replay: answer the six questions about a request from its audit records alone.

Seed 003's table: who asked (sub, session), what was proposed, which policy decided, the
verdict before search, what the model saw, what was delivered, and, for a request that
failed, how it ended (its ``error`` event: where, and which error). No chat transcript, no
store tables besides the audit log: every answer here is read from events of the hash-chained
log, and the chain is verified as part of the replay.

The request's events are read through the log's ``(tenant, request_id)`` index, and the event
that pinned its session (written by the request that opened the session) through the
``(tenant, session_id)`` index; only the chain verification reads the whole log. Each event is
read as its typed model (:mod:`govrag.audit.events`), the same one its writer built. An event
this code cannot read as such (a kind or version of another govrag, a payload that does not
match its model) is never guessed at and never fatal: it is listed under ``unrecognised`` as
stored, with the reason, and the answers are given from the events that could be read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from govrag.audit.events import (
    AuditEventBase,
    AuditEventModel,
    ContextPackEvent,
    ErrorEvent,
    EscalationEvent,
    HiddenMarkerEvent,
    IncidentEvent,
    LlmCallEvent,
    LlmResultEvent,
    PackSource,
    PepDecisionEvent,
    PinViolationEvent,
    ProposalEvent,
    ResponseEvent,
    RoutePinned,
    ValidationEvent,
    parse_event,
)
from govrag.errors import AuditEventError, NotFoundError
from govrag.store.audit import AuditEvent
from govrag.store.protocol import AuditLog

M = TypeVar("M", bound=AuditEventBase)

#: Most characters of a request id an error message repeats (real ids have 20).
SHOWN_ID_CHARS = 64
#: Events that name the caller (``sub``), in the order replay looks for one.
_WITH_SUB = (RoutePinned, PinViolationEvent, PepDecisionEvent, HiddenMarkerEvent, IncidentEvent,
             EscalationEvent,
             ResponseEvent)  # fmt: skip


@dataclass
class Replay:
    request_id: str
    tenant: str
    #: Who: ``sub``, ``session_id``, ``route_id``, the route's pinned retrieval and the
    #: caller's ``token_exp`` (only where a token opened the session).
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
    #: Events this govrag cannot read as their typed model, as stored (``seq``, ``event_id``,
    #: ``kind``, ``payload`` text) with ``problem``: the answers above leave them out.
    unrecognised: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def shown_request_id(request_id: str) -> str:
    """``request_id`` as an error message may repeat it: escaped (``repr``: no control,
    bidirectional or other invisible character reaches a terminal or a log) and cut to
    :data:`SHOWN_ID_CHARS` characters, so whoever sends an id cannot have it echoed whole."""
    if len(request_id) <= SHOWN_ID_CHARS:
        return repr(request_id)
    return f"{request_id[:SHOWN_ID_CHARS]!r}... ({len(request_id)} characters)"


def replay(log: AuditLog, tenant: str, request_id: str) -> Replay:
    """Rebuild what happened in ``request_id`` of ``tenant`` from the audit log."""
    rows = log.audit_events(tenant, request_id=request_id)
    if not rows:
        raise NotFoundError(
            f"no audit events for request {shown_request_id(request_id)} in tenant {tenant!r}; "
            "check the id (printed by `govrag ask`/`search` on stderr and in --json) and "
            "--tenant"
        )
    session_id = rows[0].session_id
    events, unrecognised = _read(rows)
    opening = log.audit_session_pinned(tenant, session_id)
    pinned = _read([opening])[0] if opening else []
    pin = next((m for _, m in pinned if isinstance(m, RoutePinned)), None)
    decisions = [(e, m) for e, m in events if isinstance(m, PepDecisionEvent)]
    allow_seq = {e.event_id: e.seq for e, m in decisions if m.verdict == "ALLOW"}
    passed: dict[str, bool] = {}
    for _, check in _of(events, ValidationEvent):
        passed |= dict.fromkeys(check.context_pack_ids, check.validation_passed)
    markers = {m.context_pack_id: {"shown": m.shown, "reason": m.reason,
                                   "sources": [s.model_dump(mode="json") for s in m.sources]}
               for _, m in _of(events, HiddenMarkerEvent)}  # fmt: skip
    packs = _of(events, ContextPackEvent)
    model_saw = [_pack(p, markers.get(p.context_pack_id), passed) for _, p in packs]
    memory = {s.chunk_id: s for _, p in packs for s in p.sources if s.origin == "session_memory"}
    before = all(
        p.pep_audit_id in allow_seq and allow_seq[p.pep_audit_id] < e.seq for e, p in packs
    )
    responses = _of(events, ResponseEvent)
    subs = [m.sub for _, m in events if isinstance(m, _WITH_SUB) and m.sub]
    errors = _of(events, ErrorEvent)
    return Replay(
        request_id=request_id,
        tenant=tenant,
        who={
            "sub": (pin.sub if pin else None) or next(iter(subs), None),
            "session_id": session_id,
            "route_id": pin.route_id if pin else None,
            "retrieval": pin.retrieval.model_dump(mode="json") if pin else None,
        }
        # When the caller's token expired (a served caller's; the session ended then): only
        # where there was a token, so a replay of an older log reads as it always did.
        | ({"token_exp": pin.token_exp} if pin and pin.token_exp else {}),
        proposed=[
            {"tool": m.tool, "accepted": m.accepted, "arguments": m.arguments,
             "corpus": m.corpus, "error": m.error, "calls": m.calls}
            for _, m in _of(events, ProposalEvent)
        ]
        or [{"tool": m.tool, "corpus": m.resource, "query": m.query} for _, m in decisions],
        decisions=[_decision(e, m) for e, m in decisions],
        verdict_before_search=before,
        model_saw=model_saw,
        llm_calls=_llm_calls(_of(events, LlmCallEvent), _of(events, LlmResultEvent)),
        delivered=_delivered(responses[-1][1], memory,
                             [m for _, m in _of(events, EscalationEvent)])
        if responses else None,
        chain_ok=log.verify_audit(tenant).ok,
        # A refused attempt to change a pinned session is how such a request ended.
        incidents=[m.payload() for _, m in _of(events, IncidentEvent)]
        + [{"kind": "pin_violation", **m.payload()} for _, m in _of(events, PinViolationEvent)],
        error=errors[-1][1].payload() if errors else None,
        unrecognised=unrecognised,
    )  # fmt: skip


def _read(
    rows: list[AuditEvent],
) -> tuple[list[tuple[AuditEvent, AuditEventModel]], list[dict[str, Any]]]:
    """Each row with its typed event, and the rows that have none (see the module)."""
    read: list[tuple[AuditEvent, AuditEventModel]] = []
    unrecognised: list[dict[str, Any]] = []
    for row in rows:
        try:
            payload = json.loads(row.payload_json)
            if not isinstance(payload, dict):
                raise AuditEventError(f"the payload of a {row.kind!r} event is not an object")
            read.append((row, parse_event(row.kind, payload)))
        except (AuditEventError, ValueError) as exc:
            unrecognised.append({"seq": row.seq, "event_id": row.event_id, "kind": row.kind,
                                 "payload": row.payload_json, "problem": str(exc)})  # fmt: skip
    return read, unrecognised


def _of(
    events: list[tuple[AuditEvent, AuditEventModel]], model: type[M]
) -> list[tuple[AuditEvent, M]]:
    return [(e, m) for e, m in events if isinstance(m, model)]


def _decision(row: AuditEvent, m: PepDecisionEvent) -> dict[str, Any]:
    shown = {"audit_id": row.event_id, "resource": m.resource, "verdict": m.verdict,
             "reason": m.reason, "policy_version": m.policy_version, "action": m.action,
             "kind": m.proposal_kind, "tool": m.tool, "query": m.query}  # fmt: skip
    if m.risk_tier is not None:  # kept since the eval plane's increment; older records lack it
        shown["risk_tier"] = m.risk_tier
    return shown


def _pack(
    p: ContextPackEvent, marker: dict[str, Any] | None, passed: dict[str, bool]
) -> dict[str, Any]:
    """One pack as the examiner sees it (records before later fields existed: defaults)."""
    return {
        "context_pack_id": p.context_pack_id, "corpus": p.corpus, "origin": p.origin,
        "policy_version": p.policy_version, "ranker_version": p.ranker_version,
        "chunks": [_chunk(s) for s in p.sources],
        "withheld": p.withheld.model_dump(mode="json") if p.withheld is not None else None,
        "hidden_marker": marker,
        "unchecked": [u.model_dump(mode="json") for u in p.unchecked],
        "validation_passed": passed.get(p.context_pack_id, False),
    }  # fmt: skip


def _chunk(source: PackSource) -> dict[str, Any]:
    out: dict[str, Any] = {"chunk_id": source.chunk_id, "doc_id": source.doc_id,
                           "score": source.score, "origin": source.origin}  # fmt: skip
    if source.writeback is not None:
        out["writeback"] = source.writeback
    return out


def _llm_calls(
    calls: list[tuple[AuditEvent, LlmCallEvent]], results: list[tuple[AuditEvent, LlmResultEvent]]
) -> list[dict[str, Any]]:
    """Each model call with its outcome, matched by step (the call's number in the request)."""
    outcome = {r.step: r for _, r in results}
    return [
        {k: v for k, v in (("model_profile", c.model_profile), ("prompt_id", c.prompt_id),
                           ("prompt_sha256", c.prompt_sha256)) if v is not None} |
        {"stage": c.stage, "step": c.step, "model": c.model, "payload_hash": c.payload_hash,
         "tools": list(c.tools),
         "result": None if (r := outcome.get(c.step)) is None else {
             "status": r.status, "fault": r.fault, "error": r.error,
             "finish_reason": r.finish_reason, "prompt_tokens": r.prompt_tokens,
             "completion_tokens": r.completion_tokens, "latency_ms": r.latency_ms,
             "reply_hash": r.reply_hash, "tool_calls": r.tool_calls}}
        for _, c in calls
    ]  # fmt: skip


def _delivered(r: ResponseEvent, memory: dict[str, PackSource],
               escalated: list[EscalationEvent]) -> dict[str, Any]:  # fmt: skip
    # The response id (and an escalation) shown only where kept (older records lack them).
    extra: dict[str, Any] = {"response_id": r.response_id} if r.response_id is not None else {}
    if r.output_schema is not None:
        extra["output_schema"] = r.output_schema.model_dump(mode="json")
    if escalated:
        extra["escalation"] = {"queue": escalated[-1].queue, "reason": escalated[-1].reason}
    return extra | {
        "answer_hash": r.answer_hash, "cited_doc_ids": list(r.cited_doc_ids),
        "cited_chunk_ids": list(r.cited_chunk_ids), "abstained": r.abstained,
        "reason": r.reason, "grounded": r.grounded, "pattern": r.pattern,
        "flagged": r.flagged, "unsupported_claims": r.unsupported_claims,
        "cited_memory": [{"chunk_id": cid, "writeback": memory[cid].writeback}
                         for cid in r.cited_chunk_ids if cid in memory],
    }  # fmt: skip
