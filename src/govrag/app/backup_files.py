"""The files of a backup: its manifest, and writing them.

The manifest is a typed record that refuses unknown fields; every file a backup holds is in
it with its size, SHA-256 and mode. Files are only ever created, never written over
(``O_EXCL | O_NOFOLLOW``), and folders are made one by one, so what a restore creates outside
its target can be recorded as it is created (:func:`make_dirs`). Reading a backup back, which
trusts none of it, is :mod:`govrag.app.backup_reading`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field

from govrag.errors import InputError
from govrag.settings import Settings
from govrag.store_url import parse_store_url

MANIFEST = "manifest.json"
DATABASE_DIR = "database"
DEPLOYMENT_DIR = "deployment"
OUTSIDE_DIR = "outside"
#: Bytes read and written at a time.
CHUNK = 1 << 20


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackupFile(_Record):
    #: Where the file is in the backup (``/``-separated, relative).
    path: str = Field(min_length=1, max_length=4096)
    size: int = Field(ge=0, le=1 << 50)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    #: Its permission bits (a signing key stays 0600).
    mode: int = Field(ge=0, le=0o777)


class Placed(_Record):
    """An item the settings keep outside the deployment directory."""

    setting: str = Field(
        pattern=r"^(audit\.(checkpoint_dir|signing_key|verify_key|"
        r"verify_keys\[[0-9]{1,2}\])|auth\.jwks_file)$"
    )
    #: The absolute path it was copied from (and is restored to).
    original: str = Field(max_length=4096)
    #: Its folder in the backup (``outside/<n>``).
    folder: str = Field(pattern=r"^outside/[0-9]{1,4}$")
    #: The setting's own path inside the deployment directory when that path is a link to
    #: the item (relative, e.g. ``audit-checkpoints`` -> WORM storage): re-created with it.
    link: str | None = Field(default=None, max_length=4096)
    link_target: str | None = Field(default=None, max_length=4096)


class BackupManifest(_Record):
    format: Literal[1] = 1
    govrag_version: str = Field(max_length=100)
    created_at: str = Field(max_length=100)
    store: Literal["sqlite", "postgresql"]
    #: The newest migration the backed-up store had run.
    schema_version: int = Field(ge=0)
    #: The snapshot's path in the backup.
    database: Literal["database/govrag.db", "database/govrag.pgdump"]
    #: A SQLite file the settings keep outside the deployment directory (absolute).
    database_path: str | None = Field(default=None, max_length=4096)
    outside: list[Placed] = Field(default_factory=list, max_length=64)
    files: list[BackupFile]


def anchor_settings(s: Settings) -> list[tuple[str, str]]:
    """(setting, configured path) of the audit anchor: copied before the database."""
    a = s.audit
    found = [("audit.checkpoint_dir", a.checkpoint_dir), ("audit.signing_key", a.signing_key)]
    if a.verify_key:
        found.append(("audit.verify_key", a.verify_key))
    found += [(f"audit.verify_keys[{i}]", v) for i, v in enumerate(a.verify_keys)]
    if s.auth.jwks_file:
        found.append(("auth.jwks_file", s.auth.jwks_file))
    return found


def database_file(s: Settings) -> Path | None:
    url = parse_store_url(s.store.url)
    return s.resolve_path(url.path) if url.kind == "sqlite" else None


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or under it (both resolved)."""
    return path == root or root in path.parents


def make_dirs(path: Path, mode: int, created: list[Path] | None = None) -> None:
    """``path`` and its missing parents, each made with ``mode``; those made are appended to
    ``created`` (so a failed restore removes them, and no folder that was there before)."""
    missing: list[Path] = []
    p = path
    while not p.exists() and not p.is_symlink():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        os.mkdir(d, mode)
        if created is not None:
            created.append(d)


def os_refusal(exc: OSError, what: str) -> InputError:
    """An OS error of a backup or restore (a folder not writable, a full disk) as a one-line
    refusal naming the file."""
    where = f" ({exc.filename})" if exc.filename else ""
    return InputError(f"cannot {what}: {exc.strerror or exc}{where}; check the folder's "
                      "permissions and free space")  # fmt: skip


def occupied(path: Path) -> bool:
    """Whether something is at ``path`` that a backup or restore would write over: anything
    but nothing or an empty folder (a link, even to an empty folder, counts)."""
    return path.is_symlink() or (path.exists() and not (path.is_dir() and not any(path.iterdir())))


def fresh_folder(target: Path, what: str) -> Path:
    """A new, private folder beside ``target`` to build into and rename into place; refused
    when ``target`` exists and is not an empty folder (a backup or restore never
    overwrites)."""
    if occupied(target):
        raise InputError(f"{str(target)!r} exists and is not an empty folder; a {what} never "
                         "writes over anything: name a new folder")  # fmt: skip
    make_dirs(target.parent, 0o755)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.{what}-", dir=target.parent))


