"""``govrag token --as SUB``: a development bearer token for an entry of ``principals.json``.

For trying the HTTP and MCP servers locally; needs ``[auth] dev_tokens = true``. Thin: the
API signs (``Govrag.dev_token``). The token goes to stdout alone, so
``TOKEN=$(govrag token --as ana)`` works; ``--json`` adds its expiry.
"""

from __future__ import annotations

import typer

from govrag.cli.common import AsOpt, DeploymentOpt, JsonOpt, emit, guard, open_app


def register(app: typer.Typer) -> None:
    app.command("token")(token)


def token(as_: AsOpt, deployment: DeploymentOpt = None, as_json: JsonOpt = False) -> None:
    """Sign a development bearer token for a principals.json entry ([auth] dev_tokens)."""

    def run() -> tuple[str, str]:
        with open_app(deployment) as app:
            signed = app.operators.dev_token(as_)
            return signed, app.callers.verify_token(signed).expires_at.isoformat()

    signed, expires_at = guard(run)
    if as_json:
        emit({"token": signed, "expires_at": expires_at, "sub": as_})
    else:
        typer.echo(signed)
