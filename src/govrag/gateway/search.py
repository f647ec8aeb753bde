"""The gateway's pipeline for one ALLOWed corpus: search -> rerank -> pack.

Only the PEP calls this (after it committed an ALLOW). The store ANDs the caller's access
rights into every leg of the query; the gateway pins the call to the one corpus the PEP
decided on, whatever corpora the request carried, so an ALLOW for one corpus can never
search another. It over-fetches candidates for the reranker, which only reorders and thins
them, then packs the best to the token budget.
"""

from __future__ import annotations

from govrag.gateway.pack import (
    ContextPack,
    TokenCounter,
    WordCounter,
    fit_to_budget,
    new_pack_id,
)
from govrag.gateway.rerank import DeterministicReranker, Reranker
from govrag.store.protocol import KnowledgeStore
from govrag.types import Principal, SearchRequest

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
        token_budget: int = 2000,
        candidates: int = 50,
    ) -> None:
        self.store = store
        self.reranker = reranker or DeterministicReranker()
        self.counter = counter or WordCounter()
        self.token_budget = token_budget
        self.candidates = candidates

    def retrieve(
        self, principal: Principal, corpus: str, request: SearchRequest, *, policy_version: str
    ) -> ContextPack:
        depth = min(MAX_CANDIDATES, max(request.top_k, self.candidates))
        one_corpus = request.model_copy(update={"corpora": (corpus,), "top_k": depth})
        result = self.store.search(principal, one_corpus)
        ranked = self.reranker.rerank(request.query, result.results, request.top_k)
        chunks, tokens, dropped = fit_to_budget(ranked, self.token_budget, self.counter)
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
            hidden=result.hidden,
            search_truncated=result.truncated,
        )
