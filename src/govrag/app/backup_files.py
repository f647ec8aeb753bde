"""The files of a backup: its manifest, copying with checksums, and checking before restore.

A restore reads a folder someone else may have written, so nothing in it is trusted until
checked: the manifest is a typed record that refuses unknown fields; every path in it must
stay inside the backup (no absolute path, no ``..``, under one of the backup's own folders);
every file must be a regular file (not a link) of the recorded size and SHA-256. Only then is
anything written, and a file is only ever created, never written over.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from govrag.errors import InputError
from govrag.settings import Settings
from govrag.store_url import parse_store_url

MANIFEST = "manifest.json"
DATABASE_DIR = "database"
DEPLOYMENT_DIR = "deployment"
OUTSIDE_DIR = "outside"
_CHUNK = 1 << 20


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackupFile(_Record):
    #: Where the file is in the backup (``/``-separated, relative).
    path: str = Field(min_length=1, max_length=4096)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    #: Its permission bits (a signing key stays 0600).
    mode: int = Field(ge=0, le=0o777)


class Placed(_Record):
    """An item the settings keep outside the deployment directory."""

    setting: str
    #: The absolute path it was copied from (and is restored to).
    original: str
    #: Its folder in the backup (``outside/<n>``).
    folder: str


class BackupManifest(_Record):
    format: Literal[1] = 1
    govrag_version: str
    created_at: str
    store: Literal["sqlite", "postgresql"]
    #: The newest migration the backed-up store had run.
    schema_version: int = Field(ge=0)
    #: The snapshot's path in the backup.
    database: str
    #: A SQLite file the settings keep outside the deployment directory (absolute).
    database_path: str | None = None
    outside: list[Placed] = Field(default_factory=list)
    files: list[BackupFile]

    def file(self, path: str) -> BackupFile:
        return next(f for f in self.files if f.path == path)


def database_file(s: Settings) -> Path | None:
    url = parse_store_url(s.store.url)
    return s.resolve_path(url.path) if url.kind == "sqlite" else None


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or under it (both resolved)."""
    return path == root or root in path.parents


def fresh_folder(target: Path, what: str) -> Path:
    """A new, private folder beside ``target`` to build into and rename into place; refused
    when ``target`` exists and is not an empty folder (a backup or restore never
    overwrites)."""
    if target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise InputError(f"{str(target)!r} exists and is not an empty folder; a {what} never "
                         "writes over anything: name a new folder")  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.{what}-", dir=target.parent))


