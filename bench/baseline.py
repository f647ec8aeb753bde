"""The baselines govrag's synthetic-corpus figures are compared with, on the same data.

bm25s over govrag's own analyzer tokens (the probe's ACL as ``weight_mask``), exact numpy
search over the same ``HashEmbedder`` vectors (the ACL as a boolean mask), and their
Reciprocal Rank Fusion with govrag's default depths. See bench/README.md, "Synthetic
enterprise corpus".
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import bm25s
import numpy as np
import numpy.typing as npt

from bench import synthetic
from bench.common import TOP_K
from govrag.embed.hashing import HashEmbedder
from govrag.settings import SearchSettings
from govrag.store.analyzer import default_analyzer
from govrag.types import Strategy

#: How many candidates the baseline's hybrid fuses from each leg: govrag's defaults.
FUSION = SearchSettings()
RRF_K = 60

F32 = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


def rrf_fuse(legs: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal Rank Fusion: ``sum(1 / (k + rank))`` over legs, rank from 1; ties by id."""
    scores: dict[int, float] = {}
    for ids in legs:
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return [item for item, _ in sorted(scores.items(), key=lambda p: (-p[1], p[0]))]


@dataclass(frozen=True)
class Access:
    """A probe's ACL in the two forms the baselines take, both precomputed outside timing."""

    weights: F32  # bm25s weight_mask: 1.0 readable, 0.0 not
    allowed: BoolArray  # numpy mask over matrix rows


class Baseline:
    """bm25s over govrag's analyzer tokens, and exact numpy search over the same vectors.

    Both are indexed by document position, which is the synthetic document number, so their
    results compare directly with govrag's hits.
    """

    def __init__(self, texts: list[str]) -> None:
        self.analyzer = default_analyzer()
        started = time.perf_counter()
        self.bm25 = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        self.bm25.index([self.analyzer.analyze(t) for t in texts], show_progress=False)
        self.bm25_s = time.perf_counter() - started
        started = time.perf_counter()
        # A separate embedder instance: its feature caches warm up on the corpus, as the
        # store's embedder's did at ingest. Vectors are bit-identical across instances.
        self.embedder = HashEmbedder(dim=synthetic.EMBED_DIM)
        self.matrix: F32 = np.ascontiguousarray(
            self.embedder.embed_documents(texts, batch_size=1024)
        )
        self.embed_s = time.perf_counter() - started
        self.n = len(texts)

    def keyword(
        self, query: str, access: Access | None, k: int = TOP_K, *, topk: bool = False
    ) -> list[int]:
        """bm25s's ``retrieve`` (as documented), or with ``topk`` its scores and a top-k of
        the positive ones: bm25s's own selection is an ``argpartition`` over every document,
        which numpy 2.4 makes slow when most scores tie at zero (15-18 ms at 100k here), so
        the second is bm25s at its fastest."""
        tokens = self.analyzer.analyze(query)
        if not tokens:
            return []
        if topk:
            weights = None if access is None else access.weights
            scores = self.bm25.get_scores(tokens, weight_mask=weights)
            hits = np.flatnonzero(scores > 0)
            if len(hits) > k:
                hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
            return [int(i) for i in hits[np.lexsort((hits, -scores[hits]))]]
        result = self.bm25.retrieve(
            [tokens],
            k=min(k, self.n),
            show_progress=False,
            weight_mask=None if access is None else access.weights,
        )
        # A zero score is a masked or non-matching document that only fills up the top-k.
        return [int(i) for i, s in zip(result.documents[0], result.scores[0], strict=True) if s > 0]

    def semantic(self, query: str, access: Access | None, k: int = TOP_K) -> list[int]:
        scores = self.matrix @ self.embedder.embed_query(query)
        if access is not None:
            scores = np.where(access.allowed, scores, -np.inf)
        k = min(k, self.n)
        top = np.argpartition(-scores, k - 1)[:k] if k < self.n else np.arange(self.n)
        top = top[np.argsort(-scores[top], kind="stable")]
        return [int(i) for i in top if scores[i] > -np.inf]

    def hybrid(
        self, query: str, access: Access | None, k: int = TOP_K, *, topk: bool = False
    ) -> list[int]:
        keyword_depth, vector_depth = FUSION.hybrid_depths(k)
        lexical = self.keyword(query, access, keyword_depth, topk=topk)
        vector = self.semantic(query, access, vector_depth)
        return rrf_fuse([lexical, vector])[:k]

    def search(
        self, strategy: Strategy, query: str, access: Access | None, *, topk: bool = False
    ) -> list[int]:
        if strategy is Strategy.KEYWORD:
            return self.keyword(query, access, topk=topk)
        if strategy is Strategy.SEMANTIC:
            return self.semantic(query, access)
        return self.hybrid(query, access, topk=topk)
