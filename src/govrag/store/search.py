"""Backend-neutral search: legs under the ACL, RRF fusion, re-check, hidden-item marker.

A backend supplies primitives that each apply the caller's access scope *inside* the leg
(before any top-k truncation); this module composes them. The order of operations is the
security argument:

1. Resolve the caller's principal tokens from the truth store (one SQL statement).
2. Run each leg restricted to what the caller may read; caller filters only narrow further.
   Lexical statistics are counted over that same set (``bm25.py``), so nothing the caller
   cannot read moves a score or an order.
3. Fuse, cut to top-k, then re-check those ids against the truth store's ACL; a mismatch is
   dropped and recorded as an incident (a derived index can lag, the truth store cannot).
4. The hidden-item marker, which must not become an oracle: it reports only *whether* a
   document the caller *could ask an owner for* (the same tenant, the requested corpora, at
   or below the caller's clearance) but may not read is relevant to the query, with at most
   ``marker_max_contacts`` source systems and author emails. Relevant means: of the query's
   ``n`` distinct analysed terms, the document holds at least
   ``m = max(2, ceil(marker_min_term_share * n))``; a query of fewer than 2 distinct terms
   never raises the marker (a one-word probe learns nothing, and natural questions have
   several content words, so a share of them, not every one, makes them raise it). Whether
   a document counts depends on that document and the query alone, never on scores, ranks,
   statistics or other documents, whatever the strategy. A request with caller filters or
   time filters gets no marker: metadata never selects a hidden candidate. A request may
   name other words for the marker to judge than its query (``marker_query``: a governed
   answer's caller question while its model searches in words of its own); the rule is the
   same on those words.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from govrag.embed.base import Embedder, FloatArray, embedder_setting
from govrag.errors import ConfigError
from govrag.settings import SearchSettings
from govrag.store.analyzer import default_analyzer
from govrag.store.clock import iso
from govrag.store.fusion import rrf
from govrag.store.glossary import Glossary
from govrag.store.records import AccessScope
from govrag.store.temporal import VersionsFn, reference_time, temporal_order
from govrag.types import (
    HiddenMarker,
    HiddenSource,
    Principal,
    SearchHit,
    SearchRequest,
    SearchResult,
    Strategy,
)


@dataclass
class SearchConfig:
    """What a store's searches read anew each time, shared by the parts that search: the
    settings (an evaluation pass may replace them between searches) and the embedder."""

    settings: SearchSettings
    #: Embeds queries for the vector leg; ingest embeds documents with the same model.
    embedder: Embedder | None
    #: The deployment's known entities: the graph leg reads chunks and questions with it.
    glossary: Glossary = field(default_factory=Glossary)


@dataclass(frozen=True)
class ChunkInfo:
    doc_id: str
    ordinal: int
    corpus: str
    source_system: str
    text: str
    author_email: str | None
    trust_score: float = 0.5

    @property
    def public_chunk_id(self) -> str:
        return f"{self.source_system}:{self.doc_id}#{self.ordinal}"


class LegFn(Protocol):
    """A keyword leg: BM25 top ``limit`` under the scope's corpora and ceiling and, with
    ``acl``, its principal tokens; statistics counted under that same predicate."""

    def __call__(
        self,
        scope: AccessScope,
        terms: Sequence[str],
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]: ...


class VectorLegFn(Protocol):
    """Top ``limit`` by similarity, and whether a scan bound stopped the search before it
    could prove there are no more candidates (the result may then be short)."""

    def __call__(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> tuple[list[tuple[int, float]], bool]: ...


class GraphLegFn(Protocol):
    """Top ``limit`` readable chunks by the entities ``query`` names (``graph.py``)."""

    def __call__(
        self, scope: AccessScope, query: str, *, doc_ids: Sequence[int] | None, limit: int
    ) -> list[tuple[int, float]]: ...


class WithheldFn(Protocol):
    """Up to ``limit`` chunk ids, lowest first, of chunks in the scope's corpora at or below
    its ceiling that hold at least ``min_terms`` of the distinct ``terms`` and that its
    principal tokens do not open (by the derived index; the truth store re-checks)."""

    def __call__(
        self, scope: AccessScope, terms: Sequence[str], *, min_terms: int, limit: int
    ) -> list[int]: ...


class ResolveAccessFn(Protocol):
    def __call__(
        self, principal: Principal, corpora: Sequence[str], *, every_corpus: bool
    ) -> AccessScope: ...


@dataclass(frozen=True)
class SearchBackend:
    """The primitives a store hands :func:`run_search`, and only it.

    They are access-free or access-parametrised (``acl=False`` ranks without the caller's
    tokens, for the hidden-item marker; ``chunk_info`` reads chunk text by id with no check),
    so no store offers them as public members: a store's governed reads build this record
    from private methods (``search_primitives.py``) inside their ``search``, and it goes no
    further than this module.
    """

    search_settings: SearchSettings
    embedder: Embedder | None
    #: Whether the vector leg runs in the database server (PostgreSQL), so the caller's
    #: thread waits on a socket while it runs. Then the whole hidden-item marker (its index
    #: query and its truth-store reads, on a connection of its own) and a hybrid search's
    #: keyword leg run on other threads beside the ranking; tantivy releases the GIL while it
    #: searches. SQLite serialises reads on one connection and scores vectors in this
    #: process: only the marker's index query runs beside the ranking (the truth store
    #: checks it after), and the legs run one after the other (a thread's hand-off costs
    #: more than a small leg, measured: bench/RESULTS.md (t)).
    server_vectors: bool
    known_corpora: Callable[[str], list[str]]
    resolve_access: ResolveAccessFn
    vector_space: Callable[[str], tuple[str, int] | None]
    #: The documents a narrowed request keeps (its filters and times), readable ones only.
    filtered_doc_ids: Callable[[AccessScope, SearchRequest], list[int]]
    lexical_leg: LegFn
    vector_leg: VectorLegFn
    graph_leg: GraphLegFn
    withheld_chunks: WithheldFn
    readable_chunks: Callable[[AccessScope, Sequence[int]], set[int]]
    chunk_info: Callable[[str, Sequence[int]], dict[int, ChunkInfo]]
    versions: VersionsFn
    record_incident: Callable[[str, str, dict[str, object]], None]


def resolve_corpora(
    known_corpora: Callable[[str], list[str]], tenant: str, wanted: Sequence[str] | None
) -> tuple[list[str], bool]:
    """The corpora a request targets that hold documents (the named ones, or all of the
    tenant's), and whether they are every corpus of the tenant. A named corpus without
    documents is simply empty: not an error, and no message that lists what exists."""
    known = known_corpora(tenant)
    if not wanted:
        return known, True
    targets = [c for c in dict.fromkeys(wanted) if c in known]
    return targets, set(targets) >= set(known)


def _query_vector(backend: SearchBackend, tenant: str, query: str) -> FloatArray | None:
    embedder = backend.embedder
    if embedder is None:
        raise ConfigError("semantic search needs an embedder; set [embedder] name in govrag.toml")
    space = backend.vector_space(tenant)
    if space is None:
        return None  # nothing embedded yet in this tenant
    if space != (embedder.name, embedder.dim):
        raise ConfigError(
            f"tenant {tenant!r} was embedded with {space[0]!r} ({space[1]} dims) but this "
            f"deployment uses {embedder.name!r} ({embedder.dim} dims); set "
            f"{embedder_setting(*space)} in govrag.toml"
        )
    return embedder.embed_query(query)


def _rank(
    backend: SearchBackend,
    scope: AccessScope,
    request: SearchRequest,
    terms: Sequence[str],
    qvec: FloatArray | None,
    doc_ids: Sequence[int] | None,
    *,
    acl: bool,
) -> tuple[list[tuple[int, float]], bool]:
    """The ranking of ``request``'s strategy under the scope (with its ACL predicate when
    ``acl``), and whether the vector leg was truncated by a scan bound."""
    if request.strategy is not Strategy.TEMPORAL:
        return _fused(backend, scope, request.strategy, request.top_k, request.query, terms,
                      qvec, doc_ids, acl=acl)  # fmt: skip
    # Temporal: the hybrid (keyword without vectors) ranking of the request, kept deeper,
    # reordered; it never drops a candidate, so it is never short (temporal.py).
    settings = backend.search_settings
    base = Strategy.HYBRID if qvec is not None else Strategy.KEYWORD
    ranked, truncated = _fused(backend, scope, base, request.top_k, request.query, terms, qvec,
                               doc_ids, acl=acl,
                               keep=max(request.top_k, settings.fusion_depth))  # fmt: skip
    at = reference_time(request)
    versions = backend.versions(scope, [cid for cid, _ in ranked], at=iso(at))
    return temporal_order(ranked, versions, settings, at)[: request.top_k], truncated


def _fused(
    backend: SearchBackend,
    scope: AccessScope,
    strategy: Strategy,
    top_k: int,
    query: str,
    terms: Sequence[str],
    qvec: FloatArray | None,
    doc_ids: Sequence[int] | None,
    *,
    acl: bool,
    keep: int | None = None,
) -> tuple[list[tuple[int, float]], bool]:
    """The top ``top_k`` of a keyword, semantic, hybrid or graph (fused) ranking; with
    ``keep``, that many of the same ranking (its legs as deep as for ``top_k``)."""
    keep = top_k if keep is None else keep
    settings = backend.search_settings
    depth = vector_depth = top_k
    graph: list[tuple[int, float]] = []
    if strategy is Strategy.GRAPH:
        # The hybrid legs and the graph leg, fused: the graph adds what names the entity
        # another way, and never takes away what the words find.
        graph = backend.graph_leg(scope, query, doc_ids=doc_ids, limit=settings.fusion_depth)
        strategy = Strategy.HYBRID
    if strategy is Strategy.HYBRID:
        depth, vector_depth = settings.hybrid_depths(top_k)
    lexical: list[tuple[int, float]] = []
    vector: list[tuple[int, float]] = []
    truncated = False
    beside: Future[list[tuple[int, float]]] | None = None
    if strategy is Strategy.HYBRID and qvec is not None and backend.server_vectors:
        # The keyword leg reads only the in-process index (synced before the search, under
        # the store's lock), so it runs beside the vector leg, which waits on the server.
        # Each leg's list depends on its own inputs alone: the order they finish in
        # changes nothing.
        beside = _pool("lexical").submit(
            backend.lexical_leg, scope, terms, acl=acl, doc_ids=doc_ids, limit=depth
        )
    elif strategy in (Strategy.KEYWORD, Strategy.HYBRID):
        lexical = backend.lexical_leg(scope, terms, acl=acl, doc_ids=doc_ids, limit=depth)
    try:
        if strategy in (Strategy.SEMANTIC, Strategy.HYBRID) and qvec is not None:
            vector, truncated = backend.vector_leg(
                scope, qvec, acl=acl, doc_ids=doc_ids, limit=vector_depth
            )
    finally:
        if beside is not None:
            wait([beside])  # never left reading an index the caller may now close
    if beside is not None:
        lexical = beside.result()
    lexical.sort(key=lambda pair: (-pair[1], pair[0]))
    if strategy is Strategy.KEYWORD:
        return lexical[:keep], False
    if strategy is Strategy.SEMANTIC:
        return vector[:keep], truncated
    fused = rrf(
        [
            ([c for c, _ in lexical], settings.lexical_weight),
            ([c for c, _ in vector], settings.vector_weight),
            ([c for c, _ in graph], settings.graph_weight),
        ],
        k=settings.rrf_k,
    )
    return fused[:keep], truncated


def run_search(
    backend: SearchBackend, principal: Principal, request: SearchRequest
) -> SearchResult:
    """Search on behalf of ``principal``: only chunks it may read, best first."""
    tenant = principal.tenant
    corpora, every_corpus = resolve_corpora(backend.known_corpora, tenant, request.corpora)
    empty = SearchResult(query=request.query, strategy=request.strategy, results=())
    if not corpora:
        return empty
    scope = backend.resolve_access(principal, corpora, every_corpus=every_corpus)
    # No identity: see nothing, learn nothing (not even the marker).
    if not scope.tokens:
        return empty
    terms = default_analyzer().analyze(request.query)
    qvec = None
    if request.strategy in (Strategy.SEMANTIC, Strategy.HYBRID) or (
        request.strategy in (Strategy.TEMPORAL, Strategy.GRAPH) and backend.embedder is not None
    ):
        qvec = _query_vector(backend, tenant, request.query)
    doc_ids = None
    if request.narrowed:
        doc_ids = backend.filtered_doc_ids(scope, request)
        if not doc_ids:
            return empty

    # A backend that can, looks for the marker's candidates beside the caller's ranking; the
    # marker is content-free, so reading it from another snapshot changes nothing shown. A
    # filtered request gets none: metadata of documents the caller cannot read must select
    # nothing.
    hidden = HiddenMarker()
    marker: Future[HiddenMarker] | None = None
    candidates: Future[list[int]] | None = None
    if backend.search_settings.hidden_marker and not request.narrowed:
        judged = terms if request.marker_query is None else default_analyzer().analyze(
            request.marker_query)  # fmt: skip
        if backend.server_vectors:
            marker = _pool("marker").submit(_hidden_marker, backend, scope, judged)
        else:
            # The candidates are an index query, which needs no truth-store connection: it
            # runs beside the caller's ranking, and the truth store checks them after it.
            candidates = _pool("candidates").submit(_marker_candidates, backend, scope, judged)

    try:
        ranked, truncated = _rank(backend, scope, request, terms, qvec, doc_ids, acl=True)
    except BaseException:
        # Never leave one reading from a store the caller may now close.
        pending: list[Future[Any]] = [f for f in (marker, candidates) if f is not None]
        wait(pending)
        raise
    if marker is not None:
        hidden = marker.result()
    if candidates is not None:
        hidden = _marker_contacts(backend, scope, candidates.result())
    ids = [cid for cid, _ in ranked]
    readable = backend.readable_chunks(scope, ids)
    stale = [cid for cid in ids if cid not in readable]
    if stale:
        backend.record_incident(
            tenant, "acl_recheck_mismatch", {"chunk_ids": stale, "sub": principal.sub}
        )
    kept = [(cid, score) for cid, score in ranked if cid in readable]

    info = backend.chunk_info(tenant, [cid for cid, _ in kept])
    hits = tuple(
        SearchHit(
            doc_id=info[cid].doc_id,
            chunk_id=info[cid].public_chunk_id,
            corpus=info[cid].corpus,
            source_system=info[cid].source_system,
            score=score,
            text=info[cid].text,
            trust_score=info[cid].trust_score,
        )
        for cid, score in kept
        if cid in info
    )
    return SearchResult(
        query=request.query,
        strategy=request.strategy,
        results=hits,
        hidden=hidden,
        truncated=truncated,
    )


#: How many hidden candidates the marker reads to name its contacts.
MARKER_CANDIDATES = 64
#: How many of them the truth store checks first (the rest only if these name too few).
MARKER_BATCH = 8


_pools: dict[tuple[int, str], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(purpose: str) -> ThreadPoolExecutor:
    """Threads for work beside the caller's ranking (one per concurrent search, at most 4),
    one pool per ``purpose`` so none queues behind another: ``marker`` (PostgreSQL's whole
    marker, which may wait for a pooled connection), ``candidates`` (SQLite's marker index
    query alone) and ``lexical`` (a hybrid search's keyword leg). Per process: a forked child
    does not have its parent's threads, and would wait for them forever."""
    key = (os.getpid(), purpose)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(
                max_workers=4, thread_name_prefix=f"govrag-{purpose}"
            )
        return pool


def marker_min_terms(n: int, share: float) -> int | None:
    """How many of a query's ``n`` distinct analysed terms a withheld document must hold to
    count for the marker: ``max(2, ceil(share * n))``, or ``None`` (nothing counts) when
    ``n < 2``. One word is a probe, not a question: the floor of 2 keeps a one-word probe
    from learning whether a hidden document says that word, and ``m`` grows with ``n``, so
    padding a probe with junk words raises the bar instead of lowering it."""
    if n < 2:
        return None
    # Shares are written in decimal and 0.7 * 10 is 7.000000000000001 in binary floating
    # point: without the slack, "70 % of 10 terms" would ask for 8.
    return max(2, math.ceil(share * n - 1e-9))


def _hidden_marker(
    backend: SearchBackend, scope: AccessScope, terms: Sequence[str]
) -> HiddenMarker:
    """Whether a relevant document the caller could ask its owner for was removed by access
    rules, and whom to ask (see the module docstring for the rule).

    Relevance is decided for each document on its own: it holds at least
    :func:`marker_min_terms` of the query's distinct terms. A rule relative to other
    documents (a score against the best one, a rank cut) would let them move it, and the
    caller could read counts off the marker: how many hidden copies hold a word, how often a
    hidden document says it. The first documents by id (not by rank) name the contacts, at
    most ``marker_max_contacts``, shown sorted.

    Content-free by construction: only source systems and author emails leave this function.
    """
    return _marker_contacts(backend, scope, _marker_candidates(backend, scope, terms))


def _marker_candidates(
    backend: SearchBackend, scope: AccessScope, terms: Sequence[str]
) -> list[int]:
    """The withheld chunks, lowest id first, that hold enough of the query's distinct terms
    (by the derived index: the truth store re-checks them in :func:`_marker_contacts`)."""
    distinct = list(dict.fromkeys(t for t in terms if t))
    need = marker_min_terms(len(distinct), backend.search_settings.marker_min_term_share)
    if need is None:
        return []
    return backend.withheld_chunks(scope, distinct, min_terms=need, limit=MARKER_CANDIDATES)


def _marker_contacts(
    backend: SearchBackend, scope: AccessScope, candidates: Sequence[int]
) -> HiddenMarker:
    """The marker of ``candidates``: whom to ask, from the first that the truth store says
    the caller may not read."""
    wanted = backend.search_settings.marker_max_contacts
    first: dict[tuple[str, str | None], None] = {}
    # The truth store decides, a few candidates at a time in id order: the contacts are the
    # first ``wanted`` distinct ones, so the later candidates are read only when the first
    # ones name too few (checking all 64 at once cost 2-3 ms of SQL at 100k chunks).
    start, size = 0, MARKER_BATCH
    while start < len(candidates) and len(first) < wanted:
        batch = candidates[start : start + size]
        start, size = start + size, len(candidates)
        readable = backend.readable_chunks(scope, batch)
        hidden = [cid for cid in batch if cid not in readable]
        info = backend.chunk_info(scope.tenant, hidden) if hidden else {}
        for cid in hidden:
            if cid in info and len(first) < wanted:
                first[(info[cid].source_system, info[cid].author_email)] = None
    if not first:
        return HiddenMarker()
    chosen = sorted(first, key=lambda s: (s[0], s[1] or ""))
    return HiddenMarker(
        present=True,
        sources=tuple(HiddenSource(source_system=s, author_email=a) for s, a in chosen),
    )
