"""PostgreSQL's per-tenant HNSW graphs (migration 12), attacked.

A tenant's first embedded document makes the schema owner create an index for it (a trigger
running as the owner, since the application role owns nothing). Whoever can write as the
application role, or name a tenant, tries to turn that into more: SQL in a tenant id, the
owner's function called directly, one tenant's graph reached by another's walk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from govrag.testing import PgServer, skip_module_unless_available

skip_module_unless_available()

import psycopg  # noqa: E402
import psycopg.conninfo  # noqa: E402

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
