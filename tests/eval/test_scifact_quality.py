"""Quality floor on SciFact (slow: run with `make test-slow`). Figures live in bench/RESULTS.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from govrag.eval.runner import run_beir_eval
from govrag.types import Strategy

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact"


@pytest.mark.slow
@pytest.mark.skipif(not SCIFACT.is_dir(), reason=f"SciFact not found at {SCIFACT}")
def test_scifact_keyword_ndcg_floor() -> None:
    figures = run_beir_eval(SCIFACT, strategy=Strategy.KEYWORD)
    assert figures["queries"] == 300
    # BEIR's BM25 reports 0.665 and bm25s 0.686; govrag's analyzer + tantivy must not regress.
    assert figures["ndcg@10"] >= 0.68
