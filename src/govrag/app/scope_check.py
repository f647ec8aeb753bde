"""Corpus ids a route's scope names that nothing in the deployment knows (``config check``).

A corpus exists only by being named somewhere: a ``[corpora.<id>]`` table describes it, a
configured source feeds it (``[sources.<name>] corpus``, or a top-level folder of a filesystem
source without one), or a tenant holds documents in it. A scoped id none of these knows is
almost always a slip (``policy_engine`` for ``policy-engine``; ids are case-sensitive): the
policy gate allows it, the search finds nothing, and every retrieve on that route comes back
empty without a word why. So ``govrag config check`` names it, as a warning: a deployment
set up before its first ingest rightly scopes corpora nothing has fed yet.

The store is read only when it exists already (checking must not create it), through the
deployment's own handle when it has one (a second handle on one SQLite file drops its locks).
A store that cannot be read (a PostgreSQL server down) leaves the question open, and then
nothing is reported: ``config check`` checks files; readiness and ``index verify`` report the
store.
"""

from __future__ import annotations

from collections.abc import Iterable

from govrag.deployment import Deployment
from govrag.errors import GovragError
from govrag.harvest.connector import slug
from govrag.problems import Problem
from govrag.routes.config import DeploymentConfig
from govrag.settings import CONFIG_FILE, Settings
from govrag.store import KnowledgeStore, location_problems, open_store
from govrag.store_url import parse_store_url


def unknown_scope_problems(dep: Deployment, config: DeploymentConfig) -> list[Problem]:
    """A warning per (route, corpus id) of a route's scope that no ``[corpora]`` table, no
    configured source and no stored document knows; none when the store cannot be read."""
    stored = stored_corpora(dep)
    if stored is None:
        return []
    known = set(dep.settings.corpora) | fed_corpora(dep.settings) | stored
    out = []
    for route_id, route in sorted(config.routes.items()):
        for corpus in dict.fromkeys(route.retrieval.scope):
            if corpus in known:
                continue
            out.append(Problem(f"routes ({route_id})", "retrieval.scope",
                               f"route {route_id!r} scopes corpus {corpus!r}, which nothing "
                               f"in this deployment knows: no [corpora.{corpus}] table in "
                               f"{CONFIG_FILE}, no [sources.*] feeds it, and no tenant holds "
                               "documents in it, so every retrieve of it finds nothing; if the "
                               "id is misspelt (ids are case-sensitive), spell it as your "
                               "documents' corpus, else ingest documents into it or describe "
                               f"it with [corpora.{corpus}] in {CONFIG_FILE}",
                               warning=True))  # fmt: skip
    return out


def fed_corpora(settings: Settings) -> set[str]:
    """Corpus ids the configured sources name: their ``corpus``, else (filesystem) the
    top-level folders of their path and the path's own name (for the files at its root)."""
    out: set[str] = set()
    for source in settings.sources.values():
        if source.corpus is not None:
            out.add(source.corpus)
        elif source.connector == "filesystem":
            out |= _folder_corpora(settings, source.path)
    return out


def _folder_corpora(settings: Settings, path: str) -> set[str]:
    # The connector's own rule (harvest/filesystem.py): a file's corpus is its top-level
    # folder's name, or the root's for files at the root. Sidecars may name others; those
    # are known once ingested.
    root = settings.resolve_path(path)
    try:
        names: Iterable[str] = [
            p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
        ]
        return {slug(n) for n in [*names, root.resolve().name]}
    except OSError:  # no folder yet (or unreadable): ingest reports it
        return set()


def stored_corpora(dep: Deployment) -> set[str] | None:
    """Every tenant's corpus ids in the store; empty when no store exists yet, ``None`` when
    it cannot be read."""
    try:
        if dep.opened_store is not None:
            return _corpora(dep.opened_store)
        settings = dep.settings
        url = parse_store_url(settings.store.url)
        if url.kind == "memory":
            return set()  # a fresh in-memory store holds nothing
        if url.kind == "sqlite" and not settings.resolve_path(url.path).is_file():
            return set()  # nothing ingested yet, and checking must not create the file
        if location_problems(settings):
            return None  # reported as errors of store.url / store.index_dir
        store = open_store(settings, None)
        try:
            return _corpora(store)
        finally:
            store.close()
    except (GovragError, ValueError):
        return None


def _corpora(store: KnowledgeStore) -> set[str]:
    return {c for tenant in store.tenants() for c, _ in store.list_corpora(tenant)}
