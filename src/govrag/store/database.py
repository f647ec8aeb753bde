"""What every repository of the store needs of a backend: a :class:`Database`, and the few
statements several repositories write inside their transactions.

The store is composed, not inherited. A backend is a :class:`Database`: connections and
transactions of one dialect (``sqlite_database.py``, ``pg_database.py``). Each concept of the
store (identities and groups, documents, sessions, audit, the access ledger, the outbox and
derived indexes, the governed reads) is a repository holding one, and writes the same SQL on
every backend, so both backends hold and return the same truth.

The statements below (a tenant row, the ACL epoch, an outbox entry, a source system) are
plain functions of a connection inside the caller's transaction: a repository calls them, it
does not inherit them. Where the backends differ in more than a slot of the SQL, a flag of
the :class:`~govrag.store.dialect.Dialect` chooses.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from govrag.errors import SourceConflict
from govrag.store.clock import now_iso
from govrag.store.dialect import Conn, Dialect

log = logging.getLogger("govrag.store")


class Database(Protocol):
    """Tenant-scoped transactions on one truth store, taking ``?`` placeholders."""

    #: The slots and flags of the shared statements.
    dialect: Dialect
    #: The driver's exceptions for a statement that broke a unique index or key.
    unique_violation: tuple[type[Exception], ...]
    #: The lock of the one connection every transaction runs on (SQLite); ``None`` when
    #: transactions take connections from a pool (PostgreSQL).
    connection_lock: threading.RLock | None

    def tx(self, tenant: str, *, read: bool = False) -> AbstractContextManager[Conn]:
        """One transaction on behalf of ``tenant``; ``read`` when it writes nothing."""
        ...

    def audit_tx(self, tenant: str) -> AbstractContextManager[Conn]:
        """A write transaction whose commit is durable when it returns (audit events)."""
        ...

    def directory_tx(self) -> AbstractContextManager[Conn]:
        """A read transaction that sees every tenant's audit events (to list their tenants)."""
        ...

    def pin_reads(self, tenant: str) -> AbstractContextManager[None]:
        """Serve the enclosed reads of ``tenant`` from one transaction, when that is cheaper
        than one each (a networked database); otherwise nothing."""
        ...

    def q(self, tenant: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement in its own read transaction and fetch its rows."""
        ...

    def back_up(self, dest: Path) -> None:
        """Write the whole database, as one consistent snapshot, to the new file ``dest``
        while other processes go on writing (an operator's backup)."""
        ...

    def close(self) -> None: ...


# -- statements inside a caller's write transaction -----------------------------------------
def ensure_tenant(conn: Conn, dialect: Dialect, tenant: str) -> None:
    """Create the tenant row (and directory entry) unless it exists."""
    if dialect.tenant_directory:
        conn.execute(
            "INSERT INTO tenant_directory(tenant_id) VALUES (?) ON CONFLICT DO NOTHING", (tenant,)
        )
    conn.execute(
        "INSERT INTO tenants(tenant_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (tenant, now_iso()),
    )


def forget_tenant(conn: Conn, dialect: Dialect, tenant: str) -> None:
    """Delete the tenant row (its other rows are gone) and its directory entry."""
    conn.execute("DELETE FROM tenants WHERE tenant_id = ?", (tenant,))
    if dialect.tenant_directory:
        conn.execute("DELETE FROM tenant_directory WHERE tenant_id = ?", (tenant,))


def bump_epoch(conn: Conn, tenant: str) -> None:
    """Rights (or what ranks) changed: caches keyed on the tenant's generation expire."""
    conn.execute("UPDATE tenants SET acl_epoch = acl_epoch + 1 WHERE tenant_id = ?", (tenant,))


def append_outbox(conn: Conn, dialect: Dialect, tenant: str, doc_id: int) -> None:
    """Record that ``doc_id`` changed, at a sequence number readers apply in order."""
    if not dialect.numbered_outbox:
        conn.execute(
            "INSERT INTO index_outbox(tenant_id, doc_id, created_at) VALUES (?, ?, ?)",
            (tenant, doc_id, now_iso()),
        )
        return
    # Numbered from the tenant row, under its lock until commit: entries become visible
    # in sequence order, so a reader that applied up to N cannot miss a later-committed N-1.
    conn.execute(
        "WITH s AS (UPDATE tenants SET outbox_seq = outbox_seq + 1 WHERE tenant_id = ? "
        "RETURNING outbox_seq) "
        "INSERT INTO index_outbox(tenant_id, seq, doc_id, created_at) "
        "SELECT ?, outbox_seq, ?, ? FROM s",
        (tenant, tenant, doc_id, now_iso()),
    )


def ensure_source(conn: Conn, tenant: str, source_system: str) -> None:
    conn.execute(
        "INSERT INTO source_systems(tenant_id, source_system) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (tenant, source_system),
    )


def claim(
    conn: Conn,
    table: str,
    id_column: str,
    key: tuple[str, str, str],
    writer: str,
    *,
    kind: str,
    delete: bool,
) -> None:
    """Let the configured source ``writer`` write (or delete) the row ``key`` (tenant, source
    system, id) of ``table`` (``groups`` or ``documents``): a row no source owns becomes its
    own; one another source owns is a :class:`~govrag.errors.SourceConflict`. Run inside the
    writer's transaction, before it changes anything (the claim locks the row on PostgreSQL,
    so two sources claiming one row at once are told apart)."""
    where = f"WHERE tenant_id = ? AND source_system = ? AND {id_column} = ?"
    conn.execute(f"UPDATE {table} SET writer = ? {where} AND writer IS NULL", (writer, *key))
    row = conn.execute(f"SELECT writer FROM {table} {where}", key).fetchone()
    if row is not None and row[0] != writer:
        raise SourceConflict.refused(kind, key[2], key[1], str(row[0]), writer, delete=delete)


# -- values as the backends take and return them -------------------------------------------
def vector_param(dialect: Dialect, vector: npt.NDArray[np.float32]) -> object:
    """A vector as the backend's ``embedding`` column takes it."""
    values = np.ascontiguousarray(vector, dtype=np.float32)
    return values if dialect.vector_arrays else values.tobytes()


def json_value(value: object) -> dict[str, Any]:
    """A JSON column read back (text on SQLite, already decoded on PostgreSQL)."""
    decoded = json.loads(value) if isinstance(value, str | bytes) else value
    return dict(decoded) if isinstance(decoded, dict) else {"value": decoded}


def json_list(values: Sequence[object]) -> str:
    """A list bound as one parameter (see ``dialect.py``)."""
    return json.dumps(list(values))


def list_tenants(db: Database) -> list[str]:
    """Every tenant with a tenant row (PostgreSQL: from the directory, which its row-level
    security leaves visible)."""
    table = "tenant_directory" if db.dialect.tenant_directory else "tenants"
    return [r[0] for r in db.q("", f"SELECT tenant_id FROM {table} ORDER BY tenant_id")]
