"""PostgreSQL schema on a real server: migrations, pgvector check, forced tenant RLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from govrag.testing import PgServer, running_server, skip_module_unless_available

skip_module_unless_available()

import psycopg  # noqa: E402 - importable once the skip above has not fired

from govrag.errors import StoreError  # noqa: E402
from govrag.store.migrations import migrate_postgres as migrate  # noqa: E402
from govrag.store.migrations import migrations  # noqa: E402
from govrag.store.pg_schema import TENANT_SETTING, TENANT_TABLES, parse_version  # noqa: E402

MIGRATIONS = migrations("postgres")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    with running_server(tmp_path_factory.mktemp("pgschema")) as pg:
        yield pg


@pytest.fixture(scope="module")
def db(server: PgServer) -> str:
    """A migrated database with an owner and an application role that does not own tables."""
    dsn = server.create_database("schema_test")
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute("CREATE ROLE govrag_owner LOGIN")
        admin.execute("CREATE ROLE govrag_app LOGIN")
        admin.execute("ALTER DATABASE schema_test OWNER TO govrag_owner")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # superuser: trusted setup step
    with as_role(dsn, "govrag_owner") as owner:
        assert migrate(owner, app_role="govrag_app") == len(MIGRATIONS)
        assert migrate(owner, app_role="govrag_app") == len(MIGRATIONS)  # idempotent
        owner.execute(f"SET {TENANT_SETTING} = 't1'")
        owner.execute("INSERT INTO tenants(tenant_id, created_at) VALUES ('t1', 'now')")
        owner.execute(f"SET {TENANT_SETTING} = 't2'")
        owner.execute("INSERT INTO tenants(tenant_id, created_at) VALUES ('t2', 'now')")
    return dsn


def as_role(dsn: str, role: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, user=role, autocommit=True)


def test_migrations_recorded_and_every_table_forces_rls(db: str) -> None:
    with psycopg.connect(db) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        assert versions == [v for v, _, _ in MIGRATIONS]
        rows = conn.execute(
            "SELECT relname, relrowsecurity, relforcerowsecurity, pg_get_userbyid(relowner) "
            "FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace"
        ).fetchall()
    tables = {r[0]: r[1:] for r in rows}
    assert set(TENANT_TABLES) | {"schema_migrations", "tenant_directory"} == set(tables)
    for table in TENANT_TABLES:
        assert tables[table] == (True, True, "govrag_owner"), table
        with psycopg.connect(db) as conn:
            columns = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s",
                (table,),
            )]  # fmt: skip
        assert "tenant_id" in columns, table


@pytest.mark.parametrize("role", ["govrag_app", "govrag_owner"])
def test_no_tenant_setting_sees_no_rows(db: str, role: str) -> None:
    with as_role(db, role) as conn:
        for table in TENANT_TABLES:
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (0,), table


def test_a_tenant_sees_only_its_rows_and_cannot_write_others(db: str) -> None:
    with as_role(db, "govrag_app") as conn:
        conn.execute(f"SET {TENANT_SETTING} = 't1'")
        assert conn.execute("SELECT tenant_id FROM tenants").fetchall() == [("t1",)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO corpora VALUES ('t2', 'c', '', 'now')")
        assert conn.execute("UPDATE tenants SET acl_epoch = 9").rowcount == 1  # t1 only
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE tenants SET tenant_id = 't2'")  # never moved into t2


def test_app_role_cannot_alter_schema(db: str) -> None:
    with as_role(db, "govrag_app") as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("ALTER TABLE documents DISABLE ROW LEVEL SECURITY")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM schema_migrations")


def test_missing_pgvector_is_a_clear_error(server: PgServer, tmp_path: Path) -> None:
    dsn = server.create_database("no_vector")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE ROLE plain_user LOGIN")
        admin.execute("ALTER DATABASE no_vector OWNER TO plain_user")
    with (
        as_role(dsn, "plain_user") as conn,
        pytest.raises(StoreError, match="pgvector"),
    ):
        migrate(conn)  # a non-superuser may not create the extension


@pytest.mark.parametrize(
    ("text", "expected"), [("0.8.0", (0, 8, 0)), ("0.8.6", (0, 8, 6)), ("1.0-dev", (1, 0))]
)
def test_parse_version(text: str, expected: tuple[int, ...]) -> None:
    assert parse_version(text) == expected


def test_old_pgvector_is_refused_with_the_upgrade_command(server: PgServer) -> None:
    dsn = server.create_database("old_vector")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        # What an old installation reports (the catalog is all govrag reads).
        conn.execute("UPDATE pg_extension SET extversion = '0.7.4' WHERE extname = 'vector'")
        with pytest.raises(StoreError, match=r"pgvector 0\.7\.4 is too old.*ALTER EXTENSION"):
            migrate(conn)
