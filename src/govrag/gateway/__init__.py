"""The retrieval gateway: what runs between a committed ALLOW and the caller."""

from __future__ import annotations

from govrag.gateway.pack import ContextPack, PackChunk, TokenCounter, Withheld, WordCounter
from govrag.gateway.rerank import DeterministicReranker, Reranker
from govrag.gateway.search import Gateway

__all__ = [
    "ContextPack", "DeterministicReranker", "Gateway", "PackChunk", "Reranker", "TokenCounter",
    "Withheld", "WordCounter",
]  # fmt: skip
