"""SciFact nDCG@10 with MiniLM queries embedded by ONNX Runtime beside the same with torch.

Run from the repository root::

    .venv/bin/python -m bench.onnx_scifact [--path /work/shared/data/scifact]

The corpus is embedded once, with torch (as ingest does); the same documents are then searched
twice through :func:`govrag.eval.runner.run_beir_evals` (semantic and hybrid), once with query
vectors from the ONNX export and once from torch. Only the query encoder differs, so any gap is
the export's. Prints both figures and writes ``bench/out/results-onnx-scifact.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from govrag.embed.base import FloatArray, ProgressCallback
from govrag.embed.minilm import MiniLMEmbedder
from govrag.eval.runner import run_beir_evals
from govrag.store.sqlite import SQLiteStore
from govrag.types import Strategy

OUT = Path(__file__).resolve().parent / "out"
DEFAULT_PATH = Path("/work/shared/data/scifact")


class _QueryRuntime:
    """MiniLM whose documents are embedded once (memoised) and whose queries go to one runtime."""

    name = "minilm"
    dim = 384

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.runtime = "onnx"
        self._documents: dict[str, FloatArray] = {}

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 64,
        progress: ProgressCallback | None = None,
    ) -> FloatArray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._documents]
        if missing:
            vectors = self.inner.embed_documents(missing, batch_size=batch_size)
            self._documents.update(zip(missing, vectors, strict=True))
        if progress is not None:
            progress(len(texts))
        return np.stack([self._documents[t] for t in texts]) if texts else np.zeros((0, 384))

    def embed_query(self, text: str) -> FloatArray:
        if self.runtime == "onnx":
            encoder = self.inner.query_encoder()
            assert encoder is not None, "the ONNX query encoder is unavailable"
            vector: FloatArray = encoder.encode([text])[0]
            return vector
        torch_vector: FloatArray = self.inner._encode([text], 1)[0]
        return torch_vector


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH)
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="govrag-onnx-scifact-") as tmp:
        embedder = _QueryRuntime(MiniLMEmbedder(cache_dir=Path(tmp) / ".govrag"))
        store = SQLiteStore(Path(tmp) / "eval.db", index_dir=Path(tmp) / "index", embedder=embedder)
        try:
            for runtime in ("onnx", "torch"):  # ONNX first: its export happens at ingest
                embedder.runtime = runtime
                started = time.perf_counter()
                figures = run_beir_evals(
                    args.path,
                    strategies=[Strategy.SEMANTIC, Strategy.HYBRID],
                    store=store,
                    progress=lambda m: print(f"  {m}", flush=True),
                )
                for strategy, row in zip(("semantic", "hybrid"), figures, strict=True):
                    rows[f"{strategy} ({runtime} queries)"] = row
                print(f"{runtime}: {time.perf_counter() - started:.0f} s", flush=True)
        finally:
            store.close()
    print(f"{'system':<28} {'nDCG@10':>8} {'R@100':>7} {'MRR@10':>7} {'p50 ms':>7}")
    for name, row in rows.items():
        print(
            f"{name:<28} {row['ndcg@10']:>8.4f} {row['recall@100']:>7.4f} "
            f"{row['mrr@10']:>7.4f} {row['p50_ms']:>7.2f}"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results-onnx-scifact.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
