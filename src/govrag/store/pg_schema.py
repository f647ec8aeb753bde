"""What the PostgreSQL schema promises, and the pgvector pieces created outside migrations.

The schema itself is the numbered files under ``migrations/postgres/`` (applied by
:mod:`govrag.store.migrations`); its tables mirror the SQLite ones so both backends hold the
same truth. Differences that matter for scale-out:

- Every primary key, unique constraint and foreign key includes ``tenant_id``, the
  distribution column under Citus, so every table can be distributed by tenant and every
  join stays on one shard.
- Row-level security is enabled *and forced* on every tenant table: a session sees only the
  rows of the tenant named in the transaction-local setting ``govrag.tenant``; with no setting
  it sees nothing. Forced RLS applies to the table owner too; only superusers and roles with
  BYPASSRLS skip it, so the application role must be neither.
- Vectors use pgvector's ``vector`` type (dimension per tenant, recorded in ``vector_spaces``);
  each tenant has an HNSW index of its own (a partial index created with its vector space by
  migration 12's trigger, hardened by migration 14, restored on open by
  ``ensure_vector_indexes``), so a walk meets only that tenant's vectors.
- The index outbox is numbered per tenant from ``tenants.outbox_seq``, incremented under the
  tenant row's lock, so entries become visible in sequence order: a reader that has applied
  up to N never misses an N-1 committed later (which a shared sequence would allow).
- ``tenant_directory`` lists tenant ids and nothing else; it is the one table outside the
  tenant policies, so an operator's "every tenant" commands can enumerate them. The audit
  log's tenants are listed under a read-only policy of their own (migration 7), so events
  whose tenant is in no directory are found too.
- Text columns use the "C" collation: comparisons and ordering are by code point, as in
  SQLite, so filters and listings agree across backends.

Requires the ``postgres`` extra (psycopg 3) and pgvector >= 0.8 on the server.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from govrag.errors import StoreError

if TYPE_CHECKING:
    import psycopg

#: Oldest pgvector with ``hnsw.iterative_scan`` (filtered HNSW scans that do not lose rows).
MIN_PGVECTOR = (0, 8, 0)
TENANT_SETTING = "govrag.tenant"
#: The transaction setting the ``reader_acl`` policy on vectors reads (migration 6).
READER_SETTING = "govrag.reader"
#: The token every vector row holds; ``govrag.reader`` unset means this one (every row).
ALL_READERS = "\x1e"
#: The transaction setting under which audit events of every tenant are readable (migration
#: 7): ``govrag audit verify`` lists every tenant holding events, one whose tenant row is gone
#: included, which the tenant policy alone would hide.
AUDIT_DIRECTORY_SETTING = "govrag.audit_directory"

#: Tables holding tenant data; each has the forced tenant isolation policy (migrations 2, 3,
#: 4, 8 and 15 create them).
TENANT_TABLES = (
    "tenants", "corpora", "source_systems", "identities", "groups", "group_members",
    "documents", "chunks", "chunk_vectors", "vector_spaces", "doc_acl", "doc_meta",
    "doc_supersedes", "entities", "chunk_entities", "relations", "access_counter",
    "index_outbox", "incidents", "audit_events", "sessions", "marker_budget",
)  # fmt: skip


def parse_version(text: str) -> tuple[int, ...]:
    """``'0.8.1'`` -> ``(0, 8, 1)``; pre-release suffixes are ignored."""
    parts = re.findall(r"\d+", text.split("-")[0])
    if not parts:
        raise StoreError(f"cannot read the pgvector version {text!r}")
    return tuple(int(p) for p in parts[:3])


def ensure_pgvector(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    """Create (if needed) and check the ``vector`` extension; a clear error when missing or old."""
    import psycopg

    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
    except psycopg.Error as exc:
        raise StoreError(
            f"the PostgreSQL server cannot provide pgvector ({exc.sqlstate}: "
            f"{str(exc).strip()}); install pgvector >= "
            f"{'.'.join(map(str, MIN_PGVECTOR))} on the server, or have an administrator run "
            "CREATE EXTENSION vector in this database"
        ) from exc
    version = parse_version(row[0] if row else "0")
    if version < MIN_PGVECTOR:
        raise StoreError(
            f"pgvector {'.'.join(map(str, version))} is too old; govrag needs >= "
            f"{'.'.join(map(str, MIN_PGVECTOR))} (iterative HNSW scans); upgrade it with "
            "ALTER EXTENSION vector UPDATE"
        )
    return version


def vector_index_name(tenant: str, dim: int) -> str:
    """The name of ``tenant``'s HNSW index of ``dim``-dimensional vectors (migration 14's
    ``govrag_vector_index_name``: 128 bits of sha256, so tenant ids cannot be made to share
    one)."""
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:32]
    return f"chunk_vectors_hnsw_{int(dim)}_{digest}"


def ensure_vector_indexes(conn: psycopg.Connection[Any]) -> list[str]:
    """Create every tenant's missing HNSW index (each is created with its tenant's vector
    space, by migration 12's trigger; this restores any dropped since); the names created.

    One partial index per tenant and dimension: a walk meets only its own tenant's vectors.
    ``conn`` is the schema owner's (autocommit); each tenant's vector space is read under the
    tenant's own setting, as the forced policies want.
    """
    import psycopg

    created: list[str] = []
    try:
        tenants = [r[0] for r in conn.execute("SELECT tenant_id FROM tenant_directory")]
        for tenant in tenants:
            with conn.transaction():
                conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
                for dim, made in conn.execute(
                    "SELECT dim, govrag_ensure_tenant_vector_index(tenant_id, dim) "
                    "FROM vector_spaces WHERE tenant_id = %s",
                    (tenant,),
                ).fetchall():
                    if made:
                        created.append(vector_index_name(tenant, int(dim)))
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot create the vector indexes ({str(exc).strip()}); set [store] admin_url "
            "to the schema owner's URL, or have the owner run govrag once"
        ) from exc
    return created
