"""The stateless admission rules of seed ``001``, the deterministic id, and the candidate snapshot.

Admission is fail-closed and checks, in this order (the first broken rule names the reason):

1. the store is enabled (``DISABLED``); the value is a :class:`WriteBackCandidate`
   (``NOT_A_CANDIDATE``); its ``agent_id`` is on the allow-list (``AGENT_NOT_ALLOWED``);
2. the gate: ``RAW_MODEL_OUTPUT`` is always rejected (``RAW_MODEL_OUTPUT``), anything but
   ``USER_CONFIRMED``, ``TOOL_VERIFIED`` or ``EVAL_GATED`` too (``GATE_NOT_ADMITTED``);
3. the strings, field by field in the order content, source turn id, agent id, tenant,
   session; each must be a non-blank ``str`` (``*_BLANK``), have a UTF-8 form
   (``TEXT_NOT_UTF8``) and fit its bound (``CONTENT_TOO_LARGE``: 16 KiB of UTF-8;
   ``IDENTITY_TOO_LONG`` / ``SCOPE_TOO_LONG``: 256 characters). A scope that is not a
   :class:`RetrievalScope` is ``SCOPE_BLANK``;
4. ``confidence`` is an ``int`` or ``float`` (not ``bool``), finite, in ``0.0..1.0``
   (``CONFIDENCE_INVALID``);
5. ``expires_at`` is a timezone-aware ``datetime`` with a UTC instant (``EXPIRES_AT_INVALID``)
   strictly after the clock's now (``EXPIRED``);
6. the scope's tenant is a tenant of the deployment: the store's tenant directory answers
   ``True`` (``UNKNOWN_TENANT``; a directory that raises or answers garbage:
   ``TENANT_UNVERIFIED``);
7. then, judged by the store under its lock because they depend on what it holds:
   ``supersedes`` (``SUPERSEDES_NOT_IN_SCOPE``), the tenant's scope cap (``SCOPE_CAP``) and the
   entry cap (``ENTRY_CAP``); finally the audit record must be written (``AUDIT_FAILED``).

Every field is read exactly once (:func:`read_fields`), and ``str`` subclasses are copied to
plain ``str``: a candidate whose attributes or strings change between two reads (a property, an
overridden ``__eq__``) cannot pass a check with one value and be stored with another.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from govrag.writeback.models import (
    ADMITTED_GATES,
    MAX_CONTENT_BYTES,
    MAX_IDENTITY_CHARS,
    META_AGENT_ID,
    META_CONFIDENCE,
    META_EXPIRES_AT,
    META_GATE,
    META_SOURCE_TURN_ID,
    META_SUPERSEDES,
    SUPERSEDES_NONE,
    AdmissionGate,
    AdmissionReason,
    Clock,
    RetrievalScope,
    WriteBackCandidate,
)

__all__ = [
    "ID_PREFIX",
    "Admissible",
    "Fields",
    "ScopeKey",
    "check",
    "confidence_text",
    "instant_text",
    "read_clock",
    "read_fields",
    "scope_key",
    "snapshot",
    "writeback_id",
]

ID_PREFIX = "writeback:"

ScopeKey = tuple[str, str]
"""A usable scope as plain strings: (tenant, session)."""

R = AdmissionReason


def writeback_id(
    tenant: str, session: str, source_turn_id: str, agent_id: str, content: str
) -> str:
    """The deterministic entry id: ``writeback:`` + hex SHA-256 of the length-prefixed fields.

    Each field is its UTF-8 bytes preceded by their length as a 4-byte big-endian integer, so
    no two different field tuples share a byte string (``("ab", "c")`` vs ``("a", "bc")``).

    Raises:
        UnicodeEncodeError: a field holds a lone surrogate (admission rejects those first).
    """
    digest = hashlib.sha256()
    for field in (tenant, session, source_turn_id, agent_id, content):
        data = field.encode("utf-8")
        digest.update(struct.pack(">I", len(data)))
        digest.update(data)
    return ID_PREFIX + digest.hexdigest()


def _plain(value: Any) -> Any:
    """A ``str`` subclass as a plain ``str`` copy (``str.__str__`` ignores overrides)."""
    return str.__str__(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class Fields:
    """A one-time read of a candidate's fields, unvalidated (``None`` where there is nothing)."""

    is_candidate: bool = False
    tenant: Any = None
    session: Any = None
    source_turn_id: Any = None
    agent_id: Any = None
    gate: Any = None
    content: Any = None
    confidence: Any = None
    expires_at: Any = None
    supersedes: Any = None


