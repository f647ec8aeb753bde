"""RRF by hand, and the vector index's masking, ties, updates and compaction."""

from __future__ import annotations

import numpy as np
import pytest

from govrag.store.fusion import rrf
from govrag.store.records import IndexedChunk
from govrag.store.vectors import VectorIndex


def test_rrf_by_hand() -> None:
    fused = dict(rrf([([1, 2, 3], 1.0), ([3, 1], 2.0)], k=60))
    assert fused[1] == pytest.approx(1 / 61 + 2 / 62)
    assert fused[2] == pytest.approx(1 / 62)
    assert fused[3] == pytest.approx(1 / 63 + 2 / 61)
    assert [i for i, _ in rrf([([1, 2, 3], 1.0), ([3, 1], 2.0)], k=60)] == [3, 1, 2]


def test_rrf_ties_and_zero_weight() -> None:
    assert rrf([([5], 1.0), ([4], 1.0)]) == [(4, 1 / 61), (5, 1 / 61)]
    assert rrf([([1], 0.0)]) == []
    with pytest.raises(ValueError):
        rrf([], k=0)


def chunk(cid: int, doc: int, vec: list[float], acl: tuple[str, ...], corpus: str = "c",
          cls: int = 0) -> IndexedChunk:  # fmt: skip
    v = np.asarray(vec, dtype=np.float32)
    return IndexedChunk(cid, doc, "", acl, corpus, cls, vector=v / np.linalg.norm(v))


def search(index: VectorIndex, tokens: list[str] | None, **kw: object) -> list[int]:
    args = {"corpora": ["c"], "max_classification": 3, "doc_ids": None, "limit": 10, **kw}
    q = np.asarray([1.0, 0.0], dtype=np.float32)
    return [c for c, _ in index.search(q, acl_tokens=tokens, **args)]  # type: ignore[arg-type]


def test_mask_before_top_k() -> None:
    index = VectorIndex(2)
    # The best vectors belong to documents the caller may not read.
    index.replace([], [chunk(i, i, [1.0, 0.01 * i], ("other",)) for i in range(1, 50)])
    index.replace([], [chunk(100, 100, [0.1, 1.0], ("me",))])
    assert search(index, ["me"], limit=1) == [100]
    assert search(index, None, limit=1) == [1]
    assert search(index, []) == []


def test_filters_ties_updates_and_compaction() -> None:
    index = VectorIndex(2)
    index.replace([], [chunk(i, i, [1.0, 0.0], ("*",), cls=i % 4) for i in range(2000)])
    assert search(index, ["*"], limit=3) == [0, 1, 2]  # ties ordered by chunk id
    assert search(index, ["*"], limit=3, max_classification=0) == [0, 4, 8]
    assert search(index, ["*"], limit=3, doc_ids=[7, 5]) == [5, 7]
    assert search(index, ["*"], corpora=["nope"]) == []
    index.replace(range(1500), [])  # drop most documents: triggers compaction
    assert len(index) == 500 and index._dead == 0
    assert search(index, ["*"], limit=2) == [1500, 1501]
    index.replace([1500], [chunk(9999, 1500, [1.0, 0.0], ("x",))])  # revoked and re-added
    assert search(index, ["*"], limit=2) == [1501, 1502]
    assert search(index, ["x"]) == [9999]
