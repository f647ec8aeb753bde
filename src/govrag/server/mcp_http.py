"""The MCP server over streamable HTTP, at ``/mcp`` of the HTTP API's app (extra ``mcp``).

One app, one gate: ``/mcp`` sits behind the same limits, access log and metrics as ``/v1``,
and each request's bearer token goes through the same :func:`~govrag.server.caller.
authenticate` (one ``Authorization`` header, verified by ``Callers.verify_token``, then the
principal's rate limit) before the SDK reads a byte of its body. A refused token gets the
``/v1`` routes' one 401 body, whose challenge also names this endpoint's protected-resource
metadata (RFC 9728, served at ``/.well-known/oauth-protected-resource/mcp``): the resource's
URL and the issuer whose tokens it takes, so a standard MCP client can find where to get one.
No token is passed on to anything downstream.

Whom a call is for is the verified token of the request that carries it, never the session
or the client: a right revoked, or a token expired, counts at the next request. The route is
the endpoint URL's ``?route=`` (else the deployment's default). Which govrag session a call
continues:

- a ``Govrag-Session`` header names one of the caller's own (anyone else's is not found);
- else, on a pre-2026 MCP session (``Mcp-Session-Id``), the session the first call of that
  MCP session opened: one MCP session, one pinned govrag session. An MCP session is its
  opener's: the SDK answers another principal naming it as it answers for an absent one;
- else (protocol 2026-07-28 has no sessions) each call opens its own, whose id the result
  carries for a client that wants to continue it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from govrag.app import Callers
from govrag.errors import AuthError, InputError
from govrag.server.caller import authenticate
from govrag.server.limits import Refusal
from govrag.server.mcp_server import Binding, build
from govrag.server.problems import from_error
from govrag.types import Principal

#: Where the endpoint is, and where its protected-resource metadata is (RFC 9728 section 3.1:
#: the well-known prefix inserted before the resource's path).
PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource" + PATH
#: The header a client names a govrag session of its own with.
SESSION_HEADER = "govrag-session"
#: Live MCP sessions the SDK keeps at once (its default).
MAX_SESSIONS = 10_000
#: Pinned sessions remembered per principal; past it the principal's least recently used is
#: forgotten, and its next call opens a new govrag session (nobody else's is touched).
PINNED_PER_PRINCIPAL = 64
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: The SDK's refusal of a body that is not one JSON-RPC message, without its library detail.
NOT_A_MESSAGE = "Invalid request: the body is not one JSON-RPC message (batches are not taken)"


class McpEndpoint:
    """``/mcp`` and its metadata for one opened deployment (its callers' use cases);
    ``resource_url`` is the URL clients reach the endpoint at (the resource its tokens are
    for), ``issuer`` their ``[auth] issuer``, ``max_body_bytes`` the ``[server]`` limit."""

    def __init__(self, callers: Callers, resource_url: str, *, issuer: str | None,
                 max_body_bytes: int) -> None:  # fmt: skip
        self.issuer = issuer
        self.resource_url = resource_url
        self._pinned: dict[tuple[str, str], OrderedDict[str, Binding]] = {}
        self._lock = threading.Lock()
        host = urlsplit(resource_url).hostname or ""
        # A server on loopback is what a DNS-rebinding page would reach from a browser: it
        # answers only requests addressed to loopback (the SDK's Host and Origin check).
        security = None
        if host in _LOOPBACK:
            security = TransportSecuritySettings(
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        self.sessions = StreamableHTTPSessionManager(
            app=build(callers, self.bind),
            # One JSON answer a request: no response stream outlives its request, so no
            # client holds an in-flight slot while idle.
            json_response=True,
            security_settings=security,
            max_request_body_size=max_body_bytes,
            max_sessions=MAX_SESSIONS,
        )

    def routes(self) -> list[Route]:
        # An ASGI callable object, not a function: Starlette hands it the raw request.
        gate = _Gate(self, StreamableHTTPASGIApp(self.sessions))
        return [
            Route(PATH, endpoint=gate, methods=["GET", "POST", "DELETE"]),  # GET: a 405
            Route(METADATA_PATH, endpoint=self.metadata, methods=["GET"]),
        ]

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """The SDK's session manager, for the app's life (the app's lifespan)."""
        async with self.sessions.run():
            yield

    def metadata(self, request: Request) -> JSONResponse:
        """RFC 9728 protected-resource metadata: this resource, and the issuer of its tokens
        when ``[auth] issuer`` is a URL (development tokens have none to discover)."""
        body: dict[str, Any] = {"resource": self.resource_url, "resource_name": "govrag",
                                "bearer_methods_supported": ["header"]}  # fmt: skip
        issuer = self.issuer
        if issuer and urlsplit(issuer).scheme in ("http", "https"):
            body["authorization_servers"] = [issuer]
        return JSONResponse(body)

    def challenge(self) -> str:
        metadata = self.resource_url.removesuffix(PATH) + METADATA_PATH
        return f'Bearer realm="govrag", resource_metadata="{metadata}"'

    def bind(self, ctx: Any) -> Binding:
        """Whom the SDK's request ``ctx`` is for (its gate put the verified principal on the
        HTTP request), on which route, continuing which session (see the module's text)."""
        request = getattr(ctx, "request", None)
        principal = getattr(getattr(request, "state", None), "mcp_principal", None)
        if not isinstance(request, Request) or not isinstance(principal, Principal):
            # Only the gate puts a principal there; without one nothing is served.
            raise AuthError("missing", "an MCP request reached a tool without its gate")
        routes = request.query_params.getlist("route")
        named_ones = request.headers.getlist(SESSION_HEADER)
        if len(routes) > 1 or len(named_ones) > 1:
            # Which one counts would be this server's guess, and a proxy may guess otherwise.
            raise InputError("name at most one route (?route=) and one Govrag-Session header")
        route = routes[0] if routes and routes[0] else None
        named = named_ones[0] if named_ones else None
        if named is not None:
            return Binding(principal, route, named)
        mcp_session = request.headers.get("mcp-session-id")
        if mcp_session is None or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # 2026-07-28 has no sessions: an Mcp-Session-Id there is the client's invention.
            return Binding(principal, route)
        # A pre-2026 request reaches a tool only on a live MCP session of this principal's
        # (the SDK answers any other id with a 404), so at most what its opener made is kept.
        with self._lock:  # bound on the tool calls' worker threads
            pinned = self._pinned.setdefault((principal.tenant, principal.sub), OrderedDict())
            binding = pinned.get(mcp_session)
            if binding is None or binding.route != route or binding.session_ended():
                binding = pinned[mcp_session] = Binding(principal, route)
            pinned.move_to_end(mcp_session)
            while len(pinned) > PINNED_PER_PRINCIPAL:
                pinned.popitem(last=False)  # the principal's own least recently used
            binding.principal = principal  # this request's claims, not the first one's
        return binding


class _Gate:
    """The endpoint: authenticate, then the SDK's transport (or the refusal, as on ``/v1``)."""

    def __init__(self, endpoint: McpEndpoint, transport: StreamableHTTPASGIApp) -> None:
        self.endpoint, self.transport = endpoint, transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        refusal: Response | None = None
        try:
            principal = await authenticate(request)
        except AuthError as exc:
            refusal = from_error(exc, _request_id(request))
            refusal.headers["WWW-Authenticate"] = self.endpoint.challenge()
        except Refusal as exc:  # the principal's rate limit
            refusal = exc.response(_request_id(request))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if request.method == "GET":
            # The stream for server-initiated messages: this server sends none, and an open
            # stream would hold an in-flight slot for as long as its client idles.
            await Response(status_code=405, headers={"Allow": "POST, DELETE"})(scope, receive, send)
            return
        request.state.mcp_principal = principal
        # Who owns a pre-2026 MCP session, for the SDK: a request naming another principal's
        # Mcp-Session-Id is answered as for one that does not exist. The token itself stays
        # here (it is passed on to nothing).
        owner = AccessToken(token="", client_id=principal.tenant, subject=principal.sub,
                            scopes=[])  # fmt: skip
        scope["user"] = AuthenticatedUser(owner)
        await self.transport(scope, receive, _plain_errors(send))


def _plain_errors(send: Send) -> Send:
    """``send`` with the SDK's refusals of a body kept to one line: its validation of a body
    that is no JSON-RPC message (a batch, say) names library types and a versioned help URL."""
    held: list[Message] = []

    async def filtered(message: Message) -> None:
        if message["type"] == "http.response.start" and 400 <= message["status"] < 500:
            held.append(message)
            return
        if not held:
            await send(message)
            return
        held.append(message)
        if message.get("more_body", False):
            return
        start, *parts = held
        body = b"".join(part.get("body", b"") for part in parts)
        try:
            answer = json.loads(body)
            if "\n" in answer["error"]["message"]:
                answer["error"]["message"] = NOT_A_MESSAGE
                body = json.dumps(answer).encode()
        except (ValueError, KeyError, TypeError):
            pass  # not a JSON-RPC error: as it was
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return filtered


def _request_id(request: Request) -> str:
    return str(getattr(request.state, "request_id", "mcp"))
