"""What a replay answers, as typed records: the examiner's six questions, field by field.

:func:`govrag.audit.replay.replay` reads a request's events as their typed models and answers
with these records; the CLI, the HTTP replay answer (``GET /v1/audit/requests/{id}``) and
``--json`` read the same fields. Each is frozen and rejects unknown fields; a defaulted field
is set only where its event had it (a token's expiry, a decision's risk tier, a memory chunk's
write-back metadata) and :meth:`Replay.as_dict` leaves out what is not set, so a replay of a
log written before a field existed reads as it always did (``tests/audit/test_old_logs.py``).
The records of events that replay shows whole (a session's pinned retrieval, an attempted pin
change, an output-schema check, a scope violation) have their own plain copies here, so the
HTTP answer's schema documents every field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from govrag.audit.events import PackRetrieval, Recorded
from govrag.types import HiddenSource, RiskTier, UncheckedChunk, Withheld


class Record(BaseModel):
    """Base of the replay records: immutable, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")


class PinnedRetrieval(Record):
    """A route's retrieval as pinned to the session (its mode and corpus scope)."""

    mode: str = "none"
    scope: tuple[str, ...] = ()


class PinAttempt(Record):
    """What a refused request tried to change its session's pin to."""

    route_id: Recorded = None
    mode: Recorded = None
    scope: Recorded = None


class SchemaOutcome(Record):
    """How a structured answer met its route's output schema."""

    schema_id: str
    sha256: str
    outcome: Literal["valid", "repaired", "invalid"]
    problems: tuple[str, ...] = ()


class ViolationRecord(Record):
    """One chunk of a pack outside the request's scope."""

    context_pack_id: str
    chunk_id: str
    corpus: str
    reason: str


class ReplayWho(Record):
    """Who asked: the caller, its session and the route the session is pinned to."""

    sub: str | None
    session_id: str
    route_id: str | None
    retrieval: PinnedRetrieval | None
    #: When the caller's token expired (only where a token opened the session).
    token_exp: str | None = None


class ProposedCall(Record):
    """A tool call the model proposed: accepted (with its corpus) or refused (its error)."""

    tool: Recorded
    accepted: bool
    arguments: Recorded
    corpus: str | None
    error: Recorded
    calls: int | None


class ProposedRetrieve(Record):
    """A retrieve decided without a model's proposal (a governed search): what was asked."""

    tool: str
    corpus: str
    query: Recorded


class ReplayDecision(Record):
    """One PEP decision: the policy that decided, and its verdict on one resource."""

    audit_id: str
    resource: str
    verdict: str
    reason: str
    policy_version: str
    action: str
    kind: str
    tool: str
    query: Recorded
    #: The tool's risk tier as the PDP saw it (records before the eval plane lack it).
    risk_tier: RiskTier | None = None


class ReplayChunk(Record):
    """One chunk the model saw: its id, document, score and origin (never its text)."""

    chunk_id: str
    doc_id: str
    score: float
    origin: str
    #: A session-memory chunk's write-back metadata.
    writeback: dict[str, str] | None = None


class ReplayMarker(Record):
    """The hidden-item marker of a pack: shown, or withheld past its budget."""

    shown: bool
    reason: str | None
    sources: tuple[HiddenSource, ...]


class ReplayPack(Record):
    """One context pack as the examiner sees it."""

    context_pack_id: str
    corpus: str
    origin: str
    policy_version: str
    ranker_version: str
    #: How the corpus was searched (strategy, as_of, time range); ``None``: not recorded
    #: (session memory, or a record made before it was kept).
    retrieval: PackRetrieval | None = None
    chunks: tuple[ReplayChunk, ...]
    withheld: Withheld | None
    hidden_marker: ReplayMarker | None
    unchecked: tuple[UncheckedChunk, ...]
    validation_passed: bool


class LlmOutcome(Record):
    """How a model call ended: usage and the reply's hash, or its fault."""

    status: str
    fault: str | None
    error: Recorded
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: int
    reply_hash: str | None
    tool_calls: int | None


class ReplayLlmCall(Record):
    """One model call: what was sent (as hashes), and its outcome (``None``: the request
    ended before the call returned)."""

    model_profile: str | None = None
    prompt_id: str | None = None
    prompt_sha256: str | None = None
    stage: str
    step: int
    model: str
    payload_hash: str
    tools: tuple[str, ...]
    result: LlmOutcome | None


class Escalated(Record):
    """The people's queue a failed validation was passed to."""

    queue: str
    reason: str


class CitedMemory(Record):
    """A session-memory chunk the answer cited, with its write-back metadata."""

    chunk_id: str
    writeback: dict[str, str] | None


class Delivered(Record):
    """What was delivered: the answer's hash and citations, or the abstention."""

    response_id: str | None = None
    output_schema: SchemaOutcome | None = None
    escalation: Escalated | None = None
    answer_hash: str
    cited_doc_ids: tuple[str, ...]
    cited_chunk_ids: tuple[str, ...]
    abstained: bool
    reason: str | None
    grounded: bool
    pattern: str
    flagged: bool
    unsupported_claims: int
    cited_memory: tuple[CitedMemory, ...]


class ReplayIncident(Record):
    """A security incident of the request: a scope violation (``violations``) or a refused
    change of its session's pinned route (``kind`` ``pin_violation``)."""

    kind: str
    violations: tuple[ViolationRecord, ...] = ()
    sub: str
    route_id: str | None = None
    pinned: PinnedRetrieval | None = None
    attempted: PinAttempt | None = None


class ReplayError(Record):
    """How a request that failed ended: where, the error's class, and its message."""

    stage: str
    error_type: str
    message: Recorded


class Unrecognised(Record):
    """An event this govrag cannot read as its typed model, as stored, and why."""

    seq: int
    event_id: str
    kind: str
    payload: str
    problem: str


class Replay(Record):
    """One request rebuilt from the audit log alone."""

    request_id: str
    tenant: str
    who: ReplayWho
    #: What was proposed: every tool proposal (accepted or refused), or the retrieves decided.
    proposed: tuple[ProposedCall | ProposedRetrieve, ...]
    #: Which policy decided, and the verdict: one entry per PEP decision.
    decisions: tuple[ReplayDecision, ...]
    #: Every pack was searched only after a committed ALLOW that precedes it in the chain.
    verdict_before_search: bool
    #: What the model saw: the packs, the chunks no source checked, whether validation passed.
    model_saw: tuple[ReplayPack, ...]
    #: The model calls (payload hashes, never the text), each with its outcome.
    llm_calls: tuple[ReplayLlmCall, ...]
    delivered: Delivered | None
    chain_ok: bool
    incidents: tuple[ReplayIncident, ...]
    error: ReplayError | None
    #: Events left out of the answers above (see :class:`Unrecognised`).
    unrecognised: tuple[Unrecognised, ...]

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``govrag replay --json`` and of the HTTP replay answer: what is
        set (see the module docstring)."""
        out: dict[str, Any] = self.model_dump(mode="json", exclude_unset=True)
        return out
