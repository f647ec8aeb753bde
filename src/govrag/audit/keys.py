"""The Ed25519 keys of the audit anchor: created once, loaded with clear errors, identified,
rotated without orphaning what an older key signed.

The private key signs checkpoints of the audit chain's heads, so it must stay where someone
who can write the database cannot read it: a file outside the database (``[audit]
signing_key``), created with mode 0600 and never overwritten in place (a replaced key would
orphan every checkpoint it signed). Its public half is written beside it (``.pub``) for
examiners. A key that is missing, unreadable or not an Ed25519 key is a :class:`ConfigError`
naming the file and the fix: nothing is checked against a key that cannot be trusted (fail
closed).

A key that is not private is refused for signing, not merely warned about: a key file that
other users can read (group or other permission bits), that is not a regular file, or that
another user owns lets someone other than this process sign checkpoints that hide a cut log,
so no checkpoint it would sign could be trusted. Verification still reads its public half (a
public key is no secret), and ``govrag audit verify`` reports the exposure as a finding.

Rotation keeps old checkpoints checkable: they carry the id of the key that signed them
(:func:`key_id`), and a :class:`Keyring` holds the current key plus the retired public keys
``[audit] verify_keys`` names (PEM files, or folders of ``.pub`` files). ``govrag audit
keygen --rotate`` (:func:`rotate_key`) files the current public key into the keyring's
folder, then replaces the private key. The keyring is trusted like the key itself: whoever
can add a file to it can make their own checkpoints verify, so a keyring path that other
users can write is refused.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from govrag.errors import ConfigError

_FIX = (
    "restore it from its backup (a new key cannot check what the old one signed), or, if "
    "this deployment never had one, create it with `govrag audit keygen`"
)
#: Largest key file read: a PEM Ed25519 key is about 120 bytes.
_MAX_KEY_BYTES = 64 * 1024
#: Permission bits that let users other than the owner at a private key.
_NOT_PRIVATE = stat.S_IRWXG | stat.S_IRWXO
#: Permission bits that let users other than the owner change a public key or a keyring folder.
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
#: Where ownership and permission bits mean something (POSIX).
_POSIX = hasattr(os, "geteuid")


def key_id(public: Ed25519PublicKey) -> str:
    """A short, stable name of a public key (SHA-256 of its raw bytes)."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]


def public_path(signing_key: Path) -> Path:
    """Where the public half of ``signing_key`` is written."""
    return signing_key.with_suffix(".pub")


