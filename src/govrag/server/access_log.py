"""One record per HTTP request: its id, route template, status and duration, and who called.

:class:`RequestRecorder` is the outermost layer of the app (pure ASGI). At a request's start
it gives it an id (``request.state.request_id``, which the error handlers quote, and the
``X-Request-Id`` response header); when the last byte of the answer is about to be sent it
builds a :class:`RequestRecord` and hands it to its sinks: the access log (:class:`AccessLog`,
one JSON line on the logger ``govrag.access``) and the metrics. Recording before that last
byte means a caller that has its answer can rely on the line being written.

A record holds only what is safe to keep: the route *template* (``/v1/sessions/{session_id}``,
never the raw path, whose segments are the caller's), never the query string, a header, a
token or a body, and ``sub``/``tenant`` only when a token was verified (the token dependency
puts them on ``request.state``). ``audit_request_id`` links the line to the audit log when the
handler set ``request.state.audit_request_id``.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

access = logging.getLogger("govrag.access")
log = logging.getLogger("govrag.server")

#: The route label of a request no route matched (a 404): one value, whatever the path.
UNMATCHED = "<unmatched>"
REQUEST_ID_HEADER = b"x-request-id"


class RequestRecord(BaseModel):
    """What the access log and the metrics know of one request (nothing of its content)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: When the request arrived (UTC, ISO 8601).
    time: str
    request_id: str
    method: str
    #: The matched route's template, or :data:`UNMATCHED`.
    route: str
    status: int
    duration_ms: float
    sub: str | None = None
    tenant: str | None = None
    audit_request_id: str | None = None
    #: The limit that refused the request (``payload-too-large``, ``rate-limited``,
    #: ``overloaded``, ``deadline-exceeded``), if one did.
    refused: str | None = None


Sink = Callable[[RequestRecord], None]


class AccessLog:
    """A sink writing each record as one JSON line on ``govrag.access`` (INFO)."""

    def __call__(self, record: RequestRecord) -> None:
        access.info(record.model_dump_json(exclude_none=True))


def route_template(scope: Scope) -> str:
    """The template of the route that took (or would take) the request, never its raw path.

    A request refused before routing (its body, the in-flight bound) is matched against the
    app's routes here, so it is labelled like the ones that ran."""
    route = scope.get("route")
    if route is None:
        app = scope.get("app")
        partial = None
        for candidate in getattr(getattr(app, "router", None), "routes", ()):
            match, _ = candidate.matches(scope)
            if match is Match.FULL:
                route = candidate
                break
            if match is Match.PARTIAL and partial is None:
                partial = candidate  # the path matched, the method did not (a 405)
        route = route or partial
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class RequestRecorder:
    """Gives each request its id and hands a :class:`RequestRecord` of it to ``sinks``."""

    def __init__(self, app: ASGIApp, sinks: Sequence[Sink]) -> None:
        self.app = app
        self.sinks = tuple(sinks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began, arrived = time.perf_counter(), datetime.now(UTC)
        state: dict[str, Any] = scope.setdefault("state", {})
        request_id = state.setdefault("request_id", f"http-{secrets.token_hex(8)}")
        status = 500
        recorded = False

        def record() -> None:
            nonlocal recorded
            if recorded:
                return
            recorded = True
            entry = RequestRecord(
                time=arrived.isoformat(timespec="milliseconds"),
                request_id=str(request_id),
                method=str(scope["method"]),
                route=route_template(scope),
                status=status,
                duration_ms=round((time.perf_counter() - began) * 1000.0, 3),
                sub=_text(state.get("sub")),
                tenant=_text(state.get("tenant")),
                audit_request_id=_text(state.get("audit_request_id")),
                refused=_text(state.get("refused")),
            )
            for sink in self.sinks:
                try:
                    sink(entry)
                except Exception:  # a broken sink must not break the answer
                    log.exception("recording request %s failed", request_id)

        async def recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", ())
                           if k.lower() != REQUEST_ID_HEADER]  # fmt: skip
                headers.append((REQUEST_ID_HEADER, str(request_id).encode("latin-1")))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                record()
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            # An error no handler answered (Starlette's outer layer turns it into a 500) or a
            # client gone mid-answer: recorded all the same, as what the server sent or 500.
            record()


def _text(value: object) -> str | None:
    return None if value is None else str(value)
