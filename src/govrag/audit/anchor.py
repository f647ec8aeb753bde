"""``govrag audit verify``: every tenant's chain, checked against its signed checkpoints.

The hash chain alone shows that no event was changed *inside* the chain; it cannot show
that the chain's end was cut and the head rewound, that the log was wiped and the head
reset, or that a tenant row was dropped, because the head lives in the same database. The
checkpoints (``govrag.audit.checkpoint``) live outside it and are signed with a key the
database does not hold, so:

- every tenant with a tenant row, audit events or a checkpoint is checked (a tenant that
  one of them forgot is exactly what an attacker leaves behind);
- every valid checkpoint must still be in the chain: the event at its head sequence exists
  and has the hash it recorded (else the chain was cut or rewritten after it);
- a chain with events must have a checkpoint (else its tenant was never anchored: events
  inserted under an unknown tenant, or a deployment that never took one);
- a checkpoint file that does not parse, is signed by a key the keyring does not hold
  (neither the current key nor a retired one, ``[audit] verify_keys``) or whose signature
  fails is a finding of its own (edited or forged), and is never used as an anchor;
- a signing key open to other users is a finding too (``key_exposed``): whoever could read it
  could have signed any checkpoint, so none proves anything until it is private again (and,
  if it was read, rotated).

Checkpoints are listed *before* the chain is read: a checkpoint is written after its event
committed, so every one listed refers to an event the (later) snapshot must contain, even
while the application keeps appending.

What cannot be detected: events cut from the end after the latest checkpoint (at most
``checkpoint_every_events - 1`` events, all appended within ``checkpoint_every_seconds`` of
it), and anything done by someone who holds the signing key or can delete checkpoint files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from govrag.audit.checkpoint import Checkpoint, CheckpointDir
from govrag.audit.keys import Keyring
from govrag.errors import ConfigError, NotFoundError
from govrag.store.audit import NO_TENANT_ROW, AuditChain, AuditEvent, ChainReport
from govrag.store.protocol import AuditChains


@dataclass(frozen=True)
class Finding:
    """One thing that is wrong, as one line. ``kind`` is one of ``chain_broken``,
    ``tenant_row_missing``, ``truncated``, ``wiped``, ``tenant_dropped``, ``rewritten``,
    ``unanchored``, ``checkpoint_invalid``, ``key_exposed`` (whose ``tenant`` is ``""``: it
    concerns every tenant)."""

    tenant: str
    kind: str
    message: str


@dataclass
class TenantAudit:
    chain: ChainReport
    #: The valid checkpoint with the highest head, if any.
    checkpoint: Checkpoint | None
    checkpoints: int
    #: The chain's last event as read (what ``govrag audit checkpoint`` signs).
    head: AuditEvent | None = None
    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Seconds since the latest checkpoint was taken.
    checkpoint_age_s: float | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        r, cp = self.chain, self.checkpoint
        broken = None if r.broken is None else dict(zip(("seq", "event_id", "problem"),
                                                        r.broken, strict=True))  # fmt: skip
        return {
            "tenant": r.tenant, "ok": self.ok, "events": r.events, "head_seq": r.head_seq,
            "head_hash": r.head_hash, "broken": broken, "tenant_row": r.tenant_row,
            "checkpoint": None if cp is None else {
                "head_seq": cp.head_seq, "head_event_id": cp.head_event_id,
                "head_hash": cp.head_hash, "created_at": cp.model_dump(mode="json")["created_at"],
                "age_s": self.checkpoint_age_s, "key_id": cp.key_id,
                "behind": max(0, r.events - cp.head_seq),
            },
            "checkpoints": self.checkpoints,
            "findings": [f.kind for f in self.findings],
            "warnings": self.warnings,
        }  # fmt: skip


@dataclass
class AuditVerification:
    tenants: list[TenantAudit]
    #: Every finding: the tenants' and those of checkpoint files.
    findings: list[Finding]
    key_id: str
    checkpoint_dir: str

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "key_id": self.key_id,
            "checkpoint_dir": self.checkpoint_dir,
            "tenants": [t.as_dict() for t in self.tenants],
            "findings": [vars(f) for f in self.findings],
            "warnings": [w for t in self.tenants for w in t.warnings],
        }


def _events(n: int) -> str:
    return f"{n} audit event" + ("" if n == 1 else "s")


def _when(cp: Checkpoint) -> str:
    return cp.created_at.strftime("%Y-%m-%d %H:%M:%SZ")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def check_tenant(
    chain: AuditChain,
    history: list[Checkpoint],
    *,
    every_events: int,
    every_seconds: float,
    now: datetime,
) -> TenantAudit:
    """Compare one tenant's chain (read after ``history`` was listed) with its checkpoints."""
    t, report = chain.tenant, chain.verify()
    latest = history[-1] if history else None
    last = chain.events[-1] if chain.events else None
    out = TenantAudit(report, latest, len(history), last)
    events = {e.seq: e for e in chain.events}

    def find(kind: str, what: str) -> None:
        out.findings.append(Finding(t, kind, f"tenant {t}: {what}"))

    if report.broken is not None and report.broken[2] != NO_TENANT_ROW:
        seq, event_id, problem = report.broken
        find("chain_broken", f"the chain is broken at event {seq} ({event_id}): {problem}")
    if not report.tenant_row and chain.events:
        find(
            "tenant_row_missing",
            f"{_events(len(events))} but no tenant row: the row recording the chain's head "
            "was deleted",
        )
    if latest is not None:
        out.checkpoint_age_s = max(0.0, (now - latest.created_at).total_seconds())
        if last is None or latest.head_seq > last.seq:
            find(*_cut(chain, latest))
    for cp in history:
        event = events.get(cp.head_seq)
        if event is not None and (event.hash, event.event_id) != (cp.head_hash, cp.head_event_id):
            find(
                "rewritten",
                f"event {cp.head_seq} is not the one the checkpoint of {_when(cp)} signed "
                f"({cp.head_event_id}, hash {cp.head_hash[:16]}...): the chain was rewritten "
                "after it",
            )
            break
    if last is not None and latest is None:
        find(
            "unanchored",
            f"{_events(len(events))} but no valid checkpoint: events under a tenant that was "
            "never anchored (written into the database directly?), or whose checkpoint history "
            "was removed (then the log may have been cut as well: restore the history from its "
            "backup; automatic checkpoints never adopt such a tenant); once you have checked "
            f"that the log is yours and whole, sign it with `govrag audit checkpoint --tenant {t}`",
        )
    elif last is not None and latest is not None and last.seq > latest.head_seq:
        behind = last.seq - latest.head_seq
        first = events.get(latest.head_seq + 1)
        late = first is not None and (
            (_parse(first.created_at) - latest.created_at).total_seconds() > every_seconds
        )
        if behind >= every_events or late:
            out.warnings.append(
                f"tenant {t}: the latest checkpoint is {_events(behind)} behind the head and "
                f"{_age(out.checkpoint_age_s or 0.0)} old: automatic checkpoints are not being "
                "written (is the checkpoint directory writable and the signing key readable? "
                "see the log); run `govrag audit checkpoint`"
            )
    return out


