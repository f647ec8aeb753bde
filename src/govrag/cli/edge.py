"""The CLI's edge: what runs around every command, so that no bad input ends in a traceback.

Commands turn govrag's own errors into one line and an exit code (``cli._guard``). Two kinds
of bad input never reach a command, and are handled here, once, for all of them:

- arguments and ``GOVRAG_*`` environment variables that are not UTF-8 text. Python hands
  them over with the bad bytes as lone surrogates, which pass as ``str`` until something
  encodes them (a SQL parameter, an audit hash, a JSON dump) and raises far from the cause.
  They are refused before any command runs, naming the option or argument;
- click's own usage errors (an unknown option, a ``--strategy`` that is not one of the
  choices, a missing argument), which click would print as a multi-line box: one line here,
  with the same exit code 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

#: Exit code of bad input on the command line (click's usage errors use it too).
USAGE_EXIT = 2


def run(app: typer.Typer, argv: Sequence[str] | None = None) -> NoReturn:
    """Run ``app`` on ``argv`` (default: the process's) and exit with its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    problem = undecodable_argument(command, args) or undecodable_environment(os.environ)
    if problem is not None:
        _exit_with(problem, USAGE_EXIT)
    try:
        result = command.main(args=args, prog_name="govrag", standalone_mode=False)
    except Exception as exc:
        kind = _click_kind(exc)
        if kind == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]  # the help is what was asked for
            sys.exit(USAGE_EXIT)
        if kind == "Abort":
            _exit_with("aborted", 130)
        elif kind is None:
            raise
        _exit_with(_one_line(exc), getattr(exc, "exit_code", USAGE_EXIT))
    sys.exit(result if isinstance(result, int) else 0)


def _click_kind(exc: Exception) -> str | None:
    """Which of click's exceptions ``exc`` is, by name: typer raises those of its vendored
    copy of click (typer >= 0.29) or of click itself (older typer), so classes can't tell."""
    names = {c.__name__ for c in type(exc).__mro__}
    return next((k for k in ("NoArgsIsHelpError", "Abort", "ClickException") if k in names), None)


def _exit_with(message: str, code: int) -> NoReturn:
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    err.print(f"[bold red]error:[/] {escape(message)}")
    sys.exit(code)


def _one_line(exc: Any) -> str:
    message = " ".join(str(exc.format_message()).split()).replace("Value error, ", "")
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message = f"{message.rstrip('.')}; see '{ctx.command_path} --help'"
    return message


def _shown(value: str) -> str:
    """``value`` with its undecodable bytes as ``\\xNN`` escapes."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _bad_byte(value: str) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        return f"0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
    return None


def undecodable_argument(command: Any, args: Sequence[str]) -> str | None:
    """The problem with the first argument that is not UTF-8 text, naming its option (or
    the positional argument) of the command it belongs to; ``None`` when all are text."""
    for i, arg in enumerate(args):
        byte = _bad_byte(arg)
        if byte is not None:
            name = _parameter_name(command, args, i)
            return (
                f"{name} is not valid UTF-8 text ('{_shown(arg)}': byte {byte}); pass UTF-8 "
                "text (rename a file or directory whose name is not)"
            )
    return None


def undecodable_environment(environ: Mapping[str, str]) -> str | None:
    for key, value in sorted(environ.items()):
        if not key.startswith("GOVRAG_"):
            continue
        byte = _bad_byte(key) or _bad_byte(value)
        if byte is not None:
            return (
                f"environment variable {_shown(key)} is not valid UTF-8 text (byte {byte}); "
                "set it to UTF-8 text"
            )
    return None


def _parameter_name(command: Any, args: Sequence[str], index: int) -> str:
    """How the user would name ``args[index]``: ``--option``, or the argument's metavar.
    (Click's objects are read by duck typing, for the same reason as in _click_kind.)"""
    arg = args[index]
    if arg.startswith("--") and "=" in arg:
        return arg.split("=", 1)[0]
    # Descend into subcommands named before the argument.
    position = 0
    while position < index and args[position] in (getattr(command, "commands", None) or {}):
        command, position = command.commands[args[position]], position + 1
    params = getattr(command, "params", [])
    takes_value = {
        opt
        for p in params
        if p.param_type_name == "option" and not p.is_flag and not p.count
        for opt in (*p.opts, *p.secondary_opts)
    }
    if index > 0 and args[index - 1] in takes_value:
        return args[index - 1]
    positionals = [p for p in params if p.param_type_name == "argument"]
    seen, j = 0, position
    while j < index:
        if args[j] in takes_value:
            j += 2
            continue
        if not args[j].startswith("-"):
            seen += 1
        j += 1
    if j == index and seen < len(positionals):
        found = positionals[seen]
        return str(getattr(found, "metavar", None) or str(found.name).upper())
    return f"argument {index + 1}"
