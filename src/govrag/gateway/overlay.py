"""The write-back overlay's part of a request (seed 001, "When the overlay joins retrieve").

**When.** The overlay joins a request only when all hold: the injected write-back store is
enabled, the request names no sources (its ``corpora`` is ``None``: the corpora came from the
route's scope, not from the caller or a model), the strategy is KEYWORD, and query expansion
is NONE. Every other request never observes it. Eligible requests bypass the result cache.

**Once, as its own pack.** A request over several corpora makes one gateway call per corpus;
the overlay is no part of those calls, so a corpus pack only ever holds documents of its
corpus, every one confirmed by the live rights check. The application asks for the request's
memory once, after its corpus packs (and only when one of them was ALLOWed): the memory
pack has ``origin`` ``session_memory``, is labelled with no corpus (``NO_CORPUS``), and lists
every chunk in ``unchecked`` with the reason ``session_memory``: the caller's own session's
entries have no source system to ask.

**Marked by type.** Only :func:`overlay_hits` builds session-memory hits: ``origin``
``session_memory`` plus the entry's seed metadata (``writeback.gate``, ...). Nothing the store
returns can carry that origin, so a document with ``source_system`` ``writeback``, a
write-back-like id or ``writeback.*`` metadata is an ordinary, rights-checked chunk.

**Filters, scores, duplicates.** Overlay filters and ``min_score`` apply inside the overlay
before its ``top_k``; a request filter the overlay cannot evaluate (any filter but ``eq`` on a
``writeback.*`` key) matches no entry, because filters only narrow. Overlay scores are BM25
on the corpus keyword leg's analyzer and scale, so the request's merged results interleave
memory and corpus chunks by score. An entry whose terms near-duplicate a chunk already
packed for the request, or a better entry, is dropped (the packed chunk is the checked
source; the seed's "deduplicate together").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from govrag.store.analyzer import default_analyzer
from govrag.types import (
    NO_CORPUS,
    WRITEBACK_SOURCE,
    ChunkOrigin,
    Principal,
    QueryExpansion,
    SearchHit,
    SearchRequest,
    Strategy,
)
from govrag.writeback import ControlledWriteBackStore, RetrievalScope

#: ``ranker_version`` of memory packs: the overlay's own BM25 order, not the reranker's.
MEMORY_RANKER = "writeback-bm25-v1"

#: ``UncheckedChunk.reason`` of every memory chunk.
SESSION_MEMORY = ChunkOrigin.SESSION_MEMORY.value


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
    request: SearchRequest,
) -> list[SearchHit]:
    """The caller's own session's admitted entries for ``request``, as session-memory hits.
    The scope comes from verified claims and the pinned session, never a request."""
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
        SearchHit(doc_id=h.id, chunk_id=h.id, corpus=NO_CORPUS, source_system=WRITEBACK_SOURCE,
                  score=h.score, text=h.content, origin=ChunkOrigin.SESSION_MEMORY,
                  writeback=dict(h.metadata))
        for h in hits
    ]  # fmt: skip


def without_duplicates(
    hits: Sequence[SearchHit], packed: Iterable[str], threshold: float
) -> list[SearchHit]:
    """``hits`` (best first) minus each one whose analysed terms overlap a ``packed`` text or
    an earlier kept hit by a Jaccard index of at least ``threshold``."""
    analyze = default_analyzer().analyze
    seen = [frozenset(analyze(text)) for text in packed]
    kept: list[SearchHit] = []
    for hit in hits:
        terms = frozenset(analyze(hit.text))
        if any(_jaccard(terms, other) >= threshold for other in seen):
            continue
        kept.append(hit)
        seen.append(terms)
    return kept


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