def _cut(chain: AuditChain, cp: Checkpoint) -> tuple[str, str]:
    """``(kind, what)`` of a chain that no longer reaches checkpoint ``cp``'s head."""
    signed = f"the checkpoint of {_when(cp)} signed event {cp.head_seq} ({cp.head_event_id})"
    if not chain.events and chain.head is None:
        return "tenant_dropped", (
            f"no tenant row and no audit events, but {signed}: the tenant and its whole audit "
            "log were deleted"
        )
    if not chain.events:
        reset = chain.head[0] if chain.head else 0
        return "wiped", (
            f"the audit log is empty (head at event {reset}), but {signed}: the log was wiped "
            "and the head reset"
        )
    last = chain.events[-1].seq
    return "truncated", (
        f"the chain ends at event {last}, but {signed}: {_events(cp.head_seq - last)} were "
        "removed from the end and the head rewound"
    )


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def verify_anchored(
    store: AuditChains,
    directory: CheckpointDir,
    keys: Keyring | Ed25519PublicKey,
    *,
    every_events: int,
    every_seconds: float,
    tenant: str | None = None,
    now: datetime | None = None,
    key_exposure: str | None = None,
) -> AuditVerification:
    """Check every tenant's chain (or one tenant's) against its checkpoints, each checkpoint
    with the key of ``keys`` it names. ``key_exposure`` is why the signing key is open to
    other users (:func:`govrag.audit.keys.signing_key_exposure`), reported as a finding."""
    keyring = Keyring.of(keys)
    scan = directory.scan(keyring, tenant)  # first: see the module docstring
    when = now or datetime.now(UTC)
    names = [tenant] if tenant is not None else sorted(set(store.audit_tenants()) | set(scan.valid))
    audits = [
        check_tenant(store.audit_chain(t), scan.valid.get(t, []), every_events=every_events,
                     every_seconds=every_seconds, now=when)
        for t in names
    ]  # fmt: skip
    bad = [
        Finding(b.tenant, "checkpoint_invalid", f"checkpoint {b.path}: {b.problem}; it was "
                "edited or forged and anchors nothing")
        for b in scan.invalid
    ]  # fmt: skip
    if key_exposure is not None:
        why = f"{key_exposure}; until then no checkpoint proves anything (whoever read the key "
        bad.append(Finding("", "key_exposed", why + "could have signed it)"))
    return AuditVerification(
        tenants=audits,
        findings=[f for a in audits for f in a.findings] + bad,
        key_id=keyring.current_id,
        checkpoint_dir=str(directory.root),
    )


