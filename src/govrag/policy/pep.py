"""The policy enforcement point: decide, commit the audit record, then (only on ALLOW) run.

One operation, so no caller can search, list or run a tool without a committed ALLOW
(DESIGN.md invariants 2 and 7). Every proposal goes through it, whatever its tool's kind:
a retrieve (downstream: the gateway), ``list_corpora`` (one decision per corpus it would
describe), ``get_document_metadata`` (the document's corpus) and any other tool (the tool
itself is the resource), each with its manifest ``pdp_action``:

1. A corpus must be in the session's pinned route scope and held by the caller's tenant
   (a corpus is per tenant; ``[corpora.<id>] tenants`` may keep an id to some tenants);
   otherwise DENY (``out_of_scope``, the same for an id no tenant has) without asking the PDP.
2. Otherwise the Cedar PDP decides the SARAC request built from the verified claims and the
   deployment's facts about the corpus: the caller's tenant's corpus of that id (the tenant
   rule still guards a bundle's own resources) and its classification.
3. The decision is committed to the audit log (``audit_id``, ``verdict``, ``policy_version``,
   ``resource``, ``downstream_called: false``) before anything else happens. If that write
   fails, the result is DENY and nothing runs.
4. On ALLOW, and only then, the downstream call runs.

A request's session memory (the write-back overlay, seed 001) is no corpus and gets no
decision of its own: :meth:`PolicyEnforcementPoint.memory` reads it once per request, only
after a committed ALLOW of that request, and records its pack like any other.

Every fault on this path (bad input, PDP error, audit failure) is a DENY, never an exception
that a caller might mistake for "no decision". A DENY carries a reason, never whether
matching documents exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from pydantic import ValidationError

from govrag.audit.events import (
    ContextPackEvent,
    PackProposal,
    PackRetrieval,
    PepDecisionEvent,
    events_of,
    write,
)
from govrag.audit.trail import recorded
from govrag.errors import GovragError, describe_validation
from govrag.gateway import ContextPack, Gateway
from govrag.policy.marker import MarkerGate
from govrag.policy.pdp import CedarPDP
from govrag.policy.sarac import Decision, SaracRequest
from govrag.store.protocol import RequestLog
from govrag.types import (
    ChunkOrigin,
    Classification,
    CorpusTenancy,
    Principal,
    Retrieval,
    RiskTier,
    SearchRequest,
    ToolKind,
)

log = logging.getLogger("govrag.policy")
T = TypeVar("T")

#: ``policy_version`` of decisions made without the PDP (out of scope, invalid input).
NO_POLICY = "none"


@dataclass(frozen=True)
class Proposal:
    """One proposed tool call, already checked against the manifest: one resource."""

    tool: str
    #: The tool's ``pdp_action`` (``retrieve_documents``, ``policy_search``, ...).
    action: str
    #: The corpus it touches; ``None`` for a tool of kind ``other`` (the tool is the resource).
    corpus: str | None
    query: str = ""
    kind: ToolKind = "retrieve"
    #: The tool's manifest ``risk_tier`` (govrag's own prefetch and search: ``low``).
    risk_tier: RiskTier = "low"

    @property
    def resource(self) -> str:
        """What the decision is about: the corpus, or the tool's name."""
        return self.tool if self.kind == "other" else str(self.corpus)


@dataclass(frozen=True)
class Enforced(Generic[T]):
    decision: Decision
    #: The committed audit record's id; ``None`` only when the audit write itself failed.
    audit_id: str | None
    #: The downstream result; ``None`` unless ALLOWed.
    result: T | None = None


class PolicyEnforcementPoint:
    """Gates every retrieve of a deployment.

    ``pdp`` is one PDP, or PDPs by policy profile (a bundle's name and each profile it
    serves); ``default_profile`` decides for routes that name none. A profile without a PDP
    is a DENY (``policy_error``), never a fallback to another bundle.
    """

    def __init__(
        self,
        pdp: CedarPDP | Mapping[str, CedarPDP],
        audit: RequestLog,
        *,
        markers: MarkerGate,
        gateway: Gateway | None = None,
        default_profile: str | None = None,
        corpus_classification: Mapping[str, Classification] | None = None,
        tenancy: CorpusTenancy | None = None,
    ) -> None:
        """``tenancy`` says which tenants hold each corpus id (default: every tenant)."""
        self.pdps = {pdp.bundle.name: pdp} if isinstance(pdp, CedarPDP) else dict(pdp)
        self.default_profile = default_profile or next(iter(self.pdps), "")
        self.audit = audit
        self.gateway = gateway
        self.corpus_classification = dict(corpus_classification or {})
        #: Audits each hidden-item marker a pack would carry and applies the budget.
        self.markers = markers
        self.tenancy = tenancy or CorpusTenancy()

    def retrieve(
        self,
        principal: Principal,
        retrieval: Retrieval,
        proposal: Proposal,
        request: SearchRequest | Callable[[], SearchRequest],
        *,
        route_id: str,
        request_id: str,
        session_id: str,
        policy_profile: str | None = None,
    ) -> Enforced[ContextPack]:
        """:meth:`enforce` with the gateway's pipeline for ``proposal.corpus`` downstream,
        then the hidden-item marker's gate (audited, within the caller's budget) and the
        pack's audit record (``context_pack``). A pack that cannot be recorded is not
        delivered: the result is DENY ``policy_error``, as for the decision itself.

        ``request`` may be a function that makes it: it is called only after a committed
        ALLOW, so work that serves only the search (a workflow's model call formulating the
        query) is never spent on a corpus the caller may not search."""
        gateway = self.gateway
        if gateway is None:
            raise GovragError("this PolicyEnforcementPoint has no gateway to forward to")
        corpus = proposal.corpus
        if proposal.kind != "retrieve" or corpus is None:
            raise GovragError(f"proposal of tool {proposal.tool!r} is not a corpus retrieve")
        made: list[SearchRequest] = []

        def searched() -> SearchRequest:
            made.append(request if isinstance(request, SearchRequest) else request())
            return made[-1]

        done = self.enforce(
            principal,
            retrieval,
            proposal,
            lambda decision: gateway.retrieve(
                principal,
                corpus,
                searched(),
                policy_version=decision.policy_version,
                session_id=session_id,
            ),
            route_id=route_id,
            request_id=request_id,
            session_id=session_id,
            policy_profile=policy_profile,
        )
        pack = done.result
        if pack is None:
            return done
        hidden = self.markers.admit(principal, pack, request_id=request_id, session_id=session_id)
        if hidden != pack.hidden:
            pack = pack.model_copy(update={"hidden": hidden})
        # The pack records the query that was searched: a factory's query (a workflow's
        # formulated one) is known only now; the decision recorded what the PDP was asked.
        if made and made[-1].query != proposal.query:
            proposal = replace(proposal, query=made[-1].query)
        searched_with = PackRetrieval.of(made[-1]) if made else None
        problem = self._record_pack(principal, pack, proposal, done, request_id, session_id,
                                    searched_with)  # fmt: skip
        if problem is not None:
            failed = Decision("DENY", "policy_error", done.decision.policy_version,
                              f"the context pack could not be recorded: {problem}")  # fmt: skip
            return Enforced(failed, done.audit_id)
        return Enforced(done.decision, done.audit_id, pack)

    def memory(
        self,
        principal: Principal,
        request: SearchRequest,
        *,
        pep_audit_id: str,
        policy_version: str,
        packs: Sequence[ContextPack],
        request_id: str,
        session_id: str,
    ) -> ContextPack | None:
        """The request's session-memory pack, recorded (``context_pack``, every chunk in
        ``unchecked``) before it is returned; ``None`` when the overlay does not join, holds
        nothing for the request, fails, or the record cannot be written.

        Call it after the request's corpus retrieves, with the committed ALLOW
        (``pep_audit_id``, ``policy_version``) of one of them: memory is read only by a
        request that was allowed to retrieve, and ``packs`` (the request's corpus packs) let
        it drop entries that repeat a packed chunk. A request gets at most one memory pack:
        once its audit trail holds one, a further call returns ``None``."""
        gateway = self.gateway
        if gateway is None:
            raise GovragError("this PolicyEnforcementPoint has no gateway to forward to")
        if not gateway.joins(request, session_id):
            return None  # decided before any read: most requests never involve memory
        try:
            if _has_memory(self.audit, principal.tenant, request_id):
                return None
            pack = gateway.memory(
                principal,
                request,
                policy_version=policy_version,
                session_id=session_id,
                packed=[c for p in packs for c in p.chunks],
            )
        except Exception as exc:  # memory is optional evidence: without it, none is shown
            log.error("session memory failed for %s (request %s): %s: %s", principal.sub,
                      request_id, type(exc).__name__, exc)  # fmt: skip
            return None
        if pack is None:
            return None
        allowed = Decision("ALLOW", "allowed", policy_version)
        joined: Enforced[ContextPack] = Enforced(allowed, pep_audit_id)
        if self._record_pack(principal, pack, None, joined, request_id, session_id):
            return None
        return pack

    def _record_pack(
        self,
        principal: Principal,
        pack: ContextPack,
        proposal: Proposal | None,
        done: Enforced[ContextPack],
        request_id: str,
        session_id: str,
        retrieval: PackRetrieval | None = None,
    ) -> str | None:
        """Commit the pack's ``context_pack`` record; the failure's text when it could not
        be (an unrecorded pack never reaches the model)."""
        try:
            write(self.audit, principal.tenant, pack_event(pack, proposal, done, retrieval),
                  request_id=request_id, session_id=session_id)  # fmt: skip
        except Exception as exc:
            log.error("audit write failed, withholding pack %s of %s: %s",
                      pack.context_pack_id, principal.sub, exc)  # fmt: skip
            return str(exc) or type(exc).__name__
        return None

    def enforce(
        self,
        principal: Principal,
        retrieval: Retrieval,
        proposal: Proposal,
        downstream: Callable[[Decision], T],
        *,
        route_id: str,
        request_id: str,
        session_id: str,
        policy_profile: str | None = None,
    ) -> Enforced[T]:
        """Decide, commit the decision, and run ``downstream(decision)`` only after a
        committed ALLOW. Whatever ``downstream`` runs (a search, a listing, a tool), this is
        the only way to it."""
        decision = self._decide(principal, retrieval, proposal, route_id, policy_profile)
        try:  # no committed record (or none could be made): nothing may be searched
            record = PepDecisionEvent(
                verdict=decision.verdict,
                reason=decision.reason,
                policy_version=decision.policy_version,
                resource=proposal.resource,
                resource_type="tool" if proposal.kind == "other" else "corpus",
                action=proposal.action,
                proposal_kind=proposal.kind,
                tool=proposal.tool,
                risk_tier=proposal.risk_tier,
                query=recorded(proposal.query),
                sub=principal.sub,
                route_id=route_id,
                downstream_called=False,
            )
            event = write(self.audit, principal.tenant, record, request_id=request_id,
                          session_id=session_id)  # fmt: skip
        except Exception as exc:  # no committed record: nothing may be searched
            log.error("audit write failed, denying %s on %s: %s", principal.sub,
                      proposal.resource, exc)  # fmt: skip
            failed = Decision("DENY", "policy_error", decision.policy_version,
                              f"the decision could not be recorded: {exc}")  # fmt: skip
            return Enforced(failed, None)
        if not decision.allowed:
            return Enforced(decision, event.event_id)
        return Enforced(decision, event.event_id, downstream(decision))

    def _decide(
        self,
        principal: Principal,
        retrieval: Retrieval,
        proposal: Proposal,
        route_id: str,
        policy_profile: str | None = None,
    ) -> Decision:
        try:
            corpus = proposal.corpus
            resource: dict[str, object]
            if proposal.kind == "other":
                # A tool that touches no corpus: the manifest offering it is its scope.
                resource = {"type": "tool", "id": proposal.tool, "tenant": principal.tenant}
            elif (
                retrieval.mode == "none"
                or corpus is None
                or corpus not in retrieval.scope
                or not self.tenancy.holds(principal.tenant, corpus)
            ):
                return Decision(
                    "DENY",
                    "out_of_scope",
                    NO_POLICY,
                    f"corpus {corpus!r} is not in the scope of route {route_id!r}",
                )
            else:
                resource = {
                    "type": "corpus",
                    "id": corpus,
                    # The caller's tenant's corpus of this id: a corpus is per tenant.
                    "tenant": principal.tenant,
                    "classification": self.corpus_classification.get(corpus, Classification.PUBLIC),
                }
            profile = policy_profile or self.default_profile
            pdp = self.pdps.get(profile)
            if pdp is None:
                return Decision("DENY", "policy_error", NO_POLICY,
                                f"no policy bundle serves profile {profile!r}")  # fmt: skip
            request = SaracRequest.model_validate(
                {
                    "subject": {
                        "sub": principal.sub,
                        "tenant": principal.tenant,
                        "roles": principal.roles,
                        "doc_entitlements": principal.doc_entitlements,
                        "clearance": principal.clearance,
                    },
                    "action": proposal.action,
                    "kind": proposal.kind,
                    "resource": resource,
                    "context": {
                        "query": proposal.query,
                        "classification_ceiling": principal.clearance,
                        "route_id": route_id,
                        "risk_tier": proposal.risk_tier,
                    },
                }
            )
        except ValidationError as exc:
            return Decision("DENY", "policy_error", NO_POLICY,
                            f"malformed request: {describe_validation(exc)}")  # fmt: skip
        except Exception as exc:  # any fault is DENY
            return Decision("DENY", "policy_error", NO_POLICY, f"{type(exc).__name__}: {exc}")
        return pdp.decide(request)


def _has_memory(audit: RequestLog, tenant: str, request_id: str) -> bool:
    """Whether ``request_id`` already recorded a session-memory pack (once per request)."""
    packs = events_of(ContextPackEvent, audit.audit_events(tenant, request_id=request_id))
    return any(p.origin == ChunkOrigin.SESSION_MEMORY.value for p in packs)


def pack_event(
    pack: ContextPack,
    proposal: Proposal | None,
    done: Enforced[ContextPack],
    retrieval: PackRetrieval | None = None,
) -> ContextPackEvent:
    """The context pack's audit event (:class:`ContextPackEvent`). A session-memory pack has
    no proposal (``retrieve_proposal`` is ``None``); its ``pep_audit_id`` is the request's
    ALLOW it joined."""
    asked = None if proposal is None else PackProposal(
        tool=proposal.tool, corpus=proposal.corpus, query=recorded(proposal.query))  # fmt: skip
    return ContextPackEvent.of(pack, asked, pep_verdict=done.decision.verdict,
                               pep_audit_id=done.audit_id, retrieval=retrieval)  # fmt: skip