def _private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _public_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _write_new(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a crash's leftover
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        _write_new(fd, data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


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
            "every checkpoint it signed), rotate it with `govrag audit keygen --rotate`, or "
            "move it away first"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot create the audit signing key {path}: {exc.strerror}") from exc
    key = Ed25519PrivateKey.generate()
    _write_new(fd, _private_pem(key))
    _replace(public_path(path), _public_pem(key.public_key()), 0o644)
    return key_id(key.public_key())


def _read(path: Path, setting: str) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` and its status, read through one open file
    (so the status is the status of what was read). A FIFO is refused, never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
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
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ConfigError(
                f"[audit] {setting} {path} is not a regular file (a directory, a device, a "
                "FIFO or a link to one); point the setting at the key file itself"
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(_MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"[audit] {setting} {path}: cannot read it ({exc.strerror}); give this process "
            "read access to it"
        ) from exc
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_BYTES:
        raise ConfigError(f"[audit] {setting} {path} is larger than {_MAX_KEY_BYTES} bytes: "
                          "not a key; point the setting at the key file")  # fmt: skip
    return data, status


def _exposure(path: Path, status: os.stat_result, *, owner: bool) -> str | None:
    """Why the private key file ``path`` (with ``status``) is not private to this process's
    user; None when it is."""
    if not _POSIX:  # pragma: no cover - permission bits mean nothing there
        return None
    mode = stat.S_IMODE(status.st_mode)
    if mode & _NOT_PRIVATE:
        return (
            f"[audit] signing_key {path} is open to other users (mode {mode:o}): anyone who "
            "can read it can sign checkpoints that hide a cut or wiped audit log, so it is not "
            f"used for signing; run `chmod 600 {path}` (and, if others may have read it, "
            "rotate it: `govrag audit keygen --rotate`)"
        )
    euid = os.geteuid()
    if owner and status.st_uid not in (euid, 0):
        return (
            f"[audit] signing_key {path} is owned by user id {status.st_uid}, not by this "
            f"process's user ({euid}) or root: its owner can read or replace it, so it is not "
            f"used for signing; run `chown {euid} {path}` (or run govrag as its owner)"
        )
    return None


def _parse_private(data: bytes, path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(
            f"[audit] signing_key {path} is not an unencrypted PEM Ed25519 private key; "
            f"point the setting at the key `govrag audit keygen` wrote, or {_FIX}"
        )
    return key


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The private key at ``path`` (PEM, unencrypted PKCS#8 Ed25519), for signing: refused
    (:class:`ConfigError` naming the file and the fix) unless it is a regular file that only
    this process's user (or root) owns and only its owner may read or write."""
    data, status = _read(path, "signing_key")
    key = _parse_private(data, path)
    problem = _exposure(path, status, owner=True)
    if problem is not None:
        raise ConfigError(problem)
    return key


def signing_key_problem(path: Path) -> str | None:
    """Why the signing key at ``path`` cannot sign (unreadable, not a key, not private), for
    ``govrag config check``; None when it can, and when there is no file at all (a deployment
    that takes no checkpoints)."""
    if not path.exists():
        return None
    try:
        load_signing_key(path)
    except ConfigError as exc:
        return str(exc)
    return None


def signing_key_exposure(path: Path) -> str | None:
    """Why the signing key at ``path`` is open to other users (its permission bits, or not a
    regular file): what ``govrag audit verify`` reports, since checkpoints signed by such a
    key prove nothing. Its owner is not judged here: an examiner may verify as another user.
    None when there is no readable file (that is :func:`verifying_key`'s error)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(status.st_mode):
        return (f"[audit] signing_key {path} is not a regular file; point the setting at the "
                "key file `govrag audit keygen` wrote")  # fmt: skip
    return _exposure(path, status, owner=False)


def _parse_public(data: bytes, path: Path, setting: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(
            f"[audit] {setting} {path} is not a PEM Ed25519 public key; point it at a "
            "'.pub' file written beside the signing key"
        )
    return key


def load_verify_key(path: Path, setting: str = "verify_key") -> Ed25519PublicKey:
    """The public key at ``path`` (PEM SubjectPublicKeyInfo, Ed25519)."""
    data, _ = _read(path, setting)
    return _parse_public(data, path, setting)


def _signing_public(path: Path) -> Ed25519PublicKey:
    data, _ = _read(path, "signing_key")
    return _parse_private(data, path).public_key()


def verifying_key(signing_key: Path, verify_key: Path | None) -> Ed25519PublicKey:
    """The current key signatures are checked with: ``verify_key`` when configured (it must
    match the signing key when that is readable here too), else the signing key's public half.
    A signing key open to other users still yields its public half (checking is no use of the
    secret); :func:`signing_key_exposure` says what is wrong with it."""
    if verify_key is None:
        return _signing_public(signing_key)
    own = _signing_public(signing_key) if signing_key.exists() else None
    public = load_verify_key(verify_key)
    if own is not None and key_id(own) != key_id(public):
        raise ConfigError(
            f"[audit] verify_key {verify_key} ({key_id(public)}) does not match signing_key "
            f"{signing_key} ({key_id(own)}): one of them was replaced; restore the right "
            "public key (the signing key's '.pub') before trusting any checkpoint"
        )
    return public


@dataclass(frozen=True)
class Keyring:
    """The public keys checkpoints are checked with, by key id: the current key (what new
    checkpoints are signed with) and the retired ones ``[audit] verify_keys`` names."""

    current: Ed25519PublicKey
    retired: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)

    @classmethod
    def of(cls, keys: Keyring | Ed25519PublicKey) -> Keyring:
        return keys if isinstance(keys, Keyring) else cls(keys)

    @cached_property
    def current_id(self) -> str:
        return key_id(self.current)

    def get(self, kid: str) -> Ed25519PublicKey | None:
        """The key whose id is ``kid``; None when the keyring does not hold it."""
        return self.current if kid == self.current_id else self.retired.get(kid)

    def ids(self) -> list[str]:
        """Every key id, the current one first."""
        return [self.current_id, *sorted(set(self.retired) - {self.current_id})]


def _not_writable_by_others(path: Path, status: os.stat_result) -> None:
    if _POSIX and status.st_mode & _WRITABLE_BY_OTHERS:
        raise ConfigError(
            f"[audit] verify_keys {path} can be written by other users (mode "
            f"{stat.S_IMODE(status.st_mode):o}): whoever adds a key to the keyring can make "
            f"their own checkpoints verify; run `chmod go-w {path}`"
        )


def load_retired_keys(entries: Sequence[Path]) -> dict[str, Ed25519PublicKey]:
    """The public keys in ``entries`` (``[audit] verify_keys``: PEM files, or folders whose
    ``*.pub`` files are keys), by key id. An entry that does not exist holds no key (a
    deployment that never rotated has no keyring folder); a key missing from the keyring only
    makes its checkpoints fail verification, never pass it."""
    out: dict[str, Ed25519PublicKey] = {}
    for entry in entries:
        try:
            status = os.stat(entry)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"[audit] verify_keys {entry}: cannot read it ({exc.strerror}); "
                              "give this process read access to it") from exc  # fmt: skip
        _not_writable_by_others(entry, status)
        if stat.S_ISDIR(status.st_mode):
            try:
                files = sorted(p for p in entry.iterdir()
                               if p.suffix == ".pub" and not p.name.startswith("."))  # fmt: skip
            except OSError as exc:
                raise ConfigError(f"[audit] verify_keys {entry}: cannot list it "
                                  f"({exc.strerror}); give this process read access to it"
                                  ) from exc  # fmt: skip
        else:
            files = [entry]
        for path in files:
            data, file_status = _read(path, "verify_keys")
            _not_writable_by_others(path, file_status)
            public = _parse_public(data, path, "verify_keys")
            out[key_id(public)] = public
    return out


def load_keyring(current: Ed25519PublicKey, entries: Sequence[Path]) -> Keyring:
    """The current key and the retired keys of ``entries`` (:func:`load_retired_keys`)."""
    return Keyring(current, load_retired_keys(entries))


@dataclass(frozen=True)
class Rotation:
    """What ``govrag audit keygen --rotate`` did."""

    signing_key: Path
    #: The new key's public half (beside it).
    public: Path
    key_id: str
    retired_key_id: str
    #: Where the retired key's public half was filed (in the keyring's folder).
    retired_public: Path


def rotate_key(path: Path, keyring_folder: Path) -> Rotation:
    """Retire the signing key at ``path``: file its public half in ``keyring_folder`` (as
    ``<key id>.pub``, so checkpoints it signed keep verifying), then replace it with a new
    key (and its ``.pub``). The old private key is gone afterwards: a retired key that still
    existed could sign checkpoints the keyring accepts.

    Crash-safe in this order: until the new key is in place the old one still signs, and its
    public half already in the keyring changes nothing. A key open to other users is rotated
    too (that is how it is replaced); its public half is kept like any other."""
    old = _signing_public(path)
    old_id = key_id(old)
    if keyring_folder.exists() and not keyring_folder.is_dir():
        raise ConfigError(
            f"[audit] verify_keys {keyring_folder} is a file; --rotate files the retired key "
            "into the first verify_keys entry, which must be a folder: put one first, e.g. "
            '"keys/audit-keyring"'
        )
    try:
        keyring_folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(
            f"[audit] verify_keys {keyring_folder}: cannot make the keyring folder "
            f"({exc.strerror}); make the first verify_keys entry a folder this process can "
            "write"
        ) from exc
    load_retired_keys([keyring_folder])  # a keyring verify would refuse is refused now
    retired = keyring_folder / f"{old_id.split(':', 1)[1]}.pub"
    key = Ed25519PrivateKey.generate()
    try:
        _replace(retired, _public_pem(old), 0o644)
        # Through a link, the file it names is replaced (the link alone would leave the old key).
        _replace(path.resolve(), _private_pem(key), 0o600)
        _replace(public_path(path), _public_pem(key.public_key()), 0o644)
    except OSError as exc:
        raise ConfigError(
            f"cannot rotate the audit signing key {path}: {exc.strerror} ({exc.filename}); "
            "make it and the keyring folder writable for this process and run it again (the "
            "key in place still signs)"
        ) from exc
    return Rotation(path, public_path(path), key_id(key.public_key()), old_id, retired)


def fsync_dir(folder: Path) -> None:
    """Make a rename durable (POSIX); where directories cannot be opened, skip it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse
        pass
    finally:
        os.close(fd)
