"""``govrag search``: a governed retrieve as a principal, printed for people or as JSON."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

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
from govrag.types import ChunkOrigin, Strategy

if TYPE_CHECKING:
    from govrag.agent import GovernedResult


class TimeFieldChoice(StrEnum):
    EFFECTIVE_AT = "effective_at"
    UPDATED_AT = "updated_at"


def register(app: typer.Typer) -> None:
    app.command()(search)


def search(
    query: Annotated[str, typer.Argument(help="What to search for.")],
    as_: AsOpt,
    corpus: Annotated[
        list[str] | None,
        typer.Option(
            help="Corpus id (repeatable); each is one PEP-gated retrieve. "
            "Default: every corpus in the route's scope."
        ),
    ] = None,
    route: Annotated[
        str | None, typer.Option(help="Route id (default: the deployment's default_route).")
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(help="Continue this session (its route stays pinned) instead of opening one."),
    ] = None,
    strategy: Annotated[
        Strategy | None,
        typer.Option(help="Retrieval strategy (default: search.default_strategy, hybrid)."),
    ] = None,
    top_k: Annotated[int | None, typer.Option(help="Results to return.")] = None,
    filter_: Annotated[
        list[str] | None, typer.Option("--filter", help="Metadata filter KEY=VALUE (repeatable).")
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(help="Only versions in effect at this instant (ISO 8601, e.g. 2026-07-01)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only documents whose --time-field is at or after this.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only documents whose --time-field is at or before this.")
    ] = None,
    time_field: Annotated[
        TimeFieldChoice,
        typer.Option(
            help="The time --since and --until compare (effective_at falls back to updated_at)."
        ),
    ] = TimeFieldChoice.EFFECTIVE_AT,
    min_score: Annotated[
        float, typer.Option(help="Drop hits scoring below this (the ranking's own scale).")
    ] = 0.0,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A governed retrieve as a principal: each corpus is decided by the policy gate and
    audited before it is searched; results are only what the principal may read."""
    from govrag.store.filters import parse_cli_filter, parse_instant, parse_time_range

    def run() -> GovernedResult:
        parsed = tuple(parse_cli_filter(f) for f in filter_ or ())
        window = parse_time_range(time_field.value, since, until)
        moment = None if as_of is None else parse_instant("--as-of", as_of)
        with open_app(deployment) as app:
            return app.callers.search(as_principal(app, as_), query, corpora=corpus or None,
                                      route=route, session=session, strategy=strategy,
                                      top_k=top_k, filters=parsed, as_of=moment,
                                      time_range=window, min_score=min_score)  # fmt: skip

    result = guard(run)
    if as_json:
        emit(result.as_dict())
        return
    _print_result(result)


def _print_result(result: GovernedResult) -> None:
    out = Console(soft_wrap=True)
    err.print(f"request {result.request_id}, session {result.session_id}, "
              f"route {result.route_id}", highlight=False)  # fmt: skip
    if not result.decisions:
        out.print(f"route {result.route_id!r} retrieves nothing (mode none or empty scope)")
    for d in result.decisions:
        if d.verdict != "ALLOW":
            why = d.reason.replace("_", " ")
            policy = "" if d.policy_version == "none" else f"{d.policy_version}, "
            out.print(f"[red]DENY[/] {d.corpus}: {why} ({policy}audit {d.audit_id})",
                      highlight=False)  # fmt: skip
    allowed = [d.corpus for d in result.decisions if d.verdict == "ALLOW"]
    if allowed and not result.results:
        out.print(f"no results you may read in {', '.join(allowed)}")
    for rank, hit in enumerate(result.results, start=1):
        snippet = " ".join(hit.text.split())[:160]
        where = hit.corpus if hit.origin is ChunkOrigin.SOURCE else "session memory"
        out.print(
            f"{rank:>2}. [bold]{hit.doc_id}[/] ({where}, {hit.source_system}) "
            f"score {hit.score:.4f}\n    {snippet}",
            highlight=False,
        )
    if result.hidden.present:
        who = "; ".join(
            f"{s.source_system}" + (f" (ask {s.author_email})" if s.author_email else "")
            for s in result.hidden.sources
        )
        out.print(f"[yellow]hidden:[/] a relevant item exists that you may not read: {who}")
    for pack in result.packs:
        if pack.withheld.count:
            why = ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in pack.withheld.reasons.items())
            out.print(f"[yellow]withheld[/] by the live rights check in {pack.corpus}: {why}",
                      highlight=False)  # fmt: skip
    v = result.validation
    if result.decisions and not v.validation_passed:
        why = (v.reason or "failed").replace("_", " ")
        out.print(f"[yellow]validation:[/] not sufficient evidence to answer from ({why})",
                  highlight=False)  # fmt: skip