class Copier:
    """Copies files into a backup folder, recording each one's size, digest and mode."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: list[BackupFile] = []
        self._done: set[str] = set()

    def tree(self, source: Path, dest: str) -> None:
        """``source`` (a file, or a folder's regular files) to ``dest`` in the backup."""
        if source.is_file() and not source.is_symlink():
            self._copy(source, dest)
        elif source.is_dir() and not source.is_symlink():
            for path in sorted(source.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    self._copy(path, f"{dest}/{path.relative_to(source).as_posix()}")

    def adopt(self, path: str) -> None:
        """Record a file already written into the backup (the database snapshot)."""
        full = self.root / path
        digest, size = _digest(full)
        self._record(path, size, digest, 0o600)

    def deployment(self, root: Path, left_out: set[Path], *, cache: Path, keep: Path
                   ) -> list[str]:  # fmt: skip
        """Every regular file under ``root`` not yet copied, except ``left_out`` and the
        cache folder (but its ``keep`` subfolder); returns what was skipped as not a file."""
        skipped: list[str] = []
        if inside(root, cache):  # a cache folder holding the deployment excludes nothing
            cache = Path("/nonexistent/govrag-cache")
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            for name in list(dirnames):
                sub = here / name
                if (sub.resolve() in left_out or sub.is_symlink()
                        or (inside(sub.resolve(), cache) and not inside(keep, sub.resolve())
                            and not inside(sub.resolve(), keep))):  # fmt: skip
                    dirnames.remove(name)
                    if sub.is_symlink():
                        skipped.append(str(sub.relative_to(root)))
            for name in filenames:
                path = here / name
                rel = f"{DEPLOYMENT_DIR}/{path.relative_to(root).as_posix()}"
                if rel in self._done or path.resolve() in left_out:
                    continue
                if inside(path.resolve(), cache) and not inside(path.resolve(), keep):
                    continue
                if path.is_symlink() or not path.is_file():
                    skipped.append(str(path.relative_to(root)))
                    continue
                self._copy(path, rel)
        return skipped

    def _copy(self, source: Path, dest: str) -> None:
        if dest in self._done:
            return
        target = self.root / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(source.stat().st_mode)
        digest = hashlib.sha256()
        size = 0
        with open(source, "rb") as src, _create(target, 0o600) as out:
            while block := src.read(_CHUNK):
                digest.update(block)
                size += len(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        self._record(dest, size, digest.hexdigest(), mode)

    def _record(self, path: str, size: int, digest: str, mode: int) -> None:
        self._done.add(path)
        self.files.append(BackupFile(path=path, size=size, sha256=digest, mode=mode))

    @staticmethod
    def place(source: Path, target: Path, record: BackupFile) -> None:
        """Create ``target`` with ``source``'s bytes and the recorded mode; never replaces a
        file (the bytes were checked against the manifest by :func:`check_backup`)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(source, "rb") as src, _create(target, record.mode) as out:
            while block := src.read(_CHUNK):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(target, record.mode)


def _create(path: Path, mode: int) -> BinaryIO:
    """A new file, opened for writing; an existing one (or a link) is an error."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError as exc:
        raise InputError(f"{str(path)!r} exists already; a backup or restore never writes "
                         "over a file: restore into a new folder") from exc  # fmt: skip
    return os.fdopen(fd, "wb")


def _digest(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def write_manifest(root: Path, manifest: BackupManifest) -> None:
    with _create(root / MANIFEST, 0o600) as out:
        out.write(manifest.model_dump_json(indent=1).encode())
        out.flush()
        os.fsync(out.fileno())


def check_backup(backup: Path) -> BackupManifest:
    """The backup's manifest, once every file it lists is checked (see the module); a
    :class:`InputError` naming the file and the fault otherwise."""
    path = backup / MANIFEST
    if not path.is_file():
        raise InputError(f"{str(backup)!r} is not a govrag backup: it has no {MANIFEST} "
                         "(`govrag backup DEST` writes one)")  # fmt: skip
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
    for p in manifest.outside:
        if not PurePosixPath(p.original).is_absolute() or not _safe(p.folder, {OUTSIDE_DIR}):
            raise InputError(f"{str(path)!r}: the outside item of {p.setting!r} names "
                             f"{p.original!r} in {p.folder!r}; the backup was edited")  # fmt: skip
    if manifest.database_path is not None and not Path(manifest.database_path).is_absolute():
        raise InputError(f"{str(path)!r}: database_path {manifest.database_path!r} is not "
                         "absolute; the backup was edited")  # fmt: skip
    for f in manifest.files:
        if not _safe(f.path, folders):
            raise InputError(f"{str(path)!r} lists {f.path!r}, a path outside the backup's "
                             "folders; the backup was edited")  # fmt: skip
        full = backup / f.path
        if full.is_symlink() or not full.is_file():
            raise InputError(f"{str(full)!r} is missing from the backup (or not a file); "
                             "the backup is incomplete")  # fmt: skip
        digest, size = _digest(full)
        if (size, digest) != (f.size, f.sha256):
            raise InputError(f"{str(full)!r} does not match the manifest ({size} bytes, "
                             f"sha256 {digest[:12]}...; recorded {f.size} bytes, "
                             f"{f.sha256[:12]}...): the backup is damaged; use another "
                             "copy")  # fmt: skip
    return manifest


def _safe(path: str, folders: set[str]) -> bool:
    """A relative, ``..``-free path under one of ``folders`` (a folder or its first parts)."""
    # Split by hand: PurePosixPath would tidy "a//b" and "a/./b" into paths that look safe.
    if "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in path.split("/")):
        return False
    return any(path == f or path.startswith(f"{f}/") for f in folders)
