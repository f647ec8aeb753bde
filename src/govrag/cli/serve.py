"""``govrag serve``: the HTTP API (``govrag.server``) on uvicorn. Thin: it opens the
deployment, checks where it may listen, and hands the application to uvicorn."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

import typer

from govrag.cli.common import DeploymentOpt, err, fail, guard, open_app
from govrag.errors import ConfigError, MissingExtraError


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    deployment: DeploymentOpt = None,
) -> None:
    """Serve the HTTP API (bearer tokens, docs/auth.md; extra 'server')."""
    with open_app(deployment) as app:
        if app.settings.auth.dev_tokens and not _loopback(host):
            fail(ConfigError(f"refusing to listen on {host}: [auth] dev_tokens is on, and "
                             "anyone who can read keys/dev-token-secret could sign a token "
                             "as anyone; listen on 127.0.0.1, or turn dev_tokens off"))  # fmt: skip
        auth = app.settings.auth
        if not (auth.keys or auth.jwks_file or auth.dev_tokens):
            fail(ConfigError("no [auth] keys: a served deployment takes identity from bearer "
                             "tokens only; configure [auth] (docs/auth.md), or set "
                             "[auth] dev_tokens = true for local development"))  # fmt: skip
        # A key that cannot load is an error at start, not a 401 for every caller.
        problems = [p for p in app.config_check().problems if not p.warning]
        if problems:
            fail(ConfigError("; ".join(str(p) for p in problems)))
        try:
            import uvicorn
        except ImportError as exc:
            fail(MissingExtraError(exc.name or "uvicorn", "server", "The HTTP server"))

        def build() -> Any:
            from govrag.server import create_app  # a missing extra names it (guarded)

            return create_app(app)

        api = guard(build)
        err.print(f"govrag serving {app.settings.deployment} on http://{host}:{port}",
                  highlight=False)  # fmt: skip
        uvicorn.run(api, host=host, port=port, log_level="info")
