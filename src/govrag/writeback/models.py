"""Value types of the controlled write-back store (seed ``001``): gates, reasons, candidates.

The candidate and scope types are deliberately *plain* frozen dataclasses with no validation:
a writer may hand the store anything (wrong types, NaN, naive datetimes, megabyte strings), and
the store must answer with a rejection, never an exception. All validation therefore lives in
:mod:`govrag.writeback.admission`, which reads each field exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "ADMITTED_GATES",
    "MAX_CONTENT_BYTES",
    "MAX_ENTRIES_PER_SCOPE",
    "MAX_IDENTITY_CHARS",
    "MAX_SCOPES",
    "META_AGENT_ID",
    "META_CONFIDENCE",
    "META_EXPIRES_AT",
    "META_GATE",
    "META_KEYS",
    "META_SOURCE_TURN_ID",
    "META_SUPERSEDES",
    "SUPERSEDES_NONE",
    "AdmissionGate",
    "AdmissionReason",
    "AdmissionResult",
    "AuditSink",
    "Clock",
    "RetrievalScope",
    "TenantDirectory",
    "WriteBackCandidate",
    "WriteBackHit",
]

MAX_CONTENT_BYTES = 16 * 1024
"""Content bound: 16 KiB of UTF-8."""

MAX_IDENTITY_CHARS = 256
"""Bound, in characters (code points), of the source turn id, agent id, tenant and session."""

MAX_SCOPES = 256
"""Live (tenant, session) scopes the store holds at most *per tenant*: one tenant filling its
scopes never refuses another tenant's admission."""

MAX_ENTRIES_PER_SCOPE = 1024
"""Live entries one scope holds at most."""

META_GATE = "writeback.gate"
META_SOURCE_TURN_ID = "writeback.sourceTurnId"
META_AGENT_ID = "writeback.agentId"
META_CONFIDENCE = "writeback.confidence"
META_EXPIRES_AT = "writeback.expiresAt"
META_SUPERSEDES = "writeback.supersedes"
META_KEYS: tuple[str, ...] = (
    META_GATE,
    META_SOURCE_TURN_ID,
    META_AGENT_ID,
    META_CONFIDENCE,
    META_EXPIRES_AT,
    META_SUPERSEDES,
)
"""Every metadata key a hit carries (the only keys a search filter can match)."""

SUPERSEDES_NONE = "none"
"""``writeback.supersedes`` of an entry that replaced nothing."""

Clock = Callable[[], datetime]
"""Returns the current time as a timezone-aware datetime."""

AuditSink = Callable[[str, str, dict[str, Any]], None]
"""``audit(tenant, session, payload)``: records one admission decision; raising = not recorded."""

TenantDirectory = Callable[[str], bool]
"""``known(tenant)``: whether ``tenant`` is a tenant of the deployment (the composition root
asks the truth store). Only ``True`` admits; anything else, or raising, refuses."""


class AdmissionGate(StrEnum):
    """How a candidate's content was established. The value is the gate's name."""

    USER_CONFIRMED = "USER_CONFIRMED"
    """The user confirmed the content explicitly."""
    TOOL_VERIFIED = "TOOL_VERIFIED"
    """A tool (not the model) produced or verified the content."""
    EVAL_GATED = "EVAL_GATED"
    """The content passed an evaluation gate."""
    RAW_MODEL_OUTPUT = "RAW_MODEL_OUTPUT"
    """Unverified model text: always rejected, never promoted to another gate."""


ADMITTED_GATES: frozenset[AdmissionGate] = frozenset(
    {AdmissionGate.USER_CONFIRMED, AdmissionGate.TOOL_VERIFIED, AdmissionGate.EVAL_GATED}
)
"""The gates under which a candidate can be admitted."""


