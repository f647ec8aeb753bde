"""One worker process of ``govrag serve`` with ``[server] workers`` above 1.

A Python process runs one request's Python at a time, so on a machine with several cores the
HTTP API serves more requests at once from several processes. uvicorn starts them and calls
:func:`create` in each: the worker opens the deployment itself (its own store connection,
indexes and caches; the truth store and the outbox keep processes in step, see
docs/scaling.md) and builds the same application as a single process would.

What is per process: the per-caller rate limit (so each worker allows its share,
``rate_per_minute / workers`` and ``rate_burst / workers``, and a caller gets at most the
configured rate in all, less if its requests land unevenly), the in-flight bound, and the
counters ``/metrics`` shows (those of the worker that answered). The audit chain is one per
tenant across processes (appends serialise on the tenant row).
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

#: The deployment directory the parent resolved, for its workers.
DEPLOYMENT_ENV = "GOVRAG_SERVE_WORKER_DEPLOYMENT"


def worker_share(rate_per_minute: float, rate_burst: int, workers: int) -> dict[str, Any]:
    """A worker's share of the per-caller limit: the rate and burst divided among workers
    (a burst of at least 1)."""
    return {"rate_per_minute": rate_per_minute / workers,
            "rate_burst": max(1, math.floor(rate_burst / workers))}  # fmt: skip


def create() -> Any:
    """The HTTP API of this worker (uvicorn's application factory)."""
    import govrag
    from govrag.server.app import create_app
    from govrag.settings import load_settings

    root = Path(os.environ[DEPLOYMENT_ENV])
    server = load_settings(root).server
    app = govrag.open(root, server=worker_share(server.rate_per_minute, server.rate_burst,
                                                server.workers))  # fmt: skip
    api = create_app(app)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            app.close()

    api.router.lifespan_context = lifespan
    return api