NO_FIELDS = Fields()


def read_fields(candidate: object) -> Fields:
    """Read every field of ``candidate`` once; a non-candidate gives :data:`NO_FIELDS`."""
    if not isinstance(candidate, WriteBackCandidate):
        return NO_FIELDS
    scope = candidate.scope
    is_scope = isinstance(scope, RetrievalScope)
    gate = candidate.gate
    return Fields(
        is_candidate=True,
        tenant=_plain(scope.tenant) if is_scope else None,
        session=_plain(scope.session) if is_scope else None,
        source_turn_id=_plain(candidate.source_turn_id),
        agent_id=_plain(candidate.agent_id),
        # Members of AdmissionGate are str too; keep them as members, plain-copy other strings.
        gate=gate if isinstance(gate, AdmissionGate) else _plain(gate),
        content=_plain(candidate.content),
        confidence=candidate.confidence,
        expires_at=candidate.expires_at,
        supersedes=_plain(candidate.supersedes),
    )


def snapshot(candidate: object) -> object:
    """``candidate`` as a plain :class:`WriteBackCandidate` of its fields each read once (a
    non-candidate as given), so a caller that checks its scope or writer admits exactly what
    it checked: a scope reading one session when checked and another when stored cannot pass."""
    fields = read_fields(candidate)
    if not fields.is_candidate:
        return candidate
    return WriteBackCandidate(
        scope=RetrievalScope(tenant=fields.tenant, session=fields.session),
        source_turn_id=fields.source_turn_id,
        agent_id=fields.agent_id,
        gate=fields.gate,
        content=fields.content,
        confidence=fields.confidence,
        expires_at=fields.expires_at,
        supersedes=fields.supersedes,
    )


def _text_reason(
    value: Any, blank: AdmissionReason, too_long: AdmissionReason, *, max_chars: int
) -> AdmissionReason | None:
    """Check one identity-like string: non-blank, UTF-8 encodable, at most ``max_chars``."""
    if not isinstance(value, str) or not value.strip():
        return blank
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return R.TEXT_NOT_UTF8
    return too_long if len(value) > max_chars else None


def _content_reason(value: Any) -> AdmissionReason | None:
    """Check the content: non-blank, UTF-8 encodable, at most 16 KiB once encoded."""
    if not isinstance(value, str) or not value.strip():
        return R.CONTENT_BLANK
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return R.TEXT_NOT_UTF8
    return R.CONTENT_TOO_LARGE if size > MAX_CONTENT_BYTES else None


def scope_key(tenant: Any, session: Any) -> ScopeKey | None:
    """(tenant, session) as plain strings when both are usable scope strings, else ``None``."""
    tenant, session = _plain(tenant), _plain(session)
    for value in (tenant, session):
        if _text_reason(value, R.SCOPE_BLANK, R.SCOPE_TOO_LONG, max_chars=MAX_IDENTITY_CHARS):
            return None
    return (tenant, session)


def confidence_value(value: Any) -> float | None:
    """The confidence as a plain float when it is a finite real in ``0.0..1.0``, else ``None``."""
    # bool is an int subclass, but True is no confidence; other numeric types (Decimal, numpy
    # scalars that are not float subclasses) are refused rather than guessed at.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        # Compare before converting: float() of a huge int would overflow.
        return float(value) if 0 <= value <= 1 else None
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        return None
    return number + 0.0  # -0.0 becomes 0.0, so its text is "0.0"


def confidence_text(value: float) -> str:
    """Shortest round-trip decimal text, never in exponent form (``1e-05`` -> ``0.00001``)."""
    return format(Decimal(repr(value)), "f")


def expiry_value(value: Any) -> datetime | None:
    """``value`` as a plain UTC datetime when it is an aware datetime, else ``None``."""
    if not isinstance(value, datetime):
        return None
    try:
        if value.utcoffset() is None:
            return None  # naive: no instant to compare against
        utc = value.astimezone(UTC)
    except Exception:
        # OverflowError near datetime.min/max, or a tzinfo whose utcoffset misbehaves.
        return None
    # Rebuild as a plain datetime so a subclass cannot change comparison or formatting later.
    return datetime(
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond, tzinfo=UTC
    )