@dataclass
class CheckpointRun:
    """What ``govrag audit checkpoint`` signed, and what it refused to sign."""

    written: list[tuple[Checkpoint, str]] = field(default_factory=list)
    #: ``(tenant, why)``: a chain with findings is never signed (that would launder them).
    refused: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.refused,
            "written": [{"tenant": c.tenant, "head_seq": c.head_seq, "head_hash": c.head_hash,
                         "key_id": c.key_id, "path": p} for c, p in self.written],
            "refused": [{"tenant": t, "reason": why} for t, why in self.refused],
        }  # fmt: skip


def checkpoint_now(
    store: AuditChains,
    directory: CheckpointDir,
    key: Ed25519PrivateKey,
    *,
    every_events: int,
    every_seconds: float,
    tenant: str | None = None,
    adopt: bool = False,
    keyring: Keyring | None = None,
) -> CheckpointRun:
    """Sign the current head of every tenant (or of ``tenant``) whose chain verifies against
    its checkpoints (checked with ``keyring``: ``key``'s public half and the retired keys). A
    tenant without any checkpoint is signed only when named or with ``adopt`` (check with
    ``govrag audit verify`` first that it is yours)."""
    keys = keyring if keyring is not None else Keyring(key.public_key())
    report = verify_anchored(store, directory, keys, every_events=every_events,
                             every_seconds=every_seconds, tenant=tenant)  # fmt: skip
    run = CheckpointRun()
    for audit in report.tenants:
        t = audit.chain.tenant
        other = [f for f in report.findings if f.tenant == t and f.kind != "unanchored"]
        if other:
            run.refused.append((t, other[0].message))
        elif audit.head is None:
            continue
        elif audit.checkpoint is None and not (adopt or tenant is not None):
            run.refused.append((t, f"tenant {t} has no checkpoint yet; check with `govrag "
                                "audit verify` that it is yours, then sign it with --tenant "
                                "or --adopt"))  # fmt: skip
        else:
            cp = Checkpoint.of(audit.head, key, at=datetime.now(UTC))
            try:
                path = directory.write(cp)
            except OSError as exc:
                raise ConfigError(
                    f"[audit] checkpoint_dir {directory.root}: cannot write a checkpoint "
                    f"({exc.strerror}); make it writable for this process"
                ) from exc
            run.written.append((cp, str(path)))
    if tenant is not None and not (run.written or run.refused):
        raise NotFoundError(f"tenant {tenant!r} has no audit events; there is nothing to sign")
    return run
