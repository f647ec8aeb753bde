"""A million chunks on the embedded default (SQLite): latency, the 1-bit prefilter, memory.

Issue 33's item 3. The synthetic enterprise corpus at 1,000,000 chunks (``bench/synthetic.py``,
built once and cached under ``bench/out/``: about 12 minutes on 2 cores) is opened twice: once
searching vectors exactly (the baseline) and once with the 1-bit prefilter
(``[search] binary_prefilter_rows``), and both are timed interleaved, query by query, at 1, 10
and 50 % of the corpus readable, in each strategy. Beside each prefilter figure: the exact
store's in the same run, and how many of the exact top-10 the prefilter found (recall@10).

The corpus's vectors are the ``hash`` embedder's (embedding a million chunks with MiniLM would
take days here), whose 1-bit codes rank poorly: the latency here is the prefilter's, its
recall on dense vectors is ``bench/prefilter.py``'s (100,000 MiniLM passages).

Memory is measured in a child process that only opens one store and searches (the parent holds
two): its peak resident set beside the bytes of the float32 vectors it must hold.

    .venv/bin/python -m bench.million [--chunks 1000000] [--queries 100] [--prefilter-rows N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import synthetic
from bench.common import TOP_K, ratio, say, time_interleaved
from govrag.embed.hashing import HashEmbedder
from govrag.eval.metrics import percentile
from govrag.settings import SearchSettings
from govrag.store.sqlite import SQLiteStore
from govrag.types import Principal, Strategy

OUT_DIR = Path(__file__).resolve().parent / "out"
STRATEGIES = (Strategy.KEYWORD, Strategy.SEMANTIC, Strategy.HYBRID)
#: Issue 33's targets at 10 % readable (p50, ms).
TARGETS = {Strategy.KEYWORD: 15.0, Strategy.HYBRID: 25.0}


def open_store(root: Path, prefilter_rows: int) -> SQLiteStore:
    return SQLiteStore(
        root / "govrag.db",
        index_dir=root / "index",
        embedder=HashEmbedder(dim=synthetic.EMBED_DIM),
        search=SearchSettings(binary_prefilter_rows=prefilter_rows),
    )


def _recall(found: list[list[int]], exact: list[list[int]]) -> float:
    """Mean share of the exact top-k that ``found`` also returned."""
    return round(statistics.fmean(
        len(set(f) & set(e)) / len(e) if e else 1.0 for f, e in zip(found, exact, strict=True)
    ), 4)  # fmt: skip


def _opened(root: Path, prefilter_rows: int) -> tuple[SQLiteStore, float]:
    t0 = time.perf_counter()
    store = open_store(root, prefilter_rows)
    store.sync_indexes(synthetic.TENANT)  # load the vector index outside any timing
    return store, time.perf_counter() - t0


def run(n_docs: int, n_queries: int, seed: int, prefilter_rows: int) -> dict[str, Any]:
    corpus = synthetic.generate(n_docs, seed)
    root, build, cached = synthetic.cached_store(corpus, OUT_DIR, say)
    queries = synthetic.make_queries(corpus.vocab, n_queries, seed)
    exact, exact_open_s = _opened(root, 0)
    fast, _ = _opened(root, prefilter_rows)
    say(f"million: opened {root} twice; loading one took {exact_open_s:.1f}s")
    probes: dict[str, Any] = {}
    try:
        for probe in corpus.probes:
            mask = synthetic.readable_mask(corpus, probe)
            readable = set(np.flatnonzero(mask).tolist())
            principal = probe.principal()
            rows: dict[str, Any] = {}
            for strategy in STRATEGIES:
                series = time_interleaved({
                    "exact": synthetic.search_system(exact, principal, strategy),
                    "prefilter": synthetic.search_system(fast, principal, strategy),
                }, queries)  # fmt: skip
                a, b = series["exact"], series["prefilter"]
                rows[str(strategy)] = {
                    "exact": a.summary(), "prefilter": b.summary(),
                    "ratio_p50": ratio(percentile(b.ms, 50), percentile(a.ms, 50)),
                    "recall@10": _recall(b.docs, a.docs),
                    "acl_violations": sum(d not in readable for s in (a, b)
                                          for docs in s.docs for d in docs),
                }  # fmt: skip
            say(f"million: probe {probe.email} ({mask.mean():.2%} readable) done")
            probes[probe.name] = {"fraction": round(float(mask.mean()), 5),
                                  "readable_docs": int(mask.sum()), "strategies": rows}  # fmt: skip
    finally:
        exact.close()
        fast.close()
    return {"n_docs": n_docs, "n_queries": n_queries, "seed": seed,
            "prefilter_rows": prefilter_rows, "store": str(root), "cached": cached,
            "build": build, "open_s": round(exact_open_s, 1), "probes": probes,
            "footprint": footprint(root, queries, [p.principal() for p in corpus.probes],
                                   prefilter_rows)}  # fmt: skip


def footprint(
    root: Path, queries: list[str], principals: list[Principal], prefilter_rows: int
) -> dict[str, Any]:
    """Peak memory of a process that opens one store and searches: a child of this one,
    given the store, the queries and the probes' principals (it builds no corpus, so what
    it holds is the store's)."""
    say("million: measuring one store's memory in a child process")
    job = {"root": str(root), "queries": queries, "prefilter_rows": prefilter_rows,
           "principals": [p.model_dump(mode="json") for p in principals]}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "bench.million", "--child"], input=json.dumps(job),
        check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    info = json.loads((root / "build.json").read_text())
    vectors = int(info["n_docs"]) * synthetic.EMBED_DIM * 4
    result |= {"vectors_mb": vectors // 2**20,
               "peak_vs_vectors": ratio(result["peak_mb"] * 2**20, vectors),
               "db_mb": int(info["db_bytes"]) // 2**20,
               "index_mb": int(info["index_bytes"]) // 2**20}  # fmt: skip
    return result


def _child(job: dict[str, Any]) -> dict[str, Any]:
    before = _resident_bytes()
    store, open_s = _opened(Path(job["root"]), int(job["prefilter_rows"]))
    after_open = _peak_bytes()
    resident_open = _resident_bytes()
    try:
        for data in job["principals"]:
            principal = Principal.model_validate(data)
            for strategy in STRATEGIES:
                search = synthetic.search_system(store, principal, strategy)
                for q in job["queries"]:
                    search(q)
        resident_searched = _resident_bytes()
    finally:
        store.close()
    return {"open_s": round(open_s, 1), "resident_before_open_mb": before // 2**20,
            "peak_after_open_mb": after_open // 2**20, "peak_mb": _peak_bytes() // 2**20,
            "resident_after_open_mb": resident_open // 2**20,
            "resident_after_searches_mb": resident_searched // 2**20}  # fmt: skip


def _peak_bytes() -> int:
    """This process's peak resident set (Linux's VmHWM: since its last exec, unlike
    ``ru_maxrss``, which a child started by a large parent inherits)."""
    return _status("VmHWM")


def _resident_bytes() -> int:
    """Resident now (Linux), after a collection."""
    import gc

    gc.collect()
    return _status("VmRSS")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status: memory figures need Linux")


def table(result: dict[str, Any]) -> str:
    lines = [
        f"\n{result['n_docs']:,} chunks on SQLite, {result['n_queries']} queries, top-{TOP_K}; "
        f"p50/p95 ms; prefilter = binary_prefilter_rows {result['prefilter_rows']:,}, "
        "recall@10 against the exact store",
        f"{'readable':>8} {'strategy':<8} | {'exact p50':>9} {'p95':>7} | {'prefilt p50':>11} "
        f"{'p95':>7} {'ratio':>6} {'recall':>7} {'viol':>4} | target",
    ]
    for probe in result["probes"].values():
        for name, row in probe["strategies"].items():
            target = TARGETS.get(Strategy(name)) if abs(probe["fraction"] - 0.1) < 0.01 else None
            verdict = ""
            if target is not None:
                best = min(row["exact"]["p50_ms"], row["prefilter"]["p50_ms"])
                verdict = f"p50<={target:g}ms {'ok' if best <= target else 'MISS'}"
            lines.append(
                f"{probe['fraction']:>8.2%} {name:<8} | {row['exact']['p50_ms']:>9.2f} "
                f"{row['exact']['p95_ms']:>7.2f} | {row['prefilter']['p50_ms']:>11.2f} "
                f"{row['prefilter']['p95_ms']:>7.2f} {row['ratio_p50']:>5}x "
                f"{row['recall@10']:>7.3f} {row['acl_violations']:>4} | {verdict}"
            )
    f = result["footprint"]
    b = result["build"]
    lines += [
        f"build {b['build_s']}s (ingest {b['ingest_s']}s, indexes {b['index_s']}s); database "
        f"{f['db_mb']:,} MB, lexical index {f['index_mb']:,} MB",
        f"one store: opened and loaded in {f['open_s']}s; peak resident {f['peak_mb']:,} MB "
        f"= {f['peak_vs_vectors']}x its float32 vectors ({f['vectors_mb']:,} MB); resident "
        f"{f['resident_before_open_mb']:,} MB before opening, {f['resident_after_open_mb']:,} "
        f"MB after, {f['resident_after_searches_mb']:,} MB after the searches",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m bench.million", description=__doc__,
                                     formatter_class=raw)  # fmt: skip
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=100, help="queries per series")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefilter-rows", type=int, default=50_000,
                        help="the prefilter's [search] binary_prefilter_rows")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.chunks < 1000 or args.queries < 1 or args.prefilter_rows < 1:
        parser.error("--chunks must be >= 1000, --queries and --prefilter-rows >= 1")
    if args.child:  # the job on stdin (see footprint)
        print(json.dumps(_child(json.loads(sys.stdin.read()))))
        return 0
    result = run(args.chunks, args.queries, args.seed, args.prefilter_rows)
    say(table(result))
    path = OUT_DIR / "results-million.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