def instant_text(value: datetime) -> str:
    """An aware datetime as an ISO-8601 UTC instant: ``2026-12-01T10:00:00Z``."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def read_clock(clock: Clock) -> datetime:
    """The clock's now as a UTC datetime.

    Raises:
        ValueError: the clock returned something other than an aware datetime.
    """
    now = clock()
    utc = expiry_value(now)
    if utc is None:
        raise ValueError(
            f"the write-back clock returned {now!r}; it must return a timezone-aware datetime, "
            "e.g. datetime.now(UTC)"
        )
    return utc


@dataclass(frozen=True)
class Admissible:
    """A candidate that passed rules 1-5, as validated plain values."""

    scope: ScopeKey
    id: str
    source_turn_id: str
    agent_id: str
    gate: AdmissionGate
    content: str
    confidence: float
    expires_at: datetime
    supersedes: str | None
    supersedes_given: bool
    now: datetime

    def metadata(self) -> dict[str, str]:
        """The hit metadata of this entry."""
        return {
            META_GATE: self.gate.value,
            META_SOURCE_TURN_ID: self.source_turn_id,
            META_AGENT_ID: self.agent_id,
            META_CONFIDENCE: confidence_text(self.confidence),
            META_EXPIRES_AT: instant_text(self.expires_at),
            META_SUPERSEDES: self.supersedes if self.supersedes is not None else SUPERSEDES_NONE,
        }


def check(
    fields: Fields, *, enabled: bool, allowed_agents: frozenset[str], clock: Clock
) -> AdmissionReason | Admissible:
    """Apply rules 1-5 in order: the first broken rule's reason, or the validated candidate.

    The clock is read only once the earlier rules hold. ``supersedes`` is passed through
    unjudged (``supersedes_given`` tells ``None`` apart from garbage): it depends on the store.

    Raises:
        ValueError: the clock is broken (the store turns this into a rejection).
    """
    if not enabled:
        return R.DISABLED
    if not fields.is_candidate:
        return R.NOT_A_CANDIDATE
    agent = fields.agent_id
    if not isinstance(agent, str) or agent not in allowed_agents:
        return R.AGENT_NOT_ALLOWED
    gate = fields.gate
    # Compared as text so the plain string "RAW_MODEL_OUTPUT" is named for what it is too.
    if isinstance(gate, str) and gate == AdmissionGate.RAW_MODEL_OUTPUT.value:
        return R.RAW_MODEL_OUTPUT
    if not isinstance(gate, AdmissionGate) or gate not in ADMITTED_GATES:
        return R.GATE_NOT_ADMITTED
    reason = _content_reason(fields.content)
    if reason is not None:
        return reason
    # A scope that is not a RetrievalScope was read as tenant=session=None: SCOPE_BLANK.
    identities = (
        (fields.source_turn_id, R.IDENTITY_BLANK, R.IDENTITY_TOO_LONG),
        (agent, R.IDENTITY_BLANK, R.IDENTITY_TOO_LONG),
        (fields.tenant, R.SCOPE_BLANK, R.SCOPE_TOO_LONG),
        (fields.session, R.SCOPE_BLANK, R.SCOPE_TOO_LONG),
    )
    for value, blank, too_long in identities:
        reason = _text_reason(value, blank, too_long, max_chars=MAX_IDENTITY_CHARS)
        if reason is not None:
            return reason
    confidence = confidence_value(fields.confidence)
    if confidence is None:
        return R.CONFIDENCE_INVALID
    expires_at = expiry_value(fields.expires_at)
    if expires_at is None:
        return R.EXPIRES_AT_INVALID
    now = read_clock(clock)
    if expires_at <= now:
        return R.EXPIRED
    tenant, session, turn = fields.tenant, fields.session, fields.source_turn_id
    supersedes = fields.supersedes
    return Admissible(
        scope=(tenant, session),
        id=writeback_id(tenant, session, turn, agent, fields.content),
        source_turn_id=turn,
        agent_id=agent,
        gate=gate,
        content=fields.content,
        confidence=confidence,
        expires_at=expires_at,
        # Only a string can name an entry; garbage is kept as "given but unusable".
        supersedes=supersedes if isinstance(supersedes, str) else None,
        supersedes_given=supersedes is not None,
        now=now,
    )
