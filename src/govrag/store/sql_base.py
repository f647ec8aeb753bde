"""What the shared SQL parts of a store (writes, derived indexes, reads) need of a backend.

A backend (``sqlite_base.py``, ``pg_base.py``) supplies tenant-scoped transactions taking
``?`` placeholders and its :class:`~govrag.store.dialect.Dialect`; the parts above it are the
same code on both, so both backends hold and return the same truth.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from govrag.embed.base import Embedder
from govrag.settings import SearchSettings
from govrag.store.clock import now_iso
from govrag.store.dialect import Conn, Dialect
from govrag.store.lexical import LexicalIndex

log = logging.getLogger("govrag.store")


class SQLBase:
    """Interface and shared plumbing of a SQL truth store."""

    backend: str
    dialect: Dialect
    embedder: Embedder | None
    search_settings: SearchSettings
    #: Where this process keeps its derived lexical indexes (None: in memory).
    index_dir: Path | None
    _lock: threading.RLock
    _lexical: dict[str, LexicalIndex]
    #: The driver's exception for a statement that broke a unique index or key.
    _unique_violation: tuple[type[Exception], ...] = ()

    def _init_state(
        self, index_dir: Path | None, embedder: Embedder | None, search: SearchSettings | None
    ) -> None:
        self.index_dir = index_dir
        self.embedder = embedder
        self.search_settings = search or SearchSettings()
        self._lock = threading.RLock()
        self._lexical = {}

    def _tx(self, tenant: str, *, read: bool = False) -> AbstractContextManager[Conn]:
        """One transaction on behalf of ``tenant``; ``read`` when it writes nothing."""
        raise NotImplementedError

    def _audit_tx(self, tenant: str) -> AbstractContextManager[Conn]:
        """A write transaction whose commit is durable when it returns (audit events)."""
        return self._tx(tenant)

    def _audit_directory_tx(self) -> AbstractContextManager[Conn]:
        """A read transaction that sees every tenant's audit events (to list their tenants)."""
        return self._tx("", read=True)

    def _pin_reads(self, tenant: str) -> AbstractContextManager[None]:
        """Hook: serve the enclosed reads of ``tenant`` from one transaction, when that is
        cheaper than one each (a networked database)."""
        return nullcontext()

    def _q(self, tenant: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement in its own read transaction and fetch its rows."""
        with self._tx(tenant, read=True) as conn:
            return list(conn.execute(sql, params).fetchall())

    def close(self) -> None:
        raise NotImplementedError

    # -- pieces of write transactions that differ by backend ---------------------------------
    def _bump_epoch(self, conn: Conn, tenant: str) -> None:
        """Rights (or what ranks) changed: caches keyed on the tenant's generation expire."""
        conn.execute("UPDATE tenants SET acl_epoch = acl_epoch + 1 WHERE tenant_id = ?", (tenant,))

    def _ensure_tenant(self, conn: Conn, tenant: str) -> None:
        conn.execute(
            "INSERT INTO tenants(tenant_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (tenant, now_iso()),
        )

    def _forget_tenant(self, conn: Conn, tenant: str) -> None:
        """Delete the tenant row (its other rows are gone)."""
        conn.execute("DELETE FROM tenants WHERE tenant_id = ?", (tenant,))

    def _append_outbox(self, conn: Conn, tenant: str, doc_id: int) -> None:
        """Record that ``doc_id`` changed, at a sequence number readers apply in order."""
        conn.execute(
            "INSERT INTO index_outbox(tenant_id, doc_id, created_at) VALUES (?, ?, ?)",
            (tenant, doc_id, now_iso()),
        )

    def _vector_param(self, vector: npt.NDArray[np.float32]) -> object:
        """A vector as the backend's ``embedding`` column takes it."""
        return np.ascontiguousarray(vector, dtype=np.float32).tobytes()

    def _json_value(self, value: object) -> dict[str, Any]:
        """A JSON column read back (text on SQLite, already decoded on PostgreSQL)."""
        decoded = json.loads(value) if isinstance(value, str | bytes) else value
        return dict(decoded) if isinstance(decoded, dict) else {"value": decoded}

    def tenants(self) -> list[str]:
        raise NotImplementedError

    def _forget_derived(self, tenant: str) -> None:
        """Hook: drop this process's derived indexes of a tenant."""

    #: Every table holding a tenant's rows, children before parents, except the audit log
    #: (append-only: it outlives a dropped tenant) and the tenant row itself.
    _tenant_tables: tuple[str, ...] = (
        "relations", "chunk_entities", "entities", "access_counter", "incidents",
        "index_outbox", "doc_meta", "doc_acl", "chunk_vectors", "chunks", "documents",
        "vector_spaces", "group_members", "groups", "identities", "source_systems", "corpora",
        "sessions", "marker_budget",
    )  # fmt: skip


def json_list(values: Sequence[object]) -> str:
    """A list bound as one parameter (see ``dialect.py``)."""
    return json.dumps(list(values))
