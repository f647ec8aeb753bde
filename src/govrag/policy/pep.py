"""The policy enforcement point: decide, commit the audit record, then (only on ALLOW) search.

One operation, so no caller can search without a committed ALLOW (DESIGN.md invariant 2):

1. The proposed corpus must be in the session's pinned route scope; otherwise DENY
   (``out_of_scope``) without asking the PDP.
2. Otherwise the Cedar PDP decides the SARAC request built from the verified claims.
3. The decision is committed to the audit log (``audit_id``, ``verdict``, ``policy_version``,
   ``resource``, ``downstream_called: false``) before anything else happens. If that write
   fails, the result is DENY and nothing is searched.
4. On ALLOW, and only then, the downstream call runs.

Every fault on this path (bad input, PDP error, audit failure) is a DENY, never an exception
that a caller might mistake for "no decision". A DENY carries a reason, never whether
matching documents exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import ValidationError

from govrag.errors import describe_validation
from govrag.policy.pdp import CedarPDP
from govrag.policy.sarac import Decision, SaracRequest
from govrag.routes.models import Retrieval
from govrag.store.protocol import KnowledgeStore
from govrag.types import Classification, Principal

log = logging.getLogger("govrag.policy")
T = TypeVar("T")

#: ``policy_version`` of decisions made without the PDP (out of scope, invalid input).
NO_POLICY = "none"


@dataclass(frozen=True)
class Proposal:
    """One retrieve, already checked against the manifest: one corpus, one query."""

    tool: str
    #: The tool's ``pdp_action`` (``retrieve_documents``, ``policy_search``, ...).
    action: str
    corpus: str
    query: str


@dataclass(frozen=True)
class Enforced(Generic[T]):
    decision: Decision
    #: The committed audit record's id; ``None`` only when the audit write itself failed.
    audit_id: str | None
    #: The downstream result; ``None`` unless ALLOWed.
    result: T | None = None


class PolicyEnforcementPoint:
    """Gates every retrieve of a deployment."""

    def __init__(
        self,
        pdp: CedarPDP,
        audit: KnowledgeStore,
        *,
        corpus_classification: Mapping[str, Classification] | None = None,
    ) -> None:
        self.pdp = pdp
        self.audit = audit
        self.corpus_classification = dict(corpus_classification or {})

    def enforce(
        self,
        principal: Principal,
        retrieval: Retrieval,
        proposal: Proposal,
        downstream: Callable[[], T],
        *,
        route_id: str,
        request_id: str,
        session_id: str,
    ) -> Enforced[T]:
        """Decide, commit the decision, and run ``downstream`` only after a committed ALLOW."""
        decision = self._decide(principal, retrieval, proposal, route_id)
        record: dict[str, object] = {
            "verdict": decision.verdict,
            "reason": decision.reason,
            "policy_version": decision.policy_version,
            "resource": proposal.corpus,
            "action": proposal.action,
            "tool": proposal.tool,
            "query": proposal.query,
            "sub": principal.sub,
            "route_id": route_id,
            "downstream_called": False,
        }
        try:
            event = self.audit.append_audit(
                principal.tenant,
                "pep_decision",
                record,
                request_id=request_id,
                session_id=session_id,
            )
        except Exception as exc:  # no committed record: nothing may be searched
            log.error("audit write failed, denying %s on %s: %s", principal.sub,
                      proposal.corpus, exc)  # fmt: skip
            failed = Decision("DENY", "policy_error", decision.policy_version,
                              f"the decision could not be recorded: {exc}")  # fmt: skip
            return Enforced(failed, None)
        if not decision.allowed:
            return Enforced(decision, event.event_id)
        return Enforced(decision, event.event_id, downstream())

    def _decide(
        self, principal: Principal, retrieval: Retrieval, proposal: Proposal, route_id: str
    ) -> Decision:
        try:
            if retrieval.mode == "none" or proposal.corpus not in retrieval.scope:
                return Decision(
                    "DENY",
                    "out_of_scope",
                    NO_POLICY,
                    f"corpus {proposal.corpus!r} is not in the scope of route {route_id!r}",
                )
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
                    "resource": {
                        "type": "corpus",
                        "id": proposal.corpus,
                        "tenant": principal.tenant,
                        "classification": self.corpus_classification.get(
                            proposal.corpus, Classification.PUBLIC
                        ),
                    },
                    "context": {
                        "query": proposal.query,
                        "classification_ceiling": principal.clearance,
                        "route_id": route_id,
                    },
                }
            )
        except ValidationError as exc:
            return Decision("DENY", "policy_error", NO_POLICY,
                            f"malformed request: {describe_validation(exc)}")  # fmt: skip
        except Exception as exc:  # any fault is DENY
            return Decision("DENY", "policy_error", NO_POLICY, f"{type(exc).__name__}: {exc}")
        return self.pdp.decide(request)
