"""Events of the second gate: pack validation before synthesis, and the incident a scope
violation raises (written first, so a crash between the two still leaves it on record)."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field

from govrag.audit.events.base import EVENT_KIND, AuditEventBase, Record, Recorded


class SufficiencyRecord(Record):
    """The evidence figures over every chunk of every pack, and the thresholds applied."""

    chunks: int
    #: Best chunk score; ``None`` when no chunk has a finite score.
    top_score: float | None
    #: Share (0..1) of the question's distinct analysed terms found in the evidence.
    query_coverage: float
    min_chunks: int
    min_top_score: float
    min_query_coverage: float
    sufficient: bool
    #: What the question asks for (``count``, ``quantity``, ``time``, ``person``, ``reason``,
    #: ``open``).
    question_kind: str | None = None
    #: Best relevance of an evidence sentence that has what the question asks for
    #: (``None``: no such sentence), the threshold it met or missed, and how relevance was
    #: scored (``embedder:minilm``, ``terms``).
    answer_score: float | None = None
    min_answer_score: float | None = None
    relevance: str | None = None
    #: Chunks validated earlier in the request that answerability read beside these packs
    #: (a workflow's earlier stages: the playbook stage of a contract review is judged with
    #: the clauses the review found, not alone).
    prior_chunks: int = 0


class ValidationEvent(AuditEventBase):
    """Whether the request's packs may be used as evidence (and why not)."""

    kind: Literal["validation"] = Field("validation", exclude=True, validation_alias=EVENT_KIND)
    validation_passed: bool
    scope_violations: int
    abstain: bool
    reason: str | None
    context_pack_ids: tuple[str, ...]
    sufficiency: SufficiencyRecord
    question: Recorded


class ViolationRecord(Record):
    """One chunk that must not have been in front of the model.

    The validation report's ``ScopeViolation`` with ``reason`` as plain text: a log must stay
    readable when a later version adds a reason."""

    context_pack_id: str
    chunk_id: str
    corpus: str
    reason: str


class IncidentEvent(AuditEventBase):
    """A security incident of a request (today: ``scope_violation``)."""

    kind: Literal["incident"] = Field("incident", exclude=True, validation_alias=EVENT_KIND)
    #: What happened; stored as ``kind`` in the payload.
    incident_kind: str = Field(
        validation_alias=AliasChoices("kind", "incident_kind"), serialization_alias="kind"
    )
    violations: tuple[ViolationRecord, ...]
    sub: str
