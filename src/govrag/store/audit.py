"""The audit log's storage: append-only, hash-chained events, one chain per tenant.

Each event's hash covers its fields and the previous event's hash (canonical JSON, SHA-256),
and the tenant row records the chain's head (sequence number and hash) in the same
transaction. So altering, deleting, inserting or reordering any event, or cutting the chain's
end, breaks a link :func:`verify_chain` reports by sequence number and event id. Appends to one
tenant are serialised by the tenant row (one valid chain under concurrent writers); on SQLite
each audit commit is synchronous (FULL), on PostgreSQL ``synchronous_commit`` is on, so a
committed event survives power loss.

Tamper-evident, not tamper-proof: someone able to rewrite the whole table and the head can
forge a consistent chain (cut its end and rewind the head, wipe it, drop the tenant row). The
anchor outside the database (``govrag.audit.checkpoint``: signed checkpoints of each head)
detects that; this module gives it what it needs: every tenant with a tenant row *or* events
(:meth:`AuditRepository.audit_tenants`), a chain and its head read in one snapshot
(:meth:`AuditRepository.audit_chain`), and observers told of each committed event
(:meth:`AuditRepository.observe_audit`), which is where the automatic checkpoints hook in.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from govrag.store.clock import now_iso
from govrag.store.database import Database, ensure_tenant, list_tenants, log
from govrag.store.dialect import Conn
from govrag.store.group_commit import GroupCommit

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
    #: Whether the tenant row (which records the chain's head) exists.
    tenant_row: bool = True

    @property
    def ok(self) -> bool:
        return self.broken is None


#: ``broken`` problem text when events exist but no tenant row records their head.
NO_TENANT_ROW = "the tenant row recording the chain's head is missing (deleted)"


def verify_chain(
    tenant: str, events: Sequence[AuditEvent], head: tuple[int, str] | None
) -> ChainReport:
    """Recompute the chain of ``events`` (in stored order) against the recorded ``head``
    (None: there is no tenant row, which is a break as soon as the chain has an event)."""
    if head is None:
        if not events:
            return ChainReport(tenant, 0, 0, "", tenant_row=False)
        last = events[-1]
        # The links are checked as usual (against the last event as head); a first broken
        # link is reported before the missing row.
        links = verify_chain(tenant, events, (last.seq, last.hash))
        broken = links.broken or (last.seq, last.event_id, NO_TENANT_ROW)
        return ChainReport(tenant, len(events), 0, "", broken, tenant_row=False)
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


@dataclass(frozen=True)
class AuditChain:
    """A tenant's events and recorded head, read in one snapshot."""

    tenant: str
    events: tuple[AuditEvent, ...]
    #: ``(audit_seq, audit_head)`` of the tenant row; None when there is no tenant row.
    head: tuple[int, str] | None

    def verify(self) -> ChainReport:
        return verify_chain(self.tenant, self.events, self.head)


#: Told of each committed event, after its commit (never inside the transaction).
AuditObserver = Callable[[AuditEvent], None]


@dataclass(frozen=True)
class _Draft:
    """An event to append: everything but its place in the chain."""

    kind: str
    payload_json: str
    request_id: str
    session_id: str


_COLUMNS = (
    "tenant_id, seq, event_id, request_id, session_id, kind, payload, created_at, prev_hash, hash"
)

#: The distinct tenant ids of the audit log, one index seek each (a loose index scan), so
#: listing them costs the number of tenants, not the number of events.
_EVENT_TENANTS = """
WITH RECURSIVE t(id) AS (
    SELECT MIN(tenant_id) FROM audit_events
    UNION ALL
    SELECT (SELECT MIN(tenant_id) FROM audit_events WHERE tenant_id > t.id)
    FROM t WHERE t.id IS NOT NULL
)
SELECT id FROM t WHERE id IS NOT NULL
"""


