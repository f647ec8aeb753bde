"""Latency of each retrieval strategy beside ``hybrid``, on the synthetic corpus (100k chunks).

Every strategy searches the same cached store as the same principals, interleaved query by
query (``common.time_interleaved``), so each figure's ratio to ``hybrid`` is measured in the
same run on the same machine state. The issue's bound: the graph leg adds at most 30 % to
hybrid's p50.

The synthetic documents are random words: they hold no glossary entity, identifier or
defined term and no ``supersedes``, so this measures what the strategies cost on top of
``hybrid`` when they find nothing to act on (the graph leg still extracts the question and
looks its phrases up under the ACL; ``temporal`` still reads the candidates' versions), not
their cost on an entity-dense corpus.

    .venv/bin/python -m bench.strategy_latency [--chunks 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench import synthetic
from bench.common import ratio, say, time_interleaved
from govrag.eval.metrics import percentile
from govrag.types import Strategy

OUT = Path(__file__).resolve().parent / "out"
STRATEGIES = (Strategy.KEYWORD, Strategy.HYBRID, Strategy.TEMPORAL, Strategy.GRAPH)
#: The graph strategy's p50 over hybrid's, at most (issue 32).
GRAPH_BOUND = 1.3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    corpus = synthetic.generate(args.chunks, args.seed)
    root, _, cached = synthetic.cached_store(corpus, OUT, say)
    say(f"{'reusing' if cached else 'built'} {root}")
    queries = synthetic.make_queries(corpus.vocab, args.queries, args.seed)
    store = synthetic.open_store(root)
    store.sync_indexes(synthetic.TENANT)
    figures: dict[str, dict[str, float | None]] = {}
    try:
        for probe in corpus.probes:
            principal = probe.principal()
            series = time_interleaved(
                {s.value: synthetic.search_system(store, principal, s) for s in STRATEGIES},
                queries,
            )
            hybrid = percentile(series["hybrid"].ms, 50)
            row: dict[str, float | None] = {}
            for s in STRATEGIES:
                p50 = percentile(series[s.value].ms, 50)
                row[f"{s.value}_p50_ms"] = round(p50, 2)
                row[f"{s.value}_p95_ms"] = round(percentile(series[s.value].ms, 95), 2)
                row[f"{s.value}_vs_hybrid"] = ratio(p50, hybrid)
            figures[f"{probe.target:.0%}"] = row
            shown = ", ".join(f"{s.value} {row[f'{s.value}_p50_ms']} ms "
                              f"({row[f'{s.value}_vs_hybrid']}x)" for s in STRATEGIES)  # fmt: skip
            bound = row["graph_vs_hybrid"]
            verdict = "" if bound is None else (" [graph within 1.3x]" if bound <= GRAPH_BOUND
                                                else " [graph OVER 1.3x]")  # fmt: skip
            say(f"{probe.target:.0%} readable: p50 {shown}{verdict}")
    finally:
        store.close()
    OUT.mkdir(exist_ok=True)
    (OUT / "results-strategies.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
