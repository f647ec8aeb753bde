"""The ``govrag`` command line. Library errors become one-line messages and exit codes here."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

if TYPE_CHECKING:
    from govrag.agent import GovernedResult
    from govrag.deployment import Deployment
    from govrag.store.protocol import KnowledgeStore

from govrag.errors import GovragError, InputError
from govrag.types import ChunkOrigin, Strategy

app = typer.Typer(
    name="govrag",
    help="Governed retrieval for agentic LLM apps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
index_app = typer.Typer(
    help="Inspect and rebuild the derived search indexes.", no_args_is_help=True
)
app.add_typer(index_app, name="index")
audit_app = typer.Typer(
    help="Check the hash-chained audit log against its signed checkpoints.", no_args_is_help=True
)
app.add_typer(audit_app, name="audit")
config_app = typer.Typer(help="Check the deployment's routes, manifests, workflows and policies.")
app.add_typer(config_app, name="config")

err = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")

DeploymentOpt = Annotated[
    Path | None,
    typer.Option(
        "--deployment",
        "-d",
        envvar="GOVRAG_DEPLOYMENT",
        help="Deployment directory (default: the current directory).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def _fail(exc: GovragError) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, markup=True,
              soft_wrap=True)  # fmt: skip
    raise typer.Exit(exc.exit_code)


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except GovragError as exc:
        _fail(exc)


def _emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


@contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on an interactive stderr; nothing when piped (CI, --json consumers)."""
    if not err.is_terminal:
        yield None
        return
    columns = (TextColumn(label), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _deployment(directory: Path | None) -> Deployment:
    from govrag.deployment import Deployment

    return Deployment.load(directory)


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Directory to create or fill.")] = Path("."),
    embedder: Annotated[
        str | None,
        typer.Option(help="'minilm' (semantic) or 'hash'. Default: minilm when installed."),
    ] = None,
    tenant: Annotated[str, typer.Option(help="Default tenant id.")] = "default",
    corpus: Annotated[
        list[str] | None,
        typer.Option(
            help="A corpus the default route may search (repeatable); the sample "
            "principal gets its read entitlement."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite existing files.")] = False,
) -> None:
    """Scaffold a deployment: govrag.toml, principals.json, a search route and its manifest."""
    from govrag.deployment import scaffold
    from govrag.embed import semantic_available

    chosen = embedder or ("minilm" if semantic_available() else "hash")
    corpora = tuple(corpus or ())
    written = _guard(
        lambda: scaffold(directory, embedder=chosen, tenant=tenant, corpora=corpora, force=force)
    )
    for path in written:
        err.print(f"wrote {path}")
    if not corpora:
        err.print(
            "note: the route 'search' has an empty scope, so every retrieve is denied; list "
            f"corpora in {directory / 'routes' / 'search.json'} (or re-run with --corpus ID)"
        )
    err.print(f"embedder: {chosen}. Next: govrag ingest FILE.jsonl --deployment {directory}")


def _per_tenant(
    deployment: Path | None, tenant: str | None, fn: Callable[[KnowledgeStore, str], T]
) -> list[T]:
    """``fn(store, tenant)`` for the given tenant, or for every tenant of the deployment."""
    with _deployment(deployment) as dep:
        return [fn(dep.store, t) for t in ([tenant] if tenant else dep.store.tenants())]


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to search for.")],
    as_: Annotated[str, typer.Option("--as", help="Principal `sub` from principals.json.")],
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
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A governed retrieve as a principal: each corpus is decided by the policy gate and
    audited before it is searched; results are only what the principal may read."""
    from govrag.store.filters import parse_cli_filter

    def run() -> GovernedResult:
        with _deployment(deployment) as dep:
            principal = dep.principal(as_)
            return dep.governed.search(
                principal,
                query,
                corpora=tuple(corpus) if corpus else None,
                route_id=route,
                session_id=session,
                strategy=strategy or dep.settings.search.default_strategy,
                top_k=dep.settings.search.default_top_k if top_k is None else top_k,
                filters=tuple(parse_cli_filter(f) for f in filter_ or ()),
            )

    result = _guard(run)
    if as_json:
        _emit(result.as_dict())
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


@app.command("eval")
def eval_(
    beir_dir: Annotated[
        Path, typer.Argument(help="BEIR directory (corpus.jsonl, queries.jsonl, qrels/).")
    ],
    strategy: Annotated[Strategy, typer.Option(help="Retrieval strategy.")] = Strategy.KEYWORD,
    split: Annotated[str, typer.Option(help="qrels split.")] = "test",
    embedder: Annotated[
        str | None,
        typer.Option(help="Embedder for semantic/hybrid: minilm (default when installed) or hash."),
    ] = None,
    top_k: Annotated[int, typer.Option(help="Depth of each ranking.")] = 100,
    deployment: Annotated[
        Path | None,
        typer.Option(
            "--deployment",
            "-d",
            help="Load into this deployment's store and embedder (any backend; a throw-away "
            "tenant, dropped afterwards) instead of a temporary SQLite file.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure retrieval quality on a BEIR dataset (loaded into a temporary store)."""
    from govrag.embed import semantic_available
    from govrag.eval.runner import run_beir_eval

    if deployment is not None:
        if embedder is not None:
            _fail(
                InputError(
                    "--embedder and --deployment exclude each other: the deployment's "
                    "[embedder] is used; drop --embedder"
                )
            )
    elif embedder is None:
        embedder = "minilm" if semantic_available() else "hash"
        if strategy is not Strategy.KEYWORD and embedder == "hash":
            err.print(
                "note: the semantic extra is not installed; using the non-semantic 'hash' embedder"
            )

    def run() -> dict[str, Any]:
        dep = _deployment(deployment) if deployment is not None else None
        try:
            return run_beir_eval(
                beir_dir,
                strategy=strategy,
                split=split,
                embedder=embedder or "hash",
                top_k=top_k,
                progress=lambda msg: err.print(msg, highlight=False),
                store=dep.store if dep is not None else None,
                search=dep.settings.search if dep is not None else None,
            )
        finally:
            if dep is not None:
                dep.close()

    figures = _guard(run)
    if as_json:
        _emit(figures)
    else:
        for key, value in figures.items():
            Console().print(f"{key:>12}: {value}")


@index_app.command("verify")
def index_verify(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare the derived indexes with the truth store; exit 1 on any difference."""

    reports = _guard(lambda: _per_tenant(deployment, tenant, lambda s, t: s.verify_index(t)))
    rows = [dict(vars(r), differences=r.differences) for r in reports]
    if as_json:
        _emit({"tenants": rows, "differences": sum(r.differences for r in reports)})
    else:
        for r in rows:
            stale = [
                f"{r[key]} {what} with stale access fields"
                for key, what in (("stale_access", "lexical entries"),
                                  ("vector_access_drift", "vector rows"))
                if r[key]
            ]  # fmt: skip
            err.print(
                f"tenant {r['tenant']}: {r['truth_chunks']} chunks in the truth store, "
                f"{r['lexical_chunks']} in the lexical index, {r['differences']} differences"
                + (f" ({'; '.join(stale)})" if stale else "")
            )
    if any(r.differences for r in reports):
        err.print("run `govrag index rebuild` to set the derived indexes right")
        raise typer.Exit(1)


@index_app.command("rebuild")
def index_rebuild(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recreate the derived search indexes from the truth store."""

    counts = dict(
        _guard(lambda: _per_tenant(deployment, tenant, lambda s, t: (t, s.rebuild_index(t))))
    )
    if as_json:
        _emit({"rebuilt": counts})
    else:
        for t, n in counts.items():
            err.print(f"tenant {t}: rebuilt, {n} chunks indexed")


@app.command()
def demo(
    directory: Annotated[
        Path, typer.Option("--dir", "--directory", help="Where to create the demo deployment.")
    ] = Path("demo-deployment"),
    embedder: Annotated[
        str | None, typer.Option(help="'minilm' or 'hash'. Default: minilm when installed.")
    ] = None,
) -> None:
    """Build the bundled bank-eu deployment and ask its questions: the seed's worked example,
    a DENY, prefetch, a workflow, the hidden-item hint and an examiner replay."""
    from govrag.demo import run_demo

    _guard(lambda: run_demo(directory, Console(), embedder=embedder))


@config_app.command("check")
def config_check(deployment: DeploymentOpt = None, as_json: JsonOpt = False) -> None:
    """Validate routes/, manifests/, workflows/ and policies/; print every problem at once.

    Exit 0 when there is no error (warnings allowed), 2 otherwise.
    """
    from govrag.deployment import check_deployment
    from govrag.settings import load_settings

    settings = _guard(lambda: load_settings(deployment))
    config, problems = _guard(lambda: check_deployment(settings))
    errors = [p for p in problems if not p.warning]
    if as_json:
        _emit(
            {
                "ok": not errors,
                "problems": [vars(p) | {"severity": "warning" if p.warning else "error"}
                             for p in problems],
                "routes": sorted(config.routes) if config else [],
                "route_table_version": config.route_table_version if config else None,
            }
        )  # fmt: skip
    else:
        for p in problems:
            err.print(str(p), style="yellow" if p.warning else "red", highlight=False)
        if config is not None:
            err.print(
                f"ok: {len(config.routes)} route(s), {len(config.manifests)} manifest(s), "
                f"{len(config.workflows)} workflow(s), {len(config.bundles)} policy bundle(s); "
                f"route table {config.route_table_version}"
            )
    if errors:
        raise typer.Exit(2)


# Commands of the agentic app live in their own module; importing it registers them.
from govrag import cli_agent as _cli_agent  # noqa: E402, F401
from govrag import cli_audit as _cli_audit  # noqa: E402, F401
from govrag import cli_curate as _cli_curate  # noqa: E402, F401
from govrag import cli_ingest as _cli_ingest  # noqa: E402, F401


def main() -> None:
    """The ``govrag`` entry point: the edge refuses arguments that are not UTF-8 and turns
    click's usage errors into one line (see cli_edge.py)."""
    from govrag.cli_edge import run

    run(app)


if __name__ == "__main__":
    # Run as ``python -m govrag.cli``, this copy of the module is ``__main__``, while the
    # agentic app's commands registered themselves on the importable ``govrag.cli``.
    from govrag.cli import main as importable_main

    importable_main()
