"""Retrieval quality on SciFact: govrag's governed search path beside bm25s on the same corpus.

govrag is measured through :func:`govrag.eval.runner.run_beir_eval` (every query goes through
``store.search``, ACL pre-filter included). The baselines are bm25s indexes built here, in the
same run, over the same documents (title + " " + text):

* ``bm25s same tokens`` -- fed govrag's own analyzer output pre-tokenized, with tantivy's BM25
  parameters (k1=1.2, b=0.75, Lucene idf), so any quality gap is govrag's search path, not
  tokenization;
* ``bm25s stock k1=...`` -- bm25s's own tokenizer, English stopwords and PyStemmer stemming,
  the configuration its authors publish SciFact figures for.

All figures come from :func:`govrag.eval.metrics.evaluate` on the test qrels, and latencies
include query tokenization, as govrag's include query analysis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer

from govrag.eval.beir import BeirDataset, load_beir
from govrag.eval.metrics import evaluate, percentile
from govrag.eval.runner import EvalPass, run_beir_eval, run_beir_evals
from govrag.settings import SearchSettings
from govrag.store.analyzer import default_analyzer
from govrag.types import Strategy

Say = Callable[[str], None]

DEFAULT_PATH = Path("/work/shared/data/scifact")
TOP_K = 100
#: The depth of the top-10 passes, and the vector leg's depth when it is not cut.
TOP_10 = 10
UNCUT = SearchSettings().fusion_depth
#: Quality targets printed beside govrag's figures (nDCG@10).
TARGETS = {"keyword": 0.68, "hybrid": 0.70}


def _ranked(result: Any, doc_ids: list[str]) -> list[str]:
    """Document ids of a one-query bm25s result, dropping zero scores.

    A zero score means no query term matched (bm25s still fills the top-k with arbitrary
    documents then); they would only add noise to recall.
    """
    indices = np.asarray(result.documents)[0]
    scores = np.asarray(result.scores)[0]
    return [doc_ids[int(i)] for i, s in zip(indices, scores, strict=True) if s > 0]


def _run_bm25s(
    retriever: bm25s.BM25,
    data: BeirDataset,
    doc_ids: list[str],
    tokenize: Callable[[str], list[str]],
) -> dict[str, Any]:
    """Run every test query through ``tokenize`` + ``retriever``; figures like govrag's."""
    run: dict[str, list[str]] = {}
    latencies: list[float] = []
    for qid, text in data.queries.items():
        t0 = time.perf_counter()
        tokens = tokenize(text)
        if tokens:
            result = retriever.retrieve([tokens], k=TOP_K, show_progress=False)
            ranking = _ranked(result, doc_ids)
        else:
            ranking = []
        latencies.append((time.perf_counter() - t0) * 1000)
        run[qid] = ranking
    figures = evaluate(run, data.qrels)
    return {
        "ndcg@10": round(figures["ndcg@10"], 4),
        "recall@100": round(figures["recall@100"], 4),
        "mrr@10": round(figures["mrr@10"], 4),
        "p50_ms": round(percentile(latencies, 50), 3),
        "p95_ms": round(percentile(latencies, 95), 3),
    }


def baselines(path: Path, say: Say) -> dict[str, dict[str, Any]]:
    """bm25s with govrag's tokens, and bm25s stock at k1=1.2 and k1=1.5."""
    data = load_beir(path, "test")
    doc_ids = list(data.corpus)
    texts = [f"{d.title} {d.text}" for d in data.corpus.values()]
    out: dict[str, dict[str, Any]] = {}

    analyzer = default_analyzer()
    started = time.perf_counter()
    same = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    same.index([analyzer.analyze(t) for t in texts], show_progress=False)
    say(f"  bm25s (govrag tokens) indexed in {time.perf_counter() - started:.1f}s")
    out["bm25s same tokens"] = _run_bm25s(same, data, doc_ids, analyzer.analyze)

    stemmer = Stemmer.Stemmer("english")
    corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)

    def stock_tokens(text: str) -> list[str]:
        tokens: list[list[str]] = bm25s.tokenize(
            [text], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )
        return tokens[0]

    for k1 in (1.2, 1.5):
        stock = bm25s.BM25(k1=k1, b=0.75, method="lucene")
        stock.index(corpus_tokens, show_progress=False)
        out[f"bm25s stock k1={k1}"] = _run_bm25s(stock, data, doc_ids, stock_tokens)
    return out


