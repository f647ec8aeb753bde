"""Development tokens: ``govrag token --as SUB`` signs one for an entry of ``principals.json``.

Only with ``[auth] dev_tokens = true``. The secret is generated on first use into
``keys/dev-token-secret`` (mode 0600) beside the audit signing key, and the tokens carry the
issuer :data:`DEV_ISSUER` and the key id ``govrag-dev``: the verifier accepts that issuer from
that key only, so a development token can never pass for one of the identity provider's, nor
one of the provider's keys sign a development token. ``govrag serve`` refuses to listen beyond
loopback while development tokens are on.

Whoever reads the secret can sign a token for any principal, and the loopback server answers
every local user; so the secret is refused (not read) when it is a symbolic link, not a
regular file, or open to the group or other users, as ssh refuses an unprotected key.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt

from govrag.auth.keys import MIN_SECRET_BYTES, VerifyingKey
from govrag.errors import ConfigError
from govrag.settings import Settings
from govrag.types import Principal

DEV_ISSUER = "govrag-dev"
DEV_KID = "govrag-dev"
DEV_ALG = "HS256"
SECRET_FILE = "keys/dev-token-secret"


def dev_key(settings: Settings, *, create: bool) -> VerifyingKey:
    """The development signing key; generated when ``create`` and missing."""
    if not settings.auth.dev_tokens:
        raise ConfigError("development tokens are off: set [auth] dev_tokens = true in "
                          "govrag.toml (local development only)")  # fmt: skip
    path = settings.resolve_path(SECRET_FILE)
    if create:
        # Already there (or a link there: refused just below).
        with contextlib.suppress(FileExistsError):
            _write_secret(path)
    secret = _read_secret(path)
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"{path} holds fewer than {MIN_SECRET_BYTES} bytes; delete it and "
                          "run `govrag token --as SUB` to create a new one")  # fmt: skip
    return VerifyingKey(DEV_KID, DEV_ALG, secret, str(path), issuer=DEV_ISSUER)


def _read_secret(path: Path) -> bytes:
    fix = "delete it and run `govrag token --as SUB` to create a new one"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"the development token secret {path} is a symbolic link; "
                              f"{fix}") from exc  # fmt: skip
        raise ConfigError(f"cannot read the development token secret {path}: {exc.strerror}; "
                          "run `govrag token --as SUB` once to create it") from exc  # fmt: skip
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"the development token secret {path} is not a file; {fix}")
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"the development token secret {path} is open to other users "
                              f"(mode {stat.S_IMODE(mode):o}): anyone who reads it can sign "
                              f"a token as anyone; run: chmod 600 {path}")  # fmt: skip
        return fh.read().strip()


def _write_secret(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(48) + "\n")


def sign_dev_token(settings: Settings, principal: Principal, *, now: datetime | None = None) -> str:
    """A development token for ``principal``, its claims under the ``[auth.claims]`` names."""
    key = dev_key(settings, create=True)
    at = now or datetime.now(UTC)
    m = settings.auth.claims
    # Within the lifetime every token is held to, or the verifier would refuse its own.
    ttl = timedelta(seconds=min(settings.auth.dev_token_ttl_s, settings.auth.max_token_lifetime_s))
    claims: dict[str, Any] = {"sub": principal.sub, "iss": DEV_ISSUER,
                              "aud": settings.auth.audience, "iat": at, "nbf": at,
                              "exp": at + ttl}  # fmt: skip
    values = {m.sub: principal.sub, m.email: principal.email, m.tenant: principal.tenant,
              m.roles: list(principal.roles),
              m.doc_entitlements: list(principal.doc_entitlements),
              m.clearance: principal.clearance.label}  # fmt: skip
    for name, value in values.items():
        *parents, leaf = name.split(".")
        target = claims
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return jwt.encode(claims, key.key, algorithm=DEV_ALG, headers={"kid": DEV_KID})