class Copier:
    """Copies files into a backup folder, recording each one's size, digest and mode."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: list[BackupFile] = []
        self._done: set[str] = set()

    def tree(self, source: Path, dest: str) -> None:
        """``source`` (a file, or a folder's regular files) to ``dest`` in the backup."""
        if source.is_file():
            self._copy(source, dest)
        elif source.is_dir():
            for path in sorted(source.rglob("*")):
                if path.is_file() and not path.is_symlink() and not _temporary(path.name):
                    self._copy(path, f"{dest}/{path.relative_to(source).as_posix()}")

    def adopt(self, path: str) -> None:
        """Record a file already written into the backup (the database snapshot)."""
        with open(self.root / path, "rb") as src:
            digest, size = pump(src, None)
        self._record(path, size, digest, 0o600)

    def deployment(self, root: Path, left_out: set[Path], *, cache: Path, keep: Path,
                   links: set[Path]) -> list[str]:  # fmt: skip
        """Every regular file under ``root`` not yet copied, except ``left_out``, ``links``
        (anchor links, copied as outside items) and the cache folder (but its ``keep``
        subfolder); returns what was skipped as not a file."""
        skipped: list[str] = []
        caching = not inside(root, cache)  # a cache folder holding the deployment: no cache

        def passed_over(path: Path) -> bool:
            """Left out, an anchor link, or in the cache folder but not on the way to (or
            in) the folder it keeps."""
            real = path.resolve()
            return path in links or real in left_out or (
                caching and inside(real, cache) and not inside(keep, real)
                and not inside(real, keep)
            )  # fmt: skip

        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            for name in list(dirnames):
                sub = here / name
                if passed_over(sub) or sub.is_symlink():
                    dirnames.remove(name)
                    if sub.is_symlink() and sub not in links:
                        skipped.append(str(sub.relative_to(root)))
            for name in filenames:
                path = here / name
                if passed_over(path):
                    continue
                if path.is_symlink() or not path.is_file():
                    skipped.append(str(path.relative_to(root)))
                    continue
                self._copy(path, f"{DEPLOYMENT_DIR}/{path.relative_to(root).as_posix()}")
        return skipped

    def _copy(self, source: Path, dest: str) -> None:
        if dest in self._done:
            return
        target = self.root / dest
        make_dirs(target.parent, 0o700)
        try:
            src = open(source, "rb")  # noqa: SIM115 - closed below, after the existence check
        except FileNotFoundError:
            return  # gone since it was listed (a writer's temporary file renamed away)
        with src, create_file(target, 0o600) as out:
            mode = stat.S_IMODE(os.fstat(src.fileno()).st_mode)
            digest, size = pump(src, out)
        self._record(dest, size, digest, mode)

    def _record(self, path: str, size: int, digest: str, mode: int) -> None:
        self._done.add(path)
        self.files.append(BackupFile(path=path, size=size, sha256=digest, mode=mode))


def _temporary(name: str) -> bool:
    """A writer's file on its way in (checkpoints, keys and states are written as
    ``.NAME.tmp`` and renamed): not part of what a backup copies."""
    return name.startswith(".") and name.endswith(".tmp")


def create_file(path: Path, mode: int) -> BinaryIO:
    """A new file, opened for writing; an existing one (or a link) is an error."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError as exc:
        raise InputError(f"{str(path)!r} exists already; a backup or restore never writes "
                         "over a file") from exc  # fmt: skip
    return os.fdopen(fd, "wb")


def pump(src: BinaryIO, out: BinaryIO | None, *, limit: int | None = None) -> tuple[str, int]:
    """Read ``src`` to its end (or just past ``limit`` bytes), writing it to ``out`` (made
    durable) if given; its SHA-256 and the bytes read."""
    digest, size = hashlib.sha256(), 0
    while (limit is None or size <= limit) and (block := src.read(CHUNK)):
        digest.update(block)
        size += len(block)
        if out is not None:
            out.write(block)
    if out is not None:
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), size


def copy_new(source: Path, target: Path) -> None:
    """Copy ``source`` (a checked file of the restore's own work folder) to the new file
    ``target``, never through a link there, with ``source``'s mode."""
    mode = stat.S_IMODE(source.stat().st_mode)
    with open(source, "rb") as src, create_file(target, mode) as out:
        pump(src, out)


def write_manifest(root: Path, manifest: BackupManifest) -> None:
    with create_file(root / MANIFEST, 0o600) as out:
        out.write(manifest.model_dump_json(indent=1).encode())
        out.flush()
        os.fsync(out.fileno())
