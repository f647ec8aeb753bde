"""PostgreSQL's per-tenant HNSW graphs (migration 12), attacked.

A tenant's first embedded document makes the schema owner create an index for it (a trigger
running as the owner, since the application role owns nothing). Whoever can write as the
application role, or name a tenant, tries to turn that into more: SQL in a tenant id, the
owner's function called directly, temporary objects shadowing what the owner's functions
read, an index per dimension, two new tenants deadlocking, a squatted index name.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from govrag.testing import PgServer, skip_module_unless_available

skip_module_unless_available()

import psycopg  # noqa: E402
import psycopg.conninfo  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from govrag.store.pg_schema import TENANT_SETTING, vector_index_name  # noqa: E402
from govrag.types import SearchRequest, Strategy  # noqa: E402

from conftest import (  # noqa: E402
    PG_APP_ROLE,
    doc,
    drop_pg_database,
    ident,
    load,
    make_pg_store,
    new_pg_database,
    principal,
)

#: Tenant ids are free text: each must become a literal of the index predicate, not SQL.
HOSTILE_TENANTS = [
    "o'brien",
    "x'); DROP TABLE documents; --",
    'quote"and\\backslash',
    "t" * 200,  # a name past PostgreSQL's 63 bytes: the index name is a hash, not the id
    "ünïcødé-テナント",
]


@pytest.fixture
def dsn(pg_cluster: PgServer) -> str:
    created = new_pg_database(pg_cluster)
    yield created  # type: ignore[misc]
    drop_pg_database(pg_cluster, created)


def test_a_hostile_tenant_id_gets_its_own_graph_and_runs_no_sql(
    pg_cluster: PgServer, dsn: str, tmp_path: Path
) -> None:
    store = make_pg_store(pg_cluster, dsn, tmp_path, exact_vector_threshold=0)
    try:
        for tenant in HOSTILE_TENANTS:
            load(store, [ident("ana@x.example", "A"), doc("a", "wire limits", ["A"])], tenant)
        for tenant in HOSTILE_TENANTS:  # the walk (threshold 0) finds each tenant's own row
            request = SearchRequest(query="wire limits", strategy=Strategy.SEMANTIC, top_k=5)
            hits = store.search(principal("ana@x.example", tenant), request).results
            assert [h.doc_id for h in hits] == ["a"], tenant
    finally:
        store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('documents')").fetchone() == ("documents",)
        names = {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'chunk_vectors'")}  # fmt: skip
        dim = 64
        assert {vector_index_name(t, dim) for t in HOSTILE_TENANTS} <= names


def test_the_app_role_cannot_call_the_owners_index_function(
    pg_cluster: PgServer, dsn: str, tmp_path: Path
) -> None:
    """Creating indexes is the owner's; the application role may only record a vector space
    (which creates its own tenant's index, once)."""
    make_pg_store(pg_cluster, dsn, tmp_path).close()
    app = psycopg.conninfo.make_conninfo(dsn, user=PG_APP_ROLE)
    with psycopg.connect(app) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT govrag_ensure_tenant_vector_index('t1', 64)")
    with psycopg.connect(app) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE INDEX mine ON chunk_vectors (tenant_id)")


def test_a_vector_space_recorded_for_another_tenant_is_refused(
    pg_cluster: PgServer, dsn: str, tmp_path: Path
) -> None:
    """Under tenant t1's setting, the app role cannot record t2's vector space (the forced
    tenant policy), so it cannot make the owner build an index over t2's rows either."""
    make_pg_store(pg_cluster, dsn, tmp_path).close()
    app = psycopg.conninfo.make_conninfo(dsn, user=PG_APP_ROLE)
    with psycopg.connect(app) as conn:
        conn.execute("SELECT set_config(%s, 't1', true)", (TENANT_SETTING,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO vector_spaces(tenant_id, embedder, dim) VALUES ('t2', 'h', 8)"
            )
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert not conn.execute(
            "SELECT 1 FROM pg_indexes WHERE indexname = %s", (vector_index_name("t2", 8),)
        ).fetchone()


def _first_space(conn: psycopg.Connection[Any], tenant: str) -> None:
    """What a new tenant's first embedded document does, in an open transaction."""
    conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
    conn.execute("INSERT INTO tenants(tenant_id, created_at) VALUES (%s, 'now')", (tenant,))
    conn.execute(
        "INSERT INTO vector_spaces(tenant_id, embedder, dim) VALUES (%s, 'h', 64)", (tenant,)
    )


def test_a_temporary_view_named_pg_class_runs_nothing_as_the_owner(
    pg_cluster: PgServer, dsn: str, tmp_path: Path
) -> None:
    """The owner's functions pin their search path with pg_temp last: the application role's
    temporary objects shadow nothing they read."""
    make_pg_store(pg_cluster, dsn, tmp_path).close()
    app = psycopg.conninfo.make_conninfo(dsn, user=PG_APP_ROLE)
    with psycopg.connect(app, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION pg_temp.pwn() RETURNS name LANGUAGE plpgsql AS $$ BEGIN "
            "EXECUTE format('GRANT UPDATE, DELETE ON public.audit_events TO %I', session_user);"
            " EXECUTE 'ALTER TABLE public.documents NO FORCE ROW LEVEL SECURITY';"
            " RETURN 'x'; END $$"
        )
        for name in ("pg_class", "pg_extension", "pg_namespace"):
            conn.execute(f"CREATE TEMP VIEW {name} AS SELECT pg_temp.pwn() AS relname")
        with conn.transaction():
            _first_space(conn, "evil")
        granted = conn.execute("SELECT has_table_privilege('audit_events', 'DELETE')").fetchone()
    with psycopg.connect(dsn, autocommit=True) as su:
        forced = su.execute(
            "SELECT relforcerowsecurity FROM pg_catalog.pg_class WHERE relname = 'documents'"
        ).fetchone()
        made = su.execute(
            "SELECT 1 FROM pg_indexes WHERE indexname = %s", (vector_index_name("evil", 64),)
        ).fetchone()
    assert granted == (False,) and forced == (True,) and made


def test_two_new_tenants_first_ingests_take_turns_instead_of_deadlocking(
    pg_cluster: PgServer, dsn: str, tmp_path: Path
) -> None:
    make_pg_store(pg_cluster, dsn, tmp_path).close()
    app = psycopg.conninfo.make_conninfo(dsn, user=PG_APP_ROLE)
    errors: list[Exception] = []
    vector = "INSERT INTO chunk_vectors(chunk_id, tenant_id, embedding) VALUES (1, %s, %s)"
    with psycopg.connect(app) as a, psycopg.connect(app) as b:
        register_vector(a)
        register_vector(b)
        _first_space(a, "na")

        def second() -> None:  # b's first document, while a's is still open
            try:
                _first_space(b, "nb")
                b.execute(vector, ("nb", np.full(64, 0.1, np.float32)))
            except psycopg.Error as exc:
                errors.append(exc)
            b.rollback()

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.5)  # b is now in its first_space (waiting its turn, or past it)
        try:
            a.execute(vector, ("na", np.full(64, 0.1, np.float32)))
        except psycopg.Error as exc:  # no chunk 1: a foreign key error, after the locks
            errors.append(exc)
        a.rollback()
        thread.join(30)
    assert not thread.is_alive()
    assert not [e for e in errors if isinstance(e, psycopg.errors.DeadlockDetected)], errors


def test_the_app_role_cannot_make_the_owner_build_an_index_per_dimension(
    pg_cluster: PgServer, dsn: str, tmp_path: Path
) -> None:
    store = make_pg_store(pg_cluster, dsn, tmp_path)
    load(store, [ident("ana@x.example", "A"), doc("a", "wire limits", ["A"])], "t1")
    store.close()
    app = psycopg.conninfo.make_conninfo(dsn, user=PG_APP_ROLE)
    with psycopg.connect(app, autocommit=True) as conn:
        conn.execute("SELECT set_config(%s, 't1', false)", (TENANT_SETTING,))
        for dim in (3, 5, 7, 64):
            conn.execute("UPDATE vector_spaces SET dim = %s", (dim,))
        (n,) = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'chunk_vectors' "
            "AND indexname LIKE 'chunk\\_vectors\\_hnsw\\_%'"
        ).fetchone()
    assert n == 1


def test_a_temporary_table_of_the_index_name_denies_no_tenant_its_graph(
    pg_cluster: PgServer, dsn: str, tmp_path: Path
) -> None:
    store = make_pg_store(pg_cluster, dsn, tmp_path)
    app = psycopg.conninfo.make_conninfo(dsn, user=PG_APP_ROLE)
    name = vector_index_name("victim", 64)
    with psycopg.connect(app, autocommit=True) as squatter:
        squatter.execute(f'CREATE TEMP TABLE "{name}" ()')
        load(store, [ident("ana@x.example", "A"), doc("a", "wire limits", ["A"])], "victim")
        store.close()
        with psycopg.connect(dsn, autocommit=True) as su:
            made = su.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", (name,)).fetchone()
    assert made
