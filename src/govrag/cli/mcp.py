"""``govrag mcp``: the route's governed tools over MCP (``govrag.server.mcp_server``).

Thin: it opens the deployment, fixes who the server acts for, and hands both to the MCP
server. Over stdio the identity is fixed at start, never taken from the client: ``--as SUB``
(a ``principals.json`` entry, for local use) or ``--token`` (a bearer token verified as the
HTTP API verifies one; also ``GOVRAG_MCP_TOKEN``, so it stays out of a process listing).
stdout is the protocol's: every message of this command goes to stderr.
"""

from __future__ import annotations

from typing import Annotated

import typer

from govrag.cli.common import DeploymentOpt, as_principal, fail, guard, open_app
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
        str | None, typer.Option(help="The route to pin (default: the deployment's).")
    ] = None,
    deployment: DeploymentOpt = None,
) -> None:
    """Serve the route's governed tools to an MCP client over stdio (extra 'mcp')."""
    if (as_ is None) == (token is None):
        fail(InputError("name whom the server acts for: --as SUB (principals.json) or "
                        "--token TOKEN (or GOVRAG_MCP_TOKEN), not both"))  # fmt: skip
    with open_app(deployment) as app:
        if token is not None:
            principal = guard(lambda: app.verify_token(token).principal)
        else:
            assert as_ is not None
            principal = guard(lambda: as_principal(app, as_))
        try:
            import anyio

            from govrag.server.mcp_server import serve_stdio
        except ImportError as exc:
            fail(MissingExtraError(exc.name or "mcp", "mcp", "The MCP server"))
        # The route must exist before a client connects: a typo is an error now, not a
        # refusal of every call.
        guard(lambda: app.offered_tools(principal, route=route))
        anyio.run(serve_stdio, app, principal, route)
