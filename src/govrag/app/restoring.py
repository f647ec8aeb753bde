"""Restoring a deployment from a backup folder (``govrag restore``).

The argument of backup and restore is in :mod:`govrag.app.backup`; how files are read back
checked is in :mod:`govrag.app.backup_files`. This module puts them together, in an order
where nothing lands in its place before everything has been checked:

1. every file is read once, checked, into a private work folder (the deployment's own files
   straight into the staging folder that becomes the target);
2. the restored settings are confined: every path restore writes or reads (the store, the
   indexes, the model cache, the checkpoints and keys) must lie inside the staging folder,
   or be exactly an item the backup places outside with the operator's ``outside`` consent
   (the model cache excepted, which deployments share by design);
   a PostgreSQL store is restored only into a database the environment names, never the
   one the backed-up settings name;
3. the items kept outside are placed, each file and folder recorded as it is created;
4. the deployment is opened (an older store migrates), its indexes rebuilt, its audit log
   verified; only then is it renamed into place. A failure removes the staging and work
   folders and exactly what step 3 created, and its message names the target, not the
   staging folder that no longer exists.

Restore is above :class:`~govrag.app.operators.Operators` (it opens the result as an
operator would), while writing a backup is below it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from govrag.app.backup_files import (
    DEPLOYMENT_DIR,
    BackupManifest,
    anchor_settings,
    copy_new,
    database_file,
    fresh_folder,
    inside,
    make_dirs,
    occupied,
    os_refusal,
)
from govrag.app.backup_reading import copy_checked, read_manifest
from govrag.app.operators import Operators
from govrag.deployment import Deployment
from govrag.errors import ConfigError, GovragError, InputError, StoreError
from govrag.settings import Settings, load_settings

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
    backup, target = backup.resolve(), target.resolve()
    manifest = read_manifest(backup)
    away = [f"{p.setting} -> {p.original!r}"
            + (f" (through the link {p.link!r} -> {p.link_target!r})" if p.link else "")
            for p in manifest.outside]  # fmt: skip
    if manifest.database_path is not None:
        away.append(f"store.url -> {manifest.database_path!r}")
    if away and not outside:
        raise InputError(f"the backup {str(backup)!r} puts {len(away)} item(s) outside the "
                         f"deployment folder: {'; '.join(away)}; pass --outside to restore "
                         "them there (nothing there is overwritten)")  # fmt: skip
    for original in [Path(p.original) for p in manifest.outside] + (
        [Path(manifest.database_path)] if manifest.database_path else []
    ):  # fmt: skip
        if inside(original, target) or inside(original, backup) or inside(target, original):
            raise InputError(f"the backup places {str(original)!r} outside the deployment, "
                             f"but that overlaps the target {str(target)!r} or the backup; "
                             "restore into another folder")  # fmt: skip
    try:
        staging = fresh_folder(target, "restore")
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-work-", dir=target.parent))
    except OSError as exc:
        raise os_refusal(exc, f"restore into {str(target)!r}") from exc
    created: list[Path] = []  # made outside the target, in order; removed again on failure
    try:
        indexed, audit = _restore(backup, manifest, staging, work, created)
        os.chmod(staging, 0o755)  # as a deployment folder is made (its keys are 0600)
        os.rename(staging, target)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        for path in reversed(created):
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
        if isinstance(exc, OSError):
            raise os_refusal(exc, f"restore into {str(target)!r}") from exc
        if type(exc) in (ConfigError, InputError, StoreError):
            # Named after the target: the staging folder in the message is gone now.
            raise type(exc)(str(exc).replace(str(staging), str(target))) from exc
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return RestoreReport(path=str(target), files=len(manifest.files), store=manifest.store,
                         indexed=indexed, audit=_relocated(audit, staging, target))  # fmt: skip


def _restore(backup: Path, manifest: BackupManifest, staging: Path, work: Path,
             created: list[Path]) -> tuple[dict[str, int], AuditVerification]:  # fmt: skip
    prefix = f"{DEPLOYMENT_DIR}/"
    for f in manifest.files:  # 1. everything read once, checked
        own = f.path.startswith(prefix)
        copy_checked(backup, f, staging / f.path[len(prefix) :] if own else work / f.path)
    overrides = _store_overrides(manifest)
    settings = load_settings(staging, **overrides)
    _link_anchors(settings, staging, manifest)
    _confine(settings, staging, manifest)  # 2.
    for p in manifest.outside:  # 3.
        _place(work / p.folder, Path(p.original), p.setting, created)
    if manifest.store == "sqlite":
        db = database_file(settings)
        assert db is not None  # _confine: a SQLite backup needs a SQLite url
        if manifest.database_path is not None:
            # SQLite's own files beside it, made when it is opened: removed with it.
            beside = [db.with_name(db.name + x) for x in ("-wal", "-shm")]
            created += [w for w in beside if not w.exists() and not w.is_symlink()]
            _place(work / manifest.database, db, "store.url", created)
        else:
            make_dirs(db.parent, 0o755)
            os.rename(work / manifest.database, db)
    key = settings.resolve_path(settings.audit.signing_key).resolve()
    if inside(key, staging.resolve()) and key.is_file():
        os.chmod(key, 0o600)  # whatever mode the backup recorded
        if key.parent != staging.resolve():
            os.chmod(key.parent, 0o700)
    if manifest.store == "postgresql":
        from govrag.app.backup_postgres import pg_restore

        pg_restore(settings, work / manifest.database)
        try:
            return _open_and_check(staging, overrides)
        except GovragError as exc:
            raise StoreError(f"{exc}; the PostgreSQL database now holds the restored store: "
                             "drop and re-create it before restoring again") from exc  # fmt: skip
    return _open_and_check(staging, overrides)  # 4.


def _store_overrides(manifest: BackupManifest) -> dict[str, Any]:
    """A PostgreSQL store is restored only into the database the environment names (its
    ``url``, and its owner's ``admin_url`` or none): never one the backed-up settings name."""
    if manifest.store == "sqlite":
        return {}
    if not os.environ.get("GOVRAG_STORE__URL"):
        raise ConfigError("a PostgreSQL backup is restored only into a new, empty database "
                          "you name: set GOVRAG_STORE__URL (and GOVRAG_STORE__ADMIN_URL, its "
                          "owner) to it; restore never connects to a database the backed-up "
                          "settings name")  # fmt: skip
    return {} if os.environ.get("GOVRAG_STORE__ADMIN_URL") else {"store": {"admin_url": None}}


def _link_anchors(s: Settings, staging: Path, manifest: BackupManifest) -> None:
    """Re-create the links the backed-up deployment had in place of an anchor path: only
    where the restored settings put that very setting, never inside the index folder, and
    only in a folder of the staging area itself (no link is created through another)."""
    configured = dict(anchor_settings(s))
    index = s.resolve_path(s.store.index_dir)
    for p in manifest.outside:
        if p.link is None or p.link_target is None:
            continue
        link = staging / p.link
        if p.setting not in configured or s.resolve_path(configured[p.setting]) != link:
            raise ConfigError(f"the backup re-creates the link {p.link!r} for {p.setting}, "
                              "which the restored settings do not put there; the backup was "
                              "edited")  # fmt: skip
        if inside(link, index) or inside(index, link):
            raise ConfigError(f"the backup's link {p.link!r} is in the index folder; the "
                              "backup was edited")  # fmt: skip
        make_dirs(link.parent, 0o755)
        if Path(os.path.realpath(link.parent)) != staging.resolve() / Path(p.link).parent:
            raise ConfigError(f"the link {p.link!r} would be made through another link; the "
                              "backup was edited")  # fmt: skip
        if not link.is_symlink():
            os.symlink(p.link_target, link)


def _confine(s: Settings, staging: Path, manifest: BackupManifest) -> None:
    """Every path the restore writes or reads is inside ``staging``, or an item the backup
    places outside for that setting (see the module)."""
    root = staging.resolve()
    #: Each setting may lie outside only at the place the backup puts that setting's item.
    allowed = {p.setting: Path(p.original) for p in manifest.outside}
    # Not the model cache: deployments of one model may share it by design (entries keyed
    # by the model's files, written atomically), and a restore loads no model.
    paths = [("store.index_dir", s.store.index_dir), *anchor_settings(s)]
    for setting, value in paths:
        resolved = s.resolve_path(value).resolve()
        if not inside(resolved, root) and resolved != allowed.get(setting):
            raise ConfigError(f"the restored settings put {setting} at {str(resolved)!r}, "
                              "outside the deployment folder, where the backup places "
                              "nothing (an environment variable, or an edited govrag.toml?); "
                              "restore without the override, or make the path relative in "
                              "the backup's govrag.toml")  # fmt: skip
    db = database_file(s)
    if manifest.store == "sqlite":
        want = Path(manifest.database_path) if manifest.database_path else None
        if db is None or (db.resolve() != want if want else not inside(db.resolve(), root)):
            raise ConfigError("the restored settings' [store] url is not the SQLite file the "
                              "backup holds (GOVRAG_STORE__URL set, or an edited "
                              "govrag.toml?); restore it as it was, then change the "
                              "settings")  # fmt: skip


def _place(source: Path, original: Path, setting: str, created: list[Path]) -> None:
    """Put an item back where the settings keep it outside the deployment; refused when
    something is there already (restore never overwrites). Each file and folder made is
    recorded in ``created``; a folder that was there (empty) is kept on failure."""
    if occupied(original):
        raise InputError(f"{setting} of the backed-up deployment is {str(original)!r}, and "
                         "something is there already; restore never overwrites: move it "
                         "away, or restore on a machine where the path is free")  # fmt: skip
    if source.is_file():
        make_dirs(original.parent, 0o755, created)
        created.append(original)
        copy_new(source, original)
        return
    make_dirs(original, 0o755, created)
    for path in sorted(source.rglob("*")):
        dest = original / path.relative_to(source)
        if path.is_dir():
            make_dirs(dest, 0o755, created)
        else:
            make_dirs(dest.parent, 0o755, created)
            created.append(dest)
            copy_new(path, dest)


def _open_and_check(root: Path, overrides: dict[str, Any]
                    ) -> tuple[dict[str, int], AuditVerification]:  # fmt: skip
    """Open the restored deployment (migrating an older store), rebuild its derived indexes
    and verify its audit chains against its checkpoints."""
    with Deployment.load(root, **overrides) as dep:
        ops = Operators(dep)
        return ops.index_rebuild(), ops.audit_verify()


def _relocated(audit: AuditVerification, staging: Path, target: Path) -> AuditVerification:
    """The verification as if made at ``target`` (its messages name the staging folder)."""

    def moved(text: str) -> str:
        return text.replace(str(staging), str(target))

    return dataclasses.replace(
        audit, checkpoint_dir=moved(audit.checkpoint_dir),
        findings=[dataclasses.replace(f, message=moved(f.message)) for f in audit.findings],
    )  # fmt: skip
