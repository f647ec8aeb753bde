"""The audit log's storage: append-only, hash-chained events, one chain per tenant.

Each event's hash covers its fields and the previous event's hash (canonical JSON, SHA-256),
and the tenant row records the chain's head (sequence number and hash) in the same
transaction. So altering, deleting, inserting or reordering any event, or cutting the chain's
end, breaks a link :func:`verify_chain` reports by sequence number and event id. Appends to one
tenant are serialised by the tenant row (one valid chain under concurrent writers); on SQLite
each audit commit is synchronous (FULL), on PostgreSQL ``synchronous_commit`` is on, so a
committed event survives power loss.

Tamper-evident, not tamper-proof: someone able to rewrite the whole table and the head can
forge a consistent chain; anchor the head (``govrag audit verify`` prints it) outside the
database to detect that too.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from govrag.store.dialect import Conn
from govrag.store.schema import now_iso
from govrag.store.sql_base import SQLBase

#: ``prev_hash`` of a chain's first event.
GENESIS = "0" * 64


def canonical(value: Any) -> str:
    """The one JSON text of a value that hashes are computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class AuditEvent:
    tenant: str
    seq: int
    event_id: str
    request_id: str
    session_id: str
    kind: str
    #: Canonical JSON text of the payload (stored and hashed exactly as written).
    payload_json: str
    created_at: str
    prev_hash: str
    hash: str

    @property
    def payload(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.payload_json)
        return value

    def expected_hash(self) -> str:
        """The hash these fields and ``prev_hash`` must have."""
        body = canonical(
            {
                "tenant": self.tenant,
                "seq": self.seq,
                "event_id": self.event_id,
                "request_id": self.request_id,
                "session_id": self.session_id,
                "kind": self.kind,
                "payload": self.payload_json,
                "created_at": self.created_at,
                "prev_hash": self.prev_hash,
            }
        )
        return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class ChainReport:
    tenant: str
    events: int
    head_seq: int
    head_hash: str
    #: ``(seq, event_id, what is wrong)`` of the first broken link; None when intact.
    broken: tuple[int, str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.broken is None


def verify_chain(tenant: str, events: Sequence[AuditEvent], head: tuple[int, str]) -> ChainReport:
    """Recompute the chain of ``events`` (in stored order) against the recorded ``head``."""
    prev = GENESIS
    for expected_seq, event in enumerate(events, start=1):
        problem = None
        if event.seq != expected_seq:
            problem = f"sequence number {event.seq} where {expected_seq} was expected"
        elif event.prev_hash != prev:
            problem = "prev_hash does not match the previous event's hash"
        elif event.hash != event.expected_hash():
            problem = "hash does not match the event's contents"
        if problem:
            return ChainReport(tenant, len(events), *head, broken=(event.seq, event.event_id,
                                                                    problem))  # fmt: skip
        prev = event.hash
    last_seq = events[-1].seq if events else 0
    if (last_seq, prev if events else "") != head:
        where = events[-1] if events else None
        return ChainReport(
            tenant,
            len(events),
            *head,
            broken=(
                last_seq,
                where.event_id if where else "",
                f"the chain ends at event {last_seq}, but the recorded head is event {head[0]}",
            ),
        )
    return ChainReport(tenant, len(events), *head)


_COLUMNS = (
    "tenant_id, seq, event_id, request_id, session_id, kind, payload, created_at, prev_hash, hash"
)


class SQLAudit(SQLBase):
    """Audit events in the truth store (the same SQL on every backend)."""

    def append_audit(
        self,
        tenant: str,
        kind: str,
        payload: dict[str, Any],
        *,
        request_id: str,
        session_id: str,
    ) -> AuditEvent:
        """Commit one event (durably) and return it; raises :class:`StoreError` on failure,
        in which case nothing was written."""
        with self._audit_tx(tenant) as conn:
            self._ensure_tenant(conn, tenant)
            return self._append_event(conn, tenant, kind, payload, request_id, session_id)

    def _append_event(
        self,
        conn: Conn,
        tenant: str,
        kind: str,
        payload: dict[str, Any],
        request_id: str,
        session_id: str,
    ) -> AuditEvent:
        """Chain one event inside the caller's (audit) transaction."""
        # Takes the tenant row's lock until commit: one writer per chain at a time.
        seq, prev = conn.execute(
            "UPDATE tenants SET audit_seq = audit_seq + 1 WHERE tenant_id = ? "
            "RETURNING audit_seq, audit_head",
            (tenant,),
        ).fetchone()
        draft = AuditEvent(
            tenant=tenant,
            seq=int(seq),
            event_id=f"aud-{secrets.token_hex(8)}",
            request_id=request_id,
            session_id=session_id,
            kind=kind,
            payload_json=canonical(payload),
            created_at=now_iso(),
            prev_hash=prev or GENESIS,
            hash="",
        )
        event = AuditEvent(**{**draft.__dict__, "hash": draft.expected_hash()})
        conn.execute(
            f"INSERT INTO audit_events({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                tenant, event.seq, event.event_id, event.request_id, event.session_id,
                event.kind, event.payload_json, event.created_at, event.prev_hash, event.hash,
            ),
        )  # fmt: skip
        conn.execute("UPDATE tenants SET audit_head = ? WHERE tenant_id = ?", (event.hash, tenant))
        return event

    def audit_events(self, tenant: str, *, request_id: str | None = None) -> list[AuditEvent]:
        """A tenant's events in chain order (those of one request, if given)."""
        where = "tenant_id = ?" + (" AND request_id = ?" if request_id is not None else "")
        params = (tenant,) if request_id is None else (tenant, request_id)
        rows = self._q(
            tenant, f"SELECT {_COLUMNS} FROM audit_events WHERE {where} ORDER BY seq", params
        )
        return [AuditEvent(r[0], int(r[1]), *r[2:]) for r in rows]

    def verify_audit(self, tenant: str) -> ChainReport:
        """Recompute the tenant's chain from the stored events and head."""
        with self._tx(tenant, read=True) as conn:
            head = conn.execute(
                "SELECT audit_seq, audit_head FROM tenants WHERE tenant_id = ?", (tenant,)
            ).fetchone()
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM audit_events WHERE tenant_id = ? ORDER BY seq",
                (tenant,),
            ).fetchall()
        events = [AuditEvent(r[0], int(r[1]), *r[2:]) for r in rows]
        return verify_chain(tenant, events, (int(head[0]), head[1]) if head else (0, ""))
