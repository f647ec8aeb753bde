"""What a source's syncs left behind, per tenant: ``.govrag/sources/<name>.json``.

The filesystem connector keeps, per file, the external id it was stored under, its content
hash, size, mtime and a hash of the rights that applied. That is what lets a re-run skip an
unchanged file before reading it, keep a moved file's identity, and turn a vanished file into
a delete. The file is written atomically (a temporary file renamed over it) and only after a
run that was not a dry run. A missing or unreadable state only costs work: files are read
again, and the store's own hashes still keep unchanged documents from being re-embedded.
A run holds the source's lock (:func:`source_lock`) so two runs never interleave.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from govrag.errors import InputError, describe_validation
from govrag.strict_json import load_json

STATE_DIR = Path(".govrag") / "sources"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileState(_Model):
    """One file as it was last stored."""

    external_id: str
    content_hash: str
    mtime_ns: int
    size: int
    #: Hash of the rights and source settings that applied (a changed ``_access.json``
    #: re-emits the file even though its bytes did not change).
    rights: str


class TenantState(_Model):
    """The last committed sync of a source into one tenant."""

    synced_at: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    files: dict[str, FileState] = Field(default_factory=dict)
    #: ``[email, account id]`` bindings the source's identities file made (filesystem): one
    #: that is no longer listed there is unbound on the next run.
    identities: list[tuple[str, str]] = Field(default_factory=list)


class SourceState(_Model):
    """The whole state file of one source."""

    version: Literal[1] = 1
    source: str
    connector: str
    path: str
    tenants: dict[str, TenantState] = Field(default_factory=dict)


def state_path(deployment: Path, name: str) -> Path:
    """Where the state of source ``name`` lives in a deployment directory."""
    return deployment / STATE_DIR / f"{name}.json"


def load_state(path: Path) -> tuple[SourceState | None, str | None]:
    """The state at ``path`` (``None`` when there is none) and a warning when it was unusable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read the sync state ({exc.strerror}); every file is read again"
    try:
        return SourceState.model_validate(load_json(raw)), None
    except (InputError, ValidationError) as exc:
        why = describe_validation(exc) if isinstance(exc, ValidationError) else str(exc)
        return None, f"the sync state is unusable ({why}); every file is read again"


def save_state(path: Path, state: SourceState) -> None:
    """Write ``state`` atomically: readers see the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(state.model_dump(mode="json"), indent=1, sort_keys=True).encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_sync(
    path: Path,
    *,
    source: str,
    connector: str,
    root: Path,
    tenant: str,
    counts: dict[str, int],
    files: dict[str, FileState] | None = None,
    identities: Iterable[tuple[str, str]] = (),
) -> None:
    """Record a committed run of ``source`` into ``tenant`` (other tenants' entries stay)."""
    state, _ = load_state(path)
    if state is None:
        state = SourceState(source=source, connector=connector, path=str(root))
    state.connector, state.path = connector, str(root)
    state.tenants[tenant] = TenantState(
        synced_at=datetime.now(UTC).isoformat(timespec="seconds"),
        counts=dict(counts),
        files=dict(files or {}),
        identities=sorted(set(identities)),
    )
    save_state(path, state)


def lock_path(path: Path) -> Path:
    """The lock file beside the state file at ``path``."""
    return path.with_name(path.name + ".lock")


@contextmanager
def source_lock(path: Path, source: str) -> Iterator[Path]:
    """Hold the exclusive lock of the source whose state is at ``path`` for a run.

    Two runs of one source would read the same state and the later writer would lose the
    earlier one's files (a deleted file then never becomes a delete): a second run fails at
    once instead of waiting. The lock is ``flock`` on a sidecar file (never deleted, so two
    runs can never lock two different files); the kernel releases it when the process ends,
    however it ends.

    Raises:
        InputError: another run holds the lock.
    """
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise InputError(
                f"source {source!r} is being ingested by another run (it holds the lock "
                f"{str(lock)!r}); wait for that run to finish, then run again"
            ) from exc
        try:
            yield lock
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
