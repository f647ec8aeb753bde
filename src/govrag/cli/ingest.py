"""``govrag ingest`` and ``govrag sources``: getting documents and rights in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from govrag.cli.common import DeploymentOpt, JsonOpt, emit, err, guard, open_app, progress
from govrag.harvest.kinds import ConnectorKind

if TYPE_CHECKING:
    from govrag.app import IngestOutcome, SourceStatus


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(sources)


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

    def run() -> IngestOutcome:
        with open_app(deployment) as app:
            return app.operators.ingest(
                source,
                connector=connector,
                tenant=tenant,
                dry_run=dry_run,
                progress=lambda total: progress(total, "ingest"),
            )

    outcome = guard(run)
    report, unrouted = outcome.report, outcome.unrouted
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
        emit(outcome.as_dict())
    else:
        counts = ", ".join(f"{k} {v}" for k, v in report.as_dict().items())
        if dry_run:
            err.print(f"dry run, nothing written; {source} would change: {counts}", highlight=False)
        else:
            err.print(f"ingested {source}: {counts}", highlight=False)
    if report.errors:
        raise typer.Exit(1)


def sources(deployment: DeploymentOpt = None, as_json: JsonOpt = False) -> None:
    """List the configured sources (\\[sources.<name>] in govrag.toml) with their last sync."""

    def run() -> list[SourceStatus]:
        with open_app(deployment) as app:
            return app.operators.sources()

    rows = guard(run)
    if as_json:
        emit({"sources": [r.model_dump(mode="json") for r in rows]})
        return
    if not rows:
        err.print(
            "no sources configured; add a [sources.<name>] table to govrag.toml", markup=False
        )
    out = Console(soft_wrap=True, highlight=False)
    for r in rows:
        missing = "" if r.exists else " [red](missing)[/]"
        where = f"{r.connector} {escape(r.path)}{missing}"
        out.print(f"[bold]{escape(r.name)}[/]: {where}, source system "
                  f"{escape(r.source_system)}, tenant {escape(r.tenant)}")  # fmt: skip
        if r.last_sync is None:
            out.print("    never synced")
        else:
            docs = "" if r.documents is None else f"{r.documents} documents; "
            counts = ", ".join(f"{k} {v}" for k, v in (r.last_run or {}).items())
            out.print(f"    last sync {r.last_sync}: {docs}last run: {counts}")
