"""The PostgreSQL truth store (psycopg 3 + pgvector): for deployments past one machine.

The store's facade (``facade.py``) over a :class:`~govrag.store.pg_database.PgDatabase` (a
pool, migrated on open): the same repositories and SQL as SQLite's, so both backends hold the
same truth and give the same keyword results. Each govrag process keeps its own tantivy
index per tenant and applies the PostgreSQL outbox before it searches. What is PostgreSQL's
own is the vector leg, in the database (``pg_vectors.py``), which lets the hidden-item
marker rank on another thread while the caller's vector leg runs on the server.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from govrag.embed.base import Embedder
from govrag.settings import SearchSettings
from govrag.store.facade import Store
from govrag.store.glossary import Glossary
from govrag.store.pg_database import PgDatabase, describe_server
from govrag.store.pg_vectors import PgVectors
from govrag.store.search import SearchConfig


class PostgresStore(Store):
    """Knowledge store on a PostgreSQL database with pgvector >= 0.8."""

    backend = "postgres"

    def __init__(
        self,
        url: str,
        *,
        admin_url: str | None = None,
        app_role: str | None = None,
        pool_size: int = 4,
        index_dir: Path | None = None,
        embedder: Embedder | None = None,
        search: SearchSettings | None = None,
        glossary: Glossary | None = None,
    ) -> None:
        config = SearchConfig(search or SearchSettings(), embedder, glossary or Glossary())
        db = PgDatabase(url, admin_url=admin_url, app_role=app_role, pool_size=pool_size)
        self.url, self.admin_url, self.where = db.url, db.admin_url, db.where
        # The derived indexes are this process's own: a lock of their own serialises them,
        # in a folder per server and database.
        super().__init__(
            db, PgVectors(db, config), config,
            lock=threading.RLock(), index_dir=index_root(index_dir, url), server_vectors=True,
        )  # fmt: skip


def index_root(index_dir: Path | None, url: str) -> Path | None:
    """This process's lexical indexes of one database: a folder per server and database, so
    pointing a deployment at another database never reuses indexes of the first."""
    if index_dir is None:
        return None
    key = hashlib.sha256(describe_server(url).encode()).hexdigest()[:12]
    return index_dir / f"pg-{key}"
