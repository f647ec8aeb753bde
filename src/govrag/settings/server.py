"""``[server]``: the limits and the operations of a served deployment (``govrag serve``).

Every limit is a bound a caller cannot talk its way around, and each refusal is cheap and
does nothing: a body over ``max_body_bytes`` is refused before it is read (or as soon as a
chunked one passes the bound), a principal past its token bucket gets a 429 after its token
is verified and before any use case runs, and a full server says 503 at once instead of
queueing. A request that is admitted runs the whole governed path; ``deadline_s`` bounds how
long its caller waits, not the work (a use case on its worker thread finishes and closes its
audit trail). ``drain_s`` is how long a stopping server lets in-flight requests finish.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from govrag.settings.sections import Section
from govrag.store_url import redact


class ServerSettings(Section):
    #: Largest request body, in bytes; a larger one is a 413 and is never read to its end.
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    #: Requests per minute one principal (tenant and subject of its verified token) may make,
    #: on average; past it a 429 with ``Retry-After``. Unauthenticated requests count for
    #: nobody (they are refused before any work).
    rate_per_minute: float = Field(default=120.0, gt=0.0, le=1_000_000.0)
    #: How many requests a principal may make at once after a quiet spell (the bucket's size).
    rate_burst: int = Field(default=30, ge=1, le=100_000)
    #: Longest a caller waits for an answer, in seconds; then a 503 ``deadline-exceeded``.
    deadline_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    #: Requests worked on at once (``/healthz`` and ``/metrics`` aside); one more is a 503
    #: ``overloaded`` with ``Retry-After``, never a queue.
    max_in_flight: int = Field(default=32, ge=1, le=10_000)
    #: Processes serving the HTTP API (``govrag serve``); on a machine with several cores,
    #: one per core serves more requests at once. Each opens the deployment itself; the
    #: per-caller rate limit is split among them, and ``/metrics`` shows the counters of
    #: the process that answered (govrag/server/worker.py). ``govrag mcp --transport http``
    #: keeps MCP sessions in one process and takes 1 only.
    workers: int = Field(default=1, ge=1, le=64)
    #: On SIGTERM or SIGINT, how long in-flight requests may still finish, in seconds.
    drain_s: float = Field(default=30.0, ge=0.0, le=3600.0)
    #: Serve Prometheus metrics at ``GET /metrics`` (no document text, query or subject in
    #: it, and no count that moves with what a caller may not read; the operator's, so only
    #: to the credential below).
    metrics: bool = True
    #: The environment variable holding the bearer secret (at least 32 bytes) a scraper of
    #: ``GET /metrics`` must send, from any address. Unset: ``/metrics`` answers only a client
    #: connected from loopback that came through no proxy (no ``Forwarded``,
    #: ``X-Forwarded-For`` or ``X-Real-IP`` header). Anything else is one fixed 403.
    metrics_token_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                          max_length=128)  # fmt: skip
    #: One JSON line per request on the logger ``govrag.access`` (never a token, a body or a
    #: query string).
    access_log: bool = True
    #: The URL clients reach this server at (behind a proxy, the proxy's), e.g.
    #: ``https://govrag.bank.example``: the MCP endpoint's resource is this URL with ``/mcp``
    #: (its protected-resource metadata names it). Default: the address it listens on.
    public_url: str | None = None

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"public_url {redact(value)!r} is not an http(s) URL with a "
                             "host, like 'https://govrag.bank.example'")  # fmt: skip
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"public_url {redact(value)!r} may not carry a query, a fragment or "
                             "credentials; give the scheme, host, port and path only")  # fmt: skip
        return value.strip().rstrip("/")
