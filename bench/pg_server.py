"""The PostgreSQL benchmark's server: a cluster from :mod:`govrag.testing`, tuned for the load.

:data:`SERVER_SETTINGS` are written with ``ALTER SYSTEM``, so they survive the test helper's
rewrite of its own settings on each start; the stores connect as :data:`APP_ROLE`, a role that
owns nothing (forced row-level security applies, as in production), with the superuser as
``admin_url``. :mod:`bench.pg_build` loads the corpus into it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import synthetic
from bench.common import say
from govrag.embed.hashing import HashEmbedder
from govrag.settings import SearchSettings
from govrag.testing import PgServer, free_port, require_server, start_server
from govrag.testing.pg_process import find_bindir, privilege_mode

if TYPE_CHECKING:
    from govrag.store.postgres import PostgresStore


DATABASE = "bench"
#: The role the stores connect as: owns nothing, so the tenant policies always apply.
APP_ROLE = "govrag_app"
#: Server settings written with ALTER SYSTEM (``postgresql.auto.conf`` in the data
#: directory, read after the test helper's own settings, so they survive its rewrite on each
#: start). Sized for the 24 GiB / 2-core machine the figures come from.
SERVER_SETTINGS = {
    # The hot set at 1M chunks (vectors, HNSW graph, documents, ACL rows and their indexes)
    # is about 6 GB: hold it in PostgreSQL's own cache, not only the OS page cache.
    "shared_buffers": "8GB",
    "effective_cache_size": "16GB",
    # The HNSW build keeps the whole graph in memory when it fits (pgvector warns and gets
    # much slower otherwise); 1M x 384 floats need about 3 GB.
    "maintenance_work_mem": "8GB",
    # Leader + one worker: both cores build the graph.
    "max_parallel_maintenance_workers": "1",
    # Benchmark data, rebuilt from the seed at will: commits need not wait for the WAL flush
    # (a crash loses the last commits and the build marker is missing, so it is rebuilt).
    "synchronous_commit": "off",
    # Fewer checkpoints during the load.
    "max_wal_size": "16GB",
    "checkpoint_timeout": "30min",
}


# -- server ---------------------------------------------------------------------------------
def fresh_server(root: Path) -> PgServer:
    """A new cluster under ``root`` with :data:`SERVER_SETTINGS`, restarted to apply them."""
    require_server()
    server = start_server(root)
    with server.connect(autocommit=True) as conn:
        for key, value in SERVER_SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")
        conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN")
        conn.execute(f'CREATE DATABASE "{DATABASE}"')
    server.stop("fast")
    server.start(timeout=120)
    return server


def restart_server(root: Path, port: int) -> PgServer:
    """The server on an existing data directory, on its old port when that is free.

    The same port keeps the store's lexical index folder (named after the server address)
    valid, so tantivy's index of a 1M-chunk database is not rebuilt on every run.
    """
    require_server()
    bindir = find_bindir()
    assert bindir is not None  # require_server() checked it
    for candidate in (port, free_port()):
        server = PgServer(
            root=root.resolve(),
            bindir=bindir,
            host="127.0.0.1",
            port=candidate,
            mode=privilege_mode(),
        )
        # The helper keeps port and listen settings in its own include file; rewrite it for
        # this port (the benchmark's settings are in postgresql.auto.conf and stay).
        server.write_settings()
        try:
            # Generous: a server that was killed replays WAL first.
            server.start(timeout=600)
            return server
        except RuntimeError:
            if candidate != port:
                raise
            say(f"postgres: port {port} unavailable, restarting on another")
    raise AssertionError("unreachable")


def dsns(server: PgServer) -> tuple[str, str]:
    """(application role URL, superuser URL) of the benchmark database."""
    from psycopg.conninfo import make_conninfo

    admin = server.dsn_for(DATABASE)
    return make_conninfo(admin, user=APP_ROLE), admin


def open_store(server: PgServer, root: Path, **search: Any) -> PostgresStore:
    """A search store on the benchmark database, as the application role."""
    from govrag.store.postgres import PostgresStore

    app, admin = dsns(server)
    return PostgresStore(
        app,
        admin_url=admin,
        index_dir=root / "index",
        embedder=HashEmbedder(dim=synthetic.EMBED_DIM),
        search=SearchSettings(**search),
    )


def prewarm(server: PgServer) -> float:
    """Read every table and index of the database into shared buffers; returns seconds.

    The timed figures are those of a server that has been serving for a while, not of the
    first queries after a restart (which read from the OS cache or disk).
    """
    t0 = time.perf_counter()
    with server.connect(DATABASE, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute(
            "SELECT pg_prewarm(c.oid) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"
        )
    return time.perf_counter() - t0
