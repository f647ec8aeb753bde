"""The SQLite vector leg's 1-bit prefilter beside the exact scan it approximates.

``[search] binary_prefilter_rows`` makes the vector leg rank the allowed rows by the Hamming
distance of their sign codes first and score exactly only ``binary_rescore`` x depth of them
(``govrag/store/vectors.py``). This measures, on the same index and queries, interleaved:
its latency beside the exact scan's (the baseline) and its recall@k against the exact scan
(a hit scoring at least the exact k-th score counts, so ties cannot lower it), at several
``binary_rescore`` values, for half the rows readable and for all of them.

Three vector sets: SciFact's 5,183 documents and 300 test queries embedded with MiniLM (what
the prefilter is for: dense semantic vectors; embedded once, about 7 minutes on 2 cores,
cached under ``bench/out/``); 100,000 passages cut from SciFact's abstracts (sentences,
titles, overlapping runs of two and three sentences) embedded with MiniLM, the same queries
(a shortlist of 400 is then 0.4 % of the rows, not 8 %; embedded once, about 30 minutes);
and the synthetic corpus's 100,000 ``hash`` vectors (the embedder of tests and lexical
deployments; its sign codes say little, so the recall there is the warning ``govrag config
check`` gives).

    .venv/bin/python -m bench.prefilter [--skip-minilm] [--passages N] [--queries N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import synthetic
from bench.common import say
from govrag.eval.metrics import percentile
from govrag.store.binary_codes import BinaryPrefilter
from govrag.store.records import IndexedChunk
from govrag.store.vectors import VectorIndex

OUT_DIR = Path(__file__).resolve().parent / "out"
SCIFACT = Path("/work/shared/data/scifact")
RESCORES = (10, 20, 40, 80)
DEPTHS = (10, 50)
F32 = npt.NDArray[np.float32]


def _index(vectors: F32, halves: bool) -> VectorIndex:
    """Every row readable by ``*``; with ``halves``, every other row by ``me`` only."""
    index = VectorIndex(vectors.shape[1])
    index.replace([], [
        IndexedChunk(i + 1, i + 1, "", ("me",) if halves and i % 2 else ("*",), "c", 0,
                     vector=v)
        for i, v in enumerate(vectors)
    ])  # fmt: skip
    return index


def measure(name: str, vectors: F32, queries: F32) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for readable, tokens in (("50%", ["*"]), ("100%", ["*", "me"])):
        index = _index(vectors, halves=True)
        for depth in DEPTHS:
            args: dict[str, Any] = {"corpora": None, "acl_tokens": tokens,
                                    "max_classification": None, "doc_ids": None,
                                    "limit": depth}  # fmt: skip
            for rescore in RESCORES:
                prefilter = BinaryPrefilter(0, rescore)
                exact_ms: list[float] = []
                fast_ms: list[float] = []
                recall: list[float] = []
                for q in queries:
                    index._memo = None  # white-box: no reuse of the last full product
                    t0 = time.perf_counter()
                    exact = index.search(q, **args)
                    t1 = time.perf_counter()
                    index._memo = None
                    got = index.search(q, **args, prefilter=prefilter)
                    t2 = time.perf_counter()
                    exact_ms.append((t1 - t0) * 1000)
                    fast_ms.append((t2 - t1) * 1000)
                    kth = exact[-1][1] if exact else 0.0
                    recall.append(sum(s >= kth - 1e-6 for _, s in got) / max(1, len(exact)))
                p50, base = percentile(fast_ms, 50), percentile(exact_ms, 50)
                rows.append({
                    "vectors": name, "rows": len(vectors), "readable": readable,
                    "depth": depth, "rescore": rescore,
                    "recall": round(float(np.mean(recall)), 4),
                    "min_recall": round(float(np.min(recall)), 2),
                    "p50_ms": round(p50, 3), "exact_p50_ms": round(base, 3),
                    "ratio": round(p50 / base, 2) if base else None,
                })  # fmt: skip
    return rows


def minilm_scifact(n_queries: int) -> tuple[F32, F32] | None:
    """SciFact's corpus and test queries embedded with MiniLM (cached), or ``None``."""
    if not (SCIFACT / "corpus.jsonl").exists():
        say(f"prefilter: no SciFact at {SCIFACT}; skipping the MiniLM vectors")
        return None
    cache = OUT_DIR / "scifact-minilm.npz"
    if cache.exists():
        data = np.load(cache)
        return data["docs"], data["queries"][:n_queries]
    from govrag.embed import get_embedder
    from govrag.eval.beir import load_beir

    dataset = load_beir(SCIFACT)
    embedder = get_embedder("minilm")
    say(f"prefilter: embedding {len(dataset.corpus)} SciFact documents with MiniLM (once)")
    texts = [f"{d.title} {d.text}".strip() for d in dataset.corpus.values()]
    docs = np.asarray(embedder.embed_documents(texts, batch_size=64), dtype=np.float32)
    queries = np.stack([embedder.embed_query(q) for q in dataset.queries.values()])
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    np.savez(cache, docs=docs, queries=queries.astype(np.float32))
    return docs, queries[:n_queries].astype(np.float32)


