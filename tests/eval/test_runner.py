"""``run_beir_evals``: strategies and extra passes over one store."""

from __future__ import annotations

import json
from pathlib import Path

from govrag.eval.runner import EvalPass, run_beir_evals
from govrag.settings import SearchSettings
from govrag.types import Strategy


def tiny_beir(root: Path) -> Path:
    root.mkdir()
    docs = ["wire transfer limits", "card fraud rules", "wire fraud alerts", "travel policy"]
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs))
    )
    queries = {"q1": "wire limits", "q2": "fraud alerts"}
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    )
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td2\t1\n")
    return root


def test_passes_run_with_their_own_depth_and_settings(tmp_path: Path) -> None:
    silent = SearchSettings(lexical_weight=0.0, vector_weight=0.0)  # fuses nothing
    keyword, default, muted, again = run_beir_evals(
        tiny_beir(tmp_path / "tiny"),
        strategies=[Strategy.KEYWORD],
        embedder="hash",
        passes=[
            EvalPass(Strategy.HYBRID, 1),
            EvalPass(Strategy.HYBRID, 1, silent),
            EvalPass(Strategy.HYBRID, 1),
        ],
    )
    assert (keyword["strategy"], keyword["top_k"]) == ("keyword", 100)
    assert (default["strategy"], default["top_k"]) == ("hybrid", 1)
    assert default["ndcg@10"] > 0
    assert muted["ndcg@10"] == 0 and muted["search"] == {
        "lexical_weight": 0.0,
        "vector_weight": 0.0,
    }
    # The store's own settings are back for the next pass.
    assert again["ndcg@10"] == default["ndcg@10"] and "search" not in again
