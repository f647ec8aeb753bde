"""Commands that set up and look after a deployment: ``init``, ``demo``, ``eval``,
``index verify | rebuild`` and ``config check``."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console

from govrag.cli.common import DeploymentOpt, JsonOpt, emit, err, fail, guard, open_app
from govrag.errors import InputError
from govrag.types import Strategy

if TYPE_CHECKING:
    from govrag.app import ConfigCheck
    from govrag.eval.suite import Split
    from govrag.store.records import IndexReport


def register(app: typer.Typer) -> None:
    app.command()(init)
    app.command()(demo)
    app.command("eval")(eval_)
    index_app = typer.Typer(
        help="Inspect and rebuild the derived search indexes.", no_args_is_help=True
    )
    index_app.command("verify")(index_verify)
    index_app.command("rebuild")(index_rebuild)
    app.add_typer(index_app, name="index")
    config_app = typer.Typer(
        help="Check the deployment's routes, manifests, workflows and policies."
    )
    config_app.command("check")(config_check)
    app.add_typer(config_app, name="config")


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
    """Scaffold a deployment: govrag.toml, principals.json, a search route and its manifest,
    and sample.jsonl (sample data for the corpora named) to try it with."""
    from govrag.app import init as init_deployment
    from govrag.embed import semantic_available
    from govrag.scaffold import SAMPLE_FILE

    chosen = embedder or ("minilm" if semantic_available() else "hash")
    corpora = tuple(corpus or ())
    written = guard(
        lambda: init_deployment(
            directory, embedder=chosen, tenant=tenant, corpora=corpora, force=force
        )
    )
    for path in written:
        err.print(f"wrote {path}", markup=False)
    if not corpora:
        err.print(
            "note: the route 'search' has an empty scope, so every retrieve is denied; list "
            f"corpora in {directory / 'routes' / 'search.json'} (or re-run with --corpus ID)"
        )
    sample = directory / SAMPLE_FILE
    source = shlex.quote(str(sample)) if sample in written else "FILE.jsonl"
    if sample in written:
        err.print(f"{sample} is sample data (identities, groups and documents of "
                  f"{', '.join(corpora)}), not yours: ingest it to try the deployment as "
                  "'ana', delete it when you ingest your own", markup=False)  # fmt: skip
    err.print(f"embedder: {chosen}. Next: govrag ingest {source} --deployment "
              f"{shlex.quote(str(directory))}", markup=False)  # fmt: skip


def eval_(
    beir_dir: Annotated[
        Path | None,
        typer.Argument(help="BEIR directory (corpus.jsonl, queries.jsonl, qrels/)."),
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            help="Run the deployment's governance suite evals/SUITE.jsonl instead "
            "(docs/eval.md); exit 1 when a threshold is missed."
        ),
    ] = None,
    route: Annotated[
        str | None,
        typer.Option(
            help="Only the cases of this route; alone, the suite its eval_suite_id binds."
        ),
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="--suite: also write the report as Markdown here.")
    ] = None,
    strategy: Annotated[
        Strategy | None,
        typer.Option(
            help="Retrieval strategy (BEIR default keyword; --suite default: the "
            "deployment's search.default_strategy)."
        ),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            help="BEIR: the qrels split (default test). --suite: only the cases marked "
            '"split": dev (tuned on) or test (held out).'
        ),
    ] = None,
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
            help="BEIR: load into this deployment's store and embedder (any backend; a "
            "throw-away tenant, dropped afterwards) instead of a temporary SQLite file. "
            "--suite: the deployment whose suite runs (default: GOVRAG_DEPLOYMENT or the "
            "current directory).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure retrieval quality on a BEIR dataset (loaded into a temporary store), or run a
    governance eval suite through the governed path (--suite)."""
    if suite is not None or (beir_dir is None and route is not None):
        if beir_dir is not None:
            fail(InputError("give a BEIR directory or --suite, not both"))
        if split not in (None, "dev", "test"):
            fail(InputError(f"--split {split!r} is no suite split; give dev or test"))
        _suite(suite, route, cast("Split | None", split), report, deployment, as_json,
               strategy)  # fmt: skip
        return
    strategy = strategy or Strategy.KEYWORD
    if beir_dir is None:
        fail(InputError("name what to evaluate: a BEIR directory, or --suite ID (a "
                        "deployment's evals/ID.jsonl)"))  # fmt: skip
    if route is not None or report is not None:
        fail(InputError("--route and --report go with --suite"))
    from govrag.app import evaluate_beir
    from govrag.embed import semantic_available

    if deployment is not None:
        if embedder is not None:
            fail(
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
        say = lambda msg: err.print(msg, highlight=False)  # noqa: E731
        if deployment is not None:
            with open_app(deployment) as app:
                return app.operators.evaluate_beir(beir_dir, strategy=strategy,
                                                   split=split or "test", top_k=top_k,
                                                   progress=say)  # fmt: skip
        return evaluate_beir(beir_dir, strategy=strategy, split=split or "test",
                             embedder=embedder or "hash", top_k=top_k, progress=say)  # fmt: skip

    figures = guard(run)
    if as_json:
        emit(figures)
    else:
        for key, value in figures.items():
            Console().print(f"{key:>12}: {value}")


def _suite(suite: str | None, route: str | None, split: Split | None, report: Path | None,
           deployment: Path | None, as_json: bool, strategy: Strategy | None) -> None:  # fmt: skip
    """``govrag eval --suite``: the run, its figures, the thresholds; exit 1 when missed."""
    from govrag.eval.governance import as_dict
    from govrag.eval.report import markdown

    say = lambda msg: err.print(msg, highlight=False)  # noqa: E731
    if report is not None and not (report.parent.is_dir() and os.access(report.parent, os.W_OK)):
        # Before the run, not after it: a long run's figures are never lost to a typo.
        fail(InputError(f"cannot write the report to {report}: its folder does not exist or "
                        "is not writable; name another --report"))  # fmt: skip
    with open_app(deployment) as app:
        result = guard(lambda: app.operators.evaluate_suite(suite, route=route, split=split,
                                                            progress=say,
                                                            strategy=strategy))  # fmt: skip
    text = markdown(result)
    if report is not None:
        try:
            report.write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(InputError(f"cannot write the report to {report}: {exc.strerror}"))
    if as_json:
        emit(as_dict(result))
    else:
        sys.stdout.write(text)  # as written: a table wrapped to the terminal is no table
    if not result.passed:
        err.print(f"suite {result.suite!r} missed {len(result.failures)} threshold(s)",
                  highlight=False)  # fmt: skip
        raise typer.Exit(1)


def index_verify(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare the derived indexes with the truth store; exit 1 on any difference."""

    def run() -> list[IndexReport]:
        with open_app(deployment) as app:
            return app.operators.index_verify(tenant)

    reports = guard(run)
    rows = [dict(vars(r), differences=r.differences) for r in reports]
    if as_json:
        emit({"tenants": rows, "differences": sum(r.differences for r in reports)})
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


def index_rebuild(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recreate the derived search indexes from the truth store."""

    def run() -> dict[str, int]:
        with open_app(deployment) as app:
            return app.operators.index_rebuild(tenant)

    counts = guard(run)
    if as_json:
        emit({"rebuilt": counts})
    else:
        for t, n in counts.items():
            err.print(f"tenant {t}: rebuilt, {n} chunks indexed")


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
    from govrag.cli.demo import run_demo

    guard(lambda: run_demo(directory, Console(), embedder=embedder))


def config_check(deployment: DeploymentOpt = None, as_json: JsonOpt = False) -> None:
    """Validate routes/, manifests/, workflows/ and policies/; print every problem at once.

    Exit 0 when there is no error (warnings allowed), 2 otherwise.
    """

    def run() -> ConfigCheck:
        with open_app(deployment) as app:
            return app.operators.config_check()

    check = guard(run)
    problems, config = check.problems, check.config
    errors = [p for p in problems if not p.warning]
    if as_json:
        emit(check.as_dict())
    else:
        for p in problems:
            # markup off: "[auth]" in a message is govrag.toml's table, not a rich style tag
            err.print(str(p), style="yellow" if p.warning else "red", highlight=False, markup=False)
        if config is not None:
            err.print(
                f"ok: {len(config.routes)} route(s), {len(config.manifests)} manifest(s), "
                f"{len(config.workflows)} workflow(s), {len(config.bundles)} policy bundle(s); "
                f"route table {config.route_table_version}"
            )
    if errors:
        raise typer.Exit(2)
