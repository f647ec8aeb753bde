"""``govrag ask`` and ``govrag replay``: the agentic app and the examiner's view of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

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
from govrag.cli.render import print_answer, print_replay
from govrag.errors import LLM_TRANSIENT_EXIT, TRANSIENT_LLM_FAULTS, LlmError
from govrag.types import Strategy

if TYPE_CHECKING:
    from govrag.agent.answer import Answer
    from govrag.audit import Replay


def register(app: typer.Typer) -> None:
    app.command()(ask)
    app.command()(replay)


def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    as_: AsOpt,
    route: Annotated[
        str | None, typer.Option(help="Route id (default: the deployment's default_route).")
    ] = None,
    session: Annotated[
        str | None, typer.Option(help="Continue this session (its route stays pinned).")
    ] = None,
    text: Annotated[
        Path | None,
        typer.Option(help="A file of caller-supplied text (an e-mail, a contract) to work on."),
    ] = None,
    strategy: Annotated[
        Strategy | None,
        typer.Option(help="The retrieves' strategy (default: search.default_strategy)."),
    ] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ask a question as a principal on a route: a grounded, cited answer or an abstention,
    every retrieval PEP-gated, validated and audited."""
    from govrag.errors import InputError

    def run() -> Answer:
        supplied = None
        if text is not None:
            try:
                supplied = text.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(
                    f"--text {str(text)!r}: cannot read it as UTF-8 text: {exc}"
                ) from exc
        with open_app(deployment) as app:
            return app.callers.ask(as_principal(app, as_), question, route=route,
                                   session=session, text=supplied, strategy=strategy)  # fmt: skip

    answer = guard(run)
    if as_json:
        emit(answer.as_dict())
    else:
        print_answer(answer, Console(soft_wrap=True))
    if answer.reason == "llm_error":
        # The caller's answer names the class only; the operator's detail goes to stderr, and
        # the exit code tells a script whether a retry may help.
        err.print(f"[bold red]the model failed ({answer.llm_fault}):[/] "
                  f"{escape(answer.llm_detail or '')}", highlight=False)  # fmt: skip
        transient = answer.llm_fault in TRANSIENT_LLM_FAULTS
        raise typer.Exit(LLM_TRANSIENT_EXIT if transient else LlmError.exit_code)


def replay(
    request_id: Annotated[str, typer.Argument(help="The request id (req-...).")],
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: default_tenant).")] = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay a request from the audit log alone: who, what was proposed, which policy decided,
    the verdict before search, what the model saw, what was delivered."""

    def run() -> Replay:
        with open_app(deployment) as app:
            return app.operators.replay(request_id, tenant=tenant)

    result = guard(run)
    if as_json:
        emit(result.as_dict())
        return
    print_replay(result, Console(soft_wrap=True))
