"""The gateway's pipeline for one ALLOWed corpus: search -> rerank -> rights trim -> pack.

Only the PEP calls this (after it committed an ALLOW). The store ANDs the caller's access
rights into every leg of the query; the gateway pins the call to the one corpus the PEP
decided on, whatever corpora the request carried, so an ALLOW for one corpus can never
search another. It over-fetches candidates for the reranker, which only reorders and thins
them; the ranking may come from the result cache. Then, on every request, the live rights
check confirms the ranked chunks at their source systems (fail-closed), and the confirmed
ones are packed to the token budget. Every chunk of a corpus pack went through that check:
whatever its ``source_system``, id or metadata, nothing the store returns skips it.

The write-back overlay is not part of a corpus's pipeline: :meth:`Gateway.memory` builds the
request's one session-memory pack (see :mod:`govrag.gateway.overlay`).
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.gateway.cache import BypassHook, CacheKey, Ranked, ResultCache
from govrag.gateway.overlay import (
    MEMORY_RANKER,
    SESSION_MEMORY,
    eligible,
    overlay_hits,
    without_duplicates,
)
from govrag.gateway.pack import (
    ContextPack,
    PackChunk,
    TokenCounter,
    WordCounter,
    fit_to_budget,
    new_pack_id,
)
from govrag.gateway.rerank import DeterministicReranker, Reranker
from govrag.gateway.rights import RightsTrim, StoredAclChecker
from govrag.store.protocol import GovernedReads
from govrag.types import (
    NO_CORPUS,
    ChunkOrigin,
    Principal,
    SearchRequest,
    Strategy,
    UncheckedChunk,
)
from govrag.writeback import ControlledWriteBackStore

#: Most candidates fetched from the store for the reranker.
MAX_CANDIDATES = 1000


class Gateway:
    """Turns an ALLOWed retrieve of one corpus into a bounded context pack."""

    def __init__(
        self,
        store: GovernedReads,
        *,
        reranker: Reranker | None = None,
        counter: TokenCounter | None = None,
        rights: RightsTrim | None = None,
        cache: ResultCache | None = None,
        cache_bypass: BypassHook | None = None,
        overlay: ControlledWriteBackStore | None = None,
        token_budget: int = 2000,
        candidates: int = 50,
        duplicate_jaccard: float = 0.9,
    ) -> None:
        self.store = store
        self.reranker = reranker or DeterministicReranker()
        self.counter = counter or WordCounter()
        self.rights = rights or RightsTrim(StoredAclChecker(store))
        self.cache = cache if cache is not None else ResultCache()
        #: The write-back overlay's hook: requests it claims never read or fill the cache.
        self.cache_bypass = cache_bypass
        #: The write-back overlay; it joins only eligible requests (see gateway/overlay.py).
        self.overlay = overlay
        self.token_budget = token_budget
        self.candidates = candidates
        #: Memory entries this close to a packed chunk (Jaccard of terms) are duplicates.
        self.duplicate_jaccard = duplicate_jaccard

    def retrieve(
        self,
        principal: Principal,
        corpus: str,
        request: SearchRequest,
        *,
        policy_version: str,
        session_id: str | None = None,
    ) -> ContextPack:
        """The pack of ``corpus`` for ``request``: documents of that corpus only, each one
        confirmed by the live rights check. ``session_id`` (the caller's pinned session) only
        decides whether the request is overlay-eligible, which bypasses the result cache."""
        # Seed 001: overlay-eligible requests neither read nor fill the shared cache.
        bypass = eligible(self.overlay, request, session_id)
        ranked, cache_hit = self._ranked(principal, corpus, request, policy_version, bypass)
        # Every hit, whatever it claims to be: only the overlay makes memory, never the store.
        confirmed, withheld, checks = self.rights.trim(principal, ranked.hits)
        chunks, tokens, dropped = fit_to_budget(confirmed, self.token_budget, self.counter)
        return ContextPack(
            context_pack_id=new_pack_id(),
            corpus=corpus,
            chunks=tuple(chunks),
            policy_version=policy_version,
            ranker_version=self.reranker.version,
            token_counter=self.counter.name,
            pack_token_count=tokens,
            token_budget=self.token_budget,
            dropped_for_budget=dropped,
            withheld=withheld,
            hidden=ranked.hidden,
            search_truncated=ranked.truncated,
            rights_checks=checks,
            cache_hit=cache_hit,
        )

    def joins(self, request: SearchRequest, session_id: str | None) -> bool:
        """Whether the write-back overlay joins ``request`` in ``session_id`` (seed 001)."""
        return eligible(self.overlay, request, session_id)

    def memory(
        self,
        principal: Principal,
        request: SearchRequest,
        *,
        policy_version: str,
        session_id: str,
        packed: Sequence[PackChunk] = (),
    ) -> ContextPack | None:
        """The request's session-memory pack, or ``None`` when the overlay does not join
        ``request`` or holds nothing for it. ``packed`` are the chunks already packed for the
        request (memory that repeats one of them is dropped). Call it once per request, after
        an ALLOW of that request (the PEP's :meth:`memory` does)."""
        overlay = self.overlay
        if overlay is None or not eligible(overlay, request, session_id):
            return None
        hits = overlay_hits(overlay, principal, session_id, request)
        hits = without_duplicates(hits, (c.text for c in packed), self.duplicate_jaccard)
        chunks, tokens, dropped = fit_to_budget(hits, self.token_budget, self.counter)
        if not chunks:
            return None
        return ContextPack(
            context_pack_id=new_pack_id(),
            corpus=NO_CORPUS,
            chunks=tuple(chunks),
            policy_version=policy_version,
            ranker_version=MEMORY_RANKER,
            token_counter=self.counter.name,
            pack_token_count=tokens,
            token_budget=self.token_budget,
            dropped_for_budget=dropped,
            origin=ChunkOrigin.SESSION_MEMORY,
            unchecked=tuple(
                UncheckedChunk(chunk_id=c.chunk_id, reason=SESSION_MEMORY) for c in chunks
            ),
        )

    def _ranked(
        self,
        principal: Principal,
        corpus: str,
        request: SearchRequest,
        policy_version: str,
        eligible_for_overlay: bool,
    ) -> tuple[Ranked, bool]:
        depth = min(MAX_CANDIDATES, max(request.top_k, self.candidates))
        key = None
        # A temporal ranking without as_of judges what is in effect now: the clock, which
        # no cache key holds, can change it (a version taking effect), so it is never cached.
        clocked = request.strategy is Strategy.TEMPORAL and request.as_of is None
        bypass = (
            eligible_for_overlay
            or clocked
            or (self.cache_bypass is not None and self.cache_bypass(principal, request))
        )
        if self.cache.max_entries and not bypass:
            key = CacheKey.build(
                principal,
                self.store.generation(principal.tenant),
                corpus,
                request,
                depth=depth,
                policy_version=policy_version,
                ranker_version=self.reranker.version,
            )
            found = self.cache.get(key)
            if found is not None:
                return found, True
        one_corpus = request.model_copy(update={"corpora": (corpus,), "top_k": depth})
        result = self.store.search(principal, one_corpus)
        candidates = [h for h in result.results if h.score >= request.min_score]
        hits = self.reranker.rerank(request.query, candidates, request.top_k)
        ranked = Ranked(tuple(hits), result.hidden, result.truncated)
        if key is not None:
            self.cache.put(key, ranked)
        return ranked, False
