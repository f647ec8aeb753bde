"""Knowledge Store: truth store, derived search indexes, ACL pre-filter, search primitives."""

from __future__ import annotations

from pathlib import Path

from govrag.embed.base import Embedder
from govrag.errors import ConfigError
from govrag.settings import Settings
from govrag.store.glossary import Glossary
from govrag.store.protocol import (
    AccessLedger,
    AuditChains,
    AuditLog,
    AuditReader,
    AuditWriter,
    GovernedReads,
    IngestWrites,
    KnowledgeStore,
    MarkerLedger,
    RequestLog,
    SessionRecords,
    SessionStore,
    StoreAdmin,
)
from govrag.store.sqlite import SQLiteStore
from govrag.store.sqlite_database import is_sqlite_file
from govrag.store_url import parse_store_url, redact, scrub

__all__ = [
    "AccessLedger",
    "AuditChains",
    "AuditLog",
    "AuditReader",
    "AuditWriter",
    "GovernedReads",
    "IngestWrites",
    "KnowledgeStore",
    "MarkerLedger",
    "RequestLog",
    "SQLiteStore",
    "SessionRecords",
    "SessionStore",
    "StoreAdmin",
    "location_problems",
    "open_store",
]


def open_store(
    settings: Settings, embedder: Embedder | None = None, glossary: Glossary | None = None
) -> KnowledgeStore:
    """Open the deployment's store from ``[store] url`` (validated with the settings, see
    :mod:`govrag.store_url`). Nothing is created unless the URL names a usable place
    (:func:`location_problems`). ``glossary``: the entities the graph leg knows
    (``entities/*.jsonl``, :func:`~govrag.store.glossary.load_glossary`)."""
    # The URL itself is taken out of its SecretUrl only here, to hand to the driver.
    url = settings.store.url.get_secret_value()
    try:
        parsed = parse_store_url(url)
    except ValueError as exc:  # settings built without validation
        raise ConfigError(f"[store] url {exc}") from exc
    if parsed.kind == "memory":
        return SQLiteStore(":memory:", index_dir=None, embedder=embedder, search=settings.search,
                           glossary=glossary)  # fmt: skip
    for field, problem in location_problems(settings):
        shown = str(getattr(settings.store, field.removeprefix("store.")))  # password masked
        raise ConfigError(f"[store] {field.removeprefix('store.')} {shown!r}: {problem}")
    index_dir = settings.resolve_path(settings.store.index_dir)
    if parsed.kind == "sqlite":
        return SQLiteStore(
            settings.resolve_path(parsed.path),
            index_dir=index_dir,
            embedder=embedder,
            search=settings.search,
            glossary=glossary,
        )
    from govrag.store.postgres import PostgresStore  # the optional 'postgres' extra

    admin = settings.store.admin_url.get_secret_value() if settings.store.admin_url else None
    _check_conninfo("url", url)
    if admin is not None:
        _check_conninfo("admin_url", admin)
    return PostgresStore(
        url,
        admin_url=admin,
        pool_size=settings.store.pool_size,
        index_dir=index_dir,
        embedder=embedder,
        search=settings.search,
        glossary=glossary,
    )


def _check_conninfo(field: str, url: str) -> None:
    """Refuse a PostgreSQL URL libpq cannot parse before the store (or its pool's background
    thread) hands it to libpq, whose message quotes the bad part: a password included."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        # Not chained: the driver's message is the very text that holds the password.
        raise ConfigError(
            f"[store] {field} {redact(url)!r} cannot be parsed ({scrub(str(exc).strip(), url)}); "
            "percent-encode special characters of the user name and password (@ is %40, "
            "% is %25)"
        ) from None


def location_problems(settings: Settings) -> list[tuple[str, str]]:
    """``(field, problem)`` for each place the store would be created in that cannot be
    meant: the SQLite file's directory and ``index_dir``'s parent must exist (a typo must
    not create directories), the file must not be a directory, and an existing file must be
    an SQLite database. ``govrag config check`` reports them; :func:`open_store` refuses."""
    out: list[tuple[str, str]] = []
    parsed = parse_store_url(settings.store.url)
    if parsed.kind == "sqlite":
        path = settings.resolve_path(parsed.path)
        if path.is_dir():
            out.append(("store.url", f"names the directory {str(path)!r}; name a file in it"))
        elif not path.parent.is_dir():
            out.append(("store.url", _missing(path.parent)))
        elif path.is_file() and path.stat().st_size and not is_sqlite_file(path):
            problem = f"{str(path)!r} is not an SQLite database (nothing was changed); "
            out.append(("store.url", problem + "point the url at the store's .db file"))
    if parsed.kind != "memory":
        index_dir = settings.resolve_path(settings.store.index_dir)
        if not index_dir.is_dir() and not index_dir.parent.is_dir():
            out.append(("store.index_dir", _missing(index_dir.parent)))
    return out


def _missing(directory: Path) -> str:
    return (
        f"the directory {str(directory)!r} does not exist (nothing was created); fix the path "
        "or create the directory"
    )
