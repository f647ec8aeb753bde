"""The access columns on PostgreSQL vector rows (migration 6) always equal the truth.

The vector leg filters on each vector row's own copy of its document's corpus,
classification and ACL tokens, so a copy that lagged an ACL change would leak. These tests
drive every write path (new document, ACL-only change, content change, corpus and
classification moves, deletion, re-creation) and compare every vector row with an
independent model of what the records said; and they migrate a database from the schema
before the columns existed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from govrag.testing import PgServer, skip_module_unless_available

skip_module_unless_available()

import psycopg  # noqa: E402
import psycopg.conninfo  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from govrag.harvest.ingest import Ingestor  # noqa: E402
from govrag.harvest.records import DeleteRecord, Record  # noqa: E402
from govrag.store.dialect import to_pyformat  # noqa: E402
from govrag.store.migrations import migrate_postgres as migrate  # noqa: E402
from govrag.store.migrations import migrations  # noqa: E402
from govrag.store.pg_schema import (  # noqa: E402
    ALL_READERS,
    READER_SETTING,
    TENANT_SETTING,
    vector_index_name,
)
from govrag.store.pg_vectors import exact_statement, scope_sql, walk_statement  # noqa: E402
from govrag.store.postgres import PostgresStore  # noqa: E402
from govrag.store.records import principal_token  # noqa: E402
from govrag.types import Classification, SearchRequest, Strategy  # noqa: E402

from conftest import (  # noqa: E402
    PG_APP_ROLE,
    acl_copies_drifted,
    doc,
    drop_pg_database,
    ident,
    load,
    make_pg_store,
    new_pg_database,
    principal,
)

MIGRATIONS = migrations("postgres")
_tenants = itertools.count()
LEVELS = ["public", "internal", "confidential", "restricted"]
TEXTS = ["wire limits for corporate clients", "credit risk review of the quarter"]


@pytest.fixture(scope="module")
def pg_db(pg_cluster: PgServer) -> Iterator[str]:
    dsn = new_pg_database(pg_cluster)
    yield dsn
    drop_pg_database(pg_cluster, dsn)


@pytest.fixture(scope="module")
def pg_store(
    pg_cluster: PgServer, pg_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PostgresStore]:
    store = make_pg_store(pg_cluster, pg_db, tmp_path_factory.mktemp("idx"))
    yield store
    store.close()


def vector_rows(dsn: str, tenant: str) -> dict[str, set[tuple[str, int, tuple[str, ...]]]]:
    """Per external id, the access columns of its vector rows (read as a superuser)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.external_id, v.corpus_id, v.classification, v.acl, v.doc_id = c.doc_id "
            "FROM chunk_vectors v JOIN chunks c ON c.tenant_id = v.tenant_id "
            "AND c.chunk_id = v.chunk_id JOIN documents d ON d.tenant_id = c.tenant_id "
            "AND d.doc_id = c.doc_id WHERE v.tenant_id = %s",
            (tenant,),
        ).fetchall()
    out: dict[str, set[tuple[str, int, tuple[str, ...]]]] = {}
    for external_id, corpus, level, acl, same_doc in rows:
        assert same_doc, external_id
        out.setdefault(external_id, set()).add((corpus, level, tuple(acl)))
    return out


def expected_tokens(acl: list[str]) -> tuple[str, ...]:
    pairs = sorted({("*", "*") if p == "*" else ("sp", p) for p in acl})
    return (ALL_READERS, *(principal_token(ss, p) for ss, p in pairs))


put_op = st.tuples(
    st.just("put"),
    st.integers(0, 3),  # which document
    st.lists(st.sampled_from(["A", "B", "g", "*"]), max_size=3, unique=True),
    st.sampled_from(["main", "other"]),
    st.sampled_from(LEVELS),
    st.sampled_from(TEXTS),
)
delete_op = st.tuples(st.just("delete"), st.integers(0, 3))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(st.one_of(put_op, put_op, delete_op), min_size=1, max_size=8))
def test_vector_access_columns_equal_the_records_after_every_write(
    pg_store: PostgresStore, pg_db: str, ops: list[tuple[object, ...]]
) -> None:
    tenant = f"h{next(_tenants)}"
    model: dict[str, tuple[str, int, tuple[str, ...]]] = {}
    for op in ops:
        ingestor = Ingestor(pg_store, tenant, embedder=pg_store.embedder)
        external_id = f"d{op[1]}"
        record: Record
        if op[0] == "put":
            _, _, acl, corpus, level, text = op
            assert isinstance(acl, list) and isinstance(text, str)
            record = doc(external_id, str(text), acl, corpus=str(corpus), classification=level)
            model[external_id] = (
                str(corpus),
                int(Classification.parse(level)),
                expected_tokens(acl),
            )
        else:
            record = DeleteRecord(type="delete", source_system="sp", external_id=external_id)
            model.pop(external_id, None)
        ingestor.add("op", record)
        ingestor.flush()
        assert ingestor.report.errors == 0, ingestor.report.messages
        assert vector_rows(pg_db, tenant) == {k: {v} for k, v in model.items()}
        assert acl_copies_drifted(pg_db) == 0


