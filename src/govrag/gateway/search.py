"""The gateway's pipeline for one ALLOWed corpus: search -> rerank -> rights trim -> pack.

Only the PEP calls this (after it committed an ALLOW). The store ANDs the caller's access
rights into every leg of the query; the gateway pins the call to the one corpus the PEP
decided on, whatever corpora the request carried, so an ALLOW for one corpus can never
search another. It over-fetches candidates for the reranker, which only reorders and thins
them; the ranking may come from the result cache. Then, on every request, the live rights
check confirms the ranked chunks at their source systems (fail-closed), and the confirmed
ones are packed to the token budget.
"""

from __future__ import annotations

from govrag.gateway.cache import BypassHook, CacheKey, Ranked, ResultCache
from govrag.gateway.overlay import eligible, overlay_hits
from govrag.gateway.pack import (
    ContextPack,
    TokenCounter,
    WordCounter,
    fit_to_budget,
    new_pack_id,
)
from govrag.gateway.rerank import DeterministicReranker, Reranker
from govrag.gateway.rights import RightsTrim, StoredAclChecker
from govrag.store.protocol import KnowledgeStore
from govrag.types import WRITEBACK_SOURCE, Principal, SearchRequest
from govrag.writeback import ControlledWriteBackStore

#: Most candidates fetched from the store for the reranker.
MAX_CANDIDATES = 1000


class Gateway:
    """Turns an ALLOWed retrieve of one corpus into a bounded context pack."""

    def __init__(
        self,
        store: KnowledgeStore,
        *,
        reranker: Reranker | None = None,
        counter: TokenCounter | None = None,
        rights: RightsTrim | None = None,
        cache: ResultCache | None = None,
        cache_bypass: BypassHook | None = None,
        overlay: ControlledWriteBackStore | None = None,
        token_budget: int = 2000,
        candidates: int = 50,
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

    def retrieve(
        self,
        principal: Principal,
        corpus: str,
        request: SearchRequest,
        *,
        policy_version: str,
        session_id: str | None = None,
    ) -> ContextPack:
        """The pack of ``corpus`` for ``request``; ``session_id`` (the caller's pinned
        session) scopes the write-back overlay, for requests it may join."""
        joins = eligible(self.overlay, request, session_id)
        ranked, cache_hit = self._ranked(principal, corpus, request, policy_version, joins,
                                         session_id)  # fmt: skip
        # Overlay entries are the caller's own session's memory: no source system to ask.
        memory = {h.chunk_id for h in ranked.hits if h.source_system == WRITEBACK_SOURCE}
        confirmed, withheld, checks = self.rights.trim(
            principal, [h for h in ranked.hits if h.chunk_id not in memory]
        )
        if memory:
            kept = {h.chunk_id for h in confirmed} | memory
            confirmed = [h for h in ranked.hits if h.chunk_id in kept]
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

    def _ranked(
        self,
        principal: Principal,
        corpus: str,
        request: SearchRequest,
        policy_version: str,
        joins: bool,
        session_id: str | None,
    ) -> tuple[Ranked, bool]:
        depth = min(MAX_CANDIDATES, max(request.top_k, self.candidates))
        key = None
        # Overlay-eligible requests never read or fill the cache (seed 001).
        bypass = joins or (self.cache_bypass is not None and self.cache_bypass(principal, request))
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
        candidates = list(result.results)
        if joins and self.overlay is not None and session_id is not None:
            candidates += overlay_hits(self.overlay, principal, session_id, corpus, request)
            candidates.sort(key=lambda h: -h.score)  # both are BM25: merge by score
        candidates = [h for h in candidates if h.score >= request.min_score]
        hits = self.reranker.rerank(request.query, candidates, request.top_k)
        ranked = Ranked(tuple(hits), result.hidden, result.truncated)
        if key is not None:
            self.cache.put(key, ranked)
        return ranked, False
