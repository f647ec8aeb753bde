"""Whether a deployment may be served, decided once for ``govrag serve`` and again by each of
its worker processes.

A served deployment takes identity from bearer tokens only, so it must be able to verify one
(keys, a JWKS file, or development tokens) and must not let anyone sign one: development
tokens are signed with a secret in the deployment directory, so they are refused beyond
loopback. Several worker processes (``[server] workers``) each hold their own MCP sessions,
write-back overlay and rate buckets, so MCP and write-back take one, and the rate burst is
split among them (it must leave each at least one). A worker that uvicorn starts again (on
SIGHUP, or in place of one that died) re-reads ``govrag.toml``: it runs the same checks and
also refuses settings other than those ``govrag serve`` checked when it started
(:func:`settings_digest`), so an edit takes effect only through a restart that checks it.
"""

from __future__ import annotations

import hashlib
import ipaddress
from pathlib import Path
from typing import Any

from govrag.app.api import Govrag
from govrag.app.entry import open as open_deployment
from govrag.errors import ConfigError
from govrag.settings import Settings, load_settings


def loopback_address(host: str) -> bool:
    """Whether ``host`` (an address, never a name) is a loopback address, an IPv4 one written
    as IPv6 (``::ffff:127.0.0.1``) included."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def loopback(host: str) -> bool:
    """Whether listening on ``host`` (an address, or ``localhost``) reaches this machine only."""
    return host == "localhost" or loopback_address(host)


def serving_refusal(app: Govrag, host: str, *, mcp: bool = False) -> ConfigError | None:
    """Why ``app`` must not be served on ``host`` (with ``mcp``: also MCP at ``/mcp``), the
    first reason found; ``None`` when it may."""
    settings = app.settings
    auth, server = settings.auth, settings.server
    if auth.dev_tokens and not loopback(host):
        return ConfigError(f"refusing to listen on {host}: [auth] dev_tokens is on, and "
                           "anyone who can read keys/dev-token-secret could sign a token "
                           "as anyone; listen on 127.0.0.1, or turn dev_tokens off")  # fmt: skip
    if not (auth.keys or auth.jwks_file or auth.dev_tokens):
        return ConfigError("no [auth] keys: a served deployment takes identity from bearer "
                           "tokens only; configure [auth] (docs/auth.md), or set "
                           "[auth] dev_tokens = true for local development")  # fmt: skip
    # A key that cannot load is an error at start, not a 401 for every caller.
    problems = [p for p in app.operators.config_check().problems if not p.warning]
    if problems:
        return ConfigError("; ".join(str(p) for p in problems))
    workers = server.workers
    if workers > 1:
        if mcp:
            return ConfigError(f"[server] workers = {workers}: an MCP session lives in the "
                               "process that opened it, so `govrag mcp --transport http` "
                               "serves from one; set workers = 1 for it (govrag serve may "
                               "use more)")  # fmt: skip
        if settings.writeback.enabled:
            return ConfigError(
                f"[server] workers = {workers}: the write-back overlay lives "
                "in the process that admitted it, so the others would not "
                "see it; set workers = 1 while [writeback] enabled = true"
            )
        if server.rate_burst < workers:
            return ConfigError(
                f"[server] rate_burst = {server.rate_burst} is below workers "
                f"= {workers}: each worker allows its share of the burst, and "
                "each needs at least 1; raise rate_burst or lower workers"
            )
    return None


def settings_digest(settings: Settings) -> str:
    """A digest of every setting (secrets as masked), to tell a worker whether it reads the
    settings its parent checked."""
    return hashlib.sha256(settings.model_dump_json().encode()).hexdigest()


def worker_share(rate_per_minute: float, rate_burst: int, workers: int) -> dict[str, Any]:
    """A worker's share of the per-caller limit: the rate and burst divided among workers
    (:func:`serving_refusal` refuses a burst below the number of workers, so each share is
    at least 1 and the shares add up to at most the burst)."""
    return {"rate_per_minute": rate_per_minute / workers,
            "rate_burst": rate_burst // workers}  # fmt: skip


def open_worker(root: Path, digest: str, host: str) -> Govrag:
    """The deployment in ``root`` opened by one of ``govrag serve``'s worker processes, with
    its share of the rate limit; raises :class:`ConfigError` when its settings are not those
    the parent checked (``digest``) or would be refused on ``host``."""
    settings = load_settings(root)
    if settings_digest(settings) != digest:
        raise ConfigError(f"the settings of {root} changed since `govrag serve` started and "
                          "checked them; restart govrag serve to apply them")  # fmt: skip
    server = settings.server
    app = open_deployment(root, server=worker_share(server.rate_per_minute, server.rate_burst,
                                                    server.workers))  # fmt: skip
    refusal = serving_refusal(app, host)
    if refusal is not None:
        app.close()
        raise refusal
    return app
