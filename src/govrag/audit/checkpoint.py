"""Signed checkpoints of a tenant's audit chain head, kept in a directory outside the database.

A checkpoint states "tenant T's chain had N events and ended at event (seq, id, hash) at time
X", signed with the deployment's Ed25519 key and naming that key's id. Someone who can write
the database but not read the key cannot make one, so a chain that no longer reaches a
checkpoint's head was cut, wiped or rewritten after it was taken (``govrag.audit.anchor``
compares them). A checkpoint is checked with the key its id names, looked up in a
:class:`~govrag.audit.keys.Keyring` (the current key and retired ones), so a rotation orphans
nothing; an id the keyring does not hold is a failure naming it.

Files are an append-only history: ``<dir>/<tenant folder>/<seq>-<time>-<nonce>.json``, one
per checkpoint, written to a temporary name, flushed and renamed into place (a reader never
sees half a file; a crash leaves at most a hidden temporary file, ignored). Nothing is ever
rewritten or deleted by govrag. The names sort by head sequence, so the newest is found
without reading the others.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from govrag.audit.keys import Keyring, fsync_dir, key_id
from govrag.errors import ConfigError, describe_validation
from govrag.store.audit import AuditEvent, canonical

FORMAT: Literal["govrag-audit-checkpoint/1"] = "govrag-audit-checkpoint/1"
#: Tenant ids longer than this get a hashed folder name (file systems limit a name's length).
_MAX_READABLE = 150


class Checkpoint(BaseModel):
    """One signed statement of a tenant's chain head."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["govrag-audit-checkpoint/1"] = FORMAT
    tenant: str = Field(min_length=1)
    head_seq: int = Field(ge=1)
    head_event_id: str = Field(min_length=1)
    head_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    #: Events in the chain up to and including the head (equals ``head_seq`` in an intact
    #: chain, whose sequence numbers run 1, 2, 3, ...).
    events: int = Field(ge=1)
    #: When it was taken: ISO 8601, UTC.
    created_at: datetime
    key_id: str
    #: Ed25519 signature (base64) over the canonical JSON of every other field.
    signature: str = ""

    def signed_bytes(self) -> bytes:
        return canonical(self.model_dump(mode="json", exclude={"signature"})).encode()

    @classmethod
    def of(cls, event: AuditEvent, key: Ed25519PrivateKey, *, at: datetime) -> Checkpoint:
        """The signed checkpoint of a chain whose head is ``event``."""
        draft = cls(
            tenant=event.tenant,
            head_seq=event.seq,
            head_event_id=event.event_id,
            head_hash=event.hash,
            events=event.seq,
            created_at=at.astimezone(UTC),
            key_id=key_id(key.public_key()),
        )
        signature = base64.b64encode(key.sign(draft.signed_bytes())).decode()
        return draft.model_copy(update={"signature": signature})

    def problem(self, keys: Keyring | Ed25519PublicKey) -> str | None:
        """Why the signature does not hold under the key of ``keys`` it names (the current
        key, or a retired one after a rotation); None when it does."""
        keyring = Keyring.of(keys)
        public = keyring.get(self.key_id)
        if public is None:
            retired = " or a retired key in [audit] verify_keys" if keyring.retired else ""
            return (
                f"signed by key {self.key_id}, not by the configured key {keyring.current_id}"
                f"{retired}; if it is a retired key of this deployment, put its public key "
                "in [audit] verify_keys"
            )
        try:
            public.verify(base64.b64decode(self.signature, validate=True), self.signed_bytes())
        except (InvalidSignature, ValueError):
            return "its signature does not match its contents"
        return None


@dataclass(frozen=True)
class BadCheckpoint:
    """A checkpoint file that cannot be trusted, and why."""

    path: Path
    #: The tenant its folder names (what it would have anchored).
    tenant: str
    problem: str


@dataclass
class Scan:
    """Every checkpoint file of a directory (or of one tenant), sorted into good and bad."""

    #: Valid checkpoints by tenant, oldest head first.
    valid: dict[str, list[Checkpoint]] = field(default_factory=dict)
    invalid: list[BadCheckpoint] = field(default_factory=list)


