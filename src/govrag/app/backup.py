"""Backup and restore of a deployment: its truth store, its audit anchor and keys, its files.

A backup is a folder: ``manifest.json``; the database snapshot under ``database/``; the
deployment directory's own files (settings, principals, routes, manifests, policies, keys,
checkpoints, source states) under ``deployment/``; and what the settings place outside that
directory (a checkpoint folder on other storage, a key file elsewhere) under ``outside/<n>/``,
with the path it came from. The argument for each choice:

- **The audit anchor before the database.** Checkpoints and keys are copied first and the
  database snapshot is taken after them, so every checkpoint in a backup signs a chain head
  the backed-up log holds. The other way round, a checkpoint written in between would sign
  events the snapshot lacks, and the restored log would rightly verify as cut.
- **One consistent snapshot** of the truth store, taken while other processes go on serving
  (SQLite's online backup through the store's own connection; PostgreSQL: ``pg_dump``).
- **Derived indexes are rebuilt, not copied**: a copy of an index another process is
  committing to may be torn, and the database is what ``govrag index verify`` compares an
  index with anyway. Restore rebuilds them from the restored database.
- **Checked before anything is in place.** Every file is in the manifest with its size and
  SHA-256. Restore (:mod:`govrag.app.restoring`) reads each once, checked, into a staging
  folder beside the target, confines the restored settings to it, opens it (an older
  release's store migrates here), rebuilds its indexes and verifies its audit chain against
  the restored checkpoints, and only then renames it into place. A corrupt, partial or
  tampered backup restores nothing, and an existing deployment or file is never overwritten.
- **A backup is as secret as the deployment**: it holds every document and the signing key.
  Its folders are created mode 0700, the database snapshot 0600, and each file keeps its
  mode (the key stays 0600).
- **Nothing is written where the deployment keeps its evidence or its derived state**: a
  backup folder inside the deployment, its checkpoint folder, its keys, its index or its
  model cache is refused.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from govrag.app.backup_files import (
    DATABASE_DIR,
    DEPLOYMENT_DIR,
    BackupManifest,
    Copier,
    Placed,
    anchor_settings,
    create_file,
    database_file,
    fresh_folder,
    inside,
    os_refusal,
    write_manifest,
)
from govrag.deployment import Deployment
from govrag.errors import ConfigError, InputError
from govrag.harvest.state import STATE_DIR
from govrag.store.clock import now_iso
from govrag.store_url import parse_store_url


@dataclass
class BackupReport:
    path: str
    files: int
    bytes: int
    store: str
    seconds: float
    #: Deployment files left out: links and special files (a backup copies regular files).
    skipped: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return vars(self).copy()


def back_up(dep: Deployment, dest: Path) -> BackupReport:
    """Write a backup of the deployment to the new folder ``dest`` (see the module)."""
    started = time.monotonic()
    s = dep.settings
    root = s.deployment.resolve()
    url = parse_store_url(s.store.url)
    if url.kind == "memory":
        raise ConfigError("[store] url is sqlite://:memory:, a store that lives and dies with "
                          "its process; there is nothing to back up")  # fmt: skip
    dest = dest.resolve()
    anchor = [(setting, s.resolve_path(c)) for setting, c in anchor_settings(s)]
    index = s.resolve_path(s.store.index_dir).resolve()
    cache = s.resolve_path(s.embedder.cache_dir).resolve()
    if inside(dest, root):
        raise InputError(f"the backup folder {str(dest)!r} is inside the deployment "
                         f"{str(root)!r}; put backups on other storage")  # fmt: skip
    for setting, path in [*((n, p.resolve()) for n, p in anchor),
                          ("store.index_dir", index), ("embedder.cache_dir", cache)]:  # fmt: skip
        if inside(dest, path):
            raise InputError(f"the backup folder {str(dest)!r} is inside {setting} "
                             f"({str(path)!r}); put backups on storage of their own")  # fmt: skip
    try:
        return _back_up(dep, dest, anchor, index=index, cache=cache, started=started)
    except OSError as exc:
        raise os_refusal(exc, f"write the backup {str(dest)!r}") from exc


def _back_up(dep: Deployment, dest: Path, anchor: list[tuple[str, Path]], *, index: Path,
             cache: Path, started: float) -> BackupReport:  # fmt: skip
    s = dep.settings
    root = s.deployment.resolve()
    url = parse_store_url(s.store.url)
    staging = fresh_folder(dest, "backup")
    try:
        copier = Copier(staging)
        placed: list[Placed] = []
        links: set[Path] = set()
        # 1. The audit anchor (see the module docstring for why first). Only this once: a
        # checkpoint written after the snapshot must not be picked up by step 3.
        for setting, configured in anchor:
            path = configured.resolve()
            if inside(path, root):
                copier.tree(path, f"{DEPLOYMENT_DIR}/{path.relative_to(root).as_posix()}")
            elif path.exists():
                folder = f"outside/{len(placed)}"
                copier.tree(path, folder)
                # Re-created by restore only when the setting's own path is the link (a
                # link further up is the operator's to make again).
                base = s.deployment.absolute()  # as written: a link is not resolved away
                link = configured.absolute() if configured.is_symlink() else None
                if link is not None and not inside(link, base):
                    link = None
                if link is not None:
                    links.add(link)
                placed.append(Placed(
                    setting=setting, original=str(path), folder=folder,
                    link=None if link is None else link.relative_to(base).as_posix(),
                    link_target=None if link is None else str(link.resolve()),
                ))  # fmt: skip
        # 2. The truth store, one snapshot, in a file only its owner may read.
        database = f"{DATABASE_DIR}/{'govrag.db' if url.kind == 'sqlite' else 'govrag.pgdump'}"
        os.mkdir(staging / DATABASE_DIR, 0o700)
        if url.kind == "sqlite":  # made 0600 first: SQLite would make it by the umask
            create_file(staging / database, 0o600).close()
        dep.store.back_up(staging / database)
        copier.adopt(database)
        # 3. The rest of the deployment directory: what is not derived or cached.
        db_file = database_file(s)
        left_out = {index, *(p.resolve() for _, p in anchor)}
        if db_file is not None:
            db = db_file.resolve()
            left_out |= {db, *(db.with_name(db.name + x) for x in ("-wal", "-shm", "-journal"))}
        keep = (root / STATE_DIR).resolve()  # source states live in the cache folder's tree
        skipped = copier.deployment(root, left_out, cache=cache, keep=keep, links=links)
        manifest = BackupManifest(
            govrag_version=_version(), created_at=now_iso(),
            store="sqlite" if url.kind == "sqlite" else "postgresql",
            schema_version=dep.store.schema_version(), database=database,
            database_path=None if db_file is None or inside(db_file.resolve(), root)
            else str(db_file.resolve()),
            outside=placed, files=copier.files,
        )  # fmt: skip
        write_manifest(staging, manifest)
        os.rename(staging, dest)  # over an empty folder too (rename(2) replaces one)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BackupReport(path=str(dest), files=len(copier.files),
                        bytes=sum(f.size for f in copier.files), store=manifest.store,
                        seconds=round(time.monotonic() - started, 3),
                        skipped=skipped)  # fmt: skip


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("govrag")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"
