"""What an app needs to be operated, wired from the deployment's ``[server]`` settings.

:func:`install` puts three layers around the routes of :func:`~govrag.server.create_app`:
outermost the request recorder (:mod:`~govrag.server.access_log`: request id, access line,
metrics), inside it the limits (:mod:`~govrag.server.limits`: body size, in-flight bound,
deadline), and it answers a rate-limit refusal raised by the token dependency
(:func:`~govrag.server.limits.admit`). The recorder is outside the limits so a refused request
is logged and counted like any other. With ``[server] metrics`` on, it mounts ``GET /metrics``
(for the operator only: :mod:`~govrag.server.metrics_access`) and subscribes the metrics to the
deployment's committed audit events.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from govrag.app import Operators
from govrag.server.access_log import AccessLog, RequestRecorder, Sink
from govrag.server.limits import Limits, LimitsMiddleware, Refusal


def install(api: FastAPI, operators: Operators, *, clock: Callable[[], float] = time.monotonic
            ) -> Limits:  # fmt: skip
    """Add the limits, the request recorder and (if configured) the metrics to ``api``;
    ``clock`` is the rate limit's (seconds, monotonic). Returns the limits, also kept as
    ``api.state.limits`` (the token dependency finds them there)."""
    cfg = operators.settings.server
    limits = Limits(max_body_bytes=cfg.max_body_bytes, rate_per_minute=cfg.rate_per_minute,
                    rate_burst=cfg.rate_burst, deadline_s=cfg.deadline_s,
                    max_in_flight=cfg.max_in_flight, clock=clock)  # fmt: skip
    api.state.limits = limits

    def refused(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Refusal)  # registered for Refusal only
        return exc.response(getattr(request.state, "request_id", None))

    api.add_exception_handler(Refusal, refused)

    sinks: list[Sink] = []
    if cfg.access_log:
        sinks.append(AccessLog())
    if cfg.metrics:
        from govrag.server.metrics import Metrics
        from govrag.server.metrics_access import MetricsAccess

        access = MetricsAccess.from_env(cfg.metrics_token_env)  # before anything is subscribed
        metrics = Metrics(in_flight=lambda: limits.in_flight)
        metrics.mount(api, access)
        operators.observe_audit(metrics.observe)
        sinks.append(metrics.record)
        api.state.metrics = metrics

    # Added last is outermost: the recorder sees every answer, the limits' refusals included.
    api.add_middleware(LimitsMiddleware, limits=limits)
    api.add_middleware(RequestRecorder, sinks=sinks)
    return limits