def test_an_acl_only_change_moves_access_on_the_vector_leg(
    pg_store: PostgresStore,
) -> None:
    tenant = f"h{next(_tenants)}"
    people = [ident("ana@x.example", "A"), ident("bo@x.example", "B")]
    load(pg_store, [*people, doc("d", TEXTS[0], ["A"])], tenant)

    def readers() -> dict[str, int]:
        return {
            who: len(
                pg_store.search(
                    principal(f"{who}@x.example", tenant),
                    SearchRequest(query=TEXTS[0], strategy=Strategy.SEMANTIC, top_k=5),
                ).results
            )
            for who in ("ana", "bo")
        }

    assert readers() == {"ana": 1, "bo": 0}
    load(pg_store, [doc("d", TEXTS[0], ["B"])], tenant)  # same text: rights only
    assert readers() == {"ana": 0, "bo": 1}


@pytest.mark.parametrize(
    "tamper",
    [
        "acl = ARRAY[chr(30), 'sp' || chr(31) || 'B']",  # B gains a document it may not read
        "acl = ARRAY[chr(30)]",  # A loses it
        "corpus_id = 'elsewhere'",
        "classification = 0",
        "doc_id = -1",
    ],
)
def test_index_verify_finds_and_rebuild_repairs_drifted_access_columns(
    pg_cluster: PgServer, pg_store: PostgresStore, pg_db: str, tmp_path: Path, tamper: str
) -> None:
    """Columns changed behind the triggers' back (as ``session_replication_role = replica``
    or a manual fix would) are differences for ``index verify``; ``index rebuild`` sets them
    right, and the vector leg follows the truth again."""
    tenant = f"h{next(_tenants)}"
    load(pg_store, [ident("ana@x.example", "A"), ident("bo@x.example", "B"),
                    doc("d", TEXTS[0], ["A"]), doc("e", TEXTS[1], ["A"])], tenant)  # fmt: skip
    truth = vector_rows(pg_db, tenant)
    assert pg_store.verify_index(tenant).differences == 0
    with psycopg.connect(pg_db, autocommit=True) as conn:  # superuser: no policy, no trigger
        conn.execute(
            f"UPDATE chunk_vectors v SET {tamper} FROM chunks c, documents d "
            "WHERE c.tenant_id = v.tenant_id AND c.chunk_id = v.chunk_id "
            "AND d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id "
            "AND v.tenant_id = %s AND d.external_id = 'd'",
            (tenant,),
        )
    report = pg_store.verify_index(tenant)
    assert (report.vector_access_drift, report.differences) == (1, 1)
    # A new process's first search builds its lexical index but leaves the vector rows
    # alone: scanning (let alone writing) all of them is `index rebuild`'s job.
    newcomer = make_pg_store(pg_cluster, pg_db, tmp_path / "fresh")
    try:
        newcomer.search(principal("ana@x.example", tenant), SearchRequest(query=TEXTS[1]))
        assert newcomer.verify_index(tenant).vector_access_drift == 1
    finally:
        newcomer.close()
    pg_store.rebuild_index(tenant)
    assert pg_store.verify_index(tenant).differences == 0
    assert vector_rows(pg_db, tenant) == truth

    def found(who: str) -> list[str]:
        request = SearchRequest(query=TEXTS[0], strategy=Strategy.SEMANTIC, top_k=5)
        return [h.doc_id for h in pg_store.search(principal(who, tenant), request).results]

    assert (found("ana@x.example"), found("bo@x.example")) == (["d", "e"], [])


