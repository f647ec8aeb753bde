"""The gateway's search step: one ALLOWed corpus per call, through the store's ACL pre-filter.

Only the PEP calls this (after it committed an ALLOW). The store ANDs the caller's access
rights into every leg of the query; the gateway pins the call to the one corpus the PEP
decided on, whatever corpora the request carried, so an ALLOW for one corpus can never
search another.
"""

from __future__ import annotations

from govrag.store.protocol import KnowledgeStore
from govrag.types import Principal, SearchRequest, SearchResult


class Gateway:
    """Searches one corpus for a caller whose retrieve the PEP has ALLOWed."""

    def __init__(self, store: KnowledgeStore) -> None:
        self.store = store

    def search(self, principal: Principal, corpus: str, request: SearchRequest) -> SearchResult:
        one_corpus = request.model_copy(update={"corpora": (corpus,)})
        return self.store.search(principal, one_corpus)
