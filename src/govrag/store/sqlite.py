"""The SQLite truth store (stdlib ``sqlite3``, WAL): the embedded default backend.

Writes go to SQL first, each document in one transaction together with an index-outbox row
(``sqlite_writes.py``); derived indexes catch up from the outbox before every search
(``sqlite_derived.py``), so a revocation is visible to the very next search in any process.
This module holds the read side: access resolution and the search primitives.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from govrag.embed.base import FloatArray
from govrag.store.filters import filters_sql
from govrag.store.records import (
    EVERYONE,
    AccessScope,
    principal_token,
)
from govrag.store.schema import now_iso
from govrag.store.search import ChunkInfo, run_search
from govrag.store.sqlite_base import log
from govrag.store.sqlite_derived import SQLiteDerived
from govrag.store.sqlite_writes import SQLiteWrites
from govrag.types import MetadataFilter, Principal, SearchRequest, SearchResult

# Email -> source accounts -> transitive groups, in one statement. Groups nest within one
# source system: a member id is an account or a group id of the group's own system.
# INDEXED BY: each recursive step must probe by member; with some statistics the planner
# instead scans every membership row of the tenant per step (18 ms instead of 0.3 ms at 100
# reachable groups).
_RESOLVE_SQL = """
WITH RECURSIVE reach(source_system, principal_id) AS (
    SELECT source_system, account_id FROM identities WHERE tenant_id = :tenant AND email = :email
    UNION
    SELECT m.source_system, m.group_id FROM reach r
    JOIN group_members m INDEXED BY group_members_by_member
    ON m.tenant_id = :tenant AND m.source_system = r.source_system AND m.member_id = r.principal_id
)
SELECT source_system, principal_id FROM reach
"""


class SQLiteStore(SQLiteWrites, SQLiteDerived):
    """Knowledge store on one SQLite file (or ``:memory:``)."""

    backend = "sqlite"

    def _after_open(self) -> None:
        # Repair on open: a crash between an SQL commit and the index write left outbox rows
        # the lexical index has not applied yet.
        for tenant in self.tenants():
            self.sync_indexes(tenant, vectors=False)

    def acl_epoch(self, tenant: str) -> int:
        rows = self._q("SELECT acl_epoch FROM tenants WHERE tenant_id = ?", (tenant,))
        return int(rows[0][0]) if rows else 0

    def is_empty(self, tenant: str) -> bool:
        return not self._q(
            "SELECT 1 FROM chunks WHERE tenant_id = ? AND indexed = 1 LIMIT 1", (tenant,)
        )

    def stats(self, tenant: str) -> dict[str, int]:
        """Row counts of a tenant: what an operator checks after an ingest or a repair."""
        row = self._q(
            "SELECT (SELECT COUNT(*) FROM documents WHERE tenant_id = :t),"
            " (SELECT COUNT(*) FROM chunks WHERE tenant_id = :t AND indexed = 1),"
            " (SELECT COUNT(*) FROM chunks WHERE tenant_id = :t AND indexed = 0),"
            " (SELECT COUNT(*) FROM chunk_vectors WHERE tenant_id = :t),"
            " (SELECT COUNT(*) FROM doc_acl WHERE tenant_id = :t),"
            " (SELECT COUNT(*) FROM identities WHERE tenant_id = :t),"
            " (SELECT COUNT(*) FROM groups WHERE tenant_id = :t),"
            " (SELECT COUNT(*) FROM index_outbox WHERE tenant_id = :t)",
            {"t": tenant},
        )[0]
        keys = ("documents", "chunks", "sections", "vectors", "acl_rows", "identities",
                "groups", "outbox_rows")  # fmt: skip
        return dict(zip(keys, (int(v) for v in row), strict=True))

    def incidents(self, tenant: str) -> list[tuple[str, dict[str, object]]]:
        """Recorded incidents (kind, detail), oldest first."""
        rows = self._q(
            "SELECT kind, detail FROM incidents WHERE tenant_id = ? ORDER BY incident_id",
            (tenant,),
        )
        return [(kind, json.loads(detail)) for kind, detail in rows]

    def list_corpora(self, tenant: str) -> list[tuple[str, str]]:
        """(corpus id, description) of a tenant's corpora."""
        rows = self._q(
            "SELECT corpus_id, description FROM corpora WHERE tenant_id = ? ORDER BY corpus_id",
            (tenant,),
        )
        return [(r[0], r[1]) for r in rows]

    def describe_corpus(self, tenant: str, corpus: str, description: str) -> None:
        with self._tx() as conn:
            self._ensure_tenant(conn, tenant)
            conn.execute(
                "INSERT INTO corpora(tenant_id, corpus_id, description, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT(tenant_id, corpus_id) "
                "DO UPDATE SET description = excluded.description",
                (tenant, corpus, description, now_iso()),
            )

    def resolve_access(
        self, principal: Principal, corpora: Sequence[str], *, every_corpus: bool
    ) -> AccessScope:
        """The caller's principal tokens (one SQL statement), ceiling and corpus scope.

        ``every_corpus``: ``corpora`` is every corpus of the tenant, so legs skip that filter.
        """
        rows = self._q(_RESOLVE_SQL, {"tenant": principal.tenant, "email": principal.email})
        tokens = {principal_token(ss, pid) for ss, pid in rows}
        if tokens:
            tokens.add(EVERYONE)  # "*" is everyone with an identity in the tenant
        top = self._q(
            "SELECT MAX(classification) FROM documents WHERE tenant_id = ?", (principal.tenant,)
        )[0][0]
        return AccessScope(
            tenant=principal.tenant,
            tokens=frozenset(tokens),
            ceiling=int(principal.clearance),
            corpora=tuple(corpora),
            filter_corpora=not every_corpus,
            filter_ceiling=top is None or int(top) > int(principal.clearance),
        )

    # -- search primitives (used by store.search.run_search) -------------------------------
    def lexical_leg(
        self,
        scope: AccessScope,
        terms: Sequence[str],
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        index, _ = self._lexical_index(scope.tenant)
        return index.search(terms, **_leg_args(scope, restricted, doc_ids, limit))

    def vector_leg(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        index = self._vectors.get(scope.tenant)
        if index is None:
            return []
        return index.search(query, **_leg_args(scope, restricted, doc_ids, limit))

    def filtered_doc_ids(
        self, tenant: str, corpora: Sequence[str], filters: tuple[MetadataFilter, ...]
    ) -> list[int]:
        """The sql primitive: documents in ``corpora`` matching every metadata filter."""
        cond, params = filters_sql(filters, tenant)
        rows = self._q(
            "SELECT d.doc_id FROM documents d WHERE d.tenant_id = ? "
            "AND d.corpus_id IN (SELECT value FROM json_each(?))"
            + (f" AND {cond}" if cond else ""),
            (tenant, json.dumps(list(corpora)), *params),
        )
        return [r[0] for r in rows]

    def readable_chunks(self, scope: AccessScope, chunk_ids: Sequence[int]) -> set[int]:
        """Defence in depth: which of ``chunk_ids`` the truth store's ACL lets the caller read."""
        if not chunk_ids or not scope.tokens:
            return set()
        rows = self._q(
            # CROSS JOIN pins the join order: look up the few given ids by primary key instead
            # of scanning the tenant's chunks.
            "SELECT c.chunk_id FROM json_each(?) j CROSS JOIN chunks c ON c.chunk_id = j.value "
            "JOIN documents d ON d.doc_id = c.doc_id "
            "WHERE c.tenant_id = ? AND d.tenant_id = ? AND c.indexed = 1 "
            "AND d.classification <= ? AND d.corpus_id IN (SELECT value FROM json_each(?)) "
            "AND EXISTS (SELECT 1 FROM doc_acl a WHERE a.doc_id = d.doc_id AND "
            "  (CASE WHEN a.principal_id = '*' THEN '*' "
            "   ELSE a.source_system || char(31) || a.principal_id END) "
            "  IN (SELECT value FROM json_each(?)))",
            (
                json.dumps(list(chunk_ids)),
                scope.tenant,
                scope.tenant,
                scope.ceiling,
                json.dumps(list(scope.corpora)),
                json.dumps(sorted(scope.tokens)),
            ),
        )
        return {r[0] for r in rows}

    def chunk_info(self, tenant: str, chunk_ids: Sequence[int]) -> dict[int, ChunkInfo]:
        """Display fields of chunks, with the author's email for the hidden-item marker."""
        rows = self._q(
            "SELECT c.chunk_id, d.external_id, c.ordinal, d.corpus_id, d.source_system, c.text, "
            " (SELECT MIN(i.email) FROM identities i WHERE i.tenant_id = d.tenant_id "
            "  AND i.source_system = d.source_system AND i.account_id = d.author_account) "
            "FROM json_each(?) j CROSS JOIN chunks c ON c.chunk_id = j.value "
            "JOIN documents d ON d.doc_id = c.doc_id WHERE c.tenant_id = ?",
            (json.dumps(list(chunk_ids)), tenant),
        )
        return {
            r[0]: ChunkInfo(
                doc_id=r[1],
                ordinal=r[2],
                corpus=r[3],
                source_system=r[4],
                text=r[5],
                author_email=r[6],
            )
            for r in rows
        }

    def record_incident(self, tenant: str, kind: str, detail: dict[str, object]) -> None:
        log.warning("store incident %s in tenant %r: %s", kind, tenant, detail)
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO incidents(tenant_id, kind, detail, created_at) VALUES (?, ?, ?, ?)",
                (tenant, kind, json.dumps(detail, sort_keys=True), now_iso()),
            )

    def known_corpora(self, tenant: str) -> list[str]:
        return [c for c, _ in self.list_corpora(tenant)]

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        """Ranked candidates the principal may read, with the hidden-item marker."""
        # One connection and mutable in-memory indexes: searches are serialised per store.
        with self._lock:
            self.sync_indexes(principal.tenant, vectors=request.strategy != "keyword")
            return run_search(self, principal, request)


def _leg_args(
    scope: AccessScope, restricted: bool, doc_ids: Sequence[int] | None, limit: int
) -> dict[str, Any]:
    """Keyword arguments of a leg's search: the access predicate unless ``restricted`` is off."""
    return {
        "corpora": scope.corpora if scope.filter_corpora else None,
        "acl_tokens": sorted(scope.tokens) if restricted else None,
        "max_classification": scope.ceiling if restricted and scope.filter_ceiling else None,
        "doc_ids": doc_ids,
        "limit": limit,
    }