def tenant_folder(tenant: str) -> str:
    """The folder name of a tenant: readable (percent-encoded) unless very long."""
    readable = quote(tenant, safe="")
    if len(readable) <= _MAX_READABLE:
        return "t-" + readable  # the prefix keeps "." and ".." from naming a real folder
    return "h-" + hashlib.sha256(tenant.encode()).hexdigest()


def _folder_tenant(name: str) -> str:
    return unquote(name[2:]) if name.startswith("t-") else name


class CheckpointDir:
    """The checkpoint history of a deployment."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, checkpoint: Checkpoint) -> Path:
        """Add ``checkpoint`` to the history (atomically, durably); returns its path. Raises
        ``OSError`` when the directory cannot be written."""
        folder = self.root / tenant_folder(checkpoint.tenant)
        folder.mkdir(parents=True, exist_ok=True)
        stamp = checkpoint.created_at.strftime("%Y%m%dT%H%M%S%fZ")
        name = f"{checkpoint.head_seq:020d}-{stamp}-{secrets.token_hex(4)}.json"
        tmp = folder / f".{name}.tmp"
        data = (checkpoint.model_dump_json(indent=2) + "\n").encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, folder / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(folder)
        return folder / name

    def _files(self, folder: Path) -> list[Path]:
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        return sorted(folder / n for n in names if n.endswith(".json") and not n.startswith("."))

    def _folders(self, tenant: str | None) -> Iterator[Path]:
        if tenant is not None:
            yield self.root / tenant_folder(tenant)
            return
        try:
            entries = sorted(self.root.iterdir())
        except FileNotFoundError:
            return
        except NotADirectoryError:
            raise ConfigError(
                f"[audit] checkpoint_dir {str(self.root)!r} is a file, not a folder; point "
                "checkpoint_dir at a folder (or move the file away)"
            ) from None
        yield from (e for e in entries if e.is_dir() and e.name[:2] in ("t-", "h-"))

    def has_history(self, tenant: str) -> bool:
        """Whether ``tenant`` has any checkpoint file, valid or not."""
        return bool(self._files(self.root / tenant_folder(tenant)))

    def read(self, path: Path, keys: Keyring | Ed25519PublicKey) -> Checkpoint | BadCheckpoint:
        """The checkpoint in ``path`` if its contents, signature (by a key of ``keys``),
        folder and name hold."""
        folder_tenant = _folder_tenant(path.parent.name)
        try:
            checkpoint = Checkpoint.model_validate_json(path.read_bytes())
        except OSError as exc:
            return BadCheckpoint(path, folder_tenant, f"cannot be read ({exc.strerror})")
        except ValidationError as exc:
            return BadCheckpoint(path, folder_tenant, f"is not a checkpoint: "
                                 f"{describe_validation(exc)}")  # fmt: skip
        problem = checkpoint.problem(keys)
        if problem is None and tenant_folder(checkpoint.tenant) != path.parent.name:
            problem = f"records tenant {checkpoint.tenant!r} but lies in another tenant's folder"
        if problem is None and not path.name.startswith(f"{checkpoint.head_seq:020d}-"):
            problem = f"records event {checkpoint.head_seq} but its name says otherwise"
        if problem is not None:
            return BadCheckpoint(path, checkpoint.tenant, problem)
        return checkpoint

    def scan(self, keys: Keyring | Ed25519PublicKey, tenant: str | None = None) -> Scan:
        """Read and check every checkpoint file (of ``tenant``, or of every tenant)."""
        out, keyring = Scan(), Keyring.of(keys)
        for folder in self._folders(tenant):
            for path in self._files(folder):
                got = self.read(path, keyring)
                if isinstance(got, BadCheckpoint):
                    out.invalid.append(got)
                else:
                    out.valid.setdefault(got.tenant, []).append(got)
        for history in out.valid.values():
            history.sort(key=lambda c: (c.head_seq, c.created_at))
        return out

    def latest(self, tenant: str, keys: Keyring | Ed25519PublicKey) -> Checkpoint | None:
        """The valid checkpoint of ``tenant`` with the highest head (newest on a tie),
        reading files newest first until one holds (normally just one)."""
        keyring = Keyring.of(keys)
        for path in reversed(self._files(self.root / tenant_folder(tenant))):
            got = self.read(path, keyring)
            if isinstance(got, Checkpoint):
                return got
        return None