def run(path: Path, *, skip_minilm: bool, say: Say) -> dict[str, Any] | None:
    """Every SciFact figure, or None (with a message) when the dataset is absent."""
    if not (path / "corpus.jsonl").is_file():
        say(f"SciFact not found at {path} (no corpus.jsonl); skipping the quality benchmark")
        return None
    rows: dict[str, dict[str, Any]] = {}
    say("SciFact: bm25s baselines")
    rows.update(baselines(path, say))

    say("SciFact: govrag keyword")
    started = time.perf_counter()
    figures = run_beir_eval(path, strategy=Strategy.KEYWORD, progress=lambda m: say(f"  {m}"))
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    rows["govrag keyword"] = figures
    if not skip_minilm:
        # One store for both dense strategies: the corpus is embedded with MiniLM once.
        say("SciFact: govrag semantic and hybrid (minilm)")
        started = time.perf_counter()
        # Then a top-10 hybrid, as a caller asking for 10 gets it, with the vector leg cut
        # before fusion at the default `search.vector_fusion_depth` and, as the baseline, at
        # `fusion_depth` (no cut). At TOP_K the cut does not apply (it is never below top_k).
        dense = run_beir_evals(
            path,
            strategies=[Strategy.SEMANTIC, Strategy.HYBRID],
            embedder="minilm",
            progress=lambda m: say(f"  {m}"),
            passes=[
                EvalPass(Strategy.HYBRID, TOP_10),
                EvalPass(Strategy.HYBRID, TOP_10, SearchSettings(vector_fusion_depth=UNCUT)),
            ],
        )
        wall = round(time.perf_counter() - started, 1)
        names = [
            "govrag semantic (minilm)",
            "govrag hybrid (minilm)",
            f"govrag hybrid@10 vec {SearchSettings().vector_fusion_depth}",
            f"govrag hybrid@10 vec {UNCUT}",
        ]
        for name, figures in zip(names, dense, strict=True):
            figures["wall_s_all_dense"] = wall
            rows[name] = figures

    reference = rows["bm25s same tokens"]["ndcg@10"]
    for name, row in rows.items():
        row["ndcg_ratio_vs_bm25s_same_tokens"] = (
            round(row["ndcg@10"] / reference, 3) if reference else None
        )
        kind = name.split()[1] if name.startswith("govrag") else ""
        row["target_ndcg@10"] = TARGETS.get(kind)
    return {"path": str(path), "split": "test", "rows": rows}


def table(result: dict[str, Any]) -> str:
    """The SciFact figures as a plain-text table."""
    header = (
        f"{'system':<26} {'nDCG@10':>8} {'R@100':>7} {'MRR@10':>7} {'p50 ms':>8} "
        f"{'p95 ms':>8} {'nDCG/bm25s':>10}  target"
    )
    lines = [header, "-" * len(header)]
    for name, row in result["rows"].items():
        target = row.get("target_ndcg@10")
        verdict = ""
        if target is not None:
            verdict = f">= {target:.2f} {'ok' if row['ndcg@10'] >= target else 'MISS'}"
        ratio = row.get("ndcg_ratio_vs_bm25s_same_tokens")
        # Recall@100 of a top-10 run says nothing.
        recall = f"{row['recall@100']:.4f}" if row.get("top_k", TOP_K) >= TOP_K else "-"
        lines.append(
            f"{name:<26} {row['ndcg@10']:>8.4f} {recall:>7} {row['mrr@10']:>7.4f} "
            f"{row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} "
            f"{'' if ratio is None else f'{ratio:.3f}':>10}  {verdict}"
        )
    return "\n".join(lines)
