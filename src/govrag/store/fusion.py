"""Reciprocal Rank Fusion of ranked candidate lists."""

from __future__ import annotations

from collections.abc import Sequence


def rrf(legs: Sequence[tuple[Sequence[int], float]], *, k: int = 60) -> list[tuple[int, float]]:
    """Fuse ranked id lists: ``score(id) = sum(weight / (k + rank))``, rank starting at 1.

    ``legs`` holds (ids best first, weight) pairs. Ties are ordered by id so fusion is
    deterministic. A leg with weight 0 contributes nothing.
    """
    if k < 1:
        raise ValueError(f"RRF k must be >= 1, got {k}")
    scores: dict[int, float] = {}
    for ids, weight in legs:
        if weight <= 0:
            continue
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
