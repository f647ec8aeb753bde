"""The Ed25519 keys of the audit anchor: created once, loaded with clear errors, identified.

The private key signs checkpoints of the audit chain's heads, so it must stay where someone
who can write the database cannot read it: a file outside the database (``[audit]
signing_key``), created with mode 0600 and never overwritten (a replaced key would orphan
every checkpoint it signed). Its public half is written beside it (``.pub``) for examiners.
A key that is missing, unreadable or not an Ed25519 key is a :class:`ConfigError` naming the
file and the fix: nothing is checked against a key that cannot be trusted (fail closed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from govrag.errors import ConfigError

log = logging.getLogger("govrag.audit")

_FIX = (
    "restore it from its backup (a new key cannot check what the old one signed), or, if "
    "this deployment never had one, create it with `govrag audit keygen`"
)


def key_id(public: Ed25519PublicKey) -> str:
    """A short, stable name of a public key (SHA-256 of its raw bytes)."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]


def public_path(signing_key: Path) -> Path:
    """Where the public half of ``signing_key`` is written."""
    return signing_key.with_suffix(".pub")


def generate_key(path: Path) -> str:
    """Create a signing key at ``path`` (0600, in a 0700 folder when it makes one) and its
    public key beside it; returns the key id. Refuses to overwrite an existing key."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # O_EXCL: two racing keygens cannot both win, and an existing key is never replaced.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(
            f"audit signing key {path} already exists; keep it (replacing it would orphan "
            "every checkpoint it signed) or move it away first"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot create the audit signing key {path}: {exc.strerror}") from exc
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
        fh.flush()
        os.fsync(fh.fileno())
    public = key.public_key()
    pub = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    tmp = public_path(path).with_name(f".{public_path(path).name}.tmp")
    tmp.write_bytes(pub)
    os.replace(tmp, public_path(path))
    return key_id(public)


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"[audit] {setting} {path} does not exist; the audit log cannot be checked "
            f"against its checkpoints without it: {_FIX}"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"[audit] {setting} {path}: cannot read it ({exc.strerror}); give this process "
            "read access to it"
        ) from exc


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The private key at ``path`` (PEM, unencrypted PKCS#8 Ed25519)."""
    data = _read(path, "signing_key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(
            f"[audit] signing_key {path} is not an unencrypted PEM Ed25519 private key; "
            f"point the setting at the key `govrag audit keygen` wrote, or {_FIX}"
        )
    try:
        mode = path.stat().st_mode
    except OSError:  # pragma: no cover - it was just read
        mode = 0
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the audit signing key %s is accessible to other users (mode %o); "
                    "run: chmod 600 %s", path, stat.S_IMODE(mode), path)  # fmt: skip
    return key


def load_verify_key(path: Path) -> Ed25519PublicKey:
    """The public key at ``path`` (PEM SubjectPublicKeyInfo, Ed25519)."""
    data = _read(path, "verify_key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(
            f"[audit] verify_key {path} is not a PEM Ed25519 public key; point it at the "
            "'.pub' file written beside the signing key"
        )
    return key


def verifying_key(signing_key: Path, verify_key: Path | None) -> Ed25519PublicKey:
    """The key signatures are checked with: ``verify_key`` when configured (it must match the
    signing key when that is readable here too), else the signing key's public half."""
    if verify_key is None:
        return load_signing_key(signing_key).public_key()
    public = load_verify_key(verify_key)
    if signing_key.exists():
        own = load_signing_key(signing_key).public_key()
        if key_id(own) != key_id(public):
            raise ConfigError(
                f"[audit] verify_key {verify_key} ({key_id(public)}) does not match signing_key "
                f"{signing_key} ({key_id(own)}): one of them was replaced; restore the right "
                "public key (the signing key's '.pub') before trusting any checkpoint"
            )
    return public
