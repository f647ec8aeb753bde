"""What only the PostgreSQL backend has: RLS on real data, server faults, the bounded HNSW
walk, and several govrag processes on one database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from govrag.testing import PgServer, running_server, skip_module_unless_available

skip_module_unless_available()

import psycopg  # noqa: E402

from govrag.errors import StoreError  # noqa: E402
from govrag.harvest.records import Record  # noqa: E402
from govrag.store.pg_schema import TENANT_SETTING, TENANT_TABLES  # noqa: E402
from govrag.store.postgres import PostgresStore  # noqa: E402
from govrag.types import SearchRequest, Strategy  # noqa: E402

from conftest import (  # noqa: E402
    PG_APP_ROLE,
    check_tiny_beir_figures,
    doc,
    drop_pg_database,
    group,
    ident,
    load,
    make_pg_store,
    new_pg_database,
    principal,
    tiny_beir,
)


@pytest.fixture
def db(pg_cluster: PgServer) -> Iterator[str]:
    dsn = new_pg_database(pg_cluster)
    yield dsn
    drop_pg_database(pg_cluster, dsn)


def corpus(
    n: int, *, readable_every: int = 1, readable_text: str | None = None, also: tuple[str, ...] = ()
) -> list[Record]:
    """``n`` documents; ana (via group g) may read every ``readable_every``-th one (with
    ``readable_text`` instead of the common text, if given); accounts ``also`` read them all."""
    records: list[Record] = [
        ident("ana@x.example", "A"),
        ident("zed@x.example", "Z"),
        group("g", ["A"]),
    ]
    for i in range(n):
        acl = (["g"] if i % readable_every == 0 else ["Z"]) + list(also)
        text = f"report {i} on wire limits and credit risk, item {i % 17} of series {i % 5}"
        if readable_text and i % readable_every == 0:
            text = f"{readable_text} {i}"
        records.append(doc(f"d{i}", text, acl, metadata={"year": 2000 + i % 20}))
    return records


# -- row-level security on a populated database -------------------------------------------
def test_without_a_tenant_setting_every_table_is_empty(pg_cluster: PgServer, db: str) -> None:
    store = make_pg_store(pg_cluster, db, None)
    try:
        load(store, corpus(5))
        store.search(principal("ana@x.example"), SearchRequest(query="wire"))
        store.record_incident("t1", "probe", {"x": 1})
    finally:
        store.close()
    app = psycopg.conninfo.make_conninfo(db, user=PG_APP_ROLE)
    with psycopg.connect(app, autocommit=True) as conn:
        for table in TENANT_TABLES:
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (0,), table
        conn.execute("SELECT set_config(%s, 't1', false)", (TENANT_SETTING,))
        populated = {
            t for t in TENANT_TABLES if conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        }
    # The check above is only meaningful for tables that hold rows of the tenant.
    assert populated >= {
        "tenants", "corpora", "source_systems", "identities", "groups", "group_members",
        "documents", "chunks", "chunk_vectors", "vector_spaces", "doc_acl", "doc_meta",
        "index_outbox", "incidents",
    }  # fmt: skip


# -- the vector leg: exact for small allowed sets, bounded HNSW walk otherwise -------------
def analyze(db: str) -> None:
    """Planner statistics, as autovacuum would gather them after a bulk load."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("ANALYZE")


def semantic(store: PostgresStore, top_k: int) -> tuple[list[str], bool]:
    result = store.search(
        principal("ana@x.example"),
        SearchRequest(query="credit risk report", strategy=Strategy.SEMANTIC, top_k=top_k),
    )
    return [h.doc_id for h in result.results], result.truncated


@pytest.fixture(scope="module")
def thousands(pg_cluster: PgServer) -> Iterator[str]:
    """3,000 documents in corpus "main" (loading them is most of these tests' time, so they
    share them and only read): ana may read 6, those farthest from the query "credit risk
    report"; bob reads all 3,000, and 6 more in corpus "small", as far from it."""
    dsn = new_pg_database(pg_cluster)
    setup = make_pg_store(pg_cluster, dsn, None)
    records = corpus(3000, readable_every=500, readable_text="zebra orchard quantum", also=("B",))
    records += [ident("bob@x.example", "B")]
    records += [doc(f"s{i}", f"zebra orchard quantum {i}", ["B"], corpus="small")
                for i in range(6)]  # fmt: skip
    load(setup, records)
    setup.close()
    analyze(dsn)
    yield dsn
    drop_pg_database(pg_cluster, dsn)


