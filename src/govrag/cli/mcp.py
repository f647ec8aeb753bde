"""``govrag mcp``: the route's governed tools over MCP (``govrag.server.mcp_server``).

Thin: it opens the deployment, fixes who the server acts for, and hands both to the MCP
server. Over stdio the identity is fixed at start, never taken from the client: ``--as SUB``
(a ``principals.json`` entry, for local use) or ``--token`` (a bearer token verified as the
HTTP API verifies one; also ``GOVRAG_MCP_TOKEN``, so it stays out of a process listing).
stdout is the protocol's: every message of this command goes to stderr. Over streamable HTTP
(``--transport http``) each request carries its own bearer token, so neither is taken: it is
``govrag serve`` with the MCP endpoint at ``/mcp`` beside ``/v1``, under the same checks.
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from govrag.cli.common import DeploymentOpt, as_principal, fail, guard, open_app
from govrag.cli.serve import run as serve_http
from govrag.errors import InputError, MissingExtraError


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)


def mcp(
    as_: Annotated[
        str | None, typer.Option("--as", help="Serve this principal of principals.json.")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="GOVRAG_MCP_TOKEN",
            show_default=False,
            help="Serve the principal of this bearer token (verified as by the HTTP API).",
        ),
    ] = None,
    route: Annotated[
        str | None,
        typer.Option(
            help="stdio: the route to pin (default: the deployment's); over http a "
            "client names one in the URL, /mcp?route=ROUTE."
        ),
    ] = None,
    transport: Annotated[
        Literal["stdio", "http"],
        typer.Option(
            help="stdio (one principal, fixed at start) or http (streamable HTTP at "
            "/mcp, a bearer token per request, beside the HTTP API)."
        ),
    ] = "stdio",
    host: Annotated[str, typer.Option(help="http: address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="http: port to listen on.")] = 8000,
    deployment: DeploymentOpt = None,
) -> None:
    """Serve the route's governed tools to MCP clients, over stdio or streamable HTTP
    (extra 'mcp')."""
    if transport == "http":
        if as_ is not None or token is not None or route is not None:
            fail(InputError("over http every request carries its own bearer token and names "
                            "its route in the URL (/mcp?route=ROUTE); drop --as, --token (or "
                            "GOVRAG_MCP_TOKEN) and --route"))  # fmt: skip
        with open_app(deployment) as app:
            _needs_mcp()
            serve_http(app, host, port, mcp=True)
        return
    if (as_ is None) == (token is None):
        fail(InputError("name whom the server acts for: --as SUB (principals.json) or "
                        "--token TOKEN (or GOVRAG_MCP_TOKEN), not both"))  # fmt: skip
    with open_app(deployment) as app:
        expires_at = None
        if token is not None:
            verified = guard(lambda: app.callers.verify_token(token))
            principal, expires_at = verified.principal, verified.expires_at
        else:
            assert as_ is not None
            principal = guard(lambda: as_principal(app, as_))
        _needs_mcp()
        import anyio

        from govrag.server.mcp_server import Binding, serve_stdio

        # The route must exist before a client connects: a typo is an error now, not a
        # refusal of every call.
        guard(lambda: app.callers.offered_tools(principal, route=route))
        anyio.run(serve_stdio, app.callers, Binding(principal, route, expires_at=expires_at))


def _needs_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        fail(MissingExtraError(exc.name or "mcp", "mcp", "The MCP server"))
