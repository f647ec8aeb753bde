"""Who may read ``GET /metrics``: the operator's scraper, never any caller who can reach the port.

The exposition counts what the governed path decided for every tenant of the deployment at
once (decisions, validations, incidents), so it is the operator's, like the audit log. One of
two rules applies, picked by ``[server] metrics_token_env``:

- **a bearer secret** (the environment variable that setting names, read once when the app is
  built, at least 32 bytes): a request must carry exactly one ``Authorization: Bearer
  <secret>``, compared in constant time (both sides hashed first, so not even the length
  shows); from any address, loopback included, so a reverse proxy on the same host does not
  turn the world's requests into local ones;
- **loopback only** (no secret configured): the ASGI client address must be a loopback
  address, and the request must carry no forwarding header (``Forwarded``,
  ``X-Forwarded-For``, ``X-Real-IP``): a reverse proxy on the same host connects from
  loopback on behalf of anyone, and says so in one of those.

No header can grant access: a forwarding header only refuses, and the address is the
connection's peer (``govrag serve`` runs uvicorn with ``proxy_headers`` off, so
``X-Forwarded-For`` never rewrites it). Every refusal is the same 403 body, whichever rule
refused and why.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from fastapi import Request
from fastapi.responses import JSONResponse

from govrag.app.serving import loopback_address
from govrag.errors import ConfigError
from govrag.server.problems import problem

#: The shortest secret accepted, in bytes (as for ``[auth] keys``' shared secrets).
MIN_SECRET_BYTES = 32
#: Headers a reverse proxy adds: a request carrying one came from elsewhere.
FORWARDING = ("forwarded", "x-forwarded-for", "x-real-ip")
REFUSED = "GET /metrics is the operator's: send the metrics token, or scrape from loopback"


class MetricsAccess:
    """The rule ``GET /metrics`` applies to each request (module docstring)."""

    def __init__(self, secret: str | None) -> None:
        self._digest = _digest(secret) if secret is not None else None

    @classmethod
    def from_env(cls, name: str | None) -> MetricsAccess:
        """The rule of ``[server] metrics_token_env`` = ``name``; a named variable that is
        unset or short is an error now, never a scrape endpoint quietly open to loopback or
        closed to everyone."""
        if name is None:
            return cls(None)
        secret = os.environ.get(name, "")
        if len(secret.encode()) < MIN_SECRET_BYTES:
            state = "is not set" if not secret else f"holds fewer than {MIN_SECRET_BYTES} bytes"
            raise ConfigError(f"[server] metrics_token_env: the environment variable {name} "
                              f"{state}; export a random secret of at least {MIN_SECRET_BYTES} "
                              "bytes there (e.g. `openssl rand -base64 48`), or unset "
                              "metrics_token_env to serve /metrics to loopback only")  # fmt: skip
        return cls(secret)

    def allows(self, request: Request) -> bool:
        if self._digest is not None:
            sent = request.headers.getlist("authorization")
            if len(sent) != 1:
                return False
            scheme, _, value = sent[0].partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(
                _digest(value.strip()), self._digest
            )
        if any(name in request.headers for name in FORWARDING):
            return False
        return request.client is not None and loopback_address(request.client.host)

    @staticmethod
    def refused() -> JSONResponse:
        """The one answer to every request this rule refuses."""
        return problem(403, "forbidden", "Forbidden", REFUSED)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()
