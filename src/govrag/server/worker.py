"""One worker process of ``govrag serve`` with ``[server] workers`` above 1.

A Python process runs one request's Python at a time, so on a machine with several cores the
HTTP API serves more requests at once from several processes. uvicorn starts them and calls
:func:`create` in each: the worker opens the deployment itself (its own store connection,
indexes and caches; the truth store and the outbox keep processes in step, see
docs/scaling.md) and builds the same application as a single process would.

What is per process: the per-caller rate limit (so each worker allows its share,
``rate_per_minute / workers`` and ``rate_burst // workers``, and a caller gets at most the
configured rate in all, less if its requests land unevenly), the in-flight bound, and the
counters ``/metrics`` shows (those of the worker that answered). The audit chain is one per
tenant across processes (appends serialise on the tenant row). A worker serves only the
settings its parent checked (govrag/app/serving.py): uvicorn starts workers again on SIGHUP
or when one dies, and such a worker reads ``govrag.toml`` anew.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from govrag.errors import GovragError

#: What the parent process checked, for its workers: the deployment directory it resolved,
#: a digest of its settings, and the address it listens on.
DEPLOYMENT_ENV = "GOVRAG_SERVE_WORKER_DEPLOYMENT"
DIGEST_ENV = "GOVRAG_SERVE_WORKER_SETTINGS"
HOST_ENV = "GOVRAG_SERVE_WORKER_HOST"

log = logging.getLogger("govrag.server")


def create() -> Any:
    """The HTTP API of this worker (uvicorn's application factory). Refuses, and stops the
    server, when the deployment's settings are not those the parent checked, or fail the
    parent's checks (govrag/app/serving.py)."""
    from govrag.app.serving import open_worker
    from govrag.server.app import create_app

    try:
        app = open_worker(Path(os.environ[DEPLOYMENT_ENV]), os.environ.get(DIGEST_ENV, ""),
                          os.environ.get(HOST_ENV, ""))  # fmt: skip
    except GovragError as exc:
        # Never serve what was not checked: stop the whole server (uvicorn would otherwise
        # start this worker again and again).
        log.error("govrag serve worker %d refuses to start: %s; stopping the server",
                  os.getpid(), exc)  # fmt: skip
        os.kill(os.getppid(), signal.SIGTERM)
        raise
    api = create_app(app)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            app.close()

    api.router.lifespan_context = lifespan
    return api
