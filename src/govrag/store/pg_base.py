"""PostgreSQL connection plumbing: a pool, tenant-scoped transactions, clear errors.

Every transaction names its tenant with ``set_config('govrag.tenant', ..., true)`` (local to
the transaction, so it is safe behind a transaction-mode pooler): the forced row-level
security policies of ``pg_schema.py`` then hide every other tenant's rows, in addition to the
``tenant_id`` predicate each statement carries.

Needs the ``postgres`` extra; importing this module without it raises
:class:`~govrag.errors.MissingExtraError` naming the extra.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from govrag.errors import MissingExtraError, StoreError
from govrag.store.pg_schema import TENANT_SETTING, migrate

try:
    import psycopg
    import psycopg_pool
    from psycopg.conninfo import conninfo_to_dict
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingExtraError("psycopg", "postgres", "The PostgreSQL store") from exc

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


class PgBase:
    """A connection pool on one PostgreSQL database, migrated on open."""

    def __init__(
        self,
        url: str,
        *,
        admin_url: str | None = None,
        app_role: str | None = None,
        pool_size: int = 4,
    ) -> None:
        self.url = url
        self.where = describe_server(url)
        migrate_url = admin_url or url
        try:
            with psycopg.connect(
                migrate_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            ) as conn:
                migrate(conn, app_role=app_role)
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc, describe_server(migrate_url)) from exc
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            # Verified on checkout: after a server restart a dead pooled connection is
            # replaced instead of failing the caller's first statement.
            check=psycopg_pool.ConnectionPool.check_connection,
            timeout=CONNECT_TIMEOUT_S,
            open=False,
            name="govrag",
        )
        self._pool.open(wait=False)

    def close(self) -> None:
        self._pool.close()

    @staticmethod
    def _unreachable(exc: Exception, where: str) -> StoreError:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(
            f"PostgreSQL at {where} is unreachable ({reason}); check [store] url and that the "
            "server is running"
        )

    @contextmanager
    def _tx(self, tenant: str) -> Iterator[psycopg.Connection[Any]]:
        """One transaction scoped to ``tenant`` (row-level security sees only its rows)."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise self._unreachable(exc, self.where) from exc
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc, self.where) from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL statement failed: {str(exc).strip()}") from exc

    def _q(
        self, tenant: str, sql: str, params: Sequence[object] | dict[str, object] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one tenant-scoped statement and fetch its rows (none for DML)."""
        with self._tx(tenant) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []
