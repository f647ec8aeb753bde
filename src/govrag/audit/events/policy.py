"""Events of the policy gate and what passed it: the PEP's decisions, the context packs
searched after an ALLOW, and the hidden-item markers shown (or withheld) with them.

The builders (:meth:`PepDecisionEvent.of`, :meth:`ContextPackEvent.of`) take the values the
PEP holds, so the record of a decision or a pack is defined here, next to its schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field

from govrag.audit.events.base import EVENT_KIND, AuditEventBase, Record, Recorded
from govrag.types import (
    ContextPack,
    HiddenSource,
    RightsCheckSummary,
    RiskTier,
    SearchRequest,
    UncheckedChunk,
    Withheld,
)


class PepDecisionEvent(AuditEventBase):
    """One PEP decision, committed before anything downstream runs."""

    kind: Literal["pep_decision"] = Field("pep_decision", exclude=True, validation_alias=EVENT_KIND)
    verdict: Literal["ALLOW", "DENY"]
    reason: str
    policy_version: str
    #: The corpus, or the tool's name for a tool of kind ``other``.
    resource: str
    resource_type: Literal["corpus", "tool"]
    action: str
    #: The proposal's tool kind (``retrieve``, ``list``, ``metadata``, ``other``); stored as
    #: ``kind`` in the payload.
    proposal_kind: str = Field(
        validation_alias=AliasChoices("kind", "proposal_kind"), serialization_alias="kind"
    )
    tool: str
    #: The tool's risk tier as the PDP saw it (``None``: a record made before it was kept).
    risk_tier: RiskTier | None = None
    query: Recorded
    sub: str
    route_id: str
    #: Always false: the record is committed before the downstream call.
    downstream_called: bool


class PackProposal(Record):
    """The retrieve a pack answers (``None`` for a session-memory pack)."""

    tool: str
    corpus: str | None
    query: Recorded


class PackRetrieval(Record):
    """How a pack's corpus was searched: the strategy and the time it was asked about (a
    record made before these were kept has none)."""

    strategy: str
    #: ``as_of``, ISO 8601 (``None``: now).
    as_of: str | None = None
    #: A time range's field and bounds, ISO 8601.
    time_range: dict[str, str] | None = None

    @classmethod
    def of(cls, request: SearchRequest) -> PackRetrieval:
        """What ``request`` asked for; a time it did not name is left out of the record."""
        given: dict[str, object] = {"strategy": request.strategy.value}
        if request.as_of is not None:
            given["as_of"] = request.as_of.isoformat()
        window = request.time_range
        if window is not None:
            given["time_range"] = {"field": window.field} | {
                k: v.isoformat() for k, v in (("start", window.start), ("end", window.end))
                if v is not None}  # fmt: skip
        return cls.model_validate(given)


class PackSource(Record):
    """One packed chunk: where it came from and its score (never its text)."""

    doc_id: str
    chunk_id: str
    source_system: str
    score: float
    origin: str = "source"
    #: A session-memory entry's seed metadata (written only for memory).
    writeback: dict[str, str] | None = None


class ContextPackEvent(AuditEventBase):
    """A context pack, recorded before it may reach validation and the model."""

    kind: Literal["context_pack"] = Field("context_pack", exclude=True, validation_alias=EVENT_KIND)
    context_pack_id: str
    corpus: str
    origin: str = "source"
    retrieve_proposal: PackProposal | None
    #: How it was searched (written since the temporal and graph strategies; ``None``: a
    #: session-memory pack, or a record made before).
    retrieval: PackRetrieval | None = None
    pep_verdict: str
    #: The committed ALLOW this pack was searched after.
    pep_audit_id: str | None
    policy_version: str
    ranker_version: str
    sources: tuple[PackSource, ...]
    unchecked: tuple[UncheckedChunk, ...] = ()
    pack_token_count: int
    token_budget: int
    dropped_for_budget: int
    withheld: Withheld | None = None
    rights_checks: tuple[RightsCheckSummary, ...] = ()
    source_unavailable: tuple[str, ...] = ()
    cache_hit: bool = False
    hidden: bool = False

    @classmethod
    def of(
        cls,
        pack: ContextPack,
        proposal: PackProposal | None,
        *,
        pep_verdict: str,
        pep_audit_id: str | None,
        retrieval: PackRetrieval | None = None,
    ) -> ContextPackEvent:
        """The record of ``pack``: its sources (ids, scores, origins, memory metadata), the
        chunks no source confirmed, its budget and rights-check figures."""
        sources = tuple(
            PackSource(doc_id=c.doc_id, chunk_id=c.chunk_id, source_system=c.source_system,
                       score=c.score, origin=c.origin.value)
            if c.writeback is None
            else PackSource(doc_id=c.doc_id, chunk_id=c.chunk_id, source_system=c.source_system,
                            score=c.score, origin=c.origin.value, writeback=dict(c.writeback))
            for c in pack.chunks
        )  # fmt: skip
        # Only when known: a payload without the field stays as it was written before.
        extra = {} if retrieval is None else {"retrieval": retrieval}
        return cls(
            **extra,
            context_pack_id=pack.context_pack_id,
            corpus=pack.corpus,
            origin=pack.origin.value,
            retrieve_proposal=proposal,
            pep_verdict=pep_verdict,
            pep_audit_id=pep_audit_id,
            policy_version=pack.policy_version,
            ranker_version=pack.ranker_version,
            sources=sources,
            unchecked=pack.unchecked,
            pack_token_count=pack.pack_token_count,
            token_budget=pack.token_budget,
            dropped_for_budget=pack.dropped_for_budget,
            withheld=pack.withheld,
            rights_checks=pack.rights_checks,
            source_unavailable=tuple(
                c.source_system for c in pack.rights_checks if c.status == "source_unavailable"
            ),
            cache_hit=pack.cache_hit,
            hidden=pack.hidden.present,
        )


class HiddenMarkerEvent(AuditEventBase):
    """A hidden-item marker shown with a pack, or withheld (``reason``: the budget)."""

    kind: Literal["hidden_marker"] = Field(
        "hidden_marker", exclude=True, validation_alias=EVENT_KIND
    )
    sub: str
    corpus: str
    context_pack_id: str
    shown: bool
    reason: str | None
    sources: tuple[HiddenSource, ...]
    budget: int
    #: Markers used in the window (``None`` when the budget could not be counted).
    used: int | None
