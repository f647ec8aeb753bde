"""A governed retrieve: a session on a route, then one PEP-gated call per corpus.

This is what ``govrag search`` runs (and what the HTTP and MCP ``retrieve_documents`` tools
will run): the caller proposes a query over some corpora; each corpus is its own proposal,
its own PEP decision and audit record, and, only after a committed ALLOW, its own gateway
search. A DENY yields no results for that corpus and says why, never whether matching
documents exist. Results of the ALLOWed corpora are merged by score.

A request over the route's scope may also get the caller's session memory (the write-back
overlay): once per request, as its own pack labelled with no corpus, after the corpus packs
and only when one of them was ALLOWed (:meth:`GovernedSearch.memory`).

Then the app's second gate runs: validation (scope, sufficiency, attribution) of the packs
against the question and the pinned route. Its report travels with the result; a pack with a
scope violation is never handed out (the violation is audited as an incident).

Once the session is open, the request runs inside :meth:`GovernedSearch.trail`: if anything
fails after that (a search, validation), an ``error`` event closes its audit trail before the
error propagates. :meth:`GovernedSearch.run_tool` is the same PEP gate for proposals that do
not search (listing a corpus, describing a document, a tool of kind ``other``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from govrag.audit.trail import closing_trail
from govrag.errors import InputError, NotFoundError, describe_validation
from govrag.policy.pep import Enforced, PolicyEnforcementPoint, Proposal
from govrag.routes.models import Route
from govrag.routes.session import Session, Sessions
from govrag.types import (
    ContextPack,
    HiddenMarker,
    MetadataFilter,
    PackChunk,
    Principal,
    RiskTier,
    SearchRequest,
    Strategy,
    TimeRange,
)
from govrag.validation import ValidationReport, Validator

T = TypeVar("T")

#: The tool a caller-made retrieve stands for; its ``pdp_action`` comes from the route's
#: manifest when the manifest lists it.
RETRIEVE_TOOL = "retrieve_documents"


@dataclass(frozen=True)
class CorpusDecision:
    """The PEP's decision on one proposal's resource, as the caller may see it."""

    audit_id: str | None
    #: The corpus decided on (for a tool of kind ``other``: the tool's name).
    corpus: str
    verdict: str
    policy_version: str
    reason: str
    #: The proposed tool's kind (``retrieve``, ``list``, ``metadata``, ``other``).
    kind: str = "retrieve"
    #: Its ``pdp_action``.
    action: str = RETRIEVE_TOOL


@dataclass(frozen=True)
class GovernedResult:
    request_id: str
    session_id: str
    route_id: str
    query: str
    strategy: Strategy
    #: One validated-to-be context pack per ALLOWed corpus, in the caller's corpus order, then
    #: the request's session-memory pack when the overlay joined.
    packs: tuple[ContextPack, ...]
    #: Every pack's chunks, merged by score (the flat list earlier versions returned).
    results: tuple[PackChunk, ...]
    hidden: HiddenMarker
    decisions: tuple[CorpusDecision, ...]
    validation: ValidationReport
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``govrag search --json``."""
        return {
            "request_id": self.request_id,
            "session_id": self.session_id,
            "route_id": self.route_id,
            "query": self.query,
            "strategy": self.strategy.value,
            "packs": [p.model_dump(mode="json") for p in self.packs],
            "results": [h.model_dump(mode="json") for h in self.results],
            "hidden": self.hidden.model_dump(mode="json"),
            "truncated": self.truncated,
            "decisions": [asdict(d) for d in self.decisions],
            "validation": self.validation.as_dict(),
        }


class GovernedSearch:
    """Runs caller-proposed retrieves of one deployment through sessions and the PEP."""

    def __init__(
        self,
        sessions: Sessions,
        pep: PolicyEnforcementPoint,
        validator: Validator | None = None,
    ) -> None:
        self.sessions = sessions
        self.pep = pep
        self.validator = validator or Validator()

    def session(
        self,
        principal: Principal,
        *,
        request_id: str,
        route_id: str | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Resume ``session_id`` (its route is pinned: naming another is refused and
        audited), or open a session on ``route_id`` (default: the deployment's)."""
        if session_id is None:
            return self.sessions.open(principal, route_id=route_id, request_id=request_id)
        session = self.sessions.resume(principal, session_id)
        if route_id is not None and route_id != session.route_id:
            self.sessions.change(session, request_id=request_id, route_id=route_id)
        return session

    def search(
        self,
        principal: Principal,
        query: str,
        *,
        corpora: tuple[str, ...] | None = None,
        route_id: str | None = None,
        session_id: str | None = None,
        strategy: Strategy = Strategy.HYBRID,
        top_k: int = 10,
        filters: tuple[MetadataFilter, ...] = (),
        as_of: datetime | None = None,
        time_range: TimeRange | None = None,
        min_score: float = 0.0,
    ) -> GovernedResult:
        """One governed retrieve per corpus (default: every corpus in the route's scope)."""
        try:
            # Corpora the caller names are named sources (the write-back overlay stays out).
            request = SearchRequest(query=query, strategy=strategy, top_k=top_k, filters=filters,
                                    corpora=corpora, as_of=as_of, time_range=time_range,
                                    min_score=min_score)  # fmt: skip
        except ValidationError as exc:
            raise InputError(describe_validation(exc)) from exc
        request_id = f"req-{secrets.token_hex(8)}"
        session = self.session(
            principal, request_id=request_id, route_id=route_id, session_id=session_id
        )
        with self.trail(principal, session, request_id) as where:
            action, tier = self.retrieve_action(self.route_of(session))
            targets = corpora if corpora is not None else session.retrieval.scope
            proposals = [
                Proposal(
                    tool=RETRIEVE_TOOL, action=action, corpus=corpus, query=query, risk_tier=tier
                )
                for corpus in dict.fromkeys(targets)
            ]  # each once, in the caller's order
            return self.run(principal, session, request, proposals, request_id, where)

    def run(
        self,
        principal: Principal,
        session: Session,
        request: SearchRequest,
        proposals: Sequence[Proposal],
        request_id: str,
        where: dict[str, str],
    ) -> GovernedResult:
        """Inside a request's trail (``where`` is its stage): each proposal PEP-gated and
        searched after its ALLOW, the session memory when eligible, then the validation gate
        over the packs, merged into the caller's result."""
        where["stage"] = "retrieve"
        done = [self.retrieve(principal, session, p, request, request_id) for p in proposals]
        packs = [p for _, p in done if p is not None]
        memory = self.memory(principal, session, request, done, request_id)
        if memory is not None:
            packs.append(memory)
        where["stage"] = "validation"
        decisions = [d for d, _ in done]
        # The packs go to the caller, not to govrag's synthesis: answerability by terms.
        report, packs = self.validate(principal, request.query, packs, session, decisions,
                                      request_id, before_synthesis=False)  # fmt: skip
        return _merge(request, request_id, session, decisions, packs, report,
                      self.pep.markers.max_contacts)  # fmt: skip

    def trail(
        self, principal: Principal, session: Session, request_id: str
    ) -> AbstractContextManager[dict[str, str]]:
        """The request's boundary once its session is open: a failure inside is recorded as
        an ``error`` event before it propagates (:func:`govrag.audit.trail.closing_trail`)."""
        return closing_trail(self.sessions.store, principal.tenant, request_id=request_id,
                             session_id=session.session_id)  # fmt: skip

    def retrieve_action(self, route: Route) -> tuple[str, RiskTier]:
        """The PDP action and risk tier of the route's ``retrieve_documents`` tool (its own
        name and ``low`` when the route's manifest does not list it): a search the app makes
        for the caller (a prefetch, ``govrag search``) is decided as that tool's call, so a
        policy on the tool's tier holds on every path."""
        manifest = self.sessions.config.manifests.get(route.tool_manifest)
        tool = manifest.tool(RETRIEVE_TOOL) if manifest else None
        return (tool.pdp_action, tool.risk_tier) if tool else (RETRIEVE_TOOL, "low")

    def route_of(self, session: Session) -> Route:
        """The session's route row; a clear error when it was withdrawn since."""
        route = self.sessions.config.routes.get(session.route_id)
        if route is None:
            raise NotFoundError(
                f"route {session.route_id!r} of session {session.session_id!r} is no longer "
                "in the route table; open a new session"
            )
        return route

    def retrieve(
        self,
        principal: Principal,
        session: Session,
        proposal: Proposal,
        request: SearchRequest | Callable[[], SearchRequest],
        request_id: str,
    ) -> tuple[CorpusDecision, ContextPack | None]:
        """One PEP-gated retrieve of ``proposal.corpus`` on the session's pinned route;
        ``request`` may be made only after the ALLOW (see
        :meth:`~govrag.policy.pep.PolicyEnforcementPoint.retrieve`)."""
        route = self.route_of(session)
        enforced = self.pep.retrieve(
            principal,
            session.retrieval,
            proposal,
            request,
            route_id=session.route_id,
            request_id=request_id,
            session_id=session.session_id,
            policy_profile=route.policy_profile,
        )
        return _decision(proposal, enforced), enforced.result

    def run_tool(
        self,
        principal: Principal,
        session: Session,
        proposal: Proposal,
        downstream: Callable[[], T],
        request_id: str,
    ) -> tuple[CorpusDecision, T | None]:
        """One PEP-gated proposal of a tool that does not search (``list_corpora`` on one
        corpus, ``get_document_metadata``, a tool of kind ``other``): ``downstream`` runs
        only after a committed ALLOW."""
        route = self.route_of(session)
        enforced = self.pep.enforce(
            principal,
            session.retrieval,
            proposal,
            lambda _decision: downstream(),
            route_id=session.route_id,
            request_id=request_id,
            session_id=session.session_id,
            policy_profile=route.policy_profile,
        )
        return _decision(proposal, enforced), enforced.result

    def memory(
        self,
        principal: Principal,
        session: Session,
        request: SearchRequest,
        done: Sequence[tuple[CorpusDecision, ContextPack | None]],
        request_id: str,
    ) -> ContextPack | None:
        """The request's session-memory pack, after its corpus retrieves ``done``: only when
        one of them was ALLOWed (memory joins a retrieval, never replaces one), and only if
        the gateway finds ``request`` eligible (route scope, keyword, no expansion). The PEP
        keeps it to one per request."""
        allowed = next((d for d, p in done if p is not None and d.audit_id is not None), None)
        if allowed is None or allowed.audit_id is None:
            return None
        return self.pep.memory(
            principal,
            request,
            pep_audit_id=allowed.audit_id,
            policy_version=allowed.policy_version,
            packs=[p for _, p in done if p is not None],
            request_id=request_id,
            session_id=session.session_id,
        )

    def validate(
        self,
        principal: Principal,
        question: str,
        packs: Sequence[ContextPack],
        session: Session,
        decisions: Sequence[CorpusDecision],
        request_id: str,
        *,
        before_synthesis: bool = True,
        prior: Sequence[str] = (),
    ) -> tuple[ValidationReport, list[ContextPack]]:
        """The validation gate over ``packs``: the corpora ALLOWed in ``decisions`` are the
        caller's entitlements, the session's pinned scope the route's. Returns the report
        and the packs as they may be handed out: after a scope violation, none of their
        chunks (the incident is on record). ``before_synthesis`` and ``prior``: see
        :meth:`~govrag.validation.Validator.validate`."""
        report = self.validator.validate(
            principal,
            question,
            packs,
            scope=session.retrieval.scope,
            allowed_corpora=[d.corpus for d in decisions if d.verdict == "ALLOW"],
            request_id=request_id,
            session_id=session.session_id,
            before_synthesis=before_synthesis,
            prior=prior,
        )
        if report.scope_violation_count:
            return report, [p.model_copy(update={"chunks": ()}) for p in packs]
        return report, list(packs)


def _decision(proposal: Proposal, enforced: Enforced[Any]) -> CorpusDecision:
    return CorpusDecision(
        audit_id=enforced.audit_id,
        corpus=proposal.resource,
        verdict=enforced.decision.verdict,
        policy_version=enforced.decision.policy_version,
        reason=enforced.decision.reason,
        kind=proposal.kind,
        action=proposal.action,
    )


def _merge(
    request: SearchRequest,
    request_id: str,
    session: Session,
    decisions: list[CorpusDecision],
    packs: list[ContextPack],
    report: ValidationReport,
    limit: int,
) -> GovernedResult:
    # One tenant's lexical index scores every corpus alike, and fused scores are rank-based,
    # so per-corpus lists merge by score; ties keep the corpus order.
    hits = sorted((c for p in packs for c in p.chunks), key=lambda c: -c.score)
    return GovernedResult(
        request_id=request_id,
        session_id=session.session_id,
        route_id=session.route_id,
        query=request.query,
        strategy=request.strategy,
        packs=tuple(packs),
        results=tuple(hits[: request.top_k]),
        hidden=merged_hidden(packs, limit),
        decisions=tuple(decisions),
        validation=report,
        truncated=any(p.search_truncated for p in packs),
    )


def merged_hidden(packs: Sequence[ContextPack], limit: int) -> HiddenMarker:
    """One request's hidden-item marker: present if any pack's is, each source once, at most
    ``limit`` of them for the whole request (the first by source system and email): however
    many corpora it searched, a request names a bounded set of contacts."""
    sources = sorted({s for p in packs for s in p.hidden.sources},
                     key=lambda s: (s.source_system, s.author_email or ""))  # fmt: skip
    return HiddenMarker(present=any(p.hidden.present for p in packs),
                        sources=tuple(sources[:limit]))  # fmt: skip