class AdmissionReason(StrEnum):
    """Why a candidate was admitted or rejected; every rejection has its own value.

    A candidate that breaks several rules is rejected with the reason of the first rule checked
    (the order is spelled out in :mod:`govrag.writeback.admission`).
    """

    ADMITTED = "admitted"
    """Every rule held; the entry is indexed (or was already, for a re-admission)."""
    DISABLED = "disabled"
    """The store is disabled: it admits nothing."""
    NOT_A_CANDIDATE = "not_a_candidate"
    """What was passed is not a :class:`WriteBackCandidate`."""
    AGENT_NOT_ALLOWED = "agent_not_allowed"
    """The writer's ``agent_id`` is not on the store's allow-list."""
    RAW_MODEL_OUTPUT = "raw_model_output"
    """The gate is ``RAW_MODEL_OUTPUT``: raw model text is never admitted."""
    GATE_NOT_ADMITTED = "gate_not_admitted"
    """The gate is not one of ``USER_CONFIRMED``, ``TOOL_VERIFIED``, ``EVAL_GATED``."""
    CONTENT_BLANK = "content_blank"
    """The content is missing, not a string, empty or whitespace only."""
    CONTENT_TOO_LARGE = "content_too_large"
    """The content is over 16 KiB of UTF-8."""
    IDENTITY_BLANK = "identity_blank"
    """The source turn id or agent id is missing, not a string, or blank."""
    IDENTITY_TOO_LONG = "identity_too_long"
    """The source turn id or agent id is over 256 characters."""
    SCOPE_BLANK = "scope_blank"
    """The scope is not a :class:`RetrievalScope`, or its tenant or session is not a non-blank
    string."""
    SCOPE_TOO_LONG = "scope_too_long"
    """The scope's tenant or session is over 256 characters."""
    TEXT_NOT_UTF8 = "text_not_utf8"
    """A string field holds a lone surrogate, so it has no UTF-8 form (and no id)."""
    CONFIDENCE_INVALID = "confidence_invalid"
    """The confidence is not a real number, not finite, or outside ``0.0..1.0``."""
    EXPIRES_AT_INVALID = "expires_at_invalid"
    """``expires_at`` is not a datetime, is naive (no timezone), or has no UTC instant."""
    EXPIRED = "expired"
    """``expires_at`` is not strictly after the store clock's now."""
    UNKNOWN_TENANT = "unknown_tenant"
    """The scope's tenant is not a tenant of the deployment (its tenant directory said no):
    memory is never kept for a tenant nobody can be a principal of."""
    TENANT_UNVERIFIED = "tenant_unverified"
    """The tenant directory could not answer (it raised or returned something but a bool):
    refused, fail-closed."""
    SUPERSEDES_NOT_IN_SCOPE = "supersedes_not_in_scope"
    """``supersedes`` names no other live entry of the candidate's scope. Unknown, expired,
    already superseded and other-scope ids are deliberately not told apart, so a writer cannot
    probe another scope."""
    SCOPE_CAP = "scope_cap"
    """The candidate needs a new scope and its tenant already has 256 live scopes (after
    purging the tenant's expired entries). Other tenants' scopes never count."""
    ENTRY_CAP = "entry_cap"
    """The candidate's scope already holds 1,024 live entries (after purging expired)."""
    AUDIT_FAILED = "audit_failed"
    """Every rule held, but the audit sink raised: the entry was not indexed."""
    UNEXPECTED_ERROR = "unexpected_error"
    """An unexpected exception during admission (e.g. a broken clock): rejected."""


@dataclass(frozen=True)
class RetrievalScope:
    """A complete (tenant, session) pair: the unit of isolation of write-back memory.

    Not validated on construction (a scope inside a candidate may be garbage); the store
    treats a scope whose tenant or session is not a non-blank string of at most 256
    characters as unusable.
    """

    tenant: Any
    session: Any


@dataclass(frozen=True)
class WriteBackCandidate:
    """Content a writer asks the store to remember for one scope.

    Fields are typed ``Any`` on purpose: construction never validates or raises, and
    :meth:`ControlledWriteBackStore.admit <govrag.writeback.store.ControlledWriteBackStore.admit>`
    decides. A well-formed candidate has a :class:`RetrievalScope`, string ids, an
    :class:`AdmissionGate`, string content, a finite ``confidence`` in ``0.0..1.0``, a
    timezone-aware ``expires_at`` and optionally the id of an entry it replaces.
    """

    scope: Any
    source_turn_id: Any
    agent_id: Any
    gate: Any
    content: Any
    confidence: Any
    expires_at: Any
    supersedes: Any = None


@dataclass(frozen=True)
class AdmissionResult:
    """The store's answer to one candidate.

    Attributes:
        admitted: whether the entry is indexed.
        id: the entry's deterministic id when admitted, else ``None``.
        reason: :attr:`AdmissionReason.ADMITTED` or the first broken rule.
    """

    admitted: bool
    id: str | None
    reason: AdmissionReason


@dataclass(frozen=True)
class WriteBackHit:
    """One search hit: an entry of the queried scope with its BM25 score.

    ``metadata`` holds exactly the keys of :data:`META_KEYS`, all with string values.
    """

    id: str
    content: str
    score: float
    metadata: Mapping[str, str]