def _passages(limit: int) -> list[str]:
    """Up to ``limit`` passages cut from SciFact's abstracts, deterministically: each
    sentence, each title, then each pair and triple of adjacent sentences (chunks that
    overlap, as a chunker with overlap makes them: near neighbours that crowd a shortlist)."""
    import re

    from govrag.eval.beir import load_beir

    split = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
    docs = [(d.title, [s for s in split.split(d.text) if len(s.split()) >= 4])
            for d in load_beir(SCIFACT).corpus.values()]  # fmt: skip
    out = [s for _, sents in docs for s in sents] + [t for t, _ in docs if t]
    for width in (2, 3):
        out += [" ".join(sents[i : i + width]) for _, sents in docs
                for i in range(len(sents) - width + 1)]  # fmt: skip
    return out[:limit]


def minilm_passages(n_queries: int, rows: int) -> tuple[F32, F32] | None:
    """``rows`` SciFact passages embedded with MiniLM (cached in blocks, so an interrupted
    run resumes; about 25 minutes for 100,000 on 2 cores) and SciFact's test queries."""
    if (sets := minilm_scifact(n_queries)) is None:
        return None
    folder = OUT_DIR / "scifact-passages-minilm"
    folder.mkdir(parents=True, exist_ok=True)
    texts = _passages(rows)
    block = 4000
    embedder = None
    parts: list[F32] = []
    for start in range(0, len(texts), block):
        path = folder / f"{start:07d}-{len(texts[start : start + block])}.npy"
        if not path.exists():
            if embedder is None:
                from govrag.embed import get_embedder

                embedder = get_embedder("minilm")
            say(f"prefilter: embedding passages {start:,}-{start + block:,} of {len(texts):,}")
            vecs = embedder.embed_documents(texts[start : start + block], batch_size=64)
            tmp = path.with_suffix(".tmp.npy")
            np.save(tmp, np.asarray(vecs, dtype=np.float32))
            tmp.replace(path)
        parts.append(np.load(path))
    return np.concatenate(parts), sets[1]


def synthetic_hash(n_queries: int) -> tuple[F32, F32]:
    from govrag.embed.hashing import HashEmbedder

    corpus = synthetic.generate(100_000, 0)
    embedder = HashEmbedder(dim=synthetic.EMBED_DIM)
    docs = np.asarray(embedder.embed_documents(corpus.texts, batch_size=1024), np.float32)
    queries = synthetic.make_queries(corpus.vocab, n_queries, 7)
    return docs, np.stack([embedder.embed_query(q) for q in queries]).astype(np.float32)


def run(n_queries: int, *, minilm: bool = True, passages: int = 100_000) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    if minilm and (sets := minilm_scifact(n_queries)) is not None:
        rows += measure("minilm-scifact", *sets)
    if minilm and passages and (sets := minilm_passages(n_queries, passages)) is not None:
        rows += measure("minilm-passages", *sets)
    say("prefilter: the synthetic corpus's hash vectors")
    rows += measure("hash-synthetic", *synthetic_hash(n_queries))
    return {"queries": n_queries, "rows": rows}


def table(result: dict[str, Any]) -> str:
    lines = ["\nVector leg: 1-bit prefilter beside the exact scan (p50 ms over the same queries)",
             f"{'vectors':<15} {'rows':>7} {'read':>5} {'depth':>5} {'rescore':>7} | "
             f"{'recall':>6} {'min':>5} | {'p50':>7} {'exact':>7} {'ratio':>6}"]  # fmt: skip
    for r in result["rows"]:
        lines.append(
            f"{r['vectors']:<15} {r['rows']:>7} {r['readable']:>5} {r['depth']:>5} "
            f"{r['rescore']:>7} | {r['recall']:>6.4f} {r['min_recall']:>5.2f} | "
            f"{r['p50_ms']:>7.3f} {r['exact_p50_ms']:>7.3f} {r['ratio']:>5}x"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m bench.prefilter", description=__doc__,
                                     formatter_class=raw)  # fmt: skip
    parser.add_argument("--queries", type=int, default=300, help="queries per series")
    parser.add_argument("--skip-minilm", action="store_true", help="hash vectors only")
    parser.add_argument("--passages", type=int, default=100_000,
                        help="MiniLM passages from SciFact (0: none)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.queries < 1 or args.passages < 0:
        parser.error("--queries must be >= 1 and --passages >= 0")
    result = run(args.queries, minilm=not args.skip_minilm, passages=args.passages)
    say(table(result))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / "results-prefilter.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
