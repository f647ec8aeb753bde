"""``make bench``: govrag's figures, each beside a baseline measured in the same run.

Run from the repository root::

    .venv/bin/python -m bench.run [--only NAME] [--chunks N] [--queries N] [--skip-minilm]
                                  [--pg-chunks N]

(NAME: scifact, synthetic, postgres, pdp, governed, gateway, writeback, ingest, http, mcp)

Without ``--only``, SciFact and the synthetic corpus on SQLite run; the PostgreSQL benchmark
(``bench/postgres.py``: a 1M-chunk load the first time) runs only with ``--only postgres``.

Prints the tables and writes every figure to ``bench/out/results.json``. See bench/README.md
for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from bench import scifact, synthetic
from bench.baseline import Access, Baseline
from bench.common import TOP_K, WARMUP, System, ratio, say, time_interleaved
from govrag.eval.metrics import percentile
from govrag.types import Strategy

OUT_DIR = Path(__file__).resolve().parent / "out"
#: Latency targets printed beside govrag's figures.
KEYWORD_P50_MS = 5.0
HYBRID_P50_MS = 20.0
HYBRID_VS_UNFILTERED = 1.5
#: The hidden-item marker's cost: p50 with it over p50 without, at most (issue 33).
MARKER_COST = 1.2
STRATEGIES = (Strategy.KEYWORD, Strategy.SEMANTIC, Strategy.HYBRID)
#: The benchmarks whose ``--only`` run writes its figures to a file of its own.
OWN_FILE = ("postgres", "pdp", "governed", "gateway", "writeback", "ingest", "http", "mcp")


def baseline_system(
    baseline: Baseline, strategy: Strategy, access: Access | None, *, topk: bool = False
) -> System:
    def search(query: str) -> tuple[list[int], bool]:
        return baseline.search(strategy, query, access, topk=topk), False

    return search


def overlap_at_k(a: list[list[int]], b: list[list[int]]) -> float:
    """Mean |A ∩ B| / max(|A|, |B|) over queries (1.0 when both are empty)."""
    values = [
        len(set(x) & set(y)) / max(len(x), len(y)) if x or y else 1.0
        for x, y in zip(a, b, strict=True)
    ]
    return round(statistics.fmean(values), 4)


# -- synthetic benchmark -------------------------------------------------------------------------
def run_synthetic(n_docs: int, n_queries: int, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    corpus = synthetic.generate(n_docs, seed)
    say(f"synthetic: generated {n_docs} docs in {time.perf_counter() - started:.1f}s")
    root, build, cached = synthetic.cached_store(corpus, OUT_DIR, say)
    verb = "reusing cached store" if cached else "built store"
    say(
        f"synthetic: {verb} {root} (build {build['build_s']}s: ingest {build['ingest_s']}s, "
        f"indexes {build['index_s']}s)"
    )
    queries = synthetic.make_queries(corpus.vocab, n_queries, seed)

    say("synthetic: indexing baselines (bm25s, numpy)")
    baseline = Baseline(corpus.texts)
    say(f"  bm25s indexed in {baseline.bm25_s:.1f}s, vectors embedded in {baseline.embed_s:.1f}s")

    stores = {
        "marker": synthetic.open_store(root, hidden_marker=True),
        "no_marker": synthetic.open_store(root, hidden_marker=False),
    }
    for store in stores.values():
        t0 = time.perf_counter()
        store.sync_indexes(synthetic.TENANT)  # load the vector index outside any timing
        say(f"  opened {store.path} and loaded its indexes in {time.perf_counter() - t0:.1f}s")

    probes: dict[str, Any] = {}
    try:
        for probe in corpus.probes:
            mask = synthetic.readable_mask(corpus, probe)
            access = Access(weights=mask.astype(np.float32), allowed=mask)
            principal = probe.principal()
            say(
                f"synthetic: probe {probe.email}: target {probe.target:.0%}, measured "
                f"{mask.mean():.2%} ({int(mask.sum())} docs)"
            )
            rows: dict[str, Any] = {}
            for strategy in STRATEGIES:
                series = time_interleaved(
                    {
                        "govrag": synthetic.search_system(stores["marker"], principal, strategy),
                        "no_marker": synthetic.search_system(
                            stores["no_marker"], principal, strategy
                        ),
                        "masked": baseline_system(baseline, strategy, access),
                        "masked_topk": baseline_system(baseline, strategy, access, topk=True),
                        "unfiltered": baseline_system(baseline, strategy, None),
                    },
                    queries,
                )
                gov, plain = series["govrag"], series["no_marker"]
                masked, unfiltered = series["masked"], series["unfiltered"]
                readable = set(np.flatnonzero(mask).tolist())
                rows[str(strategy)] = {
                    "govrag": gov.summary(),
                    "govrag_no_marker": plain.summary(),
                    "baseline_masked": masked.summary(),
                    "baseline_unfiltered": unfiltered.summary(),
                    "baseline_masked_topk": series["masked_topk"].summary(),
                    "ratio_vs_masked_p50": ratio(percentile(gov.ms, 50), percentile(masked.ms, 50)),
                    "ratio_vs_masked_topk_p50": ratio(
                        percentile(gov.ms, 50), percentile(series["masked_topk"].ms, 50)
                    ),
                    "ratio_vs_unfiltered_p50": ratio(
                        percentile(gov.ms, 50), percentile(unfiltered.ms, 50)
                    ),
                    "no_marker_ratio_vs_masked_p50": ratio(
                        percentile(plain.ms, 50), percentile(masked.ms, 50)
                    ),
                    "marker_cost_p50": ratio(percentile(gov.ms, 50), percentile(plain.ms, 50)),
                    "overlap@10_vs_masked": overlap_at_k(gov.docs, masked.docs),
                    "hidden_marker_rate": round(statistics.fmean(gov.hidden), 3),
                    "mean_hits": round(statistics.fmean(len(d) for d in gov.docs), 2),
                    # Defence-in-depth check of the benchmark itself: a govrag hit the brute
                    # force says the probe cannot read would be an access-control failure.
                    "acl_violations": sum(d not in readable for docs in gov.docs for d in docs),
                }
                say(f"  {strategy}: done")
            probes[probe.name] = {
                "email": probe.email,
                "target_fraction": probe.target,
                "measured_fraction": round(float(mask.mean()), 5),
                "readable_docs": int(mask.sum()),
                "direct_groups": [synthetic.group_id(g) for g in probe.groups],
                "strategies": rows,
            }
    finally:
        for store in stores.values():
            store.close()
    return {
        "n_docs": n_docs,
        "n_queries": n_queries,
        "seed": seed,
        "store": str(root),
        "cached": cached,
        "build": build,
        "baseline_index_s": {
            "bm25s": round(baseline.bm25_s, 2),
            "numpy_embed": round(baseline.embed_s, 2),
        },
        "example_queries": queries[:5],
        "probes": probes,
    }


def _at_most(value: float | None, bound: float) -> str:
    return "ok" if value is not None and value <= bound else "MISS"


def _verdicts(strategy: str, row: dict[str, Any]) -> str:
    p50 = row["govrag"]["p50_ms"]
    # Issue 33: keyword and hybrid at most the masked baselines (bm25s as documented, and at
    # its fastest), the marker at most 1.2x a search without it.
    mark = _at_most(row["marker_cost_p50"], MARKER_COST)
    versus = (f"<=1x masked {_at_most(row['ratio_vs_masked_p50'], 1.0)}, "
              f"<=1x top-k {_at_most(row['ratio_vs_masked_topk_p50'], 1.0)}; "
              f"mark<={MARKER_COST:g}x {mark}")  # fmt: skip
    if strategy == "keyword":
        return f"p50<={KEYWORD_P50_MS:g}ms {_at_most(p50, KEYWORD_P50_MS)}; {versus}"
    if strategy == "hybrid":
        within = row["ratio_vs_unfiltered_p50"]
        return (
            f"p50<={HYBRID_P50_MS:g}ms {_at_most(p50, HYBRID_P50_MS)}; "
            f"<={HYBRID_VS_UNFILTERED:g}x unfilt {_at_most(within, HYBRID_VS_UNFILTERED)}; "
            f"{versus}"
        )
    return ""


def synthetic_tables(result: dict[str, Any]) -> str:
    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    header = (
        f"{'strategy':<9}| {'govrag p50':>10} {'p95':>7} {'/masked':>8} {'/unfilt':>8} "
        f"| {'no-mark p50':>11} {'p95':>7} {'/masked':>8} {'mark cost':>9} "
        f"| {'masked p50':>10} {'p95':>7} | {'top-k p50':>9} {'/top-k':>7} "
        f"| {'unfilt p50':>10} {'p95':>7} | {'ovl@10':>6} {'viol':>4} | targets"
    )
    out: list[str] = []
    for name, probe in result["probes"].items():
        out.append("")
        out.append(
            f"Selectivity {probe['target_fraction']:.0%} ({name}, {probe['email']}): measured "
            f"{probe['measured_fraction']:.2%} = {probe['readable_docs']} of {result['n_docs']} "
            f"docs; direct groups {', '.join(probe['direct_groups'])}"
        )
        out.append(header)
        out.append("-" * len(header))
        for strategy, row in probe["strategies"].items():
            g, p = row["govrag"], row["govrag_no_marker"]
            m, u = row["baseline_masked"], row["baseline_unfiltered"]
            out.append(
                f"{strategy:<9}| {g['p50_ms']:>10.2f} {g['p95_ms']:>7.2f} "
                f"{x(row['ratio_vs_masked_p50']):>8} {x(row['ratio_vs_unfiltered_p50']):>8} "
                f"| {p['p50_ms']:>11.2f} {p['p95_ms']:>7.2f} "
                f"{x(row['no_marker_ratio_vs_masked_p50']):>8} {x(row['marker_cost_p50']):>9} "
                f"| {m['p50_ms']:>10.2f} {m['p95_ms']:>7.2f} "
                f"| {row['baseline_masked_topk']['p50_ms']:>9.2f} "
                f"{x(row['ratio_vs_masked_topk_p50']):>7} | {u['p50_ms']:>10.2f} "
                f"{u['p95_ms']:>7.2f} | {row['overlap@10_vs_masked']:>6.3f} "
                f"{row['acl_violations']:>4} | {_verdicts(strategy, row)}"
            )
    return "\n".join(out)


# -- entry point ---------------------------------------------------------------------------------
def _environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for dist in ("govrag", "numpy", "bm25s", "tantivy", "sentence-transformers", "torch"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    # Thread settings are recorded, never changed: the figures are for the machine as it is.
    threads = {
        k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions,
        "thread_env": threads,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument(
        "--only",
        choices=("scifact", "synthetic", *OWN_FILE),
        help="run one benchmark",
    )
    parser.add_argument("--chunks", type=int, default=100_000, help="synthetic corpus size")
    parser.add_argument("--queries", type=int, default=200, help="synthetic queries per series")
    parser.add_argument("--seed", type=int, default=0, help="synthetic generator seed")
    parser.add_argument(
        "--skip-minilm", action="store_true", help="SciFact: keyword only (no MiniLM embedding)"
    )
    parser.add_argument(
        "--scifact", type=Path, default=scifact.DEFAULT_PATH, help="SciFact directory (BEIR)"
    )
    parser.add_argument(
        "--gov-chunks", type=int, default=20_000, help="governed-search benchmark store size"
    )
    parser.add_argument(
        "--pg-chunks", type=int, default=1_000_000, help="PostgreSQL corpus size (chunks)"
    )
    parser.add_argument(
        "--pg-load-workers", type=int, default=2, help="PostgreSQL: processes loading documents"
    )
    parser.add_argument(
        "--pg-sqlite-chunks",
        type=int,
        default=100_000,
        help="PostgreSQL: size of the SQLite store timed beside it (0: none)",
    )
    parser.add_argument("--http-clients", type=int, default=8, help="HTTP load: clients")
    parser.add_argument(
        "--http-requests", type=int, default=400, help="HTTP load: requests per path per round"
    )
    parser.add_argument("--http-rounds", type=int, default=2, help="HTTP load: rounds")
    parser.add_argument("--http-workers", type=int, default=2, help="HTTP load: server processes")
    parser.add_argument(
        "--mcp-calls", type=int, default=300, help="MCP latency: calls per path per round"
    )
    parser.add_argument("--mcp-rounds", type=int, default=2, help="MCP latency: rounds")
    args = parser.parse_args(argv)
    if min(args.http_clients, args.http_requests, args.http_rounds, args.http_workers) < 1:
        parser.error(
            "--http-clients, --http-requests, --http-rounds and --http-workers must be >= 1"
        )
    if min(args.mcp_calls, args.mcp_rounds) < 1:
        parser.error("--mcp-calls and --mcp-rounds must be >= 1")
    if args.chunks < 100 or args.gov_chunks < 100 or args.queries < WARMUP:
        parser.error(f"--chunks and --gov-chunks must be >= 100 and --queries >= {WARMUP}")
    if args.pg_chunks < 100 or args.pg_load_workers < 1 or args.pg_sqlite_chunks < 0:
        parser.error("--pg-chunks must be >= 100, --pg-load-workers >= 1, --pg-sqlite-chunks >= 0")
    if 0 < args.pg_sqlite_chunks < 100:
        parser.error("--pg-sqlite-chunks must be 0 or >= 100")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": _environment(), "args": _jsonable(vars(args))}
    printed: list[Callable[[], None]] = []
    started = time.perf_counter()

    if args.only in (None, "scifact"):
        sci = scifact.run(args.scifact, skip_minilm=args.skip_minilm, say=say)
        results["scifact"] = sci
        if sci is not None:
            printed.append(lambda: say("\nSciFact (test split)\n" + scifact.table(sci)))
    if args.only in (None, "synthetic"):
        syn = run_synthetic(args.chunks, args.queries, args.seed)
        results["synthetic"] = syn
        printed.append(
            lambda: say(
                f"\nSynthetic enterprise corpus: {syn['n_docs']} chunks, {syn['n_queries']} "
                f"queries, top-{TOP_K}; latencies in ms; /masked and /unfilt are govrag p50 over "
                "the baseline p50; mark cost is p50 with / without the hidden-item marker"
                + synthetic_tables(syn)
            )
        )

    if args.only in (None, "pdp"):
        from bench import pdp

        decisions = pdp.run()
        results["pdp"] = decisions
        printed.append(lambda: say(pdp.table(decisions)))

    if args.only in (None, "governed"):
        from bench import governed

        gov = governed.run(args.gov_chunks, args.queries, args.seed, say)
        results["governed"] = gov
        printed.append(lambda: say(governed.table(gov)))

    if args.only in (None, "gateway"):
        from bench import gateway

        gw = gateway.run(args.chunks, args.queries, args.seed, OUT_DIR, say)
        results["gateway"] = gw
        printed.append(lambda: say(gateway.table(gw)))

    if args.only in (None, "writeback"):
        from bench import writeback

        wb = writeback.run(say)
        results["writeback"] = wb
        printed.append(lambda: say(writeback.table(wb)))

    if args.only in (None, "ingest"):
        from bench import ingest

        ing = ingest.run(20_000, 1_000, args.seed, say, minilm=not args.skip_minilm)
        results["ingest"] = ing
        printed.append(lambda: say(ingest.table(ing)))

    if args.only in (None, "http"):
        from bench import http_load

        load = http_load.run(args.chunks, args.http_clients, args.http_requests,
                             args.http_rounds, args.seed, OUT_DIR, say,
                             workers=args.http_workers)  # fmt: skip
        results["http"] = load
        printed.append(lambda: say(http_load.table(load)))

    if args.only in (None, "mcp"):
        from bench import mcp_latency

        tool_calls = mcp_latency.run(args.gov_chunks, args.mcp_calls, args.mcp_rounds,
                                     args.seed, OUT_DIR, say)  # fmt: skip
        results["mcp"] = tool_calls
        printed.append(lambda: say(mcp_latency.table(tool_calls)))

    if args.only == "postgres":
        # Imported here: it needs the `postgres` extra and the test server helper.
        from bench import postgres

        pg = postgres.run(
            args.pg_chunks,
            args.queries,
            args.seed,
            OUT_DIR,
            load_workers=args.pg_load_workers,
            sqlite_chunks=args.pg_sqlite_chunks,
        )
        results["postgres"] = pg
        printed.append(
            lambda: say(
                f"\nPostgreSQL, synthetic enterprise corpus: {pg['n_docs']} chunks, "
                f"{pg['n_queries']} queries, top-{TOP_K}; latencies in ms; /no-acl is pg p50 over "
                "the same search without the access predicate; acl cost is no-mark p50 over "
                "no-acl p50; mark cost is p50 with / without the hidden-item marker\n"
                + postgres.describe_build(pg)
                + postgres.tables(pg)
            )
        )

    results["total_s"] = round(time.perf_counter() - started, 1)
    for show in printed:
        show()
    # A single benchmark's figures go to their own file, so they do not replace the full run's.
    own_file = args.only in OWN_FILE
    path = OUT_DIR / (f"results-{args.only}.json" if own_file else "results.json")
    path.write_text(json.dumps(results, indent=2) + "\n")
    say(f"\nwrote {path} (total {results['total_s']}s)")
    return 0


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}


if __name__ == "__main__":
    raise SystemExit(main())
