"""Retrieval strategies on the strategies suite: each strategy beside ``hybrid``, per question type.

The suite (``bench/strategies-suite/``: a fictional bank's superseded policies, counterparties with
aliases and subsidiaries, long contracts with sections, general material; written before any
run, split dev/test) is built into a deployment of its own and run through the governed path
(``govrag eval --suite strategies --strategy NAME``) once per strategy. Each case's route is
its question type (``current``, ``history``, ``entity``, ``section``, ``general``), so the
suite report's per-route figures are the per-type figures: evidence recall@10 and nDCG@10.

Printed for the dev split (what the strategies' settings could be tuned on; they were not)
and the held-out test split, each strategy beside ``hybrid`` measured in the same run, with
the difference. The question each type asks: does the strategy made for it beat ``hybrid``
there, and does it stay within 2 % of ``hybrid`` on the other types?

    .venv/bin/python -m bench.strategies [--embedder minilm|hash] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import govrag
from govrag.embed import semantic_available
from govrag.types import Strategy

DATA = Path(__file__).resolve().parent / "strategies-suite"
SUITE = "strategies"
TENANT = "nordhavn"
#: The question types (the suite's routes) and the strategy made for each.
MADE_FOR = {"current": "temporal", "history": None, "entity": "graph", "section": None,
            "general": None}  # fmt: skip
STRATEGIES = (Strategy.KEYWORD, Strategy.HYBRID, Strategy.TEMPORAL, Strategy.GRAPH)


def build(root: Path, embedder: str) -> Path:
    """The suite's deployment at ``root``: scaffolded, its corpus ingested."""
    corpus = [json.loads(line) for line in (DATA / "corpus.jsonl").read_text().splitlines()
              if line.strip()]  # fmt: skip
    corpora = sorted({r["corpus"] for r in corpus if r["type"] == "document"})
    govrag.init(root, tenant=TENANT, corpora=corpora, embedder=embedder)
    shutil.copy(DATA / "principals.json", root / "principals.json")
    for old in (root / "routes").glob("*.json"):
        old.unlink()
    routes = [
        {"route_id": route, "intent": route, "tool_manifest": "retrieval",
         "retrieval": {"mode": "deterministic_prefetch", "scope": corpora}}
        for route in MADE_FOR
    ]  # fmt: skip
    (root / "routes" / "routes.json").write_text(json.dumps(routes, indent=2))
    (root / "entities").mkdir(exist_ok=True)
    shutil.copy(DATA / "entities" / "glossary.jsonl", root / "entities" / "glossary.jsonl")
    (root / "evals").mkdir(exist_ok=True)
    shutil.copy(DATA / "suite.jsonl", root / "evals" / f"{SUITE}.jsonl")
    config = root / "govrag.toml"
    text = config.read_text().replace('default_route = "search"', 'default_route = "general"')
    config.write_text(text)
    with govrag.open(root) as app:
        report = app.operators.ingest(DATA / "corpus.jsonl")
        if not report.ok:
            raise SystemExit(f"ingest failed: {report}")
        problems = app.operators.config_check()
        if not problems.ok:
            raise SystemExit("\n".join(str(p) for p in problems.problems))
    return root


def measure(root: Path) -> dict[str, dict[str, dict[str, dict[str, float | None]]]]:
    """``figures[split][strategy][route] = {"recall": ..., "ndcg": ..., "cases": n}``."""
    out: dict[str, dict[str, dict[str, dict[str, float | None]]]] = {}
    with govrag.open(root) as app:
        for split in ("dev", "test"):
            out[split] = {}
            for strategy in STRATEGIES:
                report = app.operators.evaluate_suite(SUITE, split=split, strategy=strategy)
                every = {**report.routes, "*": report.overall}
                rows = {
                    route: {"recall": f.recall_at_k, "ndcg": f.ndcg_at_k, "cases": f.cases}
                    for route, f in sorted(every.items())
                }
                out[split][strategy.value] = rows
    return out


def table(figures: dict[str, dict[str, dict[str, dict[str, float | None]]]]) -> str:
    """Markdown: per split and question type, each strategy's nDCG@10 / recall@10 and its
    difference to hybrid's."""
    lines = []
    for split, by_strategy in figures.items():
        lines += [f"\n{split} split", "",
                  "| type (cases) | " + " | ".join(s.value for s in STRATEGIES) + " |",
                  "|---|" + "---|" * len(STRATEGIES)]  # fmt: skip
        hybrid = by_strategy["hybrid"]
        for route in [*MADE_FOR, "*"]:
            if route not in hybrid:
                continue
            cells = []
            for s in STRATEGIES:
                got = by_strategy[s.value][route]
                cells.append(_cell(got, hybrid[route], s is Strategy.HYBRID))
            lines.append(f"| {route} ({hybrid[route]['cases']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(got: dict[str, float | None], base: dict[str, float | None], is_base: bool) -> str:
    ndcg, recall = got["ndcg"], got["recall"]
    if ndcg is None or recall is None:
        return "-"
    text = f"{ndcg:.3f} / {recall:.3f}"
    if not is_base and base["ndcg"] is not None:
        text += f" ({ndcg - base['ndcg']:+.3f})"
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="minilm" if semantic_available() else "hash")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = build(Path(tmp) / "strategies", args.embedder)
        figures = measure(root)
    print(f"strategies suite, embedder {args.embedder}: nDCG@10 / recall@10 (difference of "
          "nDCG@10 to hybrid)")  # fmt: skip
    print(table(figures))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
