"""Connection plumbing of the SQLite store: one connection (WAL), serialised by a lock."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from govrag.embed.base import Embedder
from govrag.errors import StoreError
from govrag.settings import SearchSettings
from govrag.store.dialect import SQLITE, Conn
from govrag.store.migrations import migrate_sqlite
from govrag.store.sql_base import SQLBase
from govrag.store.vectors import VectorIndex


class SQLiteBase(SQLBase):
    """One SQLite connection (WAL, foreign keys on) plus the state every part needs."""

    dialect = SQLITE
    _unique_violation = (sqlite3.IntegrityError,)

    def __init__(
        self,
        path: str | Path,
        *,
        index_dir: Path | None = None,
        embedder: Embedder | None = None,
        search: SearchSettings | None = None,
    ) -> None:
        self.path = str(path)
        self._init_state(index_dir, embedder, search)
        self._vectors: dict[str, VectorIndex] = {}
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA busy_timeout=15000")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the SQLite store {self.path!r}: {exc}") from exc
        migrate_sqlite(self._conn)
        self._after_open()

    def _after_open(self) -> None:
        """Hook for work that needs the migrated schema (the store repairs its indexes)."""

    # -- plumbing --------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, tenant: str, *, read: bool = False) -> Iterator[Conn]:
        # One file holds every tenant: ``tenant`` only scopes the statements themselves.
        with self._lock:
            try:
                self._conn.execute("BEGIN DEFERRED" if read else "BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a transaction: {exc}") from exc
            try:
                yield self._conn
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"SQLite statement failed: {exc}") from exc
            except BaseException:
                self._rollback()
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback()
                    raise StoreError(f"commit failed: {exc}") from exc

    def _rollback(self) -> None:
        # Some errors (a full disk, an I/O error) have already rolled the transaction back.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    @contextmanager
    def _audit_tx(self, tenant: str) -> Iterator[Conn]:
        # synchronous=FULL for this commit only: it reaches the disk before we return
        # (about 0.5 ms here), while ingest keeps the cheaper NORMAL.
        with self._lock:
            self._conn.execute("PRAGMA synchronous=FULL")
            try:
                with self._tx(tenant) as conn:
                    yield conn
            finally:
                self._conn.execute("PRAGMA synchronous=NORMAL")

    def _q(self, tenant: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"query failed: {exc}") from exc

    def tenants(self) -> list[str]:
        return [r[0] for r in self._q("", "SELECT tenant_id FROM tenants ORDER BY tenant_id")]
