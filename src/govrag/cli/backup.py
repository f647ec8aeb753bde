"""``govrag backup DEST`` and ``govrag restore BACKUP TARGET`` (docs/backup.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from govrag.cli.common import DeploymentOpt, JsonOpt, emit, err, guard, open_app

if TYPE_CHECKING:
    from govrag.app import BackupReport, RestoreReport


#: A control character (C0, DEL, C1): shown escaped, never sent to the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def say(text: str) -> None:
    """One line on stderr. Values in these lines come from the backup (tenant ids, audit
    findings): never Rich markup, never a terminal escape sequence."""
    err.print(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text), highlight=False,
              markup=False)  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command()(backup)
    app.command()(restore)


def backup(
    dest: Annotated[Path, typer.Argument(help="A new folder (on other storage) to write to.")],
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Back up the deployment (database snapshot, audit checkpoints and keys, settings) to a
    new folder, while it goes on serving."""

    def run() -> BackupReport:
        with open_app(deployment) as app:
            return app.operators.back_up(dest)

    report = guard(run)
    if as_json:
        emit(report.as_dict())
        return
    say(
        f"backed up to {report.path}: {report.files} files, {report.bytes:,} bytes "
        f"({report.store}), in {report.seconds:.1f} s"
    )
    for item in report.skipped:
        say(f"  not copied (a link or special file): {item}")


def restore(
    backup: Annotated[Path, typer.Argument(help="A folder `govrag backup` wrote.")],
    target: Annotated[Path, typer.Argument(help="The new deployment folder (must not exist).")],
    outside: Annotated[
        bool,
        typer.Option(
            "--outside",
            help="Also put back what the backed-up settings kept outside the deployment "
            "folder, at its absolute path (never over anything).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Restore a backup as a new deployment: every file checked against the manifest, the
    indexes rebuilt and the audit log verified before it is put in place; exit 1 if the
    restored audit log does not verify."""
    import govrag

    report: RestoreReport = guard(lambda: govrag.restore(backup, target, outside=outside))
    if as_json:
        emit(report.as_dict())
    else:
        say(f"restored {report.files} files to {report.path} ({report.store})")
        for tenant, chunks in report.indexed.items():
            say(f"tenant {tenant}: indexes rebuilt, {chunks} chunks")
        for t in report.audit.tenants:
            say(
                f"tenant {t.chain.tenant}: audit chain of {t.chain.events} events, "
                f"{t.checkpoints} checkpoints"
            )
    if not report.audit.ok:
        for f in report.audit.findings:
            say(f"audit finding: {f.message}")
        say(
            "restored, but its audit log does not verify against its checkpoints: "
            "keep the backup, and see docs/audit.md"
        )
        raise typer.Exit(1)
