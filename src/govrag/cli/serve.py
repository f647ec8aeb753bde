"""``govrag serve``: the HTTP API (``govrag.server``) on uvicorn. Thin: it opens the
deployment, checks where it may listen, and hands the application to uvicorn with the
deployment's ``[server]`` drain time (on SIGTERM or SIGINT uvicorn stops accepting and lets
in-flight requests finish for up to ``drain_s``) and govrag's access log in place of
uvicorn's (which would write each request's raw path and query string)."""

from __future__ import annotations

import copy
import os
from typing import Annotated, Any

import typer

from govrag.app import Govrag
from govrag.app.serving import serving_refusal, settings_digest
from govrag.cli.common import DeploymentOpt, err, fail, guard, open_app
from govrag.errors import MissingExtraError
from govrag.settings import ServerSettings


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def uvicorn_options(server: ServerSettings) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.Config`` that ``[server]`` decides. Without
    ``proxy_headers`` the client address the app sees is the connection's peer: uvicorn would
    otherwise take it from ``X-Forwarded-For`` sent through a loopback peer, and ``/metrics``
    trusts no header to be local (``govrag.server.metrics_access``)."""
    return {"timeout_graceful_shutdown": server.drain_s, "access_log": False,
            "proxy_headers": False}  # fmt: skip


def log_config(server: ServerSettings) -> dict[str, Any]:
    """uvicorn's logging, plus the access lines of ``govrag.access`` on stdout (one JSON
    document a line, nothing around it) when ``[server] access_log`` is on."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    if server.access_log:
        config["formatters"]["govrag_access"] = {"format": "%(message)s"}
        config["handlers"]["govrag_access"] = {"class": "logging.StreamHandler",
                                               "formatter": "govrag_access",
                                               "stream": "ext://sys.stdout"}  # fmt: skip
        config["loggers"]["govrag.access"] = {"handlers": ["govrag_access"], "level": "INFO",
                                              "propagate": False}  # fmt: skip
    return config


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    deployment: DeploymentOpt = None,
) -> None:
    """Serve the HTTP API (bearer tokens, docs/auth.md; extra 'server')."""
    with open_app(deployment) as app:
        run(app, host, port)


def run(app: Govrag, host: str, port: int, *, mcp: bool = False) -> None:
    """Serve ``app``'s HTTP API on ``host:port`` until stopped; with ``mcp`` also the MCP
    endpoint at ``/mcp`` (``govrag mcp --transport http``). Refuses, before listening, a
    deployment that could not verify a token or would let anyone sign one."""
    refusal = serving_refusal(app, host, mcp=mcp)
    if refusal is not None:
        fail(refusal)
    server = app.settings.server
    try:
        import uvicorn
    except ImportError as exc:
        fail(MissingExtraError(exc.name or "uvicorn", "server", "The HTTP server"))
    base = server.public_url or f"http://{_authority(host, port)}"
    mcp_url = f"{base}/mcp" if mcp else None

    def build() -> Any:
        from govrag.server import create_app  # a missing extra names it (guarded)

        return create_app(app, mcp_url=mcp_url)

    api = guard(build)
    err.print(f"govrag serving {app.settings.deployment} on http://{_authority(host, port)}"
              + (f" (MCP: {mcp_url})" if mcp_url else "")
              + (f" with {server.workers} worker processes" if server.workers > 1 else ""),
              highlight=False)  # fmt: skip
    options = {"host": host, "port": port, "log_level": "info",
               "log_config": log_config(server), **uvicorn_options(server)}  # fmt: skip
    if server.workers == 1:
        uvicorn.run(api, **options)
        return
    # Each worker opens the deployment this process resolved and checked, and refuses any
    # other settings (govrag/server/worker.py, govrag/app/serving.py).
    from govrag.server.worker import DEPLOYMENT_ENV, DIGEST_ENV, HOST_ENV

    os.environ[DEPLOYMENT_ENV] = str(app.settings.deployment.resolve())
    os.environ[DIGEST_ENV] = settings_digest(app.settings)
    os.environ[HOST_ENV] = host
    uvicorn.run("govrag.server.worker:create", factory=True, workers=server.workers, **options)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
