"""``govrag ingest`` and ``govrag sources``: getting documents and rights in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from govrag.cli import DeploymentOpt, JsonOpt, _deployment, _emit, _guard, _progress, app, err
from govrag.harvest.kinds import ConnectorKind

if TYPE_CHECKING:
    from govrag.deployment import Deployment
    from govrag.harvest.connector import SourceSpec
    from govrag.store.protocol import KnowledgeStore


@app.command()
def ingest(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE|PATH",
            help="A source name from \\[sources.<name>] in govrag.toml, a folder of .md/.txt/"
            ".html/.pdf files, or a JSONL file of identity/group/document/delete records.",
        ),
    ],
    connector: Annotated[
        ConnectorKind | None,
        typer.Option(
            help="How to read PATH (default: a folder is filesystem, a .jsonl file jsonl)."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would change; write nothing.")
    ] = False,
    tenant: Annotated[
        str | None, typer.Option(help="Tenant (default: the source's tenant, else default_tenant).")
    ] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest a configured source, a folder or a JSONL file. A bad file or line is reported
    with its path (and line number) and skipped, leaving nothing partial; the rest lands.
    Exit 1 when anything failed."""
    from govrag.harvest.harvester import harvest
    from govrag.harvest.sources import open_connector, resolve_source

    def run() -> Any:
        with _deployment(deployment) as dep:
            spec = resolve_source(dep.settings, source, connector)
            target = tenant or spec.tenant or dep.settings.default_tenant
            reader = open_connector(spec, target, dep.settings.ingest)
            with (
                _source_lock(spec, dry_run),
                _progress(reader.total_bytes(), "ingest") as tick,
                _ingest_store(dep, dry_run) as store,
            ):
                report = harvest(reader, store, target, settings=dep.settings.ingest,
                                 embedder=None if dry_run else dep.embedder, progress=tick,
                                 dry_run=dry_run)  # fmt: skip
                if store is not None and not dry_run:
                    store.sync_indexes(target, vectors=False)
            unrouted = [] if dry_run else dep.unrouted_corpora(target)
            return spec, target, report, unrouted

    spec, target, report, unrouted = _guard(run)
    if unrouted:
        err.print(
            f"note: no route's scope includes {', '.join(map(repr, unrouted))}: every retrieve "
            "of them is denied until a route in routes/ lists them (`govrag config check`)",
            highlight=False,
        )
    for warning in report.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    for message in report.messages:
        err.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if as_json:
        _emit(report.as_dict() | {
            "source": spec.name, "connector": spec.connector.value, "tenant": target,
            "dry_run": dry_run, "messages": report.messages, "warnings": report.warnings,
        })  # fmt: skip
    else:
        counts = ", ".join(f"{k} {v}" for k, v in report.as_dict().items())
        if dry_run:
            err.print(f"dry run, nothing written; {source} would change: {counts}", highlight=False)
        else:
            err.print(f"ingested {source}: {counts}", highlight=False)
    if report.errors:
        raise typer.Exit(1)


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


@app.command()
def sources(deployment: DeploymentOpt = None, as_json: JsonOpt = False) -> None:
    """List the configured sources (\\[sources.<name>] in govrag.toml) with their last sync."""
    from govrag.harvest.sources import list_sources
    from govrag.settings import load_settings

    rows = _guard(lambda: list_sources(load_settings(deployment)))
    if as_json:
        _emit({"sources": rows})
        return
    if not rows:
        err.print(
            "no sources configured; add a [sources.<name>] table to govrag.toml", markup=False
        )
    out = Console(soft_wrap=True, highlight=False)
    for r in rows:
        missing = "" if r["exists"] else " [red](missing)[/]"
        where = f"{r['connector']} {escape(r['path'])}{missing}"
        out.print(f"[bold]{escape(r['name'])}[/]: {where}, source system "
                  f"{escape(r['source_system'])}, tenant {escape(r['tenant'])}")  # fmt: skip
        if r["last_sync"] is None:
            out.print("    never synced")
        else:
            docs = "" if r["documents"] is None else f"{r['documents']} documents; "
            counts = ", ".join(f"{k} {v}" for k, v in (r["last_run"] or {}).items())
            out.print(f"    last sync {r['last_sync']}: {docs}last run: {counts}")
