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
from typing import TypeVar

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
from govrag.audit.events.base import Record as EventRecord
from govrag.audit.replay_records import (
    CitedMemory,
    Delivered,
    Escalated,
    LlmOutcome,
    ProposedCall,
    ProposedRetrieve,
    Replay,
    ReplayChunk,
    ReplayDecision,
    ReplayError,
    ReplayIncident,
    ReplayLlmCall,
    ReplayMarker,
    ReplayPack,
    ReplayWho,
    Unrecognised,
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
    markers = {m.context_pack_id: ReplayMarker(shown=m.shown, reason=m.reason, sources=m.sources)
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
    who: dict[str, object] = {"sub": (pin.sub if pin else None) or next(iter(subs), None),
                              "session_id": session_id, "route_id": pin.route_id if pin else None,
                              "retrieval": _copy(pin.retrieval) if pin else None}  # fmt: skip
    if pin and pin.token_exp:
        # When the caller's token expired (a served caller's; the session ended then): only
        # where there was a token, so a replay of an older log reads as it always did.
        who["token_exp"] = pin.token_exp
    proposed: list[ProposedCall | ProposedRetrieve] = [
        ProposedCall(tool=m.tool, accepted=m.accepted, arguments=m.arguments, corpus=m.corpus,
                     error=m.error, calls=m.calls)
        for _, m in _of(events, ProposalEvent)
    ]  # fmt: skip
    return Replay(
        request_id=request_id,
        tenant=tenant,
        who=ReplayWho.model_validate(who),
        proposed=proposed or [ProposedRetrieve(tool=m.tool, corpus=m.resource, query=m.query)
                              for _, m in decisions],
        decisions=[_decision(e, m) for e, m in decisions],
        verdict_before_search=before,
        model_saw=model_saw,
        llm_calls=_llm_calls(_of(events, LlmCallEvent), _of(events, LlmResultEvent)),
        delivered=_delivered(responses[-1][1], memory,
                             [m for _, m in _of(events, EscalationEvent)])
        if responses else None,
        chain_ok=log.verify_audit(tenant).ok,
        # A refused attempt to change a pinned session is how such a request ended.
        incidents=[ReplayIncident.model_validate(
            {"kind": m.incident_kind, "violations": _copy(m.violations), "sub": m.sub})
            for _, m in _of(events, IncidentEvent)]
        + [ReplayIncident.model_validate(
            {"kind": "pin_violation", "sub": m.sub, "route_id": m.route_id,
             "pinned": _copy(m.pinned), "attempted": _copy(m.attempted)})
           for _, m in _of(events, PinViolationEvent)],
        error=ReplayError(stage=errors[-1][1].stage, error_type=errors[-1][1].error_type,
                          message=errors[-1][1].message) if errors else None,
        unrecognised=unrecognised,
    )  # fmt: skip


def _copy(record: object) -> object:
    """An event's record as the replay record's fields take it: what its writer set."""
    if isinstance(record, tuple):
        return [_copy(r) for r in record]
    assert isinstance(record, EventRecord)
    return record.model_dump(mode="json")


def _read(
    rows: list[AuditEvent],
) -> tuple[list[tuple[AuditEvent, AuditEventModel]], list[Unrecognised]]:
    """Each row with its typed event, and the rows that have none (see the module)."""
    read: list[tuple[AuditEvent, AuditEventModel]] = []
    unrecognised: list[Unrecognised] = []
    for row in rows:
        try:
            payload = json.loads(row.payload_json)
            if not isinstance(payload, dict):
                raise AuditEventError(f"the payload of a {row.kind!r} event is not an object")
            read.append((row, parse_event(row.kind, payload)))
        except (AuditEventError, ValueError) as exc:
            unrecognised.append(Unrecognised(
                seq=row.seq, event_id=row.event_id, kind=row.kind, payload=row.payload_json,
                problem=str(exc)))  # fmt: skip
    return read, unrecognised


def _of(
    events: list[tuple[AuditEvent, AuditEventModel]], model: type[M]
) -> list[tuple[AuditEvent, M]]:
    return [(e, m) for e, m in events if isinstance(m, model)]


def _decision(row: AuditEvent, m: PepDecisionEvent) -> ReplayDecision:
    shown = ReplayDecision(audit_id=row.event_id, resource=m.resource, verdict=m.verdict,
                           reason=m.reason, policy_version=m.policy_version, action=m.action,
                           kind=m.proposal_kind, tool=m.tool, query=m.query)  # fmt: skip
    if m.risk_tier is None:  # kept since the eval plane's increment; older records lack it
        return shown
    return shown.model_copy(update={"risk_tier": m.risk_tier})


def _pack(p: ContextPackEvent, marker: ReplayMarker | None, passed: dict[str, bool]) -> ReplayPack:
    """One pack as the examiner sees it (records before later fields existed: defaults, and
    no ``retrieval`` at all, as they were shown before it was kept)."""
    searched = {} if p.retrieval is None else {"retrieval": p.retrieval}
    return ReplayPack(
        **searched,
        context_pack_id=p.context_pack_id, corpus=p.corpus, origin=p.origin,
        policy_version=p.policy_version, ranker_version=p.ranker_version,
        chunks=[_chunk(s) for s in p.sources], withheld=p.withheld, hidden_marker=marker,
        unchecked=p.unchecked, validation_passed=passed.get(p.context_pack_id, False),
    )  # fmt: skip


def _chunk(source: PackSource) -> ReplayChunk:
    shown = {"chunk_id": source.chunk_id, "doc_id": source.doc_id, "score": source.score,
             "origin": source.origin}  # fmt: skip
    if source.writeback is not None:
        shown["writeback"] = source.writeback
    return ReplayChunk.model_validate(shown)


def _llm_calls(
    calls: list[tuple[AuditEvent, LlmCallEvent]], results: list[tuple[AuditEvent, LlmResultEvent]]
) -> list[ReplayLlmCall]:
    """Each model call with its outcome, matched by step (the call's number in the request)."""
    outcome = {r.step: r for _, r in results}
    out = []
    for _, c in calls:
        r = outcome.get(c.step)
        result = None if r is None else LlmOutcome(
            status=r.status, fault=r.fault, error=r.error, finish_reason=r.finish_reason,
            prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
            latency_ms=r.latency_ms, reply_hash=r.reply_hash, tool_calls=r.tool_calls)  # fmt: skip
        # Which profile and prompt served the call, only where the call recorded them.
        named = (("model_profile", c.model_profile), ("prompt_id", c.prompt_id),
                 ("prompt_sha256", c.prompt_sha256))  # fmt: skip
        served = {k: v for k, v in named if v is not None}
        out.append(ReplayLlmCall.model_validate(
            served | {"stage": c.stage, "step": c.step, "model": c.model,
                      "payload_hash": c.payload_hash, "tools": c.tools,
                      "result": result}))  # fmt: skip
    return out


def _delivered(r: ResponseEvent, memory: dict[str, PackSource],
               escalated: list[EscalationEvent]) -> Delivered:  # fmt: skip
    # The response id (and an escalation) shown only where kept (older records lack them).
    extra: dict[str, object] = {"response_id": r.response_id} if r.response_id is not None else {}
    if r.output_schema is not None:
        extra["output_schema"] = _copy(r.output_schema)
    if escalated:
        extra["escalation"] = Escalated(queue=escalated[-1].queue, reason=escalated[-1].reason)
    return Delivered.model_validate(extra | {
        "answer_hash": r.answer_hash, "cited_doc_ids": r.cited_doc_ids,
        "cited_chunk_ids": r.cited_chunk_ids, "abstained": r.abstained,
        "reason": r.reason, "grounded": r.grounded, "pattern": r.pattern,
        "flagged": r.flagged, "unsupported_claims": r.unsupported_claims,
        "cited_memory": [CitedMemory(chunk_id=cid, writeback=memory[cid].writeback)
                         for cid in r.cited_chunk_ids if cid in memory],
    })  # fmt: skip
