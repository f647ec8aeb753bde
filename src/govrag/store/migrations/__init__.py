"""The schema of both backends, as numbered ``.sql`` files, and the one runner that applies them.

A migration is a file ``NNNN_the_name.sql`` under ``sqlite/`` or ``postgres/`` (package data,
read through :mod:`importlib.resources`, so an installed wheel migrates like a checkout). Its
number is its version and its name, underscores read as spaces, is what ``schema_migrations``
records. Adding a migration is adding a file: nothing else lists them. A released file never
changes; the numbers of a dialect run 1, 2, 3, ... without gaps, so a missing or misnamed file
is a packaging error caught on load, not a schema silently skipped.

The runner keeps the contract the store has always had: a ``schema_migrations`` table records
what ran; each migration runs in its own transaction together with its record, re-checked under
a write lock so two processes opening one database apply it once; and a database whose latest
version is newer than the newest file is refused, since its schema may mean what this code
cannot read. Every migration is plain SQL, data backfills included (SQLite 4 and PostgreSQL 5,
6 backfill in SQL, PostgreSQL through a ``DO`` block where a loop is needed).
"""

from __future__ import annotations

import functools
import re
import sqlite3
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from govrag.errors import StoreError
from govrag.store.clock import now_iso

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    import psycopg

Dialect = Literal["sqlite", "postgres"]

_FILE = re.compile(r"^(\d{4})_([A-Za-z0-9_-]+)\.sql$")
_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)


class Migration(NamedTuple):
    """One file: its version, the name ``schema_migrations`` records, and its SQL."""

    version: int
    name: str
    sql: str


@functools.cache
def migrations(dialect: Dialect) -> tuple[Migration, ...]:
    """The dialect's migrations in version order, read from the package's ``.sql`` files."""
    return load(resources.files(__name__).joinpath(dialect), dialect)


def load(folder: Traversable, dialect: str) -> tuple[Migration, ...]:
    """The migrations in ``folder``, checked: every ``.sql`` file well named, numbered 1..n."""
    found: list[Migration] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE.match(entry.name)
        if match is None:
            raise StoreError(
                f"migration file {dialect}/{entry.name!r} is misnamed; name it "
                "NNNN_words_of_the_name.sql (four digits, then letters, digits, _ or -)"
            )
        name = match.group(2).replace("_", " ")
        found.append(Migration(int(match.group(1)), name, entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise StoreError(
            f"the {dialect} migrations are numbered {versions}; they must run 1, 2, 3, ... "
            "without gaps or repeats: renumber the newest file"
        )
    return tuple(found)


def check_not_newer(latest: int, known: tuple[Migration, ...] | list[Migration]) -> int:
    """Refuse a database migrated by a newer govrag: its schema may mean what we cannot read."""
    newest = max((m.version for m in known), default=0)
    if latest > newest:
        raise StoreError(
            f"the database schema is version {latest}, newer than this govrag knows ({newest}); "
            "upgrade govrag"
        )
    return latest


def _uncommented(sql: str) -> str:
    """``sql`` without its whole-line ``--`` comments (the why of a file, not its statements)."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def sqlite_statements(sql: str) -> list[str]:
    """Statements of a SQLite file; a trigger body's inner ``;`` does not end its statement."""
    out: list[str] = []
    buf = ""
    for piece in _uncommented(sql).split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf.strip().removesuffix(";"))
            buf = ""
    if buf.strip(" \n;"):
        out.append(buf.strip().removesuffix(";"))
    return out


def postgres_statements(sql: str) -> list[str]:
    """Statements of a PostgreSQL file; a ``$$``-quoted function body stays whole."""
    out: list[str] = []
    current = ""
    for i, part in enumerate(_uncommented(sql).split("$$")):
        if i % 2:  # inside a dollar-quoted body
            current += f"$${part}$$"
            continue
        first, *rest = part.split(";")
        current += first
        for piece in rest:
            out.append(current)
            current = piece
    out.append(current)
    return [s.strip() for s in out if s.strip()]


def migrate_sqlite(
    conn: sqlite3.Connection, known: tuple[Migration, ...] | list[Migration] | None = None
) -> int:
    """Apply pending SQLite migrations (``known``: all files), each in its own transaction.

    ``conn`` is in autocommit mode (``isolation_level=None``). Returns the schema version.
    """
    known = migrations("sqlite") if known is None else known
    try:
        conn.execute(_TABLE)
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        for version, name, sql in known:
            if version in done:
                continue
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-check under the write lock: another process may have migrated meanwhile.
                if conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                ).fetchone():
                    conn.execute("ROLLBACK")
                    continue
                for statement in sqlite_statements(sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, now_iso()),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        latest = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(f"could not migrate the SQLite schema: {exc}") from exc
    return check_not_newer(int(latest or 0), known)


def migrate_postgres(
    conn: psycopg.Connection[Any],
    *,
    app_role: str | None = None,
    known: tuple[Migration, ...] | list[Migration] | None = None,
) -> int:
    """Apply pending PostgreSQL migrations (``known``: all files); returns the schema version.

    ``conn`` must be the schema owner's (autocommit) connection. ``app_role``, when given, is
    granted what the application needs and nothing more: it does not own the tables, so the
    forced tenant policies always apply to it.
    """
    import psycopg

    known = migrations("postgres") if known is None else known
    try:
        # One migrator at a time, from the extension to the grants: processes starting on a
        # new deployment at once otherwise collide creating the extension or granting on one
        # object (a duplicate key, "tuple concurrently updated"). Released with the session
        # if this one dies.
        conn.execute("SELECT pg_advisory_lock(hashtext('govrag.migrate'))")
        try:
            return _migrate_locked(conn, known, app_role)
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext('govrag.migrate'))")
    except psycopg.Error as exc:
        raise StoreError(f"could not migrate the PostgreSQL schema: {str(exc).strip()}") from exc


def _migrate_locked(
    conn: psycopg.Connection[Any],
    known: tuple[Migration, ...] | list[Migration],
    app_role: str | None,
) -> int:
    from psycopg import sql

    from govrag.store.pg_schema import ensure_pgvector

    ensure_pgvector(conn)
    conn.execute(_TABLE)
    for version, name, ddl in known:
        with conn.transaction():
            # Serialise concurrent migrators; re-check under the lock.
            conn.execute("LOCK TABLE schema_migrations IN EXCLUSIVE MODE")
            done = conn.execute(
                "SELECT 1 FROM schema_migrations WHERE version = %s", (version,)
            ).fetchone()
            if done:
                continue
            for statement in postgres_statements(ddl):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations(version, name, applied_at) VALUES (%s, %s, %s)",
                (version, name, now_iso()),
            )
    if app_role:
        role = sql.Identifier(app_role)
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(role))
        conn.execute(
            sql.SQL(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}"
            ).format(role)
        )
        conn.execute(
            sql.SQL("REVOKE INSERT, UPDATE, DELETE ON schema_migrations FROM {}").format(role)
        )
        # Append-only for the application: it may add audit events, never change them.
        conn.execute(sql.SQL("REVOKE UPDATE, DELETE ON audit_events FROM {}").format(role))
    row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return check_not_newer(int(row[0] or 0) if row else 0, known)
