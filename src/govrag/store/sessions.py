"""Pinned sessions in the truth store, so any process can serve a session.

A session row and its ``route_pinned`` audit event commit in one transaction: no session
exists that the audit log does not show being pinned. So this repository writes through the
audit repository it is given, inside its own audit transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from govrag.errors import InputError
from govrag.store.audit import AuditEvent, AuditRepository, canonical
from govrag.store.clock import now_iso
from govrag.store.database import Database, ensure_tenant


@dataclass(frozen=True)
class SessionRow:
    tenant: str
    session_id: str
    sub: str
    route_id: str
    #: The route's retrieval object as pinned (canonical JSON).
    retrieval_json: str
    route_table_version: str
    created_at: str
    #: When the session ends (its caller's token expiry, ISO 8601 UTC); ``None``: never.
    expires_at: str | None = None


class PinRecord(Protocol):
    """The ``route_pinned`` audit event as the session manager builds it: the typed model of
    ``govrag.audit.events`` (which the store sits below). The session row is read from the
    same event, so row and audit record cannot disagree."""

    @property
    def kind(self) -> str: ...
    @property
    def sub(self) -> str: ...
    @property
    def route_id(self) -> str: ...
    @property
    def route_table_version(self) -> str: ...
    @property
    def token_exp(self) -> str | None: ...
    def payload(self) -> dict[str, Any]: ...


class SessionRepository:
    """Pinned sessions of each tenant."""

    def __init__(self, db: Database, audit: AuditRepository) -> None:
        self._db = db
        self._audit = audit

    def create_session(
        self, tenant: str, session_id: str, pin: PinRecord, *, request_id: str
    ) -> tuple[SessionRow, AuditEvent]:
        """Pin a session and audit it (``pin``, a ``route_pinned`` event) in one durable
        transaction; a session id is used once (a second pin is refused)."""
        if pin.kind != "route_pinned":
            raise ValueError(f"a session is pinned by a route_pinned event, not {pin.kind!r}")
        payload = pin.payload()
        row = SessionRow(tenant, session_id, pin.sub, pin.route_id,
                         canonical(payload.get("retrieval", {})), pin.route_table_version,
                         now_iso(), pin.token_exp)  # fmt: skip
        with self._db.audit_tx(tenant) as conn:
            ensure_tenant(conn, self._db.dialect, tenant)
            taken = conn.execute(
                "SELECT 1 FROM sessions WHERE tenant_id = ? AND session_id = ?",
                (tenant, session_id),
            ).fetchone()
            if taken:
                raise InputError(f"session {session_id!r} already exists; open a new session")
            conn.execute(
                "INSERT INTO sessions(tenant_id, session_id, sub, route_id, retrieval, "
                "route_table_version, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (tenant, session_id, row.sub, row.route_id, row.retrieval_json,
                 row.route_table_version, row.created_at, row.expires_at),
            )  # fmt: skip
            event = self._audit.append_event(
                conn, tenant, pin.kind, payload, request_id, session_id
            )
        self._audit.announce(event)
        return row, event

    def get_session(self, tenant: str, session_id: str) -> SessionRow | None:
        rows = self._db.q(
            tenant,
            "SELECT tenant_id, session_id, sub, route_id, retrieval, route_table_version, "
            "created_at, expires_at FROM sessions WHERE tenant_id = ? AND session_id = ?",
            (tenant, session_id),
        )
        return SessionRow(*rows[0]) if rows else None
