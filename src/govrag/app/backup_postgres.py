"""Restoring a PostgreSQL store from a backup's ``pg_dump`` archive.

Into a new, empty database only (the restored ``govrag.toml``'s ``[store]``, or
``GOVRAG_STORE__URL`` and ``GOVRAG_STORE__ADMIN_URL`` pointing at a database made for it): a
database that holds a govrag store already is refused, never merged into. ``pg_restore`` runs
as the schema owner in one transaction and stops at the first error, so a restore that fails
(a missing application role, a server too old) leaves the database as empty as it was. The
roles are the server's, not the database's: create them first, as for a new deployment
(docs/scaling.md).
"""

from __future__ import annotations

from pathlib import Path

from govrag.errors import ConfigError, StoreError
from govrag.settings import Settings
from govrag.store_url import parse_store_url


def pg_restore(settings: Settings, archive: Path) -> None:
    """Load ``archive`` into the empty database the settings name (see the module)."""
    url = settings.store.admin_url or settings.store.url
    if parse_store_url(url).kind != "postgresql":
        raise ConfigError("the backup holds a PostgreSQL store, but the restored settings' "
                          "[store] url is not postgresql://; point GOVRAG_STORE__URL (and "
                          "GOVRAG_STORE__ADMIN_URL) at a new, empty database")  # fmt: skip
    from govrag.store.pg_database import describe_server, run_client

    secret = url.get_secret_value()
    where = describe_server(secret)
    if _holds_a_store(secret, where):
        raise ConfigError(f"the database {where} holds a govrag store already; a restore "
                          "never merges: create a new, empty database for it")  # fmt: skip
    failed = run_client("pg_restore", secret, ["--exit-on-error", "--single-transaction",
                                               "--no-owner", str(archive)])  # fmt: skip
    if failed is not None:
        raise StoreError(f"pg_restore into {where} failed, and restored nothing: {failed} "
                         "(are the roles created? docs/backup.md)")  # fmt: skip


def _holds_a_store(url: str, where: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute("SELECT to_regclass('public.schema_migrations')").fetchone()
    except psycopg.OperationalError as exc:
        raise StoreError(f"PostgreSQL at {where} is unreachable ({str(exc).strip()}); check "
                         "[store] url and that the database exists") from exc  # fmt: skip
    return row is not None and row[0] is not None