def test_migration_6_backfills_an_existing_store(pg_cluster: PgServer, tmp_path: Path) -> None:
    """A store written before migration 6: its vectors get the columns, its HNSW index is
    dropped by the migration and rebuilt on the next open, and searches keep the ACL."""
    dsn = new_pg_database(pg_cluster)
    try:
        store = make_pg_store(pg_cluster, dsn, tmp_path / "a")
        records = [
            ident("ana@x.example", "A"),
            doc("d1", TEXTS[0], ["A"]),
            doc("d2", TEXTS[0], ["*"], corpus="other", classification="restricted"),
            doc("d3", TEXTS[1], []),
        ]
        load(store, records)
        store.close()
        before = vector_rows(dsn, "t1")
        with psycopg.connect(dsn, autocommit=True) as conn:  # back to schema version 5
            conn.execute(
                "DROP TRIGGER chunk_vectors_fill ON chunk_vectors;"
                "DROP TRIGGER doc_acl_sync ON doc_acl;"
                "DROP TRIGGER documents_sync ON documents;"
                "DROP POLICY reader_acl ON chunk_vectors;"
                "DROP FUNCTION govrag_vector_fill, govrag_acl_sync, govrag_document_sync,"
                " govrag_acl_tokens, govrag_reader_tokens;"
                "ALTER TABLE chunk_vectors DROP COLUMN doc_id, DROP COLUMN corpus_id,"
                " DROP COLUMN classification, DROP COLUMN acl;"
                "DELETE FROM schema_migrations WHERE version = 6"
            )
            assert migrate(conn) == len(MIGRATIONS)
            assert not conn.execute(
                "SELECT 1 FROM pg_indexes WHERE indexname LIKE 'chunk_vectors_hnsw%'"
            ).fetchall()
        assert vector_rows(dsn, "t1") == before
        assert before["d2"] == {("other", 3, (ALL_READERS, "*"))}
        assert before["d3"] == {("main", 1, (ALL_READERS,))}
        store = make_pg_store(pg_cluster, dsn, tmp_path / "b")
        try:
            with psycopg.connect(dsn) as conn:
                assert conn.execute(
                    "SELECT 1 FROM pg_indexes WHERE indexname LIKE 'chunk_vectors_hnsw%'"
                ).fetchall()
            hits = store.search(
                principal("ana@x.example"),
                SearchRequest(query=TEXTS[0], strategy=Strategy.SEMANTIC, top_k=5),
            ).results
            assert sorted(h.doc_id for h in hits) == ["d1", "d2"]
        finally:
            store.close()
    finally:
        drop_pg_database(pg_cluster, dsn)


def test_the_reader_policy_shows_only_the_named_readers_rows(
    pg_cluster: PgServer, pg_store: PostgresStore, pg_db: str
) -> None:
    """Unset (writes, triggers, unrestricted rankings): every row of the tenant; set: only
    rows holding one of the named tokens; a value no row holds: none."""
    tenant = f"h{next(_tenants)}"
    load(pg_store, [doc("a", TEXTS[0], ["A"]), doc("b", TEXTS[0], ["B", "*"])], tenant)
    app = psycopg.conninfo.make_conninfo(pg_db, user=PG_APP_ROLE)
    with psycopg.connect(app) as conn:
        conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))

        def visible(reader: str | None) -> int:
            if reader is not None:
                conn.execute("SELECT set_config(%s, %s, true)", (READER_SETTING, reader))
            row = conn.execute("SELECT COUNT(*) FROM chunk_vectors").fetchone()
            assert row is not None
            return int(row[0])

        assert visible(None) == 2
        assert visible(principal_token("sp", "A")) == 1
        assert visible(ALL_READERS.join([principal_token("sp", "A"), "*"])) == 2
        assert visible("\x1f") == 0
        assert visible("") == 2


def app_plan(pg_store: PostgresStore, pg_db: str, tenant: str, *, walk: bool) -> str:
    """The plan, as the application role, of ana's semantic search in ``tenant``: the exact
    path's statement, or the walk's with the settings the walk sets (pg_vectors.py)."""
    scope = pg_store._search_backend().resolve_access(
        principal("ana@x.example", tenant), (), every_corpus=True
    )
    conds, params = scope_sql(scope, True, None)
    query = pg_store.embedder.embed_query(TEXTS[0])
    dim = pg_store.embedder.dim
    if walk:
        statement, args = walk_statement(dim, conds), (query, tenant, *params, query, 10)
    else:
        statement, args = exact_statement(conds), (query, tenant, *params, 20001, 20000, 10)
    app = psycopg.conninfo.make_conninfo(pg_db, user=PG_APP_ROLE)
    with psycopg.connect(app) as conn:
        register_vector(conn)
        conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
        if walk:
            conn.execute("SET LOCAL enable_sort = off")
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        else:
            readers = ALL_READERS.join(scope.tokens)
            conn.execute("SELECT set_config(%s, %s, true)", (READER_SETTING, readers))
        sql = "EXPLAIN " + to_pyformat(pg_store.dialect.sql(statement))
        return "\n".join(r[0] for r in conn.execute(sql, args))


