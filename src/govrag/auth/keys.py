"""The keys bearer tokens are verified with, each pinned to one algorithm.

A key comes from ``[auth] keys`` (a shared secret read from the environment variable the
settings name, or a PEM public key file) or from the ``[auth] jwks_file`` key set. The set is
re-read when the file changes (its inode, size, modification or change time: ``cp -p`` or
``rsync -a`` can give a same-sized replacement the old modification time, never the old
change time), so an operator rotates keys by replacing the file; a file that stops parsing
keeps no key at all (every token is refused until it is fixed: failing closed beats
verifying against keys nobody can vouch for).

Every key carries the one algorithm it verifies. The verifier passes only that algorithm to
PyJWT, so ``alg: none``, or an HMAC token "signed" with an RSA public key (the HS/RS confusion),
never reaches a signature check that could pass.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from govrag.errors import ConfigError, MissingExtraError
from govrag.settings import AuthKey, Settings
from govrag.settings.auth import HMAC_ALGS, PUBLIC_KEY_ALGS

log = logging.getLogger("govrag.auth")

try:
    import jwt
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingExtraError("PyJWT", "server", "Bearer-token verification") from exc

#: The algorithm a JWK without ``alg`` is taken to verify, by key type and curve.
_DEFAULT_ALG: dict[tuple[object, object], str] = {
    ("RSA", None): "RS256", ("EC", "P-256"): "ES256", ("EC", "P-384"): "ES384",
    ("EC", "P-521"): "ES512", ("OKP", "Ed25519"): "EdDSA",
}  # fmt: skip
#: The shortest HMAC secret accepted: RFC 7518 asks for at least the hash's size (HS256).
MIN_SECRET_BYTES = 32


@dataclass(frozen=True)
class VerifyingKey:
    """Key material and the one algorithm it verifies."""

    kid: str | None
    alg: str
    key: Any
    #: Where the key came from, for messages (never the key itself).
    origin: str
    #: The ``iss`` its tokens must carry; ``None``: the deployment's ``[auth] issuer``.
    issuer: str | None = None


def configured_keys(settings: Settings) -> list[VerifyingKey]:
    """The keys of ``[auth] keys``; a :class:`ConfigError` names the key that cannot load."""
    return [_load_key(settings, i, cfg) for i, cfg in enumerate(settings.auth.keys)]


def _load_key(settings: Settings, index: int, cfg: AuthKey) -> VerifyingKey:
    where = f"[auth] keys[{index}]" + (f" (kid {cfg.kid!r})" if cfg.kid else "")
    if cfg.alg in HMAC_ALGS:
        assert cfg.secret_env is not None  # the settings model checks it
        secret = os.environ.get(cfg.secret_env, "")
        if len(secret.encode()) < MIN_SECRET_BYTES:
            state = "is not set" if not secret else f"holds fewer than {MIN_SECRET_BYTES} bytes"
            raise ConfigError(f"{where}: the environment variable {cfg.secret_env} {state}; "
                              f"put a random secret of at least {MIN_SECRET_BYTES} bytes in "
                              "it")  # fmt: skip
        return VerifyingKey(cfg.kid, cfg.alg, secret.encode(), f"{where}, ${cfg.secret_env}")
    assert cfg.public_key is not None
    path = settings.resolve_path(cfg.public_key)
    try:
        pem = path.read_bytes()
        key = jwt.algorithms.get_default_algorithms()[cfg.alg].prepare_key(pem)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the public key {path}: {exc.strerror}; fix "
                          "public_key (relative to the deployment directory)") from exc  # fmt: skip
    except (jwt.InvalidKeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {path} is not a PEM public key for {cfg.alg} ({exc}); "
                          "give the identity provider's public key") from exc  # fmt: skip
    if hasattr(key, "private_bytes"):
        raise ConfigError(f"{where}: {path} holds a private key; give the public key only "
                          "(govrag verifies, it never signs)")  # fmt: skip
    return VerifyingKey(cfg.kid, cfg.alg, key, f"{where}, {path}")


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class JwksFile:
    """The keys of a JWKS file, re-read when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._keys: list[VerifyingKey] = []

    def keys(self) -> list[VerifyingKey]:
        try:
            stamp = _stamp(self.path.stat())
        except OSError as exc:
            log.error("JWKS file %s cannot be read (%s): every token is refused", self.path,
                      exc.strerror)  # fmt: skip
            return []
        with self._lock:
            if stamp != self._stamp:
                self._stamp, self._keys = self._read()
            return self._keys

    def _read(self) -> tuple[tuple[int, ...] | None, list[VerifyingKey]]:
        """The stamp of the file as read (from the open file, so a file replaced between the
        ``stat`` and the read is not remembered under the older stamp) and its keys."""
        stamp = None
        try:
            with self.path.open("rb") as fh:
                stamp = _stamp(os.fstat(fh.fileno()))
                document = json.loads(fh.read().decode("utf-8"))
            entries = document["keys"]
            if not isinstance(entries, list):
                raise TypeError("'keys' is not a list")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("JWKS file %s is not a key set (%s): every token is refused", self.path,
                      exc)  # fmt: skip
            return stamp, []
        keys = []
        for i, entry in enumerate(entries):
            try:
                keys.append(self._key(i, entry))
            except (ValueError, TypeError, KeyError, jwt.PyJWTError) as exc:
                log.error("JWKS file %s: key %d skipped: %s", self.path, i, exc)
        log.info("JWKS file %s: %d key(s) loaded", self.path, len(keys))
        return stamp, keys

    def _key(self, index: int, entry: Any) -> VerifyingKey:
        if not isinstance(entry, dict):
            raise TypeError("not an object")
        kty = entry.get("kty")
        if kty == "oct":
            raise ValueError("shared-secret keys (kty 'oct') do not belong in a key file; "
                             "use [auth] keys with secret_env")  # fmt: skip
        if "d" in entry:
            raise ValueError("a private key; publish the public key only")
        # An encryption key ("use": "enc", or key_ops without "verify") never verifies.
        if entry.get("use", "sig") != "sig" or "verify" not in entry.get("key_ops", ["verify"]):
            raise ValueError("not a signature-verification key ('use' / 'key_ops')")
        alg = entry.get("alg") or _DEFAULT_ALG.get((kty, entry.get("crv")))
        if alg is None:
            raise ValueError(f"no 'alg' and none implied by kty {kty!r}; add 'alg'")
        # The same list [auth] keys may pin, not "whatever PyJWT knows": that includes
        # "none", which has no key to load and raised out of the reader.
        if alg not in PUBLIC_KEY_ALGS:
            raise ValueError(f"alg {alg!r} is not a public-key algorithm")
        key = jwt.PyJWK.from_dict({**entry, "alg": alg}).key
        kid = entry.get("kid")
        return VerifyingKey(kid if isinstance(kid, str) else None, alg, key,
                            f"{self.path} key {index}")  # fmt: skip
