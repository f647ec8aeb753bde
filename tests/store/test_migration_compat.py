"""A database made by the code before the ``.sql`` migration files opens and works unchanged.

The fixtures were written by govrag at 8fd14a5, whose migrations were Python strings
(``store/schema.py``, ``store/pg_schema.py``): ``sqlite_8fd14a5.db`` is that code's SQLite
store, ``postgres_8fd14a5.sql`` a ``pg_dump --inserts --no-owner --no-privileges`` of its
PostgreSQL store, both holding the same records (two identities, a group, four documents, an
audit event and a session). Each test opens the old database with today's code and checks
that nothing of it is migrated again (only the migrations added since run), that search still
applies the ACLs, that writes work, that the files the old code had create the schema it created,
object by object, and that the old database migrated forward has the schema of a new one.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from govrag.harvest.records import Record
from govrag.store.migrations import migrate_sqlite, migrations
from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import (
    BACKENDS,
    acl_copies_drifted,
    doc,
    group,
    ident,
    load,
    make_pg_store,
    make_store,
    principal,
)

FIXTURES = Path(__file__).parent / "fixtures"
#: The records both fixtures hold (the script that wrote them loaded exactly these).
RECORDS: list[Record] = [
    ident("ana@x.example", "A"),
    ident("ben@x.example", "B"),
    group("G", ["A"]),
    doc("d1", "the quarterly budget review for the marketing team", ["A"], title="Budget"),
    doc("d2", "public holiday calendar for every office", ["*"], title="Holidays"),
    doc(
        "d3",
        "secret merger plans with the budget numbers",
        ["G"],
        classification="restricted",
        title="Merger",
    ),
    doc("d4", "ben's private notes about the budget", ["B"], title="Notes"),
]
OLD_VERSIONS = [
    (1, "knowledge store core"),
    (2, "audit log"),
    (3, "sessions"),
    (4, "one owner per account"),
    (5, "hidden-item marker budget"),
]
OLD_PG_VERSIONS = [
    (1, "knowledge store core"),
    (2, "tenant row-level security"),
    (3, "audit log"),
    (4, "sessions"),
    (5, "one owner per account"),
    (6, "access columns on vectors"),
    (7, "audit directory"),
    (8, "hidden-item marker budget"),
]


def found(store: KnowledgeStore, email: str, query: str) -> set[str]:
    """What ``email`` finds by keyword; semantic and hybrid find only what they may read."""
    readable = {"ana@x.example": {"d1", "d2", "d3"}, "ben@x.example": {"d2", "d4", "d5"}}
    for strategy in (Strategy.SEMANTIC, Strategy.HYBRID):
        request = SearchRequest(query=query, strategy=strategy, top_k=20)
        hits = {h.doc_id for h in store.search(principal(email), request).results}
        assert hits and hits <= readable[email], (strategy, hits)
    request = SearchRequest(query=query, strategy=Strategy.KEYWORD, top_k=20)
    return {h.doc_id for h in store.search(principal(email), request).results}


def check_store(store: KnowledgeStore) -> None:
    """The old data reads as before, under the same ACLs; the old audit chain verifies and
    grows; a new document is searchable."""
    assert found(store, "ana@x.example", "budget") == {"d1", "d3"}
    assert found(store, "ben@x.example", "budget") == {"d4"}
    assert found(store, "ana@x.example", "holiday calendar") == {"d2"}
    assert store.get_session("t1", "s1") is not None
    assert [e.kind for e in store.audit_events("t1")][:2] == ["note", "route_pinned"]
    store.append_audit("t1", "note", {"x": 2}, request_id="r2", session_id="s1")
    assert store.verify_audit("t1").ok
    load(store, [doc("d5", "budget forecast for the next year", ["B"])])
    assert found(store, "ben@x.example", "budget") == {"d4", "d5"}


# -- SQLite -----------------------------------------------------------------------------------
def sqlite_schema(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Every schema object with its SQL, whitespace-normalised (SQLite keeps the DDL's text)."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
    ).fetchall()
    return [(t, n, " ".join(sql.split())) for t, n, sql in rows]


def test_the_files_create_the_schema_the_old_code_created(tmp_path: Path) -> None:
    # Read-only: a missing fixture must fail here, not be created empty.
    old = sqlite3.connect(f"file:{FIXTURES / 'sqlite_8fd14a5.db'}?mode=ro", uri=True)
    new = sqlite3.connect(tmp_path / "new.db", isolation_level=None)
    then = migrations("sqlite")[: len(OLD_VERSIONS)]
    assert migrate_sqlite(new, then) == len(OLD_VERSIONS)
    assert sqlite_schema(new) == sqlite_schema(old)
    assert len(sqlite_schema(old)) > 30  # tables, indexes and triggers: not a vacuous match
    # Migrated forward, the old database has exactly the schema a new one gets.
    shutil.copy(FIXTURES / "sqlite_8fd14a5.db", tmp_path / "old.db")
    upgraded = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    fresh = sqlite3.connect(tmp_path / "fresh.db", isolation_level=None)
    assert migrate_sqlite(upgraded) == migrate_sqlite(fresh) == len(migrations("sqlite"))
    assert sqlite_schema(upgraded) == sqlite_schema(fresh)


def test_an_old_sqlite_database_opens_unchanged(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "sqlite_8fd14a5.db", tmp_path / "govrag.db")
    before = sqlite3.connect(tmp_path / "govrag.db")
    recorded = before.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
    before.close()
    assert [r[:2] for r in recorded] == OLD_VERSIONS
    store = make_store(tmp_path)  # no index files: the open rebuilds them from the truth
    try:
        check_store(store)
    finally:
        store.close()
    after = sqlite3.connect(tmp_path / "govrag.db")
    rows = after.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
    # The old rows untouched; only the migrations added since 8fd14a5 ran.
    assert rows[: len(recorded)] == recorded
    added = [(m.version, m.name) for m in migrations("sqlite")[len(recorded) :]]
    assert [r[:2] for r in rows[len(recorded) :]] == added


# -- PostgreSQL -------------------------------------------------------------------------------
def pg_dump(dsn: str, *args: str) -> str:
    from govrag.testing.pg_process import find_bindir

    bindir = find_bindir()
    assert bindir is not None
    out = subprocess.run(
        [str(bindir / "pg_dump"), "--no-owner", "--no-privileges", "--no-comments", *args, dsn],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    # pg_dump 17.6+ fences its output with a random \restrict key; it is not schema.
    return "\n".join(line for line in out.splitlines() if not line.startswith("\\"))


def restore_old(pg: Any, name: str) -> str:
    """A database holding the 8fd14a5 PostgreSQL fixture; returns its superuser DSN."""
    import psycopg

    dsn = pg.create_database(name)
    script = (FIXTURES / "postgres_8fd14a5.sql").read_text(encoding="utf-8")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(script.encode())  # no parameters: one simple query, many statements
    return dsn


def test_an_old_postgres_database_opens_unchanged(pg_cluster: Any, tmp_path: Path) -> None:
    import psycopg

    old = restore_old(pg_cluster, "compat_old")
    with psycopg.connect(old) as conn:
        recorded = conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
    assert [r[:2] for r in recorded] == OLD_PG_VERSIONS
    store = make_pg_store(pg_cluster, old, tmp_path / "old-index")
    try:
        check_store(store)
    finally:
        store.close()
    with psycopg.connect(old) as conn:
        rows = conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
        # Migration 12: no graph per dimension is left, each tenant with vectors has its own.
        hnsw = "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'chunk\\_vectors\\_hnsw%'"
        indexes = [r[0] for r in conn.execute(hnsw)]
        assert indexes and all(len(name.split("_")) == 5 for name in indexes), indexes
    # Migration 13: every ACL row holds its document's classification and corpus.
    assert acl_copies_drifted(old) == 0
    # The old rows untouched; only the migrations added since 8fd14a5 ran.
    assert rows[: len(recorded)] == recorded
    added = [(m.version, m.name) for m in migrations("postgres")[len(recorded) :]]
    assert [r[:2] for r in rows[len(recorded) :]] == added


def test_the_postgres_files_create_the_schema_the_old_code_created(
    pg_cluster: Any, tmp_path: Path
) -> None:
    """Compared as ``pg_dump --schema-only`` text: tables, columns and collations, keys,
    indexes, policies, functions and triggers, with the same records loaded on both sides so
    the indexes made on open (HNSW per dimension) match too."""
    old = restore_old(pg_cluster, "compat_schema_old")
    new = pg_cluster.create_database("compat_schema_new")
    for dsn in (old, new):
        store = make_pg_store(pg_cluster, dsn, tmp_path / dsn.rsplit("/", 1)[1])
        if dsn == new:
            load(store, RECORDS)
        store.close()
    old_schema, new_schema = pg_dump(old, "--schema-only"), pg_dump(new, "--schema-only")
    assert "CREATE POLICY reader_acl" in new_schema and "govrag_acl_sync" in new_schema
    assert new_schema == old_schema


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_migration_is_packaged(backend: str) -> None:
    """Read through importlib.resources, numbered from 1 without gaps, names as recorded."""
    from importlib import resources

    dialect = "sqlite" if backend == "sqlite" else "postgres"
    names = [(m.version, m.name) for m in migrations(dialect)]
    expected = OLD_VERSIONS if backend == "sqlite" else OLD_PG_VERSIONS
    assert names[: len(expected)] == expected
    folder = resources.files("govrag.store.migrations").joinpath(dialect)
    assert sorted(e.name for e in folder.iterdir() if e.name.endswith(".sql"))[0].startswith(
        "0001_"
    )
