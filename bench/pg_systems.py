"""The systems the PostgreSQL benchmark times, and the exact answers it checks them against.

:class:`NoAcl` is the baseline: govrag's own ``run_search`` pipeline on the same database
with the access predicate removed, so the difference to the real store is what filtering
costs. :class:`Exact` is filtered search done exactly in numpy over the corpus's own vectors,
the reference for recall@10. :func:`leg_system` times the vector leg alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from bench import synthetic
from bench.common import TOP_K, System
from bench.pg_server import DATABASE
from govrag.embed.hashing import HashEmbedder
from govrag.store.records import AccessScope
from govrag.store.search import run_search
from govrag.testing import (
    PgServer,
)
from govrag.types import Principal, SearchRequest, SearchResult, Strategy

if TYPE_CHECKING:
    from govrag.store.postgres import PostgresStore


#: "Forced exact": an allowed set never exceeds this (the setting's maximum).
EXACT_ALWAYS = 10_000_000
#: Two values count as the same score (float32 products in the server and in numpy).
SCORE_EPS = 1e-5

F32 = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


# -- systems under test ---------------------------------------------------------------------
class NoAcl:
    """``run_search``'s backend with the access predicate removed from both legs.

    The baseline of what filtering costs: the same resolution, legs, re-check query and
    hydration on the same data, but ranked as if the caller could read everything (the
    re-check query still runs and every id is kept; no hidden-item marker, as nothing is
    hidden from such a caller).

    White-box on purpose: the unfiltered legs are private to the store (no public member may
    rank without the caller's rights), so the baseline takes the store's search backend.
    """

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        store = self._store
        real = store._search_backend()

        def lexical(
            scope: AccessScope, terms: Sequence[str], *, acl: bool,
            doc_ids: Sequence[int] | None, limit: int,
        ) -> list[tuple[int, float]]:  # fmt: skip
            return real.lexical_leg(scope, terms, acl=False, doc_ids=doc_ids, limit=limit)

        def vector(
            scope: AccessScope, query: F32, *, acl: bool, doc_ids: Sequence[int] | None,
            limit: int,
        ) -> tuple[list[tuple[int, float]], bool]:  # fmt: skip
            return real.vector_leg(scope, query, acl=False, doc_ids=doc_ids, limit=limit)

        def readable(scope: AccessScope, chunk_ids: Sequence[int]) -> set[int]:
            real.readable_chunks(scope, chunk_ids)
            return set(chunk_ids)

        backend = dataclasses.replace(
            real,
            search_settings=real.search_settings.model_copy(update={"hidden_marker": False}),
            lexical_leg=lexical,
            vector_leg=vector,
            readable_chunks=readable,
        )
        with store._parts.indexes.lock:  # as store.search: catch up the derived index, then search
            store.sync_indexes(principal.tenant, vectors=request.strategy != Strategy.KEYWORD)
            return run_search(backend, principal, request)


def leg_system(
    store: PostgresStore,
    scope: AccessScope,
    vectors: dict[str, F32],
    chunk_doc: IntArray,
    limit: int,
) -> System:
    """A timed system over the vector leg alone (query embedded beforehand). Returns the
    documents found and, in place of the marker flag, whether the leg reported truncation.
    White-box: the leg is private to the store (see :class:`NoAcl`)."""
    backend = store._search_backend()

    def leg(query: str) -> tuple[list[int], bool]:
        hits, truncated = backend.vector_leg(
            scope, vectors[query], acl=True, doc_ids=None, limit=limit
        )
        return [int(chunk_doc[c]) for c, _ in hits], truncated

    return leg


# -- recall ---------------------------------------------------------------------------------
class Exact:
    """Exact filtered search in numpy over the corpus's own vectors."""

    def __init__(self, matrix: F32, embedder: HashEmbedder) -> None:
        self.matrix = matrix
        self.embedder = embedder
        # One full product per query (1M x 384 is ~1.5 GB of reads), reused across probes.
        self._scores: dict[str, F32] = {}

    def scores(self, query: str) -> F32:
        if query not in self._scores:
            if len(self._scores) >= 256:
                self._scores.clear()
            self._scores[query] = self.matrix @ self.embedder.embed_query(query)
        return self._scores[query]

    def recall_at_k(
        self, query: str, mask: BoolArray, found: Sequence[int], k: int = TOP_K
    ) -> float:
        """Share of the exact filtered top-``k`` that ``found`` recovers. Ties count by score:
        a found document scoring at least the exact k-th best score counts as a hit."""
        scores = self.scores(query)
        allowed = np.flatnonzero(mask)
        want = min(k, len(allowed))
        if want == 0:
            return 1.0
        kth = float(np.partition(scores[allowed], len(allowed) - want)[len(allowed) - want])
        good = sum(1 for d in found[:k] if mask[d] and scores[d] >= kth - SCORE_EPS)
        return min(good, want) / want


def chunk_doc_map(server: PgServer) -> IntArray:
    """chunk id -> synthetic document number (the vector leg returns chunk ids)."""
    with server.connect(DATABASE) as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, d.external_id FROM chunks c JOIN documents d "
            "ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id WHERE c.tenant_id = %s",
            (synthetic.TENANT,),
        ).fetchall()
    out = np.full(max(int(r[0]) for r in rows) + 1, -1, dtype=np.int64)
    for chunk_id, external in rows:
        out[int(chunk_id)] = synthetic.doc_index(external)
    return out


# -- plans ----------------------------------------------------------------------------------
def explain_vector_leg(
    store: PostgresStore, scope: AccessScope, query: F32, limit: int
) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of every statement one ``vector_leg`` call runs.

    The statements are captured from the store's own connection wrapper, then re-run under
    EXPLAIN in one read transaction of the same tenant, after the ``SET LOCAL``s they ran
    after, so the plans are those the benchmark timed.
    """
    from govrag.store import pg_database

    captured: list[tuple[str, Sequence[Any]]] = []
    original = pg_database.PgConn.execute

    def capture(self: Any, sql: str, params: Sequence[Any] = (), /) -> Any:
        captured.append((sql, params))
        return original(self, sql, params)

    pg_database.PgConn.execute = capture  # type: ignore[method-assign]
    try:
        store._search_backend().vector_leg(scope, query, acl=True, doc_ids=None, limit=limit)
    finally:
        pg_database.PgConn.execute = original  # type: ignore[method-assign]
    plans: list[str] = []
    with store._db.tx(scope.tenant, read=True) as conn:
        for sql, params in captured:
            if sql.startswith(("SELECT set_config", "SET TRANSACTION")):
                continue
            if sql.startswith("SET "):
                conn.execute(sql, params)
                continue
            rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
            # Vector literals make plan lines kilobytes long; they say nothing about the plan.
            plans.append("\n".join(_short(r[0]) for r in rows))
    return plans


def _short(line: str, width: int = 240) -> str:
    return line if len(line) <= width else line[:width] + " ..."
