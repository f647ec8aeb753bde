"""``govrag escalations``: the failed validations a route passed to people, from the log.

A route with ``on_validation_failure: escalate`` answers a failed validation with a fixed
message and an ``escalation`` audit event naming the failure and its queue. This reads them
back for an examiner or a reviewer: each with its request (``govrag replay`` shows the rest),
who asked, on which route, when, why and where it waits. The audit log is append-only, so
every escalation on it is listed; working through a queue is the reviewers' process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from govrag.audit.events import EscalationEvent, kind_of, parse_event
from govrag.store.protocol import AuditReader


@dataclass(frozen=True)
class Escalation:
    request_id: str
    session_id: str
    at: str
    sub: str
    route_id: str
    reason: str
    queue: str
    response_id: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def escalations(store: AuditReader, tenant: str, *, queue: str | None = None
                ) -> list[Escalation]:  # fmt: skip
    """The tenant's escalations, oldest first (only ``queue``'s, if given)."""
    kind = kind_of(EscalationEvent)
    out = []
    for row in store.audit_events(tenant):
        if row.kind != kind:
            continue
        event = parse_event(row.kind, row.payload)
        assert isinstance(event, EscalationEvent)
        if queue is None or event.queue == queue:
            out.append(Escalation(row.request_id, row.session_id, row.created_at, event.sub,
                                  event.route_id, event.reason, event.queue,
                                  event.response_id))  # fmt: skip
    return out
