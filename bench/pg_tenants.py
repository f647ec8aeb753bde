"""What one HNSW graph per tenant costs a PostgreSQL database holding many tenants.

Migration 12 gives each tenant a partial HNSW index of its own, so a walk meets only its
tenant's vectors. The price grows with the number of tenants in one database: the planner
considers every index of ``chunk_vectors`` when it plans a walk, and each inserted vector is
checked against every index's predicate. This measures both, on a throwaway server from
:mod:`govrag.testing`, as tenants are added (each with one embedded document): the p50 of a
walk (``exact_vector_threshold = 0``) by a caller of the first tenant, and the time to ingest a
batch of documents into it, beside the same figures in a database of that tenant alone, on
the same server, interleaved query by query.

    .venv/bin/python -m bench.pg_tenants [--tenants 1,100,500] [--queries 60] [--docs 100]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import ratio, say
from govrag.embed.hashing import HashEmbedder
from govrag.eval.metrics import percentile
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord, IdentityRecord
from govrag.settings import SearchSettings
from govrag.testing import require_server, start_server
from govrag.types import Classification, Principal, SearchRequest, Strategy

OUT = Path(__file__).resolve().parent / "out"
APP = "govrag_app"
WORDS = [
    "wire",
    "limit",
    "credit",
    "risk",
    "loan",
    "audit",
    "policy",
    "model",
    "fraud",
    "review",
    "quarter",
    "client",
]


def _documents(tenant: str, start: int, n: int) -> list[Any]:
    out: list[Any] = [IdentityRecord(type="identity", source_system="sp", account_id="A",
                                     email="ana@x.example")]  # fmt: skip
    for i in range(start, start + n):
        words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5, 7))
        out.append(DocumentRecord(type="document", source_system="sp", external_id=f"d{i}",
                                  corpus="main", title=f"doc {i}", text=f"{words} {tenant} {i}",
                                  acl=["A"], classification=Classification.INTERNAL))  # fmt: skip
    return out


def _ingest(store: Any, tenant: str, records: list[Any]) -> float:
    t0 = time.perf_counter()
    ingestor = Ingestor(store, tenant, embedder=store.embedder)
    for i, record in enumerate(records):
        ingestor.add(f"r{i}", record)
    ingestor.flush()
    if ingestor.report.errors:
        raise RuntimeError(ingestor.report.messages[:3])
    return time.perf_counter() - t0


def run(counts: Sequence[int], n_queries: int, n_docs: int) -> dict[str, Any]:
    from psycopg.conninfo import make_conninfo

    from govrag.store.postgres import PostgresStore

    require_server()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="govrag-bench-tenants-") as tmp:
        server = start_server(Path(tmp) / "pg")
        stores: dict[str, Any] = {}
        try:
            with server.connect(autocommit=True) as conn:
                conn.execute(f"CREATE ROLE {APP} LOGIN")
                for name in ("one", "many"):  # the baseline keeps one tenant
                    conn.execute(f'CREATE DATABASE "{name}"')
            for name in ("one", "many"):
                admin = server.dsn_for(name)
                stores[name] = PostgresStore(
                    make_conninfo(admin, user=APP), admin_url=admin,
                    index_dir=Path(tmp) / name, embedder=HashEmbedder(dim=64),
                    search=SearchSettings(exact_vector_threshold=0),
                )  # fmt: skip
                _ingest(stores[name], "t0", _documents("t0", 0, 2000))
            caller = Principal(sub="a", email="ana@x.example", tenant="t0")
            queries = [" ".join(WORDS[(i * k) % len(WORDS)] for k in (2, 5))
                       for i in range(n_queries)]  # fmt: skip
            have, next_doc = 1, 2000
            for count in counts:
                t0 = time.perf_counter()
                for t in range(have, count):
                    _ingest(stores["many"], f"t{t}", _documents(f"t{t}", 0, 1))
                have = max(have, count)
                added_s = time.perf_counter() - t0
                ms: dict[str, list[float]] = {"one": [], "many": []}
                for i, q in enumerate(queries):  # interleaved, the order alternating
                    for name in ("one", "many") if i % 2 else ("many", "one"):
                        request = SearchRequest(query=q, strategy=Strategy.SEMANTIC, top_k=10)
                        s0 = time.perf_counter()
                        stores[name].search(caller, request)
                        ms[name].append((time.perf_counter() - s0) * 1000)
                ingest = {name: _ingest(stores[name], "t0", _documents("t0", next_doc, n_docs))
                          for name in ("many", "one")}  # fmt: skip
                next_doc += n_docs
                walk = {name: percentile(series, 50) for name, series in ms.items()}
                rows.append({
                    "tenants": count, "walk_p50_ms": round(walk["many"], 3),
                    "baseline_walk_p50_ms": round(walk["one"], 3),
                    "walk_ratio": ratio(walk["many"], walk["one"]),
                    "ingest_ms_per_doc": round(ingest["many"] * 1000 / n_docs, 3),
                    "baseline_ingest_ms_per_doc": round(ingest["one"] * 1000 / n_docs, 3),
                    "ingest_ratio": ratio(ingest["many"], ingest["one"]),
                    "tenants_added_s": round(added_s, 1),
                })  # fmt: skip
                say(f"pg_tenants: {count} tenants done")
        finally:
            for store in stores.values():
                store.close()
            server.close()
    return {"queries": n_queries, "docs": n_docs, "rows": rows}


def table(result: dict[str, Any]) -> str:
    lines = [f"\nOne HNSW graph per tenant: a walk of tenant t0 ({result['queries']} queries) "
             f"and ingest into it ({result['docs']} docs), in a database of N tenants beside "
             "one of t0 alone (same server, interleaved)",
             f"{'tenants':>8} | {'walk p50':>9} {'alone':>9} {'ratio':>6} | "
             f"{'ingest/doc':>10} {'alone':>9} {'ratio':>6}"]  # fmt: skip
    for r in result["rows"]:
        lines.append(
            f"{r['tenants']:>8} | {r['walk_p50_ms']:>7.2f}ms {r['baseline_walk_p50_ms']:>7.2f}ms "
            f"{r['walk_ratio']:>5}x | {r['ingest_ms_per_doc']:>8.2f}ms "
            f"{r['baseline_ingest_ms_per_doc']:>7.2f}ms {r['ingest_ratio']:>5}x"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m bench.pg_tenants", description=__doc__,
                                     formatter_class=raw)  # fmt: skip
    parser.add_argument("--tenants", default="1,100,500",
                        help="tenant counts, ascending (the first is the baseline)")  # fmt: skip
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--docs", type=int, default=100)
    args = parser.parse_args(argv)
    try:
        counts = [int(c) for c in args.tenants.split(",")]
    except ValueError:
        parser.error(f"--tenants {args.tenants!r}: give counts like 1,100,500")
    if not counts or counts != sorted(counts) or counts[0] < 1 or args.queries < 1 or args.docs < 1:
        parser.error("--tenants must ascend from >= 1; --queries and --docs must be >= 1")
    result = run(counts, args.queries, args.docs)
    say(table(result))
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "results-pg-tenants.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
