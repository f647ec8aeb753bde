"""The server's limits (``[server]``): what a caller may cost it, each refused cheaply.

Four bounds, each a problem document with a stable ``type``:

- **Body size** (413 ``payload-too-large``): a ``Content-Length`` over ``max_body_bytes`` is
  refused before a byte of the body is read; a chunked body is counted as it is read and
  refused the moment it passes the bound. Either way the connection is closed after the
  answer, so the unread rest is never parsed as a next request.
- **Rate per principal** (429 ``rate-limited``, ``Retry-After``): a token bucket per
  (tenant, sub) of the *verified* token, taken in :func:`admit`, which the app's token
  dependency calls right after verification. A request without a valid token is refused by
  verification first and takes from nobody's bucket.
- **In-flight bound** (503 ``overloaded``, ``Retry-After``): past ``max_in_flight`` requests
  being worked on, one more is refused at once; nothing queues without bound.
- **Deadline** (503 ``deadline-exceeded``): a caller waits at most ``deadline_s``. The use case
  runs on a worker thread and cannot be killed: it finishes, closes its audit trail, and its
  result is dropped; the caller gets the 503. Its in-flight slot is held until the work has
  really ended, so the bound counts work, not waiting callers.

A refused request does nothing: it is answered before the app (body, in-flight) or before the
handler's use case (rate), so it leaves no audit event. An admitted one runs the whole governed
path. ``/healthz`` and ``/metrics`` are outside the in-flight bound and the deadline, so an
overloaded server still answers its probes. Each refusal's kind is put on
``request.state.refused`` for the access log and the metrics.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from govrag.server.problems import problem
from govrag.types import Principal

log = logging.getLogger("govrag.server")

#: Paths that are never refused for load or cut by the deadline (probes and scrapes).
EXEMPT_PATHS = frozenset({"/healthz", "/metrics"})
#: When an overloaded server asks a caller to come back, in seconds.
OVERLOADED_RETRY_S = 1
#: Buckets kept before full ones are forgotten (a full bucket is the same as none).
MAX_BUCKETS = 100_000


class Refusal(Exception):
    """A limit refused the request; :meth:`response` is its problem document."""

    def __init__(self, status: int, code: str, detail: str, *, retry_after: int | None = None,
                 close: bool = False) -> None:  # fmt: skip
        super().__init__(code)
        self.status, self.code, self.detail = status, code, detail
        self.retry_after, self.close = retry_after, close

    def response(self, request_id: str | None = None) -> JSONResponse:
        extra = {"request_id": request_id} if request_id and self.status >= 500 else {}
        response = problem(self.status, self.code, self.code.replace("-", " ").capitalize(),
                           self.detail, **extra)  # fmt: skip
        if self.retry_after is not None:
            response.headers["Retry-After"] = str(self.retry_after)
        if self.close:
            response.headers["Connection"] = "close"
        return response


def _state(scope: Scope) -> MutableMapping[str, Any]:
    """The request's ``request.state`` (Starlette keeps it in the scope)."""
    state: MutableMapping[str, Any] = scope.setdefault("state", {})
    return state


class TokenBuckets:
    """One token bucket per key: ``burst`` tokens, refilled at ``per_minute`` a minute.

    ``clock`` (seconds, monotonic) is injectable so a test can move time instead of waiting.
    Thread-safe: the token dependency runs on FastAPI's thread pool."""

    def __init__(self, per_minute: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}

    def take(self, key: tuple[str, str]) -> float:
        """Take one token: 0.0 when there was one, else the seconds until there is."""
        with self._lock:
            now = self.clock()
            tokens, last = self._buckets.get(key, (self.burst, now))
            # max(): a clock that steps back refills nothing, and never un-fills.
            tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
            if len(self._buckets) > MAX_BUCKETS:
                self._forget_full(now)
            return wait

    def _forget_full(self, now: float) -> None:
        full = [k for k, (tokens, last) in self._buckets.items()
                if tokens + (now - last) * self.rate >= self.burst]  # fmt: skip
        for key in full:
            del self._buckets[key]


