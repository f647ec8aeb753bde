"""Typed audit events: one pydantic model per kind of event govrag writes, shared by every
writer and every reader.

Before, each writer built a string-keyed payload dict and replay read it back by the same keys,
agreeing only by convention. Now a writer builds the kind's model and records it with
:func:`write` (the model's payload is what the store hashes and stores), and a reader turns a
row back into that model with :func:`parse_event`. The store keeps its generic ``(kind,
payload)`` log and its hash chain unchanged: rows written before the models existed parse as
version 1 of their kind (see :mod:`govrag.audit.events.base` for how versions are stored).

The kinds, by who writes them:

- the session and its end: ``route_pinned``, ``pin_violation``, ``response``, ``error``
  (:mod:`~govrag.audit.events.session`);
- the policy gate: ``pep_decision``, ``context_pack``, ``hidden_marker``
  (:mod:`~govrag.audit.events.policy`);
- validation: ``validation``, ``incident`` (:mod:`~govrag.audit.events.checks`);
- the model: ``llm_call``, ``llm_result``, ``proposal`` (:mod:`~govrag.audit.events.model`);
- write-back: ``writeback_admission`` (:mod:`~govrag.audit.events.writeback`).
"""

from __future__ import annotations

from govrag.audit.events.base import UNVERSIONED, AuditEventBase, AuditSink, Recorded
from govrag.audit.events.checks import (
    IncidentEvent,
    SufficiencyRecord,
    ValidationEvent,
    ViolationRecord,
)
from govrag.audit.events.kinds import (
    KNOWN_VERSIONS,
    AuditEventModel,
    StoredEvent,
    events_of,
    kind_of,
    parse_event,
    payload_version,
    write,
)
from govrag.audit.events.model import LlmCallEvent, LlmResultEvent, ProposalEvent
from govrag.audit.events.policy import (
    ContextPackEvent,
    HiddenMarkerEvent,
    PackProposal,
    PackRetrieval,
    PackSource,
    PepDecisionEvent,
)
from govrag.audit.events.session import (
    ErrorEvent,
    EscalationEvent,
    PinAttempt,
    PinnedRetrieval,
    PinViolationEvent,
    RemovedClaim,
    ResponseEvent,
    RoutePinned,
    SchemaOutcome,
)
from govrag.audit.events.writeback import WritebackAdmissionEvent

__all__ = [
    "KNOWN_VERSIONS",
    "UNVERSIONED",
    "AuditEventBase",
    "AuditEventModel",
    "AuditSink",
    "ContextPackEvent",
    "ErrorEvent",
    "EscalationEvent",
    "HiddenMarkerEvent",
    "IncidentEvent",
    "LlmCallEvent",
    "LlmResultEvent",
    "PackProposal",
    "PackRetrieval",
    "PackSource",
    "PepDecisionEvent",
    "PinAttempt",
    "PinViolationEvent",
    "PinnedRetrieval",
    "ProposalEvent",
    "Recorded",
    "RemovedClaim",
    "ResponseEvent",
    "RoutePinned",
    "SchemaOutcome",
    "StoredEvent",
    "SufficiencyRecord",
    "ValidationEvent",
    "ViolationRecord",
    "WritebackAdmissionEvent",
    "events_of",
    "kind_of",
    "parse_event",
    "payload_version",
    "write",
]