def test_a_walk_stopped_by_its_bound_says_truncated(pg_cluster: PgServer, thousands: str) -> None:
    db = thousands
    readable = {f"d{i}" for i in range(0, 3000, 500)}  # ana's 6 of the 3,000

    exact = make_pg_store(pg_cluster, db, None)  # 6 readable vectors: scored exactly
    assert semantic(exact, 5) == (semantic(exact, 50)[0][:5], False)
    assert set(semantic(exact, 50)[0]) == readable
    exact.close()

    # More readable vectors than asked for, so the graph is walked in distance order; the
    # bound stops the walk after about a third of the vectors, before the readable ones.
    walk = make_pg_store(pg_cluster, db, None, exact_vector_threshold=0, hnsw_max_scan_tuples=1000)
    hits, truncated = semantic(walk, 5)
    walk.close()
    assert set(hits) <= readable
    assert len(hits) < 5 and truncated  # fewer than exist, and the result says so


def test_a_small_corpus_is_scored_exactly_for_a_broad_reader(
    pg_cluster: PgServer, thousands: str
) -> None:
    # bob reads 3,006, far more than the threshold, but the 6 of corpus "small" are few.
    store = make_pg_store(pg_cluster, thousands, None, exact_vector_threshold=100,
                          hnsw_max_scan_tuples=1000)  # fmt: skip
    result = store.search(
        principal("bob@x.example"),
        SearchRequest(query="credit risk report", strategy=Strategy.SEMANTIC, top_k=5,
                      corpora=("small",)),
    )  # fmt: skip
    store.close()
    # A walk would have been stopped by its bound long before reaching them (truncated).
    assert len(result.results) == 5 and not result.truncated
    assert {h.doc_id for h in result.results} <= {f"s{i}" for i in range(6)}


def test_an_unbounded_enough_walk_is_not_truncated(pg_cluster: PgServer, db: str) -> None:
    setup = make_pg_store(pg_cluster, db, None)
    load(setup, corpus(600, readable_every=2))
    setup.close()
    analyze(db)
    walk = make_pg_store(pg_cluster, db, None, exact_vector_threshold=0)
    hits, truncated = semantic(walk, 10)
    walk.close()
    assert len(hits) == 10 and not truncated


# -- several processes on one database ------------------------------------------------------
def write_deployment(root: Path, db: str) -> Path:
    dep = root / "dep"
    dep.mkdir()
    app = db.replace("://postgres", f"://{PG_APP_ROLE}", 1)
    (dep / "govrag.toml").write_text(
        f'default_tenant = "t1"\ndefault_route = "search"\n[store]\nurl = "{app}"\n'
        f'admin_url = "{db}"\n[embedder]\nname = "hash"\ndim = 64\n'
    )
    (dep / "routes").mkdir()
    route = {"route_id": "search", "retrieval": {"mode": "tool", "scope": ["main"]}}
    (dep / "routes" / "search.json").write_text(json.dumps(route))
    principals = [
        {"sub": "ana", "email": "ana@x.example", "tenant": "t1", "doc_entitlements": ["main:read"]}
    ]
    (dep / "principals.json").write_text(json.dumps({"principals": principals}))
    return dep


def govrag(dep: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "govrag.cli", *args, "--deployment", str(dep)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("GOVRAG_")},
    )


def jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_revocation_by_another_process_is_honoured_by_the_next_search(
    pg_cluster: PgServer, db: str, tmp_path: Path
) -> None:
    dep = write_deployment(tmp_path, db)
    grant = {
        "type": "document", "source_system": "sp", "external_id": "memo", "corpus": "main",
        "text": "quarterly wire limits", "acl": ["A"], "classification": "internal",
    }  # fmt: skip
    ana = {"type": "identity", "email": "ana@x.example", "source_system": "sp", "account_id": "A"}
    done = govrag(dep, "ingest", str(jsonl(tmp_path / "a.jsonl", [ana, grant])), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 1

    # This process serves searches from its own derived index ...
    store = make_pg_store(pg_cluster, db, tmp_path / "this-process")
    me = principal("ana@x.example")
    assert [h.doc_id for h in store.search(me, SearchRequest(query="wire")).results] == ["memo"]
    # ... while another process (the CLI) revokes.
    revoke = dict(grant, acl=["Z"])
    done = govrag(dep, "ingest", str(jsonl(tmp_path / "b.jsonl", [revoke])), "--json")
    assert done.returncode == 0, done.stderr
    for strategy in Strategy:
        request = SearchRequest(query="wire", strategy=strategy)
        assert store.search(me, request).results == (), strategy
    store.close()
    # The other process's own search agrees.
    done = govrag(dep, "search", "wire", "--as", "ana", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"] == []


def test_eval_runs_unchanged_on_postgres(pg_cluster: PgServer, db: str, tmp_path: Path) -> None:
    dep = write_deployment(tmp_path, db)
    done = govrag(dep, "eval", str(tiny_beir(tmp_path)), "--json")
    assert done.returncode == 0, done.stderr
    check_tiny_beir_figures(json.loads(done.stdout))
    store = make_pg_store(pg_cluster, db, None)
    assert store.tenants() == []  # the throw-away tenant was dropped
    store.close()


def test_an_unreachable_server_is_one_clear_cli_error(tmp_path: Path) -> None:
    from govrag.testing import free_port

    dep = write_deployment(tmp_path, f"postgresql://postgres:pw@127.0.0.1:{free_port()}/x")
    done = govrag(dep, "search", "wire", "--as", "ana")
    assert done.returncode == 4
    assert "unreachable" in done.stderr and "Traceback" not in done.stderr
    assert "pw" not in done.stderr


# -- faults: a server stopped mid-ingest, a killed backend ---------------------------------
@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """A server of its own: these tests stop it and kill its backends."""
    with running_server(tmp_path_factory.mktemp("faults")) as pg:
        with pg.connect(autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {PG_APP_ROLE} LOGIN")
        yield pg


def check_whole_documents(store: PostgresStore) -> dict[str, int]:
    """Every stored document has its chunks, vectors, ACL rows and an outbox entry."""
    with store._db.tx("t1", read=True) as conn:
        partial = conn.execute(
            "SELECT d.external_id FROM documents d WHERE d.tenant_id = 't1' AND ("
            " NOT EXISTS (SELECT 1 FROM chunks c WHERE c.tenant_id = d.tenant_id"
            "   AND c.doc_id = d.doc_id)"
            " OR NOT EXISTS (SELECT 1 FROM doc_acl a WHERE a.tenant_id = d.tenant_id"
            "   AND a.doc_id = d.doc_id)"
            " OR NOT EXISTS (SELECT 1 FROM index_outbox o WHERE o.tenant_id = d.tenant_id"
            "   AND o.doc_id = d.doc_id)"
            " OR (SELECT COUNT(*) FROM chunks c JOIN chunk_vectors v ON v.tenant_id = c.tenant_id"
            "   AND v.chunk_id = c.chunk_id WHERE c.tenant_id = d.tenant_id"
            "   AND c.doc_id = d.doc_id) <> (SELECT COUNT(*) FROM chunks c"
            "   WHERE c.tenant_id = d.tenant_id AND c.doc_id = d.doc_id AND c.indexed))"
        ).fetchall()
    assert partial == []
    return store.stats("t1")


def fresh_store(pg: PgServer, tmp: Path) -> tuple[PostgresStore, str]:
    name = f"f{time.monotonic_ns()}"
    dsn = pg.create_database(name)
    return make_pg_store(pg, dsn, tmp / name), dsn


@pytest.mark.parametrize("fault", ["stop_immediate", "terminate_backend"])
def test_a_fault_during_ingest_leaves_whole_documents_and_recovers(
    faulty: PgServer, tmp_path: Path, fault: str
) -> None:
    records = corpus(150)  # three of the ingestor's batches; the fault strikes in the first
    reference, _ = fresh_store(faulty, tmp_path)
    load(reference, records)
    expected = check_whole_documents(reference)
    reference.close()

    store, _ = fresh_store(faulty, tmp_path)
    # The fault strikes inside the 51st document's transaction, after its connection is
    # checked out: a fixed point of the ingest, however fast or loaded the machine is.
    real_tx, real_put = store._db.tx, store.put_document
    written = 0

    def put_document(tenant: str, doc: Any) -> str:
        nonlocal written
        written += 1
        return real_put(tenant, doc)

    @contextmanager
    def tx(tenant: str, *, read: bool = False) -> Iterator[Any]:
        with real_tx(tenant, read=read) as conn:
            if not read and written == 51:
                if fault == "stop_immediate":
                    faulty.stop("immediate")  # `pg_ctl stop -m immediate`: no clean shutdown
                else:  # the backend serving this very transaction is terminated
                    conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            yield conn

    store._db.tx, store.put_document = tx, put_document  # type: ignore[method-assign]
    with pytest.raises(StoreError) as failure:
        load(store, records)
    assert "Traceback" not in str(failure.value)
    store._db.tx, store.put_document = real_tx, real_put  # type: ignore[method-assign]
    if fault == "stop_immediate":
        with pytest.raises(StoreError, match="unreachable"):
            store.stats("t1")  # a clear error while it is down
        faulty.start()

    # Recovery without reopening: the pool reconnects by itself, after its reconnect backoff
    # (which grew while the server was down); meanwhile a caller is told "unreachable".
    for _ in range(60):
        try:
            partial = check_whole_documents(store)
            break
        except StoreError as exc:
            assert "unreachable" in str(exc) or "failed" in str(exc), exc
    else:
        pytest.fail("the pool never reconnected")
    assert partial["documents"] == 50 < expected["documents"]
    load(store, records)
    assert check_whole_documents(store) == expected
    hits = store.search(principal("ana@x.example"), SearchRequest(query="report 149"))
    assert hits.results[0].doc_id == "d149"
    store.close()
