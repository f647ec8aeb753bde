"""The search primitives of a SQL store, handed to :func:`~govrag.store.search.run_search`
as a :class:`~govrag.store.search.SearchBackend` and to nothing else.

They are access-free or access-parametrised: a ranking without the caller's tokens (for the
hidden-item marker), chunk text read by id. So they are private methods here, and the only
public member, :meth:`SearchPrimitives.backend`, is called by the governed reads inside their
``search`` (and by white-box tests and benchmarks through the store's ``_search_backend``).
The same SQL on every backend; the vector leg is the backend's own, given at construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.store.acl import ACL_EXISTS, acl_exists, leg_args, resolve_access, token_pairs
from govrag.store.catalogue import CatalogueRepository
from govrag.store.database import Database, json_list
from govrag.store.derived import DerivedIndexes, VectorLeg
from govrag.store.filters import filters_sql
from govrag.store.graph import graph_leg, query_entities
from govrag.store.outbox import vector_space
from govrag.store.records import AccessScope
from govrag.store.search import ChunkInfo, SearchBackend, SearchConfig
from govrag.store.temporal import Version, time_conditions
from govrag.types import Principal, SearchRequest


class SearchPrimitives:
    """Legs, re-check and chunk reads over the truth store and the derived indexes."""

    def __init__(
        self,
        db: Database,
        catalogue: CatalogueRepository,
        indexes: DerivedIndexes,
        vectors: VectorLeg,
        config: SearchConfig,
        *,
        server_vectors: bool,
    ) -> None:
        self._db = db
        self._catalogue = catalogue
        self._indexes = indexes
        self._vectors = vectors
        self._config = config
        #: See :class:`~govrag.store.search.SearchBackend` (PostgreSQL: yes, SQLite: no).
        self._server_vectors = server_vectors

    def backend(self) -> SearchBackend:
        """These primitives, for :func:`run_search` only (see :class:`SearchBackend`); built
        anew for each search, so it reads the current settings."""
        return SearchBackend(
            search_settings=self._config.settings,
            embedder=self._config.embedder,
            server_vectors=self._server_vectors,
            known_corpora=self._catalogue.known_corpora,
            resolve_access=self._resolve_access,
            vector_space=self._vector_space,
            filtered_doc_ids=self._filtered_doc_ids,
            lexical_leg=self._lexical_leg,
            vector_leg=self._vectors.leg,
            graph_leg=self._graph_leg,
            withheld_chunks=self._withheld_chunks,
            readable_chunks=self._readable_chunks,
            chunk_info=self._chunk_info,
            versions=self._versions,
            record_incident=self._catalogue.record_incident,
        )

    def _resolve_access(
        self, principal: Principal, corpora: Sequence[str], *, every_corpus: bool
    ) -> AccessScope:
        return resolve_access(self._db, principal, corpora, every_corpus=every_corpus)

    def _vector_space(self, tenant: str) -> tuple[str, int] | None:
        return vector_space(self._db, tenant)

    def _lexical_leg(
        self,
        scope: AccessScope,
        terms: Sequence[str],
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        index, _ = self._indexes.lexical_index(scope.tenant)
        return index.search(terms, **leg_args(scope, acl, doc_ids, limit))

    def _graph_leg(
        self, scope: AccessScope, query: str, *, doc_ids: Sequence[int] | None, limit: int
    ) -> list[tuple[int, float]]:
        """The graph primitive: see :mod:`govrag.store.graph` (always under the ACL)."""
        reached = query_entities(query, self._config.glossary)
        return graph_leg(self._db, scope, reached, doc_ids=doc_ids, limit=limit)

    def _withheld_chunks(
        self, scope: AccessScope, terms: Sequence[str], *, min_terms: int, limit: int
    ) -> list[int]:
        """The hidden-item marker's candidates: see :meth:`LexicalIndex.withheld` (and
        ``search.py`` for how many terms ``min_terms`` asks for)."""
        if not scope.tokens:
            return []
        index, _ = self._indexes.lexical_index(scope.tenant)
        args = leg_args(scope, False, None, limit)
        return index.withheld(terms, min_terms=min_terms, corpora=args["corpora"],
                              acl_tokens=sorted(scope.tokens),
                              max_classification=args["max_classification"],
                              limit=limit)  # fmt: skip

    def _filtered_doc_ids(self, scope: AccessScope, request: SearchRequest) -> list[int]:
        """The sql primitive: documents in the scope's corpora that the caller may read and
        that match every metadata filter and the request's times (``as_of``,
        ``time_range``). Readable ones only: the filter narrows what the legs AND with the
        access predicate anyway, and so no count or choice made from this list (a vector
        path, a statistic) can depend on documents the caller cannot read."""
        if not scope.tokens:
            return []
        cond, params = filters_sql(request.filters, scope.tenant)
        times, when = time_conditions(request)
        conds = [c for c in (cond, *times) if c]
        rows = self._db.q(
            scope.tenant,
            self._db.dialect.sql(
                "SELECT d.doc_id FROM documents d WHERE d.tenant_id = ? "
                "AND d.corpus_id IN (SELECT value FROM {texts}) AND d.classification <= ? AND "
                + ACL_EXISTS
            )
            + "".join(f" AND {c}" for c in conds),
            (scope.tenant, json_list(scope.corpora), scope.ceiling, token_pairs(scope),
             *params, *when),
        )  # fmt: skip
        return [int(r[0]) for r in rows]

    def _readable_chunks(self, scope: AccessScope, chunk_ids: Sequence[int]) -> set[int]:
        """Defence in depth: which of ``chunk_ids`` the truth store's ACL lets the caller read."""
        if not chunk_ids or not scope.tokens:
            return set()
        rows = self._db.q(
            scope.tenant,
            # The id list drives (pinned join): the few given chunks by primary key, never a
            # scan of the tenant's chunks.
            self._db.dialect.sql(
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

    def _versions(
        self, scope: AccessScope, chunk_ids: Sequence[int], *, at: str
    ) -> dict[int, Version]:
        """The temporal strategy's facts of ranked chunks' documents: when each is in effect
        from, and the versions naming it in ``supersedes`` that the caller may read (same
        source system, searched corpora, at or below its clearance, in effect at ``at``).
        A replacement the caller cannot read is not there."""
        if not chunk_ids or not scope.tokens:
            return {}
        rows = self._db.q(
            scope.tenant,
            self._db.dialect.sql(
                "SELECT c.chunk_id, d.doc_id, d.effective_at, n.doc_id "
                "FROM {ids} {pin} chunks c ON c.chunk_id = j.value "
                "JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id "
                "LEFT JOIN doc_supersedes s "
                " ON s.tenant_id = d.tenant_id AND s.external_id = d.external_id "
                "LEFT JOIN documents n ON n.tenant_id = s.tenant_id AND n.doc_id = s.doc_id "
                " AND n.source_system = d.source_system AND n.doc_id <> d.doc_id "
                " AND (n.effective_at IS NULL OR n.effective_at <= ?) "
                " AND n.classification <= ? AND n.corpus_id IN (SELECT value FROM {texts}) "
                " AND " + acl_exists("n") + " "
                "WHERE c.tenant_id = ?"
            ),
            (json_list(chunk_ids), at, scope.ceiling, json_list(scope.corpora),
             token_pairs(scope), scope.tenant),
        )  # fmt: skip
        found: dict[int, tuple[int, str | None, set[int]]] = {}
        for cid, doc, effective_at, replacement in rows:
            entry = found.setdefault(int(cid), (int(doc), effective_at, set()))
            if replacement is not None:
                entry[2].add(int(replacement))
        return {
            cid: Version(doc=doc, effective_at=when, superseded_by=frozenset(by))
            for cid, (doc, when, by) in found.items()
        }

    def _chunk_info(self, tenant: str, chunk_ids: Sequence[int]) -> dict[int, ChunkInfo]:
        """Display fields of chunks, with the author's email for the hidden-item marker."""
        if not chunk_ids:
            return {}
        rows = self._db.q(
            tenant,
            self._db.dialect.sql(
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
