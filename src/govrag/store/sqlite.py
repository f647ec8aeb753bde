"""The SQLite truth store (stdlib ``sqlite3``, WAL): the embedded default backend.

The store's facade (``facade.py``) over a :class:`~govrag.store.sqlite_database.SQLiteDatabase`,
with SQLite's own vector leg: an in-memory matrix per tenant derived from the outbox like the
lexical index (``sqlite_vectors.py``). The derived indexes are serialised on the connection's
lock, so a search sees no write between its statements.
"""

from __future__ import annotations

from pathlib import Path

from govrag.embed.base import Embedder
from govrag.settings import SearchSettings
from govrag.store.facade import Store
from govrag.store.glossary import Glossary
from govrag.store.search import SearchConfig
from govrag.store.sqlite_database import SQLiteDatabase
from govrag.store.sqlite_vectors import SQLiteVectors


class SQLiteStore(Store):
    """Knowledge store on one SQLite file (or ``:memory:``)."""

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        index_dir: Path | None = None,
        embedder: Embedder | None = None,
        search: SearchSettings | None = None,
        glossary: Glossary | None = None,
    ) -> None:
        config = SearchConfig(search or SearchSettings(), embedder, glossary or Glossary())
        db = SQLiteDatabase(path)
        self.path = db.path
        super().__init__(
            db, SQLiteVectors(db, config), config,
            lock=db.lock, index_dir=index_dir, server_vectors=False,
        )  # fmt: skip
        # Repair on open: a crash between an SQL commit and the index write left outbox rows
        # the lexical index has not applied yet.
        for tenant in self.tenants():
            self.sync_indexes(tenant, vectors=False)
