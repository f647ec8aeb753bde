"""What every command shares: its options, the way it opens the deployment, and the way a
library error becomes one line on stderr and an exit code (never a traceback).

Commands are thin: they parse their arguments, call one method of the application API
(:class:`govrag.app.Govrag`) and print its result. ``--as SUB`` is the development identity
provider: the principal is the entry of ``principals.json``, the claims a verified token
would carry on a served deployment.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from govrag.errors import GovragError, UnknownRouteError

if TYPE_CHECKING:
    from govrag.app import Govrag
    from govrag.types import Principal

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
AsOpt = Annotated[str, typer.Option("--as", help="Principal `sub` from principals.json.")]
TenantOpt = Annotated[str | None, typer.Option(help="Only this tenant.")]


def fail(exc: GovragError) -> NoReturn:
    # Whoever runs the CLI holds the deployment's files: an unknown route lists the routes
    # (HTTP and MCP callers get the message alone).
    text = exc.for_operator() if isinstance(exc, UnknownRouteError) else str(exc)
    err.print(f"[bold red]error:[/] {escape(text)}", highlight=False, markup=True,
              soft_wrap=True)  # fmt: skip
    raise typer.Exit(exc.exit_code)


def guard(fn: Callable[[], T]) -> T:
    """``fn()``; a govrag error ends the command with its message and exit code."""
    try:
        return fn()
    except GovragError as exc:
        fail(exc)


def emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on an interactive stderr; nothing when piped (CI, --json consumers)."""
    if not err.is_terminal:
        yield None
        return
    columns = (TextColumn(label), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def open_app(directory: Path | None) -> Govrag:
    """The deployment in ``directory`` (default: ``GOVRAG_DEPLOYMENT`` or the current one),
    which must hold ``govrag.toml``.

    The check is the command line's, not ``govrag.open``'s: a library caller may describe a
    deployment by keyword overrides and environment alone (tests and embedders do), but on the
    command line a folder without ``govrag.toml`` is a mistyped ``-d``, and opening it would
    quietly create a new, empty store there that every later command then reads."""
    import govrag
    from govrag.settings import find_deployment

    root = guard(lambda: find_deployment(directory))
    guard(lambda: require_config_file(root, directory))
    return guard(lambda: govrag.open(root))


def require_config_file(root: Path, directory: Path | None) -> None:
    """Refuse ``root`` unless it holds ``govrag.toml``; the message says where ``root`` came
    from (``-d``, ``GOVRAG_DEPLOYMENT`` or the current directory) and how to fix it."""
    from govrag.errors import ConfigError
    from govrag.settings import CONFIG_FILE, DEPLOYMENT_ENV

    if (root / CONFIG_FILE).exists():  # one that cannot be read is the settings' to name
        return
    if directory is not None:
        # Typer fills the option from GOVRAG_DEPLOYMENT too; name the variable when it did.
        env = os.environ.get(DEPLOYMENT_ENV)
        came_from = f"{DEPLOYMENT_ENV}={env}" if env and Path(env) == directory else "-d"
    else:
        came_from = "the current directory"
    raise ConfigError(
        f"{str(root)!r} ({came_from}) holds no {CONFIG_FILE}, so it is not a govrag "
        f"deployment and nothing was opened or created there; create one with `govrag init "
        f"{root}`, or point -d (or {DEPLOYMENT_ENV}) at the folder holding {CONFIG_FILE}"
    )


def as_principal(app: Govrag, sub: str) -> Principal:
    """The development identity ``--as SUB`` names (``principals.json``)."""
    from govrag.app import local_principal

    return local_principal(app.settings, sub)
