"""Knowledge Store: truth store, derived search indexes, ACL pre-filter, search primitives."""

from __future__ import annotations

from govrag.embed.base import Embedder
from govrag.errors import ConfigError
from govrag.settings import Settings
from govrag.store.protocol import KnowledgeStore
from govrag.store.sqlite import SQLiteStore

__all__ = ["KnowledgeStore", "SQLiteStore", "open_store"]


def open_store(settings: Settings, embedder: Embedder | None = None) -> KnowledgeStore:
    """Open the deployment's store from ``[store] url``."""
    url = settings.store.url
    if url.startswith("sqlite://"):
        rest = url.removeprefix("sqlite://")
        if rest in (":memory:", "/:memory:"):
            return SQLiteStore(
                ":memory:", index_dir=None, embedder=embedder, search=settings.search
            )
        if not rest.startswith("/"):
            raise ConfigError(
                f"store url {url!r} is malformed; write sqlite:///govrag.db (relative to the "
                "deployment) or sqlite:////absolute/path.db"
            )
        path = settings.resolve_path(rest[1:])
        return SQLiteStore(
            path,
            index_dir=settings.resolve_path(settings.store.index_dir),
            embedder=embedder,
            search=settings.search,
        )
    if url.startswith(("postgresql://", "postgres://")):
        from govrag.store.postgres import PostgresStore  # the optional 'postgres' extra

        return PostgresStore(
            url,
            admin_url=settings.store.admin_url,
            pool_size=settings.store.pool_size,
            index_dir=settings.resolve_path(settings.store.index_dir),
            embedder=embedder,
            search=settings.search,
        )
    scheme = url.split(":", 1)[0]
    raise ConfigError(
        f"store url {url!r}: unsupported scheme {scheme!r}; use sqlite:///govrag.db or "
        "postgresql://user@host:5432/dbname (with the 'postgres' extra)"
    )
