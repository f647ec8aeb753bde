"""Retrieval metrics against hand-computed values (trec_eval 9.0.x formulas)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from govrag.errors import InputError
from govrag.eval.metrics import (
    DEFAULT_KS,
    evaluate,
    mrr_at_k,
    ndcg_at_k,
    order_run,
    percentile,
    recall_at_k,
)

# 1 / log2(3), the discount of rank 2, used by several hand computations below.
INV_LOG2_3 = 0.6309297535714575


# --- nDCG ------------------------------------------------------------------------------------


def test_ndcg_binary_and_graded_example() -> None:
    # ranking [d1, d2, d3], qrels {d1: 1, d3: 2}, k = 3
    # DCG  = 1/log2(2) + 0/log2(3) + 2/log2(4)  = 1 + 0 + 1          = 2
    # IDCG = 2/log2(2) + 1/log2(3)              = 2 + 0.63092975     = 2.63092975
    # nDCG = 2 / 2.63092975                                          = 0.76018753
    value = ndcg_at_k(["d1", "d2", "d3"], {"d1": 1, "d3": 2}, 3)
    assert value == pytest.approx(0.7601875334318685, abs=1e-12)
    assert value == pytest.approx(2 / (2 + INV_LOG2_3), abs=1e-12)


def test_ndcg_gain_is_linear_not_exponential() -> None:
    # ranking [a, b], qrels {a: 1, b: 3}, k = 2
    # linear gains:  DCG = 1 + 3/log2(3) = 2.89278926; IDCG = 3 + 1/log2(3) = 3.63092975
    #                nDCG = 2.89278926 / 3.63092975 = 0.79670758
    # (2**rel - 1 gains would give (1 + 7*0.63092975) / (7 + 0.63092975) = 0.70980974,
    # which must not match)
    value = ndcg_at_k(["a", "b"], {"a": 1, "b": 3}, 2)
    assert value == pytest.approx((1 + 3 * INV_LOG2_3) / (3 + INV_LOG2_3), abs=1e-12)
    assert value == pytest.approx(0.7967075809905066, abs=1e-12)


def test_ndcg_graded_with_unretrieved_relevant_doc() -> None:
    # ranking [a, b, c, d], qrels {a: 0, b: 3, c: 1, e: 2}, k = 4; e is never retrieved, d unjudged
    # DCG  = 0/1 + 3/log2(3) + 1/log2(4) + 0       = 1.89278926 + 0.5          = 2.39278926
    # IDCG = grades [3, 2, 1]: 3/1 + 2/log2(3) + 1/log2(4) = 3 + 1.26185951 + 0.5 = 4.76185951
    # nDCG = 2.39278926 / 4.76185951                                             = 0.50249052
    value = ndcg_at_k(["a", "b", "c", "d"], {"a": 0, "b": 3, "c": 1, "e": 2}, 4)
    assert value == pytest.approx(0.5024905201686705, abs=1e-12)


def test_ndcg_k_cuts_both_ranking_and_ideal() -> None:
    qrels = {"a": 0, "b": 3, "c": 1, "e": 2}
    ranking = ["a", "b", "c", "d"]
    # k = 1: only a (grade 0) counts -> DCG 0 -> nDCG 0
    assert ndcg_at_k(ranking, qrels, 1) == 0.0
    # k = 2: DCG = 0 + 3/log2(3) = 1.89278926; IDCG@2 = 3 + 2/log2(3) = 4.26185951
    #        nDCG = 0.44412287 (the ideal is cut at 2 as well, so grade 1 of c is not in it)
    assert ndcg_at_k(ranking, qrels, 2) == pytest.approx(0.44412286644879784, abs=1e-12)
    # k larger than the ranking: same as k = 4
    assert ndcg_at_k(ranking, qrels, 50) == pytest.approx(0.5024905201686705, abs=1e-12)


def test_ndcg_ideal_uses_all_relevant_docs_not_only_retrieved() -> None:
    # qrels {a: 1, b: 1, c: 1}, ranking [a], k = 2
    # DCG = 1; IDCG@2 = 1 + 1/log2(3) = 1.63092975 -> nDCG = 0.61314719
    assert ndcg_at_k(["a"], {"a": 1, "b": 1, "c": 1}, 2) == pytest.approx(
        1 / (1 + INV_LOG2_3), abs=1e-12
    )
    # k = 1: DCG = 1, IDCG@1 = 1 -> 1.0
    assert ndcg_at_k(["a"], {"a": 1, "b": 1, "c": 1}, 1) == 1.0


def test_ndcg_negative_grade_gives_no_gain() -> None:
    # ranking [x, y], qrels {x: -1, y: 1}, k = 2
    # DCG = 0 (not -1) + 1/log2(3) = 0.63092975; IDCG = 1/log2(2) = 1 -> nDCG = 0.63092975
    assert ndcg_at_k(["x", "y"], {"x": -1, "y": 1}, 2) == pytest.approx(INV_LOG2_3, abs=1e-12)


def test_ndcg_empty_cases_are_zero() -> None:
    assert ndcg_at_k([], {"a": 1}, 10) == 0.0
    assert ndcg_at_k(["a"], {}, 10) == 0.0
    # only non-relevant judgements: ideal DCG is 0, so nDCG is defined as 0
    assert ndcg_at_k(["a", "b"], {"a": 0, "b": -2}, 10) == 0.0
    assert ndcg_at_k(["x", "y"], {"a": 2}, 10) == 0.0


def test_ndcg_perfect_ranking_is_one() -> None:
    assert ndcg_at_k(["b", "a", "z"], {"a": 1, "b": 2}, 10) == 1.0


# --- recall and MRR ----------------------------------------------------------------------------


def test_recall_at_k() -> None:
    qrels = {"a": 1, "b": 2, "c": 1, "d": 1, "n": 0}
    ranking = ["a", "n", "b", "x", "c"]
    # relevant = {a, b, c, d} (n has grade 0): 4 docs
    assert recall_at_k(ranking, qrels, 1) == 0.25  # a
    assert recall_at_k(ranking, qrels, 2) == 0.25  # a, n(not relevant)
    assert recall_at_k(ranking, qrels, 3) == 0.5  # a, b
    assert recall_at_k(ranking, qrels, 100) == 0.75  # a, b, c; d never retrieved
    assert recall_at_k(ranking, {"n": 0}, 10) == 0.0  # no relevant docs
    assert recall_at_k([], qrels, 10) == 0.0


def test_mrr_at_k() -> None:
    qrels = {"a": 1, "n": 0}
    # first relevant doc a at rank 3 -> 1/3; grade-0 n at rank 1 does not count
    assert mrr_at_k(["n", "x", "a"], qrels, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["n", "x", "a"], qrels, 3) == pytest.approx(1 / 3)
    assert mrr_at_k(["n", "x", "a"], qrels, 2) == 0.0  # a is cut off
    assert mrr_at_k(["a", "n"], qrels, 1) == 1.0
    assert mrr_at_k([], qrels, 10) == 0.0
    assert mrr_at_k(["a"], {}, 10) == 0.0


@pytest.mark.parametrize("metric", [ndcg_at_k, recall_at_k, mrr_at_k])
@pytest.mark.parametrize("k", [0, -1, True, 2.5])
def test_bad_k_is_rejected(metric: object, k: object) -> None:
    with pytest.raises(InputError, match="cutoff k must be a positive integer"):
        metric(["a"], {"a": 1}, k)  # type: ignore[operator]


@pytest.mark.parametrize("metric", [ndcg_at_k, recall_at_k, mrr_at_k])
def test_bad_rankings_are_rejected(metric: object) -> None:
    with pytest.raises(InputError, match="'a' appears more than once"):
        metric(["a", "b", "a"], {"a": 1}, 10)  # type: ignore[operator]
    with pytest.raises(InputError, match="got the string 'abc'"):
        metric("abc", {"a": 1}, 10)  # type: ignore[operator]


# --- order_run -----------------------------------------------------------------------------


def test_order_run_breaks_ties_by_doc_id_descending() -> None:
    scores = {"a": 1.0, "b": 2.0, "c": 1.0, "d": 1.0, "e": 0.5}
    assert order_run(scores) == ["b", "d", "c", "a", "e"]


def test_order_run_compares_ids_as_strings() -> None:
    # "9" > "10" as strings (trec_eval uses strcmp), so on a tie "9" ranks first.
    assert order_run({"10": 3.0, "9": 3.0, "100": 4.0}) == ["100", "9", "10"]


def test_order_run_rejects_nan() -> None:
    with pytest.raises(InputError, match="'x' is NaN"):
        order_run({"a": 1.0, "x": math.nan})


def test_order_run_empty() -> None:
    assert order_run({}) == []


# --- evaluate -----------------------------------------------------------------------------------


def test_evaluate_means_over_judged_queries() -> None:
    qrels = {
        "q1": {"d1": 1},
        "q2": {"d2": 2, "d3": 1},
        "q3": {"d4": 0},  # no relevant doc -> skipped
        "q5": {"d5": 1},  # judged but missing from the run -> counts as 0
    }
    run = {
        "q1": ["d1", "x"],
        "q2": ["d3", "d2"],
        "q3": ["d4"],
        "q4": ["d9"],  # not in qrels -> ignored
    }
    # q1: nDCG 1, recall 1, MRR 1
    # q2: DCG = 1/1 + 2/log2(3) = 2.26185951; IDCG = 2 + 1/log2(3) = 2.63092975
    #     nDCG = 0.85971870, recall 1, MRR 1 (d3 is relevant, grade 1)
    # q5: 0 on everything
    # means over 3 queries: nDCG (1 + 0.85971870) / 3 = 0.61990623, recall 2/3, MRR 2/3
    result = evaluate(run, qrels)
    assert set(result) == {"ndcg@10", "recall@100", "mrr@10"}
    assert result["ndcg@10"] == pytest.approx(0.6199062332840657, abs=1e-12)
    assert result["recall@100"] == pytest.approx(2 / 3)
    assert result["mrr@10"] == pytest.approx(2 / 3)


def test_evaluate_custom_cutoffs() -> None:
    qrels = {"q1": {"a": 1, "b": 1}}
    run = {"q1": ["x", "a", "b"]}
    # recall@1 = 0 (x), recall@2 = 1/2 (a), recall@3 = 2/2
    # ndcg@1 = 0; mrr@2 = 1/2
    result = evaluate(run, qrels, ks={"recall": (1, 2, 3), "ndcg": (1,), "mrr": [2]})
    assert result == {
        "recall@1": 0.0,
        "recall@2": 0.5,
        "recall@3": 1.0,
        "ndcg@1": 0.0,
        "mrr@2": 0.5,
    }


def test_evaluate_default_ks_is_read_only() -> None:
    with pytest.raises(TypeError):
        DEFAULT_KS["ndcg"] = (5,)  # type: ignore[index]


def test_evaluate_errors() -> None:
    with pytest.raises(InputError, match="unknown metric 'map'"):
        evaluate({}, {"q": {"a": 1}}, ks={"map": (10,)})
    with pytest.raises(InputError, match="cutoff k must be a positive integer, got 0"):
        evaluate({}, {"q": {"a": 1}}, ks={"ndcg": (0,)})
    with pytest.raises(InputError, match="none of the 2 queries in qrels"):
        evaluate({"q": ["a"]}, {"q": {"a": 0}, "r": {}})
    with pytest.raises(InputError, match="run query 'q': document id 'a' appears more than once"):
        evaluate({"q": ["a", "a"]}, {"q": {"a": 1}})


# --- percentile -----------------------------------------------------------------------------


def test_percentile_linear_interpolation() -> None:
    values = [4.0, 1.0, 3.0, 2.0]  # sorted: 1, 2, 3, 4 at positions 0..3
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    # p50: position 0.5 * 3 = 1.5 -> 2 + (3 - 2) * 0.5 = 2.5
    assert percentile(values, 50) == 2.5
    # p95: position 0.95 * 3 = 2.85 -> 3 + (4 - 3) * 0.85 = 3.85
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile([7.0], 95) == 7.0


def test_percentile_errors() -> None:
    with pytest.raises(InputError, match="no values"):
        percentile([], 50)
    with pytest.raises(InputError, match="between 0 and 100, got 101"):
        percentile([1.0], 101)
    with pytest.raises(InputError, match="between 0 and 100, got -1"):
        percentile([1.0], -1)
    with pytest.raises(InputError, match="NaN"):
        percentile([1.0, math.nan], 50)


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50),
    st.floats(0, 100),
)
def test_percentile_matches_numpy(values: list[float], p: float) -> None:
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), abs=1e-6)


# --- properties -----------------------------------------------------------------------------

_doc_ids = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
_qrels = st.dictionaries(_doc_ids, st.integers(min_value=-1, max_value=4), max_size=12)


@given(_qrels, st.lists(_doc_ids, unique=True, max_size=15), st.integers(1, 20))
def test_ndcg_is_between_zero_and_one(qrels: dict[str, int], ranking: list[str], k: int) -> None:
    value = ndcg_at_k(ranking, qrels, k)
    assert 0.0 <= value <= 1.0
    assert 0.0 <= recall_at_k(ranking, qrels, k) <= 1.0
    assert 0.0 <= mrr_at_k(ranking, qrels, k) <= 1.0


@given(_qrels, st.lists(_doc_ids, max_size=5), st.integers(1, 20))
def test_ndcg_of_ideal_ordering_is_one(qrels: dict[str, int], extra: list[str], k: int) -> None:
    ideal = sorted(qrels, key=lambda doc_id: qrels[doc_id], reverse=True)
    # Unjudged documents after the ideal ranking change nothing.
    ranking = ideal + [doc_id for doc_id in dict.fromkeys(extra) if doc_id not in qrels]
    value = ndcg_at_k(ranking, qrels, k)
    if any(grade > 0 for grade in qrels.values()):
        assert value == 1.0
    else:
        assert value == 0.0


@given(st.dictionaries(_doc_ids, st.integers(-3, 3).map(float), max_size=12))
def test_order_run_is_sorted_and_complete(scores: dict[str, float]) -> None:
    ordered = order_run(scores)
    assert sorted(ordered) == sorted(scores)
    keys = [(scores[doc_id], doc_id) for doc_id in ordered]
    assert keys == sorted(keys, reverse=True)
