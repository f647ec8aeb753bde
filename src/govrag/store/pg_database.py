"""The PostgreSQL :class:`~govrag.store.database.Database`: a pool, tenant-scoped
transactions, clear errors.

Every transaction names its tenant with ``set_config('govrag.tenant', ..., true)`` (local to
the transaction, so it is safe behind a transaction-mode pooler): the forced row-level
security policies (``migrations/postgres/``) then hide every other tenant's rows, in addition
to the ``tenant_id`` predicate each statement carries.

Needs the ``postgres`` extra; importing this module without it raises
:class:`~govrag.errors.MissingExtraError` naming the extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from govrag.errors import MissingExtraError, StoreError
from govrag.store.database import log
from govrag.store.dialect import POSTGRES, Conn, Cursor, to_pyformat
from govrag.store.migrations import migrate_postgres
from govrag.store.pg_schema import AUDIT_DIRECTORY_SETTING, TENANT_SETTING, ensure_vector_indexes

try:
    import psycopg
    import psycopg_pool
    from pgvector.psycopg import register_vector
    from psycopg.conninfo import conninfo_to_dict
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingExtraError(
        getattr(exc, "name", None) or "psycopg", "postgres", "The PostgreSQL store"
    ) from exc

#: How long to wait for a connection before reporting the server unreachable.
CONNECT_TIMEOUT_S = 5


def describe_server(url: str) -> str:
    """``user@host:port/db`` of a URL, never its password (for error messages)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the configured server"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    return f"{parts.get('user', '')}@{host}:{port}/{parts.get('dbname', '')}".lstrip("@")


def _user_of(url: str) -> str | None:
    try:
        user = conninfo_to_dict(url).get("user")
    except psycopg.ProgrammingError:
        return None
    return str(user) if user else None


class PgConn:
    """A psycopg connection taking the shared statements' ``?`` placeholders."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor:
        return self.raw.execute(to_pyformat(sql), params)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]], /) -> None:
        if seq:
            with self.raw.cursor() as cur:
                cur.executemany(to_pyformat(sql), seq)


class PgDatabase:
    """A connection pool on one PostgreSQL database, migrated on open."""

    dialect = POSTGRES
    unique_violation: tuple[type[Exception], ...] = (psycopg.errors.UniqueViolation,)

    def __init__(
        self,
        url: str,
        *,
        admin_url: str | None = None,
        app_role: str | None = None,
        pool_size: int = 4,
    ) -> None:
        self.url = url
        self.admin_url = admin_url or url
        #: Transactions take connections from a pool (see :class:`Database`).
        self.connection_lock: threading.RLock | None = None
        self.where = describe_server(url)
        if app_role is None and admin_url and admin_url != url:
            # The application connects as a role that owns nothing: grant it what it needs.
            app_role = _user_of(url)
        try:
            with psycopg.connect(
                self.admin_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            ) as conn:
                migrate_postgres(conn, app_role=app_role)
                for name in ensure_vector_indexes(conn):
                    log.info("created the HNSW index %s", name)
        except psycopg.OperationalError as exc:
            raise _unreachable(exc, describe_server(self.admin_url)) from exc
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            configure=register_vector,
            # Verified on checkout: after a server restart a dead pooled connection is
            # replaced instead of failing the caller's first statement.
            check=psycopg_pool.ConnectionPool.check_connection,
            timeout=CONNECT_TIMEOUT_S,
            open=False,
            name="govrag",
        )
        self._pool.open(wait=False)
        self._pinned = threading.local()

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def tx(self, tenant: str, *, read: bool = False) -> Iterator[Conn]:
        """One transaction scoped to ``tenant`` (row-level security sees only its rows).

        A read transaction is one snapshot (repeatable read), so the statements of an outbox
        apply or a search agree with each other. Inside :meth:`pin_reads`, reads of its
        tenant join the pinned transaction.
        """
        pinned = getattr(self._pinned, "conn", None)
        if read and pinned is not None and self._pinned.tenant == tenant:
            yield pinned
            return
        try:
            with self._pool.connection() as conn, conn.transaction():
                if read:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
                yield PgConn(conn)
        except psycopg_pool.PoolTimeout as exc:
            raise _unreachable(exc, self.where) from exc
        except psycopg.OperationalError as exc:
            raise _unreachable(exc, self.where) from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL statement failed: {str(exc).strip()}") from exc

    @contextmanager
    def pin_reads(self, tenant: str) -> Iterator[None]:
        """Serve this thread's reads of ``tenant`` from one snapshot on one connection: a
        search then costs one checkout and a round trip per statement, not a transaction
        per statement, and all its statements see the same data."""
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        with self.tx(tenant, read=True) as conn:
            self._pinned.conn, self._pinned.tenant = conn, tenant
            try:
                yield
            finally:
                self._pinned.conn = None

    @contextmanager
    def directory_tx(self) -> Iterator[Conn]:
        with self.tx("", read=True) as conn:
            conn.execute("SELECT set_config(?, 'on', true)", (AUDIT_DIRECTORY_SETTING,))
            yield conn

    @contextmanager
    def audit_tx(self, tenant: str) -> Iterator[Conn]:
        with self.tx(tenant) as conn:
            # Whatever the server's default: the commit returns once the WAL is flushed.
            conn.execute("SET LOCAL synchronous_commit = on")
            yield conn

    def q(self, tenant: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.tx(tenant, read=True) as conn:
            return list(conn.execute(sql, params).fetchall())

    def back_up(self, dest: Path) -> None:
        """``pg_dump --format=custom`` of the database as its owner (``admin_url``): one
        snapshot, row-level security, grants and the per-tenant vector indexes included."""
        failed = run_client("pg_dump", self.admin_url, ["--format=custom", "--file", str(dest)])
        if failed is not None:
            raise StoreError(f"pg_dump of the PostgreSQL store at {self.where} failed: "
                             f"{failed}")  # fmt: skip


#: libpq's environment variable for each connection parameter govrag's URLs may carry.
_LIBPQ_ENV = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD",
              "dbname": "PGDATABASE", "sslmode": "PGSSLMODE"}  # fmt: skip


def run_client(program: str, url: str, args: list[str]) -> str | None:
    """Run the PostgreSQL client ``program`` (``pg_dump``, ``pg_restore``) on the database of
    ``url``; ``None`` when it succeeded, else why it failed (its last line of errors). The
    connection goes to it in its environment: a URL on its command line would show its
    password to every local user."""
    found = shutil.which(program)
    if found is None:
        raise StoreError(f"{program} is not on PATH; install the PostgreSQL client tools of "
                         "the server's major version (docs/backup.md)")  # fmt: skip
    params = conninfo_to_dict(url)
    env = os.environ | {v: str(params[k]) for k, v in _LIBPQ_ENV.items() if params.get(k)}
    done = subprocess.run([found, "--dbname", env.get("PGDATABASE", ""), *args], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode == 0:
        return None
    return (done.stderr.strip() or f"exit code {done.returncode}").splitlines()[-1]


def _unreachable(exc: Exception, where: str) -> StoreError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreError(
        f"PostgreSQL at {where} is unreachable ({reason}); check [store] url and that the "
        "server is running"
    )
