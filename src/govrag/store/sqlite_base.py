"""Connection plumbing shared by the SQLite store's parts (writes, derived indexes, reads)."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from govrag.embed.base import Embedder
from govrag.errors import StoreError
from govrag.settings import SearchSettings
from govrag.store.lexical import LexicalIndex
from govrag.store.schema import migrate, now_iso
from govrag.store.vectors import VectorIndex

log = logging.getLogger("govrag.store")


class SQLiteBase:
    """One SQLite connection (WAL, foreign keys on) plus the state every part needs."""

    def __init__(
        self,
        path: str | Path,
        *,
        index_dir: Path | None = None,
        embedder: Embedder | None = None,
        search: SearchSettings | None = None,
    ) -> None:
        self.path = str(path)
        self.index_dir = index_dir
        self.embedder = embedder
        self.search_settings = search or SearchSettings()
        self._lock = threading.RLock()
        self._lexical: dict[str, LexicalIndex] = {}
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
        migrate(self._conn)
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
    def _tx(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute(f"BEGIN {mode}")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a transaction: {exc}") from exc
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._conn.execute("ROLLBACK")
                    raise StoreError(f"commit failed: {exc}") from exc

    def _q(self, sql: str, params: Sequence[object] | dict[str, object] = ()) -> list[tuple]:  # type: ignore[type-arg]
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"query failed: {exc}") from exc

    # -- tenants and catalogue -------------------------------------------------------------
    def tenants(self) -> list[str]:
        return [r[0] for r in self._q("SELECT tenant_id FROM tenants ORDER BY tenant_id")]

    def _ensure_tenant(self, conn: sqlite3.Connection, tenant: str) -> None:
        conn.execute(
            "INSERT INTO tenants(tenant_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (tenant, now_iso()),
        )

    def _bump_epoch(self, conn: sqlite3.Connection, tenant: str) -> None:
        conn.execute("UPDATE tenants SET acl_epoch = acl_epoch + 1 WHERE tenant_id = ?", (tenant,))

    def _ensure_source(self, conn: sqlite3.Connection, tenant: str, source_system: str) -> None:
        conn.execute(
            "INSERT INTO source_systems(tenant_id, source_system) VALUES (?, ?) "
            "ON CONFLICT DO NOTHING",
            (tenant, source_system),
        )
