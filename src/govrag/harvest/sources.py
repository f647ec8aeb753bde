"""Sources by name or by path: what ``govrag ingest`` and ``govrag sources`` work on.

A configured source is a ``[sources.<name>]`` section of ``govrag.toml`` (its path relative
to the deployment directory). A path given instead is a folder (the filesystem connector) or
a ``.jsonl`` file (the JSONL connector); a path that is a configured source's path is that
source. Sync state lives in the deployment's ``.govrag/sources/``; a JSONL file given by
path keeps none (as ``govrag ingest FILE.jsonl`` always did).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from govrag.errors import InputError
from govrag.harvest.connector import (
    Connector,
    ConnectorKind,
    HarvestReport,
    JsonlConnector,
    SourceSpec,
    slug,
)
from govrag.harvest.filesystem import FilesystemConnector
from govrag.harvest.state import load_state, record_sync, state_path
from govrag.settings import IngestSettings, Settings, SourceSettings


def configured_source(settings: Settings, name: str, cfg: SourceSettings) -> SourceSpec:
    """The spec of ``[sources.<name>]``."""
    return SourceSpec(
        name=name,
        connector=ConnectorKind(cfg.connector),
        path=settings.resolve_path(cfg.path),
        source_system=cfg.source_system or name,
        corpus=cfg.corpus,
        classification=cfg.classification,
        authority_tier=cfg.authority_tier,
        tenant=cfg.tenant,
        state_path=state_path(settings.deployment, name),
        allow_front_matter_corpus=cfg.allow_front_matter_corpus,
        writer=name,
    )


def resolve_source(
    settings: Settings, target: str, connector: ConnectorKind | None = None
) -> SourceSpec:
    """The source ``target`` names: a configured source's name, else a path.

    Raises:
        InputError: an unknown name (the message lists the configured ones), a path whose
            connector cannot be told, or a ``connector`` that does not fit.
    """
    if target in settings.sources:
        spec = configured_source(settings, target, settings.sources[target])
        if connector is not None and connector != spec.connector:
            raise InputError(
                f"source {target!r} is configured with connector {spec.connector.value!r}; "
                f"drop --connector {connector.value}"
            )
        return spec
    path = Path(target)
    if not path.exists():
        known = ", ".join(sorted(settings.sources)) or "none"
        raise InputError(
            f"{target!r} is neither a configured source nor an existing file or folder; "
            f"configured sources (sources.<name> tables of govrag.toml): {known}"
        )
    resolved = path.resolve()
    for name, cfg in sorted(settings.sources.items()):
        spec = configured_source(settings, name, cfg)
        if spec.path.resolve() == resolved and connector in (None, spec.connector):
            return spec
    if connector is None:
        if path.is_dir():
            connector = ConnectorKind.FILESYSTEM
        elif path.suffix.lower() == ".jsonl":
            connector = ConnectorKind.JSONL
        else:
            raise InputError(
                f"cannot tell how to read {target!r}: it is neither a folder nor a .jsonl "
                "file; pass --connector filesystem or --connector jsonl"
            )
    if connector is ConnectorKind.FILESYSTEM and not path.is_dir():
        raise InputError(f"the filesystem connector reads a folder; {target!r} is not one")
    if connector is ConnectorKind.JSONL and not path.is_file():
        raise InputError(f"the jsonl connector reads a file; {target!r} is not one")
    name = slug(resolved.name, "source")
    state = None
    if connector is ConnectorKind.FILESYSTEM:
        digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
        state = state_path(settings.deployment, f"path-{name}-{digest}")
    return SourceSpec(name=name, connector=connector, path=path, source_system=name,
                      state_path=state)  # fmt: skip


def open_connector(spec: SourceSpec, tenant: str, settings: IngestSettings) -> Connector:
    """The connector that reads ``spec`` into ``tenant``."""
    if spec.connector is ConnectorKind.FILESYSTEM:
        return FilesystemConnector(spec, tenant, max_text_bytes=settings.max_text_bytes)
    state = spec.state_path

    def remember(report: HarvestReport) -> None:
        if state is not None:
            record_sync(state, source=spec.name, connector=spec.connector.value,
                        root=spec.path.resolve(), tenant=tenant,
                        counts=report.as_dict())  # fmt: skip

    return JsonlConnector(spec.path, max_text_bytes=settings.max_text_bytes, on_finish=remember)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceSync(_Record):
    """One tenant's last sync of a source."""

    tenant: str
    synced_at: str | None
    counts: dict[str, int]
    #: Files the sync state lists (filesystem sources); ``None`` for other connectors.
    documents: int | None


class SourceStatus(_Record):
    """A configured source (``[sources.<name>]``) and what its last sync did."""

    name: str
    connector: str
    path: str
    exists: bool
    source_system: str
    tenant: str
    corpus: str | None
    authority_tier: int | None
    classification: str
    last_sync: str | None
    documents: int | None
    last_run: dict[str, int] | None
    syncs: list[SourceSync]
    #: Why the sync state could not be read (it is then treated as absent).
    state_warning: str | None


def list_sources(settings: Settings) -> list[SourceStatus]:
    """Every configured source with its last syncs (from its state file), by name."""
    out = []
    for name, cfg in sorted(settings.sources.items()):
        spec = configured_source(settings, name, cfg)
        state, warning = load_state(spec.state_path) if spec.state_path else (None, None)
        syncs = [
            SourceSync(tenant=tenant, synced_at=entry.synced_at, counts=entry.counts,
                       documents=len(entry.files) if spec.connector is ConnectorKind.FILESYSTEM
                       else None)
            for tenant, entry in sorted(state.tenants.items())
        ] if state else []  # fmt: skip
        last = max(syncs, key=lambda s: s.synced_at or "", default=None)
        out.append(
            SourceStatus(
                name=name,
                connector=spec.connector.value,
                path=str(spec.path),
                exists=spec.path.exists(),
                source_system=spec.source_system,
                tenant=cfg.tenant or settings.default_tenant,
                corpus=cfg.corpus,
                authority_tier=cfg.authority_tier,
                classification=cfg.classification.label,
                last_sync=last.synced_at if last else None,
                documents=last.documents if last else None,
                last_run=last.counts if last else None,
                syncs=syncs,
                state_warning=warning,
            )
        )
    return out