def test_the_exact_path_reads_the_acl_index_as_the_app_role(
    pg_cluster: PgServer, pg_store: PostgresStore, pg_db: str
) -> None:
    """The plan, not a timing: a caller who reads 1 % of 3,000 vectors gets a bitmap scan of
    the GIN index under forced row-level security (a sequential scan of every vector of the
    tenant before the reader policy existed)."""
    tenant = f"h{next(_tenants)}"
    records: list[Record] = [ident("ana@x.example", "A")]
    records += [doc(f"d{i}", f"{TEXTS[i % 2]} {i}", ["A" if i % 100 == 0 else "B"])
                for i in range(3000)]  # fmt: skip
    load(pg_store, records, tenant)
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("ANALYZE chunk_vectors")
    plan = app_plan(pg_store, pg_db, tenant, walk=False)
    assert "Bitmap Index Scan on chunk_vectors_by_acl" in plan, plan
    assert "Seq Scan on chunk_vectors" not in plan, plan


def test_each_tenant_walks_a_graph_of_its_own(
    pg_cluster: PgServer, pg_store: PostgresStore, pg_db: str
) -> None:
    """Migration 12: a tenant's first embedded document creates its own HNSW index (a
    partial index on its rows), none covers every tenant, and the walk, planned as the app
    role with the tenant as a constant, reads its tenant's graph and no other."""
    mine, theirs = f"h{next(_tenants)}", f"h{next(_tenants)}"
    load(pg_store, [ident("ana@x.example", "A"), doc("a", TEXTS[0], ["A"])], mine)
    load(pg_store, [doc("b", TEXTS[0], ["B"])], theirs)
    dim = pg_store.embedder.dim
    with psycopg.connect(pg_db, autocommit=True) as conn:  # a superuser: every index
        defs = dict(conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'chunk_vectors' "
            "AND indexname LIKE 'chunk\\_vectors\\_hnsw\\_%'"
        ).fetchall())  # fmt: skip
    assert {vector_index_name(mine, dim), vector_index_name(theirs, dim)} <= set(defs)
    assert f"tenant_id = '{mine}'" in defs[vector_index_name(mine, dim)]
    assert not [n for n in defs if n == f"chunk_vectors_hnsw_{dim}"]  # no shared graph
    plan = app_plan(pg_store, pg_db, mine, walk=True)
    assert f"Index Scan using {vector_index_name(mine, dim)}" in plan, plan
    assert vector_index_name(theirs, dim) not in plan, plan


def test_a_dropped_tenant_graph_comes_back_on_open(pg_cluster: PgServer, tmp_path: Path) -> None:
    dsn = new_pg_database(pg_cluster)
    try:
        store = make_pg_store(pg_cluster, dsn, tmp_path / "a")
        load(store, [doc("a", TEXTS[0], ["A"])], "t9")
        name = vector_index_name("t9", store.embedder.dim)
        store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP INDEX {name}")
        make_pg_store(pg_cluster, dsn, tmp_path / "b").close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", (name,)).fetchone()
    finally:
        drop_pg_database(pg_cluster, dsn)


def test_index_verify_finds_and_rebuild_repairs_drifted_acl_copies(
    pg_store: PostgresStore, pg_db: str
) -> None:
    """An ACL row's copy of its document's classification (migration 13) changed behind the
    triggers' back is a difference for ``index verify``, and ``index rebuild`` restores it."""
    tenant = f"h{next(_tenants)}"
    load(pg_store, [ident("ana@x.example", "A"), doc("d", TEXTS[0], ["A", "*"])], tenant)
    assert pg_store.verify_index(tenant).differences == 0
    with psycopg.connect(pg_db, autocommit=True) as conn:  # superuser: no policy, no trigger
        conn.execute("UPDATE doc_acl SET classification = 0 WHERE tenant_id = %s", (tenant,))
    assert pg_store.verify_index(tenant).vector_access_drift == 2  # both ACL rows
    pg_store.rebuild_index(tenant)
    assert pg_store.verify_index(tenant).differences == 0
    assert acl_copies_drifted(pg_db) == 0
