"""Prometheus metrics of one app (``GET /metrics``; ``[server] metrics``).

Two sources, neither of them the request's content:

- each :class:`~govrag.server.access_log.RequestRecord` (requests by route template and
  status, latency by route, refusals by limit) and the in-flight count;
- the audit log: every event the deployment commits is handed to :meth:`Metrics.observe`
  (``Operators.observe_audit``), which reads it as its typed model and counts PEP verdicts
  by reason, chunks withheld from packs by reason, context packs served from the result
  cache, live rights checks that failed, validations that failed, and incidents. What the
  governed path decided is counted from the record it must commit anyway, so no layer below
  the application API knows there are metrics.

No count may move with what a caller cannot read: each one above is a function of what the
request's own answer shows its caller (its decisions, its packs' withheld counts, cache flag
and rights-check statuses, its validation), all computed over readable material only.
``hidden_marker`` events are not counted at all: one is written only when a withheld
document matches the query, so any count of them (shown, or withheld past the budget) would
tell whoever reads the exposition that hidden material matched, past the marker's budget and
for every principal. The audit log has them.

Every label value is bounded: route templates, status codes, verdicts and the fixed reason
and status vocabularies of the events (a value outside ``[A-Za-z0-9_.:-]{1,64}`` is counted as
``other``). No subject, tenant, query, document id or text is a label; still the counts are
every tenant's at once, so only the operator reads them (:mod:`~govrag.server.metrics_access`).
Each app has its own registry (never the process-wide default), so several apps in one
process keep separate counts. ``prometheus_client`` is imported only here, when an app with
metrics is built (``import govrag`` stays light).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import Response

from govrag.app import (
    ContextPackEvent,
    IncidentEvent,
    PepDecisionEvent,
    ValidationEvent,
    parse_event,
)
from govrag.errors import AuditEventError, MissingExtraError
from govrag.server.access_log import RequestRecord
from govrag.server.metrics_access import MetricsAccess
from govrag.server.problems import MEDIA_TYPE

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

_LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: Latency buckets in seconds: a governed search takes milliseconds, an answer seconds.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class CommittedEvent(Protocol):
    """An audit event as observers get it (``Operators.observe_audit``)."""

    @property
    def kind(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...


def label(value: object) -> str:
    """``value`` as a label value, or ``other`` when it is not a short plain name."""
    text = str(value)
    return text if _LABEL.fullmatch(text) else "other"


class Metrics:
    """The counters of one app and its registry."""

    def __init__(self, in_flight: Callable[[], float]) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError as exc:
            raise MissingExtraError(exc.name or "prometheus_client", "server",
                                    "The HTTP server's metrics") from exc  # fmt: skip
        self.registry: CollectorRegistry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("govrag_http_requests", "HTTP requests answered, by route "
                                "template and status.", ["route", "status"],
                                registry=r)  # fmt: skip
        self.latency = Histogram("govrag_http_request_duration_seconds", "Time to answer, by "
                                 "route template.", ["route"], buckets=_BUCKETS,
                                 registry=r)  # fmt: skip
        self.in_flight = Gauge("govrag_http_in_flight", "Requests being worked on (those "
                               "past their deadline included, until their work ends).",
                               registry=r)  # fmt: skip
        self.in_flight.set_function(in_flight)
        self.refusals = Counter("govrag_http_refusals", "Requests refused by a limit, by "
                                "kind (payload-too-large, rate-limited, overloaded, "
                                "deadline-exceeded).", ["kind"], registry=r)  # fmt: skip
        self.decisions = Counter("govrag_pep_decisions", "Policy gate decisions (audited), "
                                 "by verdict and reason.", ["verdict", "reason"],
                                 registry=r)  # fmt: skip
        self.withheld = Counter("govrag_withheld_chunks", "Chunks kept out of context packs "
                                "after ranking, by reason.", ["reason"], registry=r)  # fmt: skip
        self.packs = Counter("govrag_context_packs", "Context packs built, by whether the "
                             "ranking came from the result cache.", ["cache"],
                             registry=r)  # fmt: skip
        self.rights_failures = Counter("govrag_rights_check_failures", "Live rights checks "
                                       "of a source system that failed (its unconfirmed "
                                       "chunks withheld), by status.", ["status"],
                                       registry=r)  # fmt: skip
        self.validations = Counter("govrag_validations", "Pack validations, by outcome.",
                                   ["passed"], registry=r)  # fmt: skip
        self.incidents = Counter("govrag_incidents", "Security incidents, by kind.",
                                 ["kind"], registry=r)  # fmt: skip
        # Known series start at 0, so a rate or an alert on them works before the first one.
        for kind in REFUSALS:
            self.refusals.labels(kind)
        for outcome in ("true", "false"):
            self.validations.labels(outcome)
        for cache in ("hit", "miss"):
            self.packs.labels(cache)

    # -- sinks -----------------------------------------------------------------------------

    def record(self, record: RequestRecord) -> None:
        """Count one answered request (a :class:`RequestRecorder` sink)."""
        self.requests.labels(record.route, str(record.status)).inc()
        self.latency.labels(record.route).observe(record.duration_ms / 1000.0)
        if record.refused is not None:
            self.refusals.labels(label(record.refused)).inc()

    def observe(self, event: CommittedEvent) -> None:
        """Count what one committed audit event says (an audit observer), read as its typed
        model, as its writer built it; one this govrag cannot read is counted nowhere."""
        if event.kind not in _COUNTED:
            return  # parsing no payload of the kinds not counted (most of them)
        try:
            read = parse_event(event.kind, event.payload)
        except AuditEventError:
            return
        if isinstance(read, PepDecisionEvent):
            self.decisions.labels(label(read.verdict), label(read.reason)).inc()
        elif isinstance(read, ContextPackEvent):
            self.packs.labels("hit" if read.cache_hit else "miss").inc()
            for reason, count in (read.withheld.reasons if read.withheld else {}).items():
                if count > 0:
                    self.withheld.labels(label(reason)).inc(count)
            for check in read.rights_checks:
                if check.status != "ok":
                    self.rights_failures.labels(label(check.status)).inc()
        elif isinstance(read, ValidationEvent):
            self.validations.labels(str(read.validation_passed).lower()).inc()
        elif isinstance(read, IncidentEvent):
            self.incidents.labels(label(read.incident_kind)).inc()

    # -- exposition ------------------------------------------------------------------------

    def exposition(self) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    def mount(self, api: FastAPI, access: MetricsAccess) -> None:
        """Serve :meth:`exposition` at ``GET /metrics`` to the requests ``access`` allows."""

        def metrics(request: Request) -> Response:
            return self.exposition() if access.allows(request) else access.refused()

        refused = {"description": "Not the operator: no metrics token, or not from loopback "
                                  "([server] metrics_token_env).",
                   "content": {MEDIA_TYPE: {}}}  # fmt: skip
        api.add_api_route("/metrics", metrics, methods=["GET"], tags=["operations"],
                          summary="Prometheus metrics (the metrics token, or loopback only; "
                          "counts only).", response_class=Response,
                          responses={403: refused})  # fmt: skip


#: The limits' refusal kinds (``govrag.server.limits``).
REFUSALS = ("payload-too-large", "rate-limited", "overloaded", "deadline-exceeded")
#: The audit events counted; never ``hidden_marker`` (module docstring).
_COUNTED = frozenset({"pep_decision", "context_pack", "validation", "incident"})
