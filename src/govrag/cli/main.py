"""The ``govrag`` command: every command module registers its commands here, explicitly.

Nothing registers itself by being imported: the list below is the whole command line, in
the order ``govrag --help`` shows it.
"""

from __future__ import annotations

import typer

from govrag.cli import admin, agent, audit, curate, ingest, mcp, search, serve, token


def build() -> typer.Typer:
    """The ``govrag`` Typer application with every command."""
    app = typer.Typer(
        name="govrag",
        help="Governed retrieval for agentic LLM apps.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for module in (admin, ingest, search, agent, curate, audit, token, serve, mcp):
        module.register(app)
    return app


app = build()


def main() -> None:
    """The ``govrag`` entry point: the edge refuses arguments that are not UTF-8 and turns
    click's usage errors into one line (see edge.py)."""
    from govrag.cli.edge import run

    run(app)