class Limits:
    """The limits of one app, from its deployment's ``[server]`` settings."""

    def __init__(self, *, max_body_bytes: int, rate_per_minute: float, rate_burst: int,
                 deadline_s: float, max_in_flight: int,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.max_body_bytes = max_body_bytes
        self.deadline_s = deadline_s
        self.max_in_flight = max_in_flight
        self.buckets = TokenBuckets(rate_per_minute, rate_burst, clock)
        #: Requests being worked on (changed on the event loop only; read by the metrics).
        self.in_flight = 0

    def too_large(self) -> Refusal:
        return Refusal(413, "payload-too-large",
                       f"the request body is larger than {self.max_body_bytes} bytes",
                       close=True)  # fmt: skip


def admit(request: Request, principal: Principal) -> Principal:
    """The verified ``principal``, once its bucket had a token; a :class:`Refusal` (429)
    otherwise. Called where the token is verified, so only verified callers are counted, and
    records who is calling on ``request.state`` (``sub``, ``tenant``) for the access log."""
    request.state.sub, request.state.tenant = principal.sub, principal.tenant
    limits: Limits = request.app.state.limits
    wait = limits.buckets.take((principal.tenant, principal.sub))
    if wait > 0.0:
        request.state.refused = "rate-limited"
        raise Refusal(429, "rate-limited", "too many requests for this principal; retry after "
                      "the time in Retry-After", retry_after=max(1, math.ceil(wait)))  # fmt: skip
    return principal


class LimitsMiddleware:
    """Body size, in-flight bound and deadline, in that order, around the app (pure ASGI, so
    a refused body is never read to its end)."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        #: Work whose caller got its deadline answer; kept so it is not collected mid-flight.
        self._abandoned: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await self._body(scope, receive)
        if body is None:
            return  # the client went away while sending
        exempt = scope["path"] in EXEMPT_PATHS
        if not exempt and self.limits.in_flight >= self.limits.max_in_flight:
            body = Refusal(503, "overloaded", "the server is at its bound of requests in flight; "
                           "retry after the time in Retry-After",
                           retry_after=OVERLOADED_RETRY_S)  # fmt: skip
        if isinstance(body, Refusal):
            await self._refuse(body, scope, receive, send)
        elif exempt:
            await self.app(scope, _replay(body, receive), send)
        else:
            await self._within_deadline(scope, _replay(body, receive), send)

    async def _body(self, scope: Scope, receive: Receive) -> bytes | Refusal | None:
        """The whole body, or the refusal of one over the bound: at once for a declared
        length, else as soon as the count passes it (``None``: the client disconnected)."""
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limits.max_body_bytes:
            return self.limits.too_large()
        return await self._read(receive)

    async def _read(self, receive: Receive) -> bytes | Refusal | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                return self.limits.too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _refuse(self, refusal: Refusal, scope: Scope, receive: Receive, send: Send) -> None:
        state = _state(scope)
        state["refused"] = refusal.code
        await refusal.response(state.get("request_id"))(scope, receive, send)

    async def _within_deadline(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = abandoned = False

        async def guarded(message: Message) -> None:
            nonlocal started
            if abandoned:
                return  # the caller already has its 503: the late result is dropped
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def work() -> None:
            try:
                await self.app(scope, receive, guarded)
            finally:
                self.limits.in_flight -= 1

        self.limits.in_flight += 1
        task = asyncio.get_running_loop().create_task(work())
        done, _ = await asyncio.wait({task}, timeout=self.limits.deadline_s)
        if task in done or started:
            await task  # finished (its errors propagate), or already answering: let it end
            return
        abandoned = True
        self._abandoned.add(task)
        task.add_done_callback(self._ended)
        await self._refuse(Refusal(503, "deadline-exceeded",
                                   f"no answer within {self.limits.deadline_s:g} s; the "
                                   "request still runs to its end and is audited"),
                           scope, receive, send)  # fmt: skip

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a request past its deadline failed", exc_info=task.exception())


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's own."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
