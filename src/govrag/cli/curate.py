"""``govrag curate`` (the Curation Pass) and ``govrag click`` (a source click, counted)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from govrag.cli.common import (
    AsOpt,
    DeploymentOpt,
    JsonOpt,
    as_principal,
    emit,
    err,
    guard,
    open_app,
)

if TYPE_CHECKING:
    from govrag.store.curation import CurationReport


def register(app: typer.Typer) -> None:
    app.command()(curate)
    app.command()(click)


def curate(
    tenant: Annotated[
        str | None, typer.Option(help="Only this tenant (default: every one).")
    ] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recompute every document's trust score from authority and access (idempotent)."""

    def run() -> list[CurationReport]:
        with open_app(deployment) as app:
            return app.operators.curate(tenant)

    reports = guard(run)
    if as_json:
        emit({"tenants": [r.as_dict() for r in reports]})
        return
    for r in reports:
        err.print(f"tenant {r.tenant}: {r.documents} documents, {r.moved} scores moved, "
                  f"mean trust {r.mean_trust:.3f}", highlight=False)  # fmt: skip


def click(
    doc: Annotated[str, typer.Argument(help="SOURCE_SYSTEM:EXTERNAL_ID of the document opened.")],
    as_: AsOpt,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Count a click on a document's source (only for a document the principal may read)."""
    from govrag.errors import InputError

    def run() -> dict[str, object]:
        source_system, sep, external_id = doc.partition(":")
        if not sep or not source_system or not external_id:
            raise InputError(
                f"document {doc!r}: give SOURCE_SYSTEM:EXTERNAL_ID, e.g. "
                "sharepoint:policy-wire-limits-v3 (a citation's source and id)"
            )
        with open_app(deployment) as app:
            app.callers.click(as_principal(app, as_), source_system, external_id)
        # Everyone's access count is not the caller's to know: only that this one counted.
        return {"document": doc, "counted": True}

    counted = guard(run)
    if as_json:
        emit(counted)
    else:
        err.print(f"counted a click on {doc}", highlight=False)
