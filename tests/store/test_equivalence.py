"""Both backends, the same JSONL and the same queries: the same answers.

Keyword and sql (metadata filter) results must be identical; the PostgreSQL vector leg walks
an approximate HNSW graph, so vector and hybrid results must reach recall@10 >= 0.95 of the
SQLite backend's exact search.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from govrag.testing import PgServer, skip_module_unless_available

skip_module_unless_available()

import psycopg  # noqa: E402

from govrag.harvest.ingest import ingest_jsonl  # noqa: E402
from govrag.store.protocol import KnowledgeStore  # noqa: E402
from govrag.types import MetadataFilter, Principal, SearchRequest, Strategy  # noqa: E402

from conftest import drop_pg_database, make_pg_store, make_store, new_pg_database  # noqa: E402

WORDS = [
    "wire", "transfer", "limit", "credit", "risk", "model", "policy", "audit", "loan", "fraud",
    "console", "treasury", "swap", "rate", "hedge", "capital", "reserve", "liquidity", "stress",
    "scenario", "exposure", "counterparty", "margin", "collateral", "settlement", "payment",
    "ledger", "reconciliation", "control", "breach", "incident", "report",
]  # fmt: skip
ACCOUNTS = ["a0", "a1", "a2", "a3", "a4", "a5"]
EMAILS = [f"u{i}@x.example" for i in range(5)]
N_DOCS = 400


def world(path: Path) -> Path:
    rng = random.Random(7)
    lines: list[dict[str, object]] = []
    for i, email in enumerate(EMAILS[:4]):  # u4 has no identity: sees nothing
        lines.append({"type": "identity", "email": email, "source_system": "sp",
                      "account_id": ACCOUNTS[i]})  # fmt: skip
    lines.append({"type": "group", "source_system": "sp", "group_id": "g0", "members": ["a0"]})
    lines.append({"type": "group", "source_system": "sp", "group_id": "g1", "members": ["g0"]})
    lines.append({"type": "group", "source_system": "sp", "group_id": "g2", "members": ["a2"]})
    for i in range(N_DOCS):
        acl = rng.sample([*ACCOUNTS, "g0", "g1", "g2", "*"], k=rng.randint(1, 3))
        lines.append({
            "type": "document", "source_system": rng.choice(["sp", "wiki"]),
            "external_id": f"d{i}", "corpus": rng.choice(["c1", "c2"]),
            "title": " ".join(rng.choices(WORDS, k=2)),
            "text": " ".join(rng.choices(WORDS, k=rng.randint(8, 60))),
            "acl": acl, "classification": rng.choice(["public", "internal", "confidential"]),
            "metadata": {"year": 2015 + i % 10, "kind": rng.choice(["memo", "policy", "faq"]),
                         "tags": rng.sample(["eu", "us", "apac", "retail"], k=2)},
        })  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def stores(
    pg_cluster: PgServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KnowledgeStore, KnowledgeStore]]:
    root = tmp_path_factory.mktemp("equivalence")
    data = world(root / "world.jsonl")
    sqlite = make_store(root / "sqlite")
    dsn = new_pg_database(pg_cluster)
    # exact_vector_threshold=0: the PostgreSQL vector leg always walks the HNSW graph.
    pg = make_pg_store(pg_cluster, dsn, root / "pg-index", exact_vector_threshold=0)
    for store in (sqlite, pg):
        report = ingest_jsonl(store, data, "t1", embedder=store.embedder)
        assert (report.added, report.errors) == (N_DOCS, 0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    yield sqlite, pg
    sqlite.close()
    pg.close()
    drop_pg_database(pg_cluster, dsn)


QUERIES = [" ".join(random.Random(q).choices(WORDS, k=1 + q % 3)) for q in range(25)]
CALLERS = [(email, ceiling) for email in EMAILS for ceiling in ("internal", "restricted")]


def run(store: KnowledgeStore, strategy: Strategy, **kwargs: object) -> Iterator[list[str]]:
    for email, ceiling in CALLERS:
        caller = Principal(sub="u", email=email, tenant="t1", clearance=ceiling)
        for query in QUERIES:
            request = SearchRequest(query=query, strategy=strategy, top_k=10, **kwargs)  # type: ignore[arg-type]
            result = store.search(caller, request)
            yield [f"{h.chunk_id} {h.score:.4f}" for h in result.results]


def test_keyword_results_are_identical(stores: tuple[KnowledgeStore, KnowledgeStore]) -> None:
    sqlite, pg = stores
    got = list(zip(run(sqlite, Strategy.KEYWORD), run(pg, Strategy.KEYWORD), strict=True))
    assert sum(1 for a, _ in got if a) > 50  # enough non-empty rankings to mean something
    assert all(a == b for a, b in got)


FILTERS = [
    MetadataFilter(key="kind", op="eq", value="policy"),
    MetadataFilter(key="tags", op="in", values=("eu", "apac")),
    MetadataFilter(key="year", op="range", gte=2018, lte=2021),
    MetadataFilter(key="kind", op="prefix", value="me"),
]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: f.op)
def test_sql_results_are_identical(
    stores: tuple[KnowledgeStore, KnowledgeStore], flt: MetadataFilter
) -> None:
    sqlite, pg = stores
    a = list(run(sqlite, Strategy.KEYWORD, filters=(flt,)))
    b = list(run(pg, Strategy.KEYWORD, filters=(flt,)))
    assert any(a) and a == b


@pytest.mark.parametrize("strategy", [Strategy.SEMANTIC, Strategy.HYBRID])
def test_vector_results_reach_recall_of_exact(
    stores: tuple[KnowledgeStore, KnowledgeStore], strategy: Strategy
) -> None:
    sqlite, pg = stores
    found = wanted = 0
    for exact, approx in zip(run(sqlite, strategy), run(pg, strategy), strict=True):
        truth = {hit.split()[0] for hit in exact}
        found += len(truth & {hit.split()[0] for hit in approx})
        wanted += len(truth)
    assert wanted > 500
    assert found / wanted >= 0.95, f"recall@10 {found / wanted:.3f}"
