"""Retrieval-quality metrics that reproduce trec_eval's numbers.

The formulas follow trec_eval 9.0.x (the version behind ``pytrec_eval`` and therefore BEIR's
published scores), so a number computed here can be compared with a number in a paper:

* ``ndcg_cut.k`` -- gain is the qrels relevance grade itself (linear, *not* ``2**rel - 1``), the
  document at rank ``r`` (counting from 1) is discounted by ``log2(r + 1)``, documents judged
  ``<= 0`` or not judged give no gain, and the ideal DCG is built from *all* judged documents with
  a positive grade, sorted by grade descending and cut at ``k``. Older trec_eval releases (8.x)
  discounted rank 1 and rank 2 both by 1; we deliberately follow the current formula.
* ``recall.k`` -- relevant documents (grade > 0) in the top ``k`` over all relevant documents.
* ``recip_rank`` cut at ``k`` -- ``1 / rank`` of the first relevant document in the top ``k``.

trec_eval ignores the rank column of a run file: it re-sorts each query's documents by score
descending and breaks score ties by document id *descending* (string comparison). The metric
functions here take a ranking that is already ordered; use :func:`order_run` to turn scores
into the ranking trec_eval would evaluate, so tied scores do not make numbers drift.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from govrag.errors import InputError

__all__ = [
    "DEFAULT_KS",
    "evaluate",
    "mrr_at_k",
    "ndcg_at_k",
    "order_run",
    "percentile",
    "recall_at_k",
]

#: Metric name -> cutoffs reported by :func:`evaluate` by default (BEIR's headline numbers).
DEFAULT_KS: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {"ndcg": (10,), "recall": (100,), "mrr": (10,)}
)


def _check_k(k: int) -> None:
    # bool is an int subclass; k=True would silently mean k=1.
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"cutoff k must be a positive integer, got {k!r}; pass e.g. k=10")


def _check_ranking(ranking: Sequence[str]) -> None:
    # A bare string is a Sequence[str] too; evaluating its characters would be silently wrong.
    if isinstance(ranking, str):
        raise InputError(
            f"ranking must be a sequence of document ids, got the string {ranking!r}; "
            "wrap a single id in a list: [doc_id]"
        )
    seen: set[str] = set()
    for doc_id in ranking:
        if doc_id in seen:
            # trec_eval refuses runs with duplicate documents: a repeated relevant document
            # would be counted twice and could push nDCG above 1.
            raise InputError(
                f"document id {doc_id!r} appears more than once in the ranking; "
                "keep only its best-ranked occurrence"
            )
        seen.add(doc_id)


def _dcg(gains: Iterable[float]) -> float:
    # enumerate() counts from 0, so the document at rank r = i + 1 is discounted by log2(i + 2).
    return sum(gain / math.log2(i + 2) for i, gain in enumerate(gains))


def order_run(scores: Mapping[str, float]) -> list[str]:
    """Order one query's scored documents exactly as trec_eval does before evaluating.

    Sorts by score descending, then by document id descending (plain string comparison, which
    for UTF-8 ids is the same order as C's ``strcmp`` that trec_eval uses).

    Raises:
        InputError: a score is NaN, which has no place in an order.
    """
    for doc_id, score in scores.items():
        if math.isnan(score):
            raise InputError(
                f"score of document {doc_id!r} is NaN; a ranking needs comparable scores, "
                "so fix the scorer or drop the document"
            )
    # One key, reversed: (score, id) descending gives score desc, then id desc for ties.
    return [
        doc_id
        for doc_id, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)
    ]


def ndcg_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k of an ordered ranking, identical to trec_eval's ``ndcg_cut.k``.

    Args:
        ranking: document ids, best first (see :func:`order_run` for tie-breaking).
        qrels: relevance grade of each judged document of this query.
        k: cutoff, at least 1.

    Returns:
        A value in [0, 1]; 0.0 when the query has no document with a positive grade.
    """
    _check_k(k)
    _check_ranking(ranking)
    ideal = sorted((grade for grade in qrels.values() if grade > 0), reverse=True)[:k]
    ideal_dcg = _dcg(ideal)
    if ideal_dcg == 0.0:
        return 0.0
    # Grades <= 0 (non-relevant, or "harmful" negative grades) give no gain, as in trec_eval.
    gains = [max(qrels.get(doc_id, 0), 0) for doc_id in ranking[:k]]
    return _dcg(gains) / ideal_dcg


def recall_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Fraction of the query's relevant documents (grade > 0) found in the top ``k``.

    Returns 0.0 when the query has no relevant document.
    """
    _check_k(k)
    _check_ranking(ranking)
    relevant = {doc_id for doc_id, grade in qrels.items() if grade > 0}
    if not relevant:
        return 0.0
    found = sum(1 for doc_id in ranking[:k] if doc_id in relevant)
    return found / len(relevant)


def mrr_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Reciprocal rank (rank counted from 1) of the first relevant document in the top ``k``.

    Returns 0.0 when no relevant document is in the top ``k``.
    """
    _check_k(k)
    _check_ranking(ranking)
    for rank, doc_id in enumerate(ranking[:k], start=1):
        if qrels.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


_METRICS = {"ndcg": ndcg_at_k, "recall": recall_at_k, "mrr": mrr_at_k}


def evaluate(
    run: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    ks: Mapping[str, Sequence[int]] = DEFAULT_KS,
) -> dict[str, float]:
    """Mean metrics of a run over the judged queries, keyed like ``"ndcg@10"``.

    Args:
        run: query id -> ranked document ids, best first.
        qrels: query id -> document id -> relevance grade.
        ks: metric name (``"ndcg"``, ``"recall"``, ``"mrr"``) -> cutoffs to report. The default
            gives ``ndcg@10``, ``recall@100`` and ``mrr@10``.

    The mean is over every query that has at least one document with a positive grade in
    ``qrels``. Queries without one are skipped (their ideal DCG and recall are undefined), as are
    run queries absent from ``qrels``. A judged query missing from the run scores 0 on every
    metric, as with ``trec_eval -c``: a system must not look better by not answering.

    Raises:
        InputError: an unknown metric name or bad cutoff, a malformed ranking, or no query in
            ``qrels`` has a relevant document (usually the wrong qrels split or file).
    """
    for name, cutoffs in ks.items():
        if name not in _METRICS:
            known = ", ".join(sorted(_METRICS))
            raise InputError(f"unknown metric {name!r} in ks; use one of: {known}")
        for k in cutoffs:
            _check_k(k)

    judged = [qid for qid, judgements in qrels.items() if any(g > 0 for g in judgements.values())]
    if not judged:
        raise InputError(
            f"none of the {len(qrels)} queries in qrels has a document with a positive grade, "
            "so no metric is defined; check that the right qrels split was loaded"
        )

    totals = {f"{name}@{k}": 0.0 for name, cutoffs in ks.items() for k in cutoffs}
    for qid in judged:
        ranking = run.get(qid)
        if ranking is None:
            continue  # contributes 0 to every sum, but still counts in the denominator
        for name, cutoffs in ks.items():
            metric = _METRICS[name]
            for k in cutoffs:
                try:
                    totals[f"{name}@{k}"] += metric(ranking, qrels[qid], k)
                except InputError as exc:
                    # Say which query's ranking is bad; the metric itself cannot know.
                    raise InputError(f"run query {qid!r}: {exc}") from exc
    return {key: total / len(judged) for key, total in totals.items()}


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) with linear interpolation, like numpy's default.

    Used for latency p50/p95: the sorted values are treated as points at positions
    ``0 .. n-1`` and the value at position ``p / 100 * (n - 1)`` is interpolated.

    Raises:
        InputError: ``values`` is empty or holds NaN, or ``p`` is outside [0, 100].
    """
    if isinstance(p, bool) or not 0.0 <= p <= 100.0:
        raise InputError(f"percentile p must be between 0 and 100, got {p!r}; use e.g. p=95")
    if not values:
        raise InputError("cannot take a percentile of no values; record at least one sample")
    if any(math.isnan(v) for v in values):
        raise InputError("values contain NaN, which has no percentile; drop the failed samples")
    ordered = sorted(values)
    position = p / 100.0 * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    fraction = position - lower
    # Written as a + (b - a) * f so equal neighbours give back exactly that value.
    return ordered[lower] + (ordered[upper] - ordered[lower]) * fraction
