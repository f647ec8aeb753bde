"""Reading a backup back, checked: a restore reads a folder someone else may have written.

Nothing in it is trusted until checked. The manifest must parse as the typed record, and every
path in it must stay inside the backup (no absolute path, no ``..``, under one of the backup's
own folders). Each file is then read exactly once, through no link at any level (every
component opened ``O_NOFOLLOW`` from the backup folder down), as a regular file, hashed while
it is copied to the restore's private staging area: a file swapped between a check and a
copy, a link to a secret elsewhere, a FIFO or a device never gets in.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pydantic import ValidationError

from govrag.app.backup_files import (
    DATABASE_DIR,
    DEPLOYMENT_DIR,
    MANIFEST,
    BackupFile,
    BackupManifest,
    create_file,
    make_dirs,
    pump,
)
from govrag.errors import InputError

#: Largest manifest read (a backup of a million files lists ~200 MB; refuse beyond).
_MANIFEST_BYTES = 512 << 20


def _open_inside(backup: Path, path: str) -> int:
    """A descriptor of the regular file ``path`` under ``backup``, opened without following
    a link at any level (see the module docstring)."""
    parts = path.split("/")
    fd = os.open(backup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        raise OSError(f"{path!r} is not a regular file")
    return leaf


def copy_checked(backup: Path, record: BackupFile, target: Path) -> None:
    """Copy the backup's file ``record`` to the new file ``target`` (folders made 0700),
    hashing as it goes: the bytes must be the recorded size and SHA-256. The mode is the
    recorded one without write access for others (a hostile 0777 lands 0755)."""
    where = str(backup / record.path)
    try:
        fd = _open_inside(backup, record.path)
    except OSError as exc:
        raise InputError(f"{where!r} is missing from the backup, or not a regular file "
                         f"({exc.strerror or exc}); the backup is incomplete or was "
                         "tampered with: use another copy") from None  # fmt: skip
    make_dirs(target.parent, 0o700)
    with os.fdopen(fd, "rb") as src, create_file(target, 0o600) as out:
        digest, size = pump(src, out, limit=record.size)
    if (size, digest) != (record.size, record.sha256):
        raise InputError(f"{where!r} does not match the manifest ({size} bytes read, "
                         f"recorded {record.size}; or its SHA-256 differs): the backup is "
                         "damaged; use another copy")  # fmt: skip
    os.chmod(target, record.mode & 0o755)


def read_manifest(backup: Path) -> BackupManifest:
    """The backup's manifest, its paths checked (see the module); its files are checked as
    they are copied (:func:`copy_checked`). A :class:`InputError` naming the fault."""
    path = backup / MANIFEST
    if not backup.is_dir():
        raise InputError(f"{str(backup)!r} is not a folder; name the folder `govrag backup` "
                         "wrote")  # fmt: skip
    if not path.is_file() or path.stat().st_size > _MANIFEST_BYTES:
        raise InputError(f"{str(backup)!r} is not a govrag backup: it has no readable "
                         f"{MANIFEST} (`govrag backup DEST` writes one)")  # fmt: skip
    try:
        manifest = BackupManifest.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(f"{str(path)!r} is not a manifest this govrag reads: {where}: "
                         f"{first['msg']}; was the backup written by a newer govrag, or "
                         "edited?") from None  # fmt: skip
    listed = {f.path for f in manifest.files}
    if len(listed) != len(manifest.files):
        raise InputError(f"{str(path)!r} lists a file twice; the backup was edited")
    if manifest.database not in listed:
        raise InputError(f"{str(path)!r} names the database {manifest.database!r}, which it "
                         "does not list; the backup is incomplete")  # fmt: skip
    folders = {DATABASE_DIR, DEPLOYMENT_DIR, *(p.folder for p in manifest.outside)}
    absolute = [p.original for p in manifest.outside] + [p.link_target or "/" for p in
                                                          manifest.outside]  # fmt: skip
    if manifest.database_path is not None:
        absolute.append(manifest.database_path)
    for value in absolute:
        if not value.startswith("/") or "\x00" in value or any(
            part in (".", "..") for part in value.split("/")
        ):  # fmt: skip
            raise InputError(f"{str(path)!r} names {value!r}, which is not a plain absolute "
                             "path; the backup was edited")  # fmt: skip
    links = [p.link for p in manifest.outside if p.link is not None]
    for p in manifest.outside:
        if (p.link is None) != (p.link_target is None) or (p.link is not None and (
            not _safe(p.link, {p.link}) or p.link_target != p.original
            or any(other != p.link and (other.startswith(f"{p.link}/")
                                        or p.link.startswith(f"{other}/")) for other in links)
        )):  # fmt: skip
            raise InputError(f"{str(path)!r}: the link {p.link!r} of {p.setting} is not a "
                             "plain relative path leading to the item itself, or lies in "
                             "another link; the backup was edited")  # fmt: skip
    for f in manifest.files:
        if not _safe(f.path, folders):
            raise InputError(f"{str(path)!r} lists {f.path!r}, a path outside the backup's "
                             "folders; the backup was edited")  # fmt: skip
    return manifest


def _safe(path: str, folders: set[str]) -> bool:
    """A relative, ``..``-free path under one of ``folders`` (a folder or its first parts)."""
    # Split by hand: PurePosixPath would tidy "a//b" and "a/./b" into paths that look safe.
    if "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in path.split("/")):
        return False
    return any(path == f or path.startswith(f"{f}/") for f in folders)
