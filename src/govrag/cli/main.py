"""The ``govrag`` command: every command module registers its commands here, explicitly.

Nothing registers itself by being imported: the list below is the whole command line, in
the order ``govrag --help`` shows it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from govrag.cli import admin, agent, audit, backup, curate, ingest, mcp, search, serve, token


def build() -> typer.Typer:
    """The ``govrag`` Typer application with every command."""
    app = typer.Typer(
        name="govrag",
        help="Governed retrieval for agentic LLM apps.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_options)
    for module in (admin, ingest, search, agent, curate, audit, backup, token, serve, mcp):
        module.register(app)
    return app


def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            is_eager=True,
            callback=lambda shown: _show_version() if shown else None,
            help="Print govrag's version and exit.",
        ),
    ] = False,
) -> None:
    """Governed retrieval for agentic LLM apps."""


def _show_version() -> None:
    # The installed distribution's metadata, not a constant in the source: it is what pip
    # installed, so a bug report names the build that actually ran.
    from importlib.metadata import PackageNotFoundError, version

    try:
        shown = version("govrag")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from govrag import __version__ as shown
    typer.echo(f"govrag {shown}")
    raise typer.Exit(0)


app = build()


def main() -> None:
    """The ``govrag`` entry point: the edge refuses arguments that are not UTF-8 and turns
    click's usage errors into one line (see edge.py)."""
    from govrag.cli.edge import run

    run(app)