class AuditRepository:
    """Audit events in the truth store (the same SQL on every backend)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        #: Replaced (never mutated) by :meth:`observe_audit`, so iterating it needs no lock.
        self._observers: tuple[AuditObserver, ...] = ()
        #: Concurrent appends share a durable commit (``group_commit.py``).
        lock = db.connection_lock
        self._group: GroupCommit[_Draft, AuditEvent] = GroupCommit(
            self._commit_drafts, turn=None if lock is None else (lambda _tenant: lock)
        )

    def observe_audit(self, observer: AuditObserver) -> None:
        """Call ``observer(event)`` after each audit event this handle commits. An observer
        that raises is logged; the committed event stands."""
        self._observers = (*self._observers, observer)

    def announce(self, event: AuditEvent) -> None:
        """Tell the observers of ``event``, once its transaction has committed."""
        for observer in self._observers:
            try:
                observer(event)
            except Exception:
                log.exception(
                    "an audit observer failed after event %d (%s) of tenant %r was committed; "
                    "the event stands", event.seq, event.event_id, event.tenant,
                )  # fmt: skip

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
        # Serialised here, so a payload that is no JSON fails its own caller alone.
        draft = _Draft(kind, canonical(payload), request_id, session_id)
        event = self._group.submit(tenant, draft)
        self.announce(event)
        return event

    def _commit_drafts(self, tenant: str, drafts: Sequence[_Draft]) -> list[AuditEvent]:
        """One durable transaction chaining ``drafts`` in order (see ``group_commit.py``)."""
        with self._db.audit_tx(tenant) as conn:
            ensure_tenant(conn, self._db.dialect, tenant)
            return [self._chain(conn, tenant, d) for d in drafts]

    def append_event(
        self,
        conn: Conn,
        tenant: str,
        kind: str,
        payload: dict[str, Any],
        request_id: str,
        session_id: str,
    ) -> AuditEvent:
        """Chain one event inside the caller's audit transaction (:meth:`Database.audit_tx`);
        announce it after the commit."""
        return self._chain(conn, tenant, _Draft(kind, canonical(payload), request_id, session_id))

    def _chain(self, conn: Conn, tenant: str, pending: _Draft) -> AuditEvent:
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
            request_id=pending.request_id,
            session_id=pending.session_id,
            kind=pending.kind,
            payload_json=pending.payload_json,
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
        rows = self._db.q(
            tenant, f"SELECT {_COLUMNS} FROM audit_events WHERE {where} ORDER BY seq", params
        )
        return [AuditEvent(r[0], int(r[1]), *r[2:]) for r in rows]

    def audit_session_pinned(self, tenant: str, session_id: str) -> AuditEvent | None:
        """The ``route_pinned`` event that opened ``session_id`` (one index seek), or None."""
        rows = self._db.q(
            tenant,
            f"SELECT {_COLUMNS} FROM audit_events WHERE tenant_id = ? AND session_id = ? "
            "AND kind = 'route_pinned' ORDER BY seq LIMIT 1",
            (tenant, session_id),
        )
        return AuditEvent(rows[0][0], int(rows[0][1]), *rows[0][2:]) if rows else None

    def audit_chain(self, tenant: str) -> AuditChain:
        """The tenant's events and its tenant row's head, from one snapshot."""
        with self._db.tx(tenant, read=True) as conn:
            head = conn.execute(
                "SELECT audit_seq, audit_head FROM tenants WHERE tenant_id = ?", (tenant,)
            ).fetchone()
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM audit_events WHERE tenant_id = ? ORDER BY seq",
                (tenant,),
            ).fetchall()
        events = tuple(AuditEvent(r[0], int(r[1]), *r[2:]) for r in rows)
        return AuditChain(tenant, events, (int(head[0]), head[1]) if head else None)

    def verify_audit(self, tenant: str) -> ChainReport:
        """Recompute the tenant's chain from the stored events and head."""
        return self.audit_chain(tenant).verify()

    def audit_tenants(self) -> list[str]:
        """Every tenant with a tenant row or with audit events: a chain whose tenant row was
        deleted, or events written under a tenant nobody created, are listed too."""
        with self._db.directory_tx() as conn:
            rows = conn.execute(_EVENT_TENANTS).fetchall()
        return sorted({str(r[0]) for r in rows} | set(list_tenants(self._db)))
