"""Versioned migrations: recorded, idempotent, each in a transaction, newer schemas refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from govrag.errors import StoreError
from govrag.store.migrations import Migration, load, migrate_sqlite, migrations, sqlite_statements

from conftest import make_store

MIGRATIONS = migrations("sqlite")


def test_migrations_are_recorded_and_idempotent(tmp_path: Path) -> None:
    make_store(tmp_path).close()
    make_store(tmp_path).close()  # a second open applies nothing twice
    conn = sqlite3.connect(tmp_path / "govrag.db")
    rows = conn.execute("SELECT version, name FROM schema_migrations").fetchall()
    assert rows == [(v, n) for v, n, _ in MIGRATIONS]
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"documents", "chunks", "doc_acl", "identities", "group_members", "index_outbox",
            "access_counter", "entities", "relations", "chunk_vectors"} <= tables  # fmt: skip
    # Every table but the migration log carries tenant_id.
    for table in tables - {"schema_migrations", "sqlite_sequence"}:
        columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        assert "tenant_id" in columns, table


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    migrate_sqlite(conn)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'now')")
    with pytest.raises(StoreError, match="newer than this govrag knows"):
        migrate_sqlite(conn)


def test_a_failing_migration_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = [Migration(1, "broken", "CREATE TABLE a (x); CREATE TABLE")]
    conn = sqlite3.connect(tmp_path / "y.db", isolation_level=None)
    with pytest.raises(StoreError):
        migrate_sqlite(conn, broken)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"schema_migrations"}


def test_migration_files_are_numbered_and_named(tmp_path: Path) -> None:
    """A new migration is a file; a misnamed file or a gap in the numbers is refused on
    load (a packaging mistake must not skip a schema change silently)."""
    (tmp_path / "0001_first_thing.sql").write_text("CREATE TABLE a (x);\n")
    (tmp_path / "0002_second-thing.sql").write_text("-- why; with a semicolon\nCREATE TABLE b (y);")
    (tmp_path / "README.txt").write_text("not a migration")
    loaded = load(tmp_path, "sqlite")
    assert [(m.version, m.name) for m in loaded] == [(1, "first thing"), (2, "second-thing")]
    assert sqlite_statements(loaded[1].sql) == ["CREATE TABLE b (y)"]
    conn = sqlite3.connect(tmp_path / "z.db", isolation_level=None)
    assert migrate_sqlite(conn, loaded) == 2
    (tmp_path / "0004_gap.sql").write_text("CREATE TABLE c (z);")
    with pytest.raises(StoreError, match=r"numbered \[1, 2, 4\].*renumber"):
        load(tmp_path, "sqlite")
    (tmp_path / "0004_gap.sql").unlink()
    (tmp_path / "3_short.sql").write_text("CREATE TABLE c (z);")
    with pytest.raises(StoreError, match="misnamed"):
        load(tmp_path, "sqlite")
