"""``govrag demo`` / ``make demo``: the bundled ``bank-eu`` deployment, asked as its people
through the application API (see ``govrag/demo.py`` for what the deployment holds)."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

import govrag
from govrag.agent.answer import Answer
from govrag.app import local_principal
from govrag.cli.render import print_replay
from govrag.demo import TENANT, DemoQuestion, bundled_corpus, create, questions


def run_demo(directory: Path, console: Console, *, embedder: str | None = None) -> None:
    """Create (or reuse) the demo deployment, ingest its corpus, and ask its questions."""
    if create(directory, embedder):
        console.print(f"created the bank-eu demo deployment in [bold]{directory}[/]")
    with govrag.open(directory) as app, bundled_corpus() as corpus:
        counts = app.operators.ingest(corpus, tenant=TENANT).report.as_dict()
        console.print(f"ingested the corpus (embedder {app.settings.embedder.name}): "
                      f"{counts['added']} added, {counts['unchanged']} unchanged, "
                      f"{counts['errors']} errors")  # fmt: skip
        first: Answer | None = None
        asked = questions()
        for q in asked:
            principal = local_principal(app.settings, q.sub)
            answer = app.callers.ask(principal, q.question, route=q.route_id, text=q.text)
            first = first or answer
            console.print(_panel(q, answer))
        if first is not None:
            console.rule(f"Examiner replay of {first.request_id} (audit log only)")
            print_replay(app.operators.replay(first.request_id, tenant=TENANT), console)
        chain = next(t.chain for t in app.operators.audit_verify(TENANT).tenants)
        console.print(f"\naudit log: {chain.events} events, chain "
                      f"{'intact' if chain.ok else 'BROKEN'}.")  # fmt: skip
        if asked:
            # Never wrapped, never read as markup: each command is pasted into a shell as it is.
            console.print("Try it yourself:", soft_wrap=True)
            for line in try_it(asked[0], directory):
                console.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)


def try_it(q: DemoQuestion, directory: Path) -> list[str]:
    """The commands that ask the demo's first question again and replay it, quoted for a
    POSIX shell (the question holds an apostrophe; a directory may hold spaces)."""
    where = _quote(str(directory))
    return [
        f"govrag ask {_quote(q.question)} --as {_quote(q.sub)} "
        f"--route {_quote(q.route_id)} -d {where}",
        f"govrag replay REQUEST_ID -d {where}",
    ]


def _quote(word: str) -> str:
    """``word`` as one shell word: in double quotes when nothing in it is special there (a
    question's apostrophe then reads as itself), else :func:`shlex.quote`'s single quotes."""
    quoted = shlex.quote(word)
    if quoted == word or any(ch in word for ch in '"$`\\!\n'):
        return quoted
    return f'"{word}"'


def _panel(q: DemoQuestion, a: Answer) -> Panel:
    lines = [f"[dim]{q.sub} on route {a.route_id} (pattern {a.pattern}):[/] "
             f"{escape(q.question)}"]  # fmt: skip
    if q.text:
        lines.append(f"[dim]text:[/] {escape(q.text)}")
    for d in a.decisions:
        colour = "green" if d.verdict == "ALLOW" else "red"
        lines.append(f"  [{colour}]{d.verdict}[/] {d.corpus} ({d.reason}, {d.policy_version}, "
                     f"audit {d.audit_id})")  # fmt: skip
    if not a.decisions:
        lines.append("  [dim]no retrieval on this route[/]")
    label = "[yellow]abstained[/]" if a.abstained else "[bold green]answer[/]"
    why = f" ({a.reason.replace('_', ' ')})" if a.reason else ""
    lines.append(f"{label}{why}: {escape(a.answer)}")
    for c in a.citations:
        lines.append(f"  [cyan]cites[/] {c.doc_id} ({c.corpus}, {c.source_system})")
    if a.hint:
        lines.append(f"  [yellow]hint:[/] {escape(a.hint)}")
    return Panel("\n".join(lines), title=q.title, title_align="left", expand=True)
