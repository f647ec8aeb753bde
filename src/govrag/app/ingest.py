"""Ingest as a use case: what every edge (CLI, HTTP, the demo) gets by asking for it.

Getting documents in is more than calling the harvester: a run that writes holds its
source's lock (a second run of the same source fails at once rather than interleaving); a dry
run opens the store without writing anything and does not create a SQLite file that does not
exist yet; the lexical index is synced before the run reports (so the next search, in any
process, sees what was ingested); and the caller learns which of the tenant's corpora no
route may search, since every retrieve of those is denied. These steps lived in the CLI;
here an HTTP or MCP edge gets them too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from govrag.harvest.harvester import harvest
from govrag.harvest.kinds import ConnectorKind
from govrag.harvest.sources import (
    open_connector,
    resolve_source,
)

if TYPE_CHECKING:
    from govrag.deployment import Deployment
    from govrag.harvest.connector import HarvestReport, SourceSpec
    from govrag.store.protocol import KnowledgeStore

#: Given the run's total in bytes, a context whose value is called with each advance (or
#: ``None`` for no progress): an edge shows a bar, a server logs, a library caller ignores.
ProgressFactory = Callable[[int], AbstractContextManager[Callable[[int], None] | None]]


@dataclass(frozen=True)
class IngestOutcome:
    """What one ingest run did: counts, the lines or files it refused, and what to fix."""

    source: str
    connector: ConnectorKind
    tenant: str
    dry_run: bool
    report: HarvestReport
    #: Corpora of the tenant that no route's scope includes (every retrieve of them is
    #: denied until a route lists them); empty on a dry run.
    unrouted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """``False`` when any file or line failed (the rest landed)."""
        return not self.report.errors

    def as_dict(self) -> dict[str, Any]:
        return self.report.as_dict() | {
            "source": self.source,
            "connector": self.connector.value,
            "tenant": self.tenant,
            "dry_run": self.dry_run,
            "messages": self.report.messages,
            "warnings": self.report.warnings,
        }


def run_ingest(
    dep: Deployment,
    source: str,
    *,
    connector: ConnectorKind | None = None,
    tenant: str | None = None,
    dry_run: bool = False,
    progress: ProgressFactory | None = None,
) -> IngestOutcome:
    """Ingest ``source`` (a configured source's name, a folder or a JSONL file)."""
    spec = resolve_source(dep.settings, source, connector)
    target = tenant or spec.tenant or dep.settings.default_tenant
    reader = open_connector(spec, target, dep.settings.ingest)
    bar = progress(reader.total_bytes()) if progress is not None else nullcontext(None)
    with _source_lock(spec, dry_run), bar as tick, _ingest_store(dep, dry_run) as store:
        report = harvest(reader, store, target, settings=dep.settings.ingest,
                         embedder=None if dry_run else dep.embedder, progress=tick,
                         dry_run=dry_run, tenancy=dep.settings.tenancy,
                         writer=spec.writer)  # fmt: skip
        if store is not None and not dry_run:
            store.sync_indexes(target, vectors=False)
    unrouted = [] if dry_run else unrouted_corpora(dep, target)
    return IngestOutcome(spec.name, spec.connector, target, dry_run, report, unrouted)


def unrouted_corpora(dep: Deployment, tenant: str) -> list[str]:
    """Corpora of ``tenant`` that no route may search (so every retrieve of them is denied);
    empty when the deployment's config does not load (``config check`` says why)."""
    from govrag.errors import ConfigError

    try:
        scoped = dep.config.scoped_corpora()
    except ConfigError:
        return []
    return [c for c, _ in dep.store.list_corpora(tenant) if c not in scoped]


@contextmanager
def _source_lock(spec: SourceSpec, dry_run: bool) -> Iterator[None]:
    """A run that writes holds its source's lock (a second run of it fails at once); a dry
    run or a source without sync state needs none."""
    if dry_run or spec.state_path is None:
        yield
        return
    from govrag.harvest.state import source_lock

    with source_lock(spec.state_path, spec.name):
        yield


@contextmanager
def _ingest_store(dep: Deployment, dry_run: bool) -> Iterator[KnowledgeStore | None]:
    """The deployment's store; on a dry run one opened without writing anything (no corpus
    descriptions), or ``None`` when its SQLite file does not exist yet (nothing stored)."""
    if not dry_run:
        yield dep.store
        return
    from govrag.store import open_store
    from govrag.store_url import parse_store_url

    url = parse_store_url(dep.settings.store.url)
    if url.kind == "sqlite" and not dep.settings.resolve_path(url.path).exists():
        yield None
        return
    store = open_store(dep.settings, None)
    try:
        yield store
    finally:
        store.close()
