"""Events of a request's frame: the session it runs in, and how it ended.

``route_pinned`` is written by the store in the transaction that creates the session row (so
no session exists without its audit record; see ``govrag.store.sessions``); the others by the
session manager, the orchestrator and :func:`govrag.audit.trail.closing_trail`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from govrag.audit.events.base import EVENT_KIND, AuditEventBase, Record, Recorded


class PinnedRetrieval(Record):
    """A route's retrieval as pinned to a session (``Retrieval`` of the route table)."""

    mode: str = "none"
    scope: tuple[str, ...] = ()


class RoutePinned(AuditEventBase):
    """A session was opened and its route's retrieval pinned."""

    kind: Literal["route_pinned"] = Field("route_pinned", exclude=True, validation_alias=EVENT_KIND)
    sub: str
    route_id: str
    retrieval: PinnedRetrieval
    route_table_version: str
    #: When the caller's token expires (ISO 8601, UTC): the session ends then. Absent for a
    #: caller without a token (the CLI's local principals).
    token_exp: str | None = None


class PinAttempt(Record):
    """What a refused change of a pinned session asked for (only what it named). The values
    are the caller's, recorded bounded and whatever their type: the attempt is refused and on
    record however malformed it was."""

    route_id: Recorded = None
    mode: Recorded = None
    scope: Recorded = None


class PinViolationEvent(AuditEventBase):
    """An attempt to change a session's pinned route, mode or scope (always refused)."""

    kind: Literal["pin_violation"] = Field(
        "pin_violation", exclude=True, validation_alias=EVENT_KIND
    )
    sub: str
    route_id: str
    pinned: PinnedRetrieval
    attempted: PinAttempt


class RemovedClaim(Record):
    """A sentence the claim check removed from an answer (the sentence only as its hash)."""

    sentence_sha256: str
    reason: str
    unknown: tuple[str, ...]
    missing: tuple[str, ...]


class SchemaOutcome(Record):
    """How a structured answer met its route's output schema (``output_schema_id``)."""

    schema_id: str
    #: SHA-256 of the schema's canonical JSON: the version the answer was checked against.
    sha256: str
    #: ``valid`` (first reply), ``repaired`` (after the one repair), ``invalid`` (abstained).
    outcome: Literal["valid", "repaired", "invalid"]
    #: Where the reply missed the schema and which rule: never the model's words.
    problems: tuple[str, ...] = ()


class ResponseEvent(AuditEventBase):
    """What was delivered: the answer's hash and citations, or the abstention."""

    kind: Literal["response"] = Field("response", exclude=True, validation_alias=EVENT_KIND)
    sub: str
    route_id: str
    answer_hash: str
    cited_doc_ids: tuple[str, ...]
    cited_chunk_ids: tuple[str, ...]
    abstained: bool
    reason: str | None
    grounded: bool
    #: The route's pattern: ``"0"`` .. ``"3"``.
    pattern: str
    unsupported_claims: int
    flagged: bool
    truncated: bool = False
    #: The fault class of a model call that failed (the answer is then an abstention).
    llm_fault: str | None = None
    removed_claims: tuple[RemovedClaim, ...] = ()
    #: Hash of the model's own reply (differs from ``answer_hash`` when it was replaced).
    reply_hash: str | None = None
    #: The delivered answer's id (``resp-...``; ``None``: a record made before it was kept).
    response_id: str | None = None
    #: The output schema's check (``None``: the route has none, or a record made before).
    output_schema: SchemaOutcome | None = None


class EscalationEvent(AuditEventBase):
    """A failed validation passed to people (the route's ``on_validation_failure:
    escalate``): which failure, and which queue holds it."""

    kind: Literal["escalation"] = Field("escalation", exclude=True, validation_alias=EVENT_KIND)
    sub: str
    route_id: str
    #: The validation failure (``unsupported``, ``scope_violation``, ``thin_evidence``, ...).
    reason: str
    queue: str
    response_id: str


class ErrorEvent(AuditEventBase):
    """How a request that failed ended: where, the error's class, and (for govrag's own
    errors) its bounded message."""

    kind: Literal["error"] = Field("error", exclude=True, validation_alias=EVENT_KIND)
    stage: str
    error_type: str
    message: Recorded
