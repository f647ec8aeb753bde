"""Reranking: the gateway's second stage, over the store's ACL-filtered candidates only.

A reranker reorders and thins what the store returned; it never adds a candidate, so it can
never widen what the caller sees. The default is deterministic (same input, same order):

- score: the store's fused score, nudged by the document's trust score around neutral
  (``score * (1 + trust_weight * (trust - 0.5))``), so curated authority breaks near-ties;
- near-duplicates: a candidate whose analysed terms overlap an already kept one by at least
  ``duplicate_jaccard`` is dropped (copies of one paragraph in several documents);
- diversity: at most ``max_per_document`` chunks of one document.

Ties fall back to the chunk id, so the order never depends on the engine's tie order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from govrag.store.analyzer import default_analyzer
from govrag.types import SearchHit


class Reranker(Protocol):
    #: Recorded in every pack and audit record; change it whenever the ordering changes.
    version: str

    def rerank(self, query: str, hits: Sequence[SearchHit], limit: int) -> list[SearchHit]: ...


class DeterministicReranker:
    """Trust-nudged fusion score, near-duplicate removal, per-document diversity."""

    def __init__(
        self,
        *,
        trust_weight: float = 0.2,
        duplicate_jaccard: float = 0.9,
        max_per_document: int = 2,
    ) -> None:
        if not 0.0 <= trust_weight <= 1.0:
            raise ValueError(f"trust_weight {trust_weight!r} is outside 0..1")
        if not 0.0 < duplicate_jaccard <= 1.0:
            raise ValueError(f"duplicate_jaccard {duplicate_jaccard!r} is outside (0, 1]")
        if max_per_document < 1:
            raise ValueError(f"max_per_document {max_per_document!r} must be at least 1")
        self.trust_weight = trust_weight
        self.duplicate_jaccard = duplicate_jaccard
        self.max_per_document = max_per_document
        self.version = (
            f"deterministic-v1(trust={trust_weight:g},dup={duplicate_jaccard:g},"
            f"per_doc={max_per_document})"
        )
        self._analyzer = default_analyzer()

    def rerank(self, query: str, hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
        return self.thin([h.model_copy(update={"score": self._score(h)}) for h in hits], limit)

    def thin(self, hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
        """The best ``limit`` of ``hits`` by score (ties by chunk id), without
        near-duplicates and with at most ``max_per_document`` chunks of one document."""
        scored = sorted(hits, key=lambda h: (-h.score, h.chunk_id))
        kept: list[SearchHit] = []
        kept_terms: list[frozenset[str]] = []
        per_doc: dict[tuple[str, str], int] = {}
        for hit in scored:
            if len(kept) >= limit:
                break
            doc = (hit.source_system, hit.doc_id)
            if per_doc.get(doc, 0) >= self.max_per_document:
                continue
            terms = frozenset(self._analyzer.analyze(hit.text))
            if any(_jaccard(terms, other) >= self.duplicate_jaccard for other in kept_terms):
                continue
            kept.append(hit)
            kept_terms.append(terms)
            per_doc[doc] = per_doc.get(doc, 0) + 1
        return kept

    def _score(self, hit: SearchHit) -> float:
        return hit.score * (1.0 + self.trust_weight * (hit.trust_score - 0.5))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
