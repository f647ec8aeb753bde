"""The read side of the truth store, the same SQL on every backend.

Catalogue reads, access resolution and the search primitives :func:`run_search` composes.
A backend adds its identity-resolution statement (``_resolve_sql``) and its vector leg.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from govrag.embed.base import FloatArray
from govrag.store.clock import now_iso
from govrag.store.filters import filters_sql
from govrag.store.records import (
    EVERYONE,
    AccessScope,
    principal_token,
    token_pair,
)
from govrag.store.search import ChunkInfo, SearchBackend, resolve_corpora, run_search
from govrag.store.sql_base import json_list, log
from govrag.store.sql_derived import SQLDerived
from govrag.types import MetadataFilter, Principal, SearchRequest, SearchResult, Strategy

# Email -> source accounts -> transitive groups, in one statement. Groups nest within one
# source system: a member id is an account or a group id of the group's own system.
_RESOLVE = """
WITH RECURSIVE reach(source_system, principal_id) AS (
    SELECT source_system, account_id FROM identities WHERE tenant_id = ? AND email = ?
    UNION
    SELECT m.source_system, m.group_id FROM reach r
    JOIN group_members m {by_member}
    ON m.tenant_id = ? AND m.source_system = r.source_system AND m.member_id = r.principal_id
)
SELECT source_system, principal_id FROM reach
"""

#: The caller's ACL predicate on a document ``d``: some ACL row names one of the caller's
#: principals (bound as pairs). The principal list is uncorrelated, so engines build it once.
ACL_EXISTS = (
    "EXISTS (SELECT 1 FROM doc_acl a WHERE {plus}a.tenant_id = d.tenant_id AND a.doc_id = d.doc_id "
    "AND (a.source_system, a.principal_id) IN (SELECT ss, pid FROM {pairs}))"
)

_STATS = (
    ("documents", "SELECT COUNT(*) FROM documents WHERE tenant_id = ?"),
    ("chunks", "SELECT COUNT(*) FROM chunks WHERE tenant_id = ? AND indexed = {true}"),
    ("sections", "SELECT COUNT(*) FROM chunks WHERE tenant_id = ? AND NOT indexed"),
    ("vectors", "SELECT COUNT(*) FROM chunk_vectors WHERE tenant_id = ?"),
    ("acl_rows", "SELECT COUNT(*) FROM doc_acl WHERE tenant_id = ?"),
    ("identities", "SELECT COUNT(*) FROM identities WHERE tenant_id = ?"),
    ("groups", "SELECT COUNT(*) FROM groups WHERE tenant_id = ?"),
    ("outbox_rows", "SELECT COUNT(*) FROM index_outbox WHERE tenant_id = ?"),
)


class SQLReads(SQLDerived):
    """Catalogue, access resolution and search primitives over the truth store."""

    #: See :class:`~govrag.store.search.SearchBackend`; PostgreSQL overrides it.
    _concurrent_marker = False

    def acl_epoch(self, tenant: str) -> int:
        rows = self._q(tenant, "SELECT acl_epoch FROM tenants WHERE tenant_id = ?", (tenant,))
        return int(rows[0][0]) if rows else 0

    def generation(self, tenant: str) -> tuple[int, int]:
        """``(acl_epoch, outbox head)``: changes whenever rights, content or trust scores of
        the tenant do.

        Result caches key on it, so nothing cached survives a revocation or an edit.
        """
        rows = self._q(
            tenant,
            "SELECT t.acl_epoch, (SELECT COALESCE(MAX(o.seq), 0) FROM index_outbox o "
            "WHERE o.tenant_id = t.tenant_id) FROM tenants t WHERE t.tenant_id = ?",
            (tenant,),
        )
        return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)

    def is_empty(self, tenant: str) -> bool:
        return not self._q(
            tenant,
            self.dialect.sql(
                "SELECT 1 FROM chunks WHERE tenant_id = ? AND indexed = {true} LIMIT 1"
            ),
            (tenant,),
        )

    def is_empty_for(self, principal: Principal, corpora: Sequence[str]) -> bool:
        """Whether ``corpora`` hold nothing the principal could search or ask an owner for:
        no chunk at or below its clearance. What it sees of the knowledge path then does not
        depend on documents above its clearance or in other corpora (``is_empty`` is the
        whole tenant's)."""
        tenant = principal.tenant
        if not corpora:
            return True
        with self._lock, self._pin_reads(tenant):
            self.sync_indexes(tenant, vectors=False)
            targets, every = resolve_corpora(self._known_corpora, tenant, corpora)
            if not targets:
                return True
            scope = self._resolve_access(principal, targets, every_corpus=every)
            args = leg_args(scope, False, None, 1)
            index, _ = self._lexical_index(tenant)
            return not index.any_match(corpora=args["corpora"], acl_tokens=None,
                                       max_classification=args["max_classification"])  # fmt: skip

    def stats(self, tenant: str) -> dict[str, int]:
        """Row counts of a tenant: what an operator checks after an ingest or a repair."""
        sql = "SELECT " + ", ".join(f"({self.dialect.sql(q)})" for _, q in _STATS)
        row = self._q(tenant, sql, (tenant,) * len(_STATS))[0]
        return {key: int(v) for (key, _), v in zip(_STATS, row, strict=True)}

    def incidents(self, tenant: str) -> list[tuple[str, dict[str, object]]]:
        """Recorded incidents (kind, detail), oldest first."""
        rows = self._q(
            tenant,
            "SELECT kind, detail FROM incidents WHERE tenant_id = ? ORDER BY incident_id",
            (tenant,),
        )
        return [(kind, self._json_value(detail)) for kind, detail in rows]

    def record_incident(self, tenant: str, kind: str, detail: dict[str, object]) -> None:
        log.warning("store incident %s in tenant %r: %s", kind, tenant, detail)
        with self._tx(tenant) as conn:
            conn.execute(
                "INSERT INTO incidents(tenant_id, kind, detail, created_at) VALUES (?, ?, ?, ?)",
                (tenant, kind, json.dumps(detail, sort_keys=True), now_iso()),
            )

    def list_corpora(self, tenant: str) -> list[tuple[str, str]]:
        """(corpus id, description) of a tenant's corpora."""
        rows = self._q(
            tenant,
            "SELECT corpus_id, description FROM corpora WHERE tenant_id = ? ORDER BY corpus_id",
            (tenant,),
        )
        return [(r[0], r[1]) for r in rows]

    def _known_corpora(self, tenant: str) -> list[str]:
        return [c for c, _ in self.list_corpora(tenant)]

    def describe_corpus(self, tenant: str, corpus: str, description: str) -> None:
        with self._tx(tenant) as conn:
            self._ensure_tenant(conn, tenant)
            conn.execute(
                "INSERT INTO corpora(tenant_id, corpus_id, description, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT(tenant_id, corpus_id) "
                "DO UPDATE SET description = excluded.description",
                (tenant, corpus, description, now_iso()),
            )

    # -- access ----------------------------------------------------------------------------
    def _resolve_access(
        self, principal: Principal, corpora: Sequence[str], *, every_corpus: bool
    ) -> AccessScope:
        """The caller's principal tokens (one SQL statement), ceiling and corpus scope.

        ``every_corpus``: ``corpora`` is every corpus of the tenant, so legs skip that filter.
        """
        tenant = principal.tenant
        with self._tx(tenant, read=True) as conn:
            rows = conn.execute(
                self.dialect.sql(_RESOLVE), (tenant, principal.email, tenant)
            ).fetchall()
            top = conn.execute(
                "SELECT MAX(classification) FROM documents WHERE tenant_id = ?", (tenant,)
            ).fetchone()[0]
        tokens = {principal_token(ss, pid) for ss, pid in rows}
        if tokens:
            tokens.add(EVERYONE)  # "*" is everyone with an identity in the tenant
        return AccessScope(
            tenant=tenant,
            tokens=frozenset(tokens),
            ceiling=int(principal.clearance),
            corpora=tuple(corpora),
            filter_corpora=not every_corpus,
            filter_ceiling=top is None or int(top) > int(principal.clearance),
        )

    # -- search primitives (private: handed to run_search only, see _search_backend) -------
    def _lexical_leg(
        self,
        scope: AccessScope,
        terms: Sequence[str],
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        index, _ = self._lexical_index(scope.tenant)
        return index.search(terms, **leg_args(scope, acl, doc_ids, limit))

    def _withheld_chunks(self, scope: AccessScope, terms: Sequence[str], limit: int) -> list[int]:
        """The hidden-item marker's candidates: see :meth:`LexicalIndex.withheld`."""
        if not scope.tokens:
            return []
        index, _ = self._lexical_index(scope.tenant)
        args = leg_args(scope, False, None, limit)
        return index.withheld(terms, corpora=args["corpora"], acl_tokens=sorted(scope.tokens),
                              max_classification=args["max_classification"],
                              limit=limit)  # fmt: skip

    def _vector_leg(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> tuple[list[tuple[int, float]], bool]:
        raise NotImplementedError

    def _filtered_doc_ids(
        self, scope: AccessScope, filters: tuple[MetadataFilter, ...]
    ) -> list[int]:
        """The sql primitive: documents in the scope's corpora that the caller may read and
        that match every metadata filter. Readable ones only: the filter narrows what the
        legs AND with the access predicate anyway, and so no count or choice made from this
        list (a vector path, a statistic) can depend on documents the caller cannot read."""
        if not scope.tokens:
            return []
        cond, params = filters_sql(filters, scope.tenant)
        rows = self._q(
            scope.tenant,
            self.dialect.sql(
                "SELECT d.doc_id FROM documents d WHERE d.tenant_id = ? "
                "AND d.corpus_id IN (SELECT value FROM {texts}) AND d.classification <= ? AND "
                + ACL_EXISTS
            )
            + (f" AND {cond}" if cond else ""),
            (scope.tenant, json_list(scope.corpora), scope.ceiling, token_pairs(scope), *params),
        )
        return [int(r[0]) for r in rows]

    def _readable_chunks(self, scope: AccessScope, chunk_ids: Sequence[int]) -> set[int]:
        """Defence in depth: which of ``chunk_ids`` the truth store's ACL lets the caller read."""
        if not chunk_ids or not scope.tokens:
            return set()
        rows = self._q(
            scope.tenant,
            # The id list drives (pinned join): the few given chunks by primary key, never a
            # scan of the tenant's chunks.
            self.dialect.sql(
                "SELECT c.chunk_id FROM {ids} {pin} chunks c ON c.chunk_id = j.value "
                "JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id "
                "WHERE c.tenant_id = ? AND c.indexed = {true} AND d.classification <= ? "
                "AND d.corpus_id IN (SELECT value FROM {texts}) AND " + ACL_EXISTS
            ),
            (
                json_list(chunk_ids),
                scope.tenant,
                scope.ceiling,
                json_list(scope.corpora),
                token_pairs(scope),
            ),
        )
        return {int(r[0]) for r in rows}

    def readable_documents(
        self, principal: Principal, source_system: str, external_ids: Sequence[str]
    ) -> set[str]:
        """Which of a source system's documents the stored ACL lets the caller read now.

        The stored-ACL rights checker's question, asked again right before packing (a
        revocation synced since the search, or a cached ranking, is honoured).
        """
        return set(self._readable(principal, source_system, external_ids))

    def readable_corpus(
        self, principal: Principal, source_system: str, external_id: str
    ) -> str | None:
        """The corpus of a document the caller may read now; ``None`` alike when it does not
        exist and when it may not be read."""
        return self._readable(principal, source_system, [external_id]).get(external_id)

    def _readable(
        self, principal: Principal, source_system: str, external_ids: Sequence[str]
    ) -> dict[str, str]:
        """External id -> corpus of the given documents the caller may read now."""
        if not external_ids:
            return {}
        scope = self._resolve_access(principal, (), every_corpus=True)
        if not scope.tokens:
            return {}
        rows = self._q(
            scope.tenant,
            self.dialect.sql(
                "SELECT d.external_id, d.corpus_id FROM {texts} {pin} documents d "
                "ON d.tenant_id = ? AND d.source_system = ? AND d.external_id = j.value "
                "WHERE d.classification <= ? AND " + ACL_EXISTS
            ),
            (
                json_list(sorted(set(external_ids))),
                scope.tenant,
                source_system,
                scope.ceiling,
                token_pairs(scope),
            ),
        )
        return {str(r[0]): str(r[1]) for r in rows}

    def source_accounts(self, tenant: str, email: str, source_system: str) -> list[str]:
        """The caller's own accounts in a source system (what a live rights check asks about)."""
        rows = self._q(
            tenant,
            "SELECT account_id FROM identities WHERE tenant_id = ? AND email = ? "
            "AND source_system = ? ORDER BY account_id",
            (tenant, email.casefold(), source_system),
        )
        return [str(r[0]) for r in rows]

    def _chunk_info(self, tenant: str, chunk_ids: Sequence[int]) -> dict[int, ChunkInfo]:
        """Display fields of chunks, with the author's email for the hidden-item marker."""
        if not chunk_ids:
            return {}
        rows = self._q(
            tenant,
            self.dialect.sql(
                "SELECT c.chunk_id, d.external_id, c.ordinal, d.corpus_id, d.source_system, "
                " c.text, (SELECT MIN(i.email) FROM identities i {by_account} "
                "  WHERE i.tenant_id = d.tenant_id"
                "  AND i.source_system = d.source_system AND i.account_id = d.author_account), "
                " d.trust_score "
                "FROM {ids} {pin} chunks c ON c.chunk_id = j.value "
                "JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id "
                "WHERE c.tenant_id = ?"
            ),
            (json_list(chunk_ids), tenant),
        )
        return {
            int(r[0]): ChunkInfo(
                doc_id=r[1],
                ordinal=r[2],
                corpus=r[3],
                source_system=r[4],
                text=r[5],
                author_email=r[6],
                trust_score=float(r[7]),
            )
            for r in rows
        }

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        """Ranked candidates the principal may read, with the hidden-item marker."""
        # Derived in-process indexes are mutable: a store serialises its searches.
        with self._lock, self._pin_reads(principal.tenant):
            self.sync_indexes(principal.tenant, vectors=request.strategy != Strategy.KEYWORD)
            return run_search(self._search_backend(), principal, request)

    def _search_backend(self) -> SearchBackend:
        """This store's primitives, for :func:`run_search` only (see :class:`SearchBackend`)."""
        return SearchBackend(
            search_settings=self.search_settings,
            embedder=self.embedder,
            concurrent_marker=self._concurrent_marker,
            known_corpora=self._known_corpora,
            resolve_access=self._resolve_access,
            vector_space=self._vector_space,
            filtered_doc_ids=self._filtered_doc_ids,
            lexical_leg=self._lexical_leg,
            vector_leg=self._vector_leg,
            withheld_chunks=self._withheld_chunks,
            readable_chunks=self._readable_chunks,
            chunk_info=self._chunk_info,
            record_incident=self.record_incident,
        )


def token_pairs(scope: AccessScope) -> str:
    """The caller's principals as the bound pairs :data:`ACL_EXISTS` takes."""
    return json_list(sorted(token_pair(t) for t in scope.tokens))


def leg_args(
    scope: AccessScope, acl: bool, doc_ids: Sequence[int] | None, limit: int
) -> dict[str, Any]:
    """Keyword arguments of a derived index's search: the corpora, the ceiling and, with
    ``acl``, the caller's principal tokens (the hidden-item marker ranks without those)."""
    return {
        "corpora": scope.corpora if scope.filter_corpora else None,
        "acl_tokens": sorted(scope.tokens) if acl else None,
        "max_classification": scope.ceiling if scope.filter_ceiling else None,
        "doc_ids": doc_ids,
        "limit": limit,
    }
