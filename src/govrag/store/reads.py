"""The governed reads: search and reads *under a principal*, the same SQL on every backend.

What the gateway and every edge receive (:class:`~govrag.store.protocol.GovernedReads`).
Every read that returns content, or tells which documents exist, takes the caller's
:class:`~govrag.types.Principal` and applies its rights; the rest are counters that change
with rights or content (cache keys). The access-free primitives a search composes stay in
:class:`~govrag.store.search_primitives.SearchPrimitives`, which this repository hands only
to :func:`~govrag.store.search.run_search`.
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.store.acl import ACL_EXISTS, leg_args, resolve_access, token_pairs
from govrag.store.catalogue import CatalogueRepository
from govrag.store.database import Database, json_list
from govrag.store.derived import DerivedIndexes
from govrag.store.search import resolve_corpora, run_search
from govrag.store.search_primitives import SearchPrimitives
from govrag.types import (
    Classification,
    DocumentInfo,
    Principal,
    SearchRequest,
    SearchResult,
    Strategy,
)


class ReadRepository:
    """Search, rights-checked document reads, and the tenant's generation."""

    def __init__(
        self,
        db: Database,
        catalogue: CatalogueRepository,
        indexes: DerivedIndexes,
        primitives: SearchPrimitives,
    ) -> None:
        self._db = db
        self._catalogue = catalogue
        self._indexes = indexes
        self._primitives = primitives

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        """Ranked candidates the principal may read, with the hidden-item marker."""
        # Derived in-process indexes are mutable: a store serialises its searches.
        with self._indexes.lock, self._db.pin_reads(principal.tenant):
            self._indexes.sync_indexes(
                principal.tenant, vectors=request.strategy != Strategy.KEYWORD
            )
            return run_search(self._primitives.backend(), principal, request)

    def is_empty_for(self, principal: Principal, corpora: Sequence[str]) -> bool:
        """Whether ``corpora`` hold nothing the principal could search or ask an owner for:
        no chunk at or below its clearance. What it sees of the knowledge path then does not
        depend on documents above its clearance or in other corpora (``is_empty`` is the
        whole tenant's)."""
        tenant = principal.tenant
        if not corpora:
            return True
        with self._indexes.lock, self._db.pin_reads(tenant):
            self._indexes.sync_indexes(tenant, vectors=False)
            targets, every = resolve_corpora(self._catalogue.known_corpora, tenant, corpora)
            if not targets:
                return True
            scope = resolve_access(self._db, principal, targets, every_corpus=every)
            args = leg_args(scope, False, None, 1)
            index, _ = self._indexes.lexical_index(tenant)
            return not index.any_match(corpora=args["corpora"], acl_tokens=None,
                                       max_classification=args["max_classification"])  # fmt: skip

    def readable_documents(
        self, principal: Principal, source_system: str, external_ids: Sequence[str]
    ) -> set[str]:
        """Which of a source system's documents the stored ACL lets the caller read now.

        The stored-ACL rights checker's question, asked again right before packing (a
        revocation synced since the search, or a cached ranking, is honoured).
        """
        return set(self._readable(principal, source_system, external_ids))

    def readable_document(
        self, principal: Principal, source_system: str, external_id: str
    ) -> DocumentInfo | None:
        """A document the caller may read now, as metadata (never its text); ``None`` alike
        when it does not exist and when it may not be read."""
        scope = resolve_access(self._db, principal, (), every_corpus=True)
        if not scope.tokens:
            return None
        rows = self._db.q(
            scope.tenant,
            self._db.dialect.sql(
                "SELECT d.corpus_id, d.title, d.classification, d.updated_at, "
                "(SELECT COUNT(*) FROM chunks c WHERE c.doc_id = d.doc_id) "
                "FROM {texts} {pin} documents d "
                "ON d.tenant_id = ? AND d.source_system = ? AND d.external_id = j.value "
                "WHERE d.classification <= ? AND " + ACL_EXISTS
            ),
            (json_list([external_id]), scope.tenant, source_system, scope.ceiling,
             token_pairs(scope)),
        )  # fmt: skip
        if not rows:
            return None
        corpus, title, classification, updated_at, chunks = rows[0]
        return DocumentInfo(
            source_system=source_system,
            external_id=external_id,
            corpus=str(corpus),
            title=str(title),
            classification=Classification(int(classification)),
            updated_at=str(updated_at) if updated_at is not None else None,
            chunks=int(chunks),
        )

    def _readable(
        self, principal: Principal, source_system: str, external_ids: Sequence[str]
    ) -> dict[str, str]:
        """External id -> corpus of the given documents the caller may read now."""
        if not external_ids:
            return {}
        scope = resolve_access(self._db, principal, (), every_corpus=True)
        if not scope.tokens:
            return {}
        rows = self._db.q(
            scope.tenant,
            self._db.dialect.sql(
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

    def acl_epoch(self, tenant: str) -> int:
        rows = self._db.q(tenant, "SELECT acl_epoch FROM tenants WHERE tenant_id = ?", (tenant,))
        return int(rows[0][0]) if rows else 0

    def generation(self, tenant: str) -> tuple[int, int]:
        """``(acl_epoch, outbox head)``: changes whenever rights, content or trust scores of
        the tenant do.

        Result caches key on it, so nothing cached survives a revocation or an edit.
        """
        rows = self._db.q(
            tenant,
            "SELECT t.acl_epoch, (SELECT COALESCE(MAX(o.seq), 0) FROM index_outbox o "
            "WHERE o.tenant_id = t.tenant_id) FROM tenants t WHERE t.tenant_id = ?",
            (tenant,),
        )
        return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)
