"""The write-back overlay's part of a retrieval (seed 001, "When the overlay joins retrieve").

The overlay joins a retrieval only when all hold: the injected write-back store is enabled,
the request names no sources (its ``corpora`` is ``None``: the corpus came from the route's
scope, not from the caller or a model), the strategy is KEYWORD, and query expansion is
NONE. Every other request never observes it. Eligible requests bypass the result cache, so
overlay evidence can never reach a runtime with write-back disabled that shares the cache.

Overlay filters and ``min_score`` apply inside the overlay before its ``top_k``; a request
filter the overlay cannot evaluate (any filter but ``eq`` on a ``writeback.*`` key) matches
no overlay entry, because filters only narrow. The overlay's BM25 scores are on the corpus's
keyword scale, so both merge by descending score and then go through the reranker together
(near-duplicates of each other are removed there). Overlay hits carry ``source_system``
``writeback`` everywhere after this: packs, citations, replay.
"""

from __future__ import annotations

from govrag.types import (
    WRITEBACK_SOURCE,
    Principal,
    QueryExpansion,
    SearchHit,
    SearchRequest,
    Strategy,
)
from govrag.writeback import ControlledWriteBackStore, RetrievalScope


def eligible(
    overlay: ControlledWriteBackStore | None, request: SearchRequest, session_id: str | None
) -> bool:
    """Whether the overlay joins this request (see the module docstring)."""
    return (
        overlay is not None
        and overlay.is_enabled
        and session_id is not None
        and request.corpora is None
        and request.strategy is Strategy.KEYWORD
        and request.query_expansion is QueryExpansion.NONE
    )


def overlay_hits(
    overlay: ControlledWriteBackStore,
    principal: Principal,
    session_id: str,
    corpus: str,
    request: SearchRequest,
) -> list[SearchHit]:
    """The caller's own session's admitted entries for ``request``, as hits of ``corpus``'s
    pack. The scope comes from verified claims and the pinned session, never a request."""
    filters: dict[str, str] = {}
    for f in request.filters:
        if f.op != "eq" or not f.key.startswith("writeback.") or f.value is None:
            return []  # a filter the overlay cannot satisfy: no entry matches it
        filters[f.key] = str(f.value).lower() if isinstance(f.value, bool) else str(f.value)
    hits = overlay.search(
        RetrievalScope(principal.tenant, session_id),
        request.query,
        top_k=request.top_k,
        min_score=request.min_score,
        filters=filters or None,
    )
    return [
        SearchHit(doc_id=h.id, chunk_id=h.id, corpus=corpus, source_system=WRITEBACK_SOURCE,
                  score=h.score, text=h.content)
        for h in hits
    ]  # fmt: skip
