"""Restoring a deployment from a backup folder (``govrag restore``); the argument is in
:mod:`govrag.app.backup`'s docstring. Restore opens the result as an operator would (indexes
rebuilt, audit log verified), so it sits above :class:`~govrag.app.operators.Operators`,
while writing a backup sits below it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from govrag.app.backup_files import (
    DEPLOYMENT_DIR,
    BackupManifest,
    Copier,
    check_backup,
    database_file,
    fresh_folder,
    inside,
)
from govrag.app.operators import Operators
from govrag.deployment import Deployment
from govrag.errors import ConfigError, InputError
from govrag.settings import load_settings

if TYPE_CHECKING:
    from govrag.audit.anchor import AuditVerification


@dataclass
class RestoreReport:
    path: str
    files: int
    store: str
    #: Chunks indexed per tenant (the derived indexes, rebuilt from the restored database).
    indexed: dict[str, int]
    #: The restored audit chains checked against the restored checkpoints.
    audit: AuditVerification

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "files": self.files, "store": self.store,
                "indexed": self.indexed, "audit": self.audit.as_dict()}  # fmt: skip


def restore(backup: Path, target: Path, *, outside: bool = False) -> RestoreReport:
    """Restore the backup folder ``backup`` as the new deployment folder ``target``; the
    result is opened, indexed and verified before it is put in place (see the module).

    Items the backed-up settings kept outside the deployment directory go back to their
    absolute paths only with ``outside``: a backup from elsewhere must not write anywhere on
    this machine unasked."""
    backup = backup.resolve()
    manifest = check_backup(backup)
    away = [f"{p.setting} -> {p.original}" for p in manifest.outside]
    if manifest.database_path is not None:
        away.append(f"store.url -> {manifest.database_path}")
    if away and not outside:
        raise InputError(f"the backup {str(backup)!r} puts {len(away)} item(s) outside the "
                         f"deployment folder: {'; '.join(away)}; pass --outside to restore "
                         "them there (nothing there is overwritten)")  # fmt: skip
    target = target.resolve()
    staging = fresh_folder(target, "restore")
    made: list[Path] = []  # what was placed outside the target, removed again on failure
    try:
        for f in manifest.files:
            if f.path.startswith(f"{DEPLOYMENT_DIR}/"):
                Copier.place(backup / f.path, staging / f.path[len(DEPLOYMENT_DIR) + 1 :], f)
        for p in manifest.outside:
            made.append(_place_outside(backup, manifest, p.folder, Path(p.original), p.setting))
        if manifest.store == "sqlite":
            db = manifest.database_path
            if db is not None:
                made.append(_place_outside(backup, manifest, manifest.database, Path(db),
                                           "store.url"))  # fmt: skip
        settings = load_settings(staging)
        if manifest.store == "sqlite" and manifest.database_path is None:
            db_file = database_file(settings)
            if db_file is None or not inside(db_file.resolve(), staging.resolve()):
                raise ConfigError("the backup holds a SQLite database, but the restored "
                                  "govrag.toml's [store] url is not a SQLite file in the "
                                  "deployment folder (GOVRAG_STORE__URL set?); restore it "
                                  "as it was, then change the settings")  # fmt: skip
            Copier.place(backup / manifest.database, db_file, manifest.file(manifest.database))
        elif manifest.store == "postgresql":
            from govrag.app.backup_postgres import pg_restore

            pg_restore(settings, backup / manifest.database)
        indexed, audit = _open_and_check(staging)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for path in made:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(True)
        raise
    return RestoreReport(path=str(target), files=len(manifest.files), store=manifest.store,
                         indexed=indexed, audit=audit)  # fmt: skip


def _place_outside(backup: Path, manifest: BackupManifest, folder: str, original: Path,
                   setting: str) -> Path:  # fmt: skip
    """Put an item the settings keep outside the deployment back where it was; refused when
    something is there already (restore never overwrites)."""
    if original.exists() and not (original.is_dir() and not any(original.iterdir())):
        raise InputError(f"{setting} of the backed-up deployment is {str(original)!r}, and "
                         "something is there already; restore never overwrites: move it "
                         "away, or restore on a machine where the path is free")  # fmt: skip
    for f in manifest.files:
        if f.path == folder:
            Copier.place(backup / f.path, original, f)
        elif f.path.startswith(f"{folder}/"):
            Copier.place(backup / f.path, original / f.path[len(folder) + 1 :], f)
    return original


def _open_and_check(root: Path) -> tuple[dict[str, int], AuditVerification]:
    """Open the restored deployment (migrating an older store), rebuild its derived indexes
    and verify its audit chains against its checkpoints."""
    with Deployment.load(root) as dep:
        ops = Operators(dep)
        return ops.index_rebuild(), ops.audit_verify()
