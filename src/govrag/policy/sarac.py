"""The SARAC request the PEP sends the PDP, and the decision it gets back (seed 003).

subject (who: sub, roles, doc entitlements, tenant, clearance), action (the proposed tool's
``pdp_action``: ``retrieve_documents``, ``policy_search``, ``list_corpora``, ...; with the
tool's kind, which is the action's group in Cedar), resource (one corpus, or for a tool that
touches no corpus the tool itself), context (query, classification ceiling, route, the tool's
risk tier). The model
never carries a token or policy text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from govrag.types import Classification, Ident, RiskTier, ToolKind

Verdict = Literal["ALLOW", "DENY"]
#: Why a request was decided so; DENY reasons never say whether matching documents exist.
Reason = Literal[
    "allowed",
    "out_of_scope",
    "no_entitlement",
    "tenant",
    "classification",
    "policy_error",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Subject(_Model):
    sub: str = Field(min_length=1, max_length=256)
    tenant: str = Field(min_length=1, max_length=256)
    roles: tuple[str, ...] = ()
    #: e.g. ``policy-engine:read``: which corpora this principal may search.
    doc_entitlements: tuple[str, ...] = ()
    clearance: Classification = Classification.PUBLIC


#: What a proposed tool does (its manifest ``kind``); in Cedar, its action is a member of
#: ``Action::"kind:<kind>"``.
ActionKind = ToolKind


class Resource(_Model):
    #: ``corpus`` for retrieve, list and metadata tools; ``tool`` for a tool of kind other.
    type: Literal["corpus", "tool"] = "corpus"
    id: Ident
    #: The tenant whose corpus of this id is decided: a corpus is per tenant, so the PEP
    #: names the caller's (a deployment's own PEP or bundle may name another); a tool serves
    #: every tenant, so it is the caller's.
    tenant: str = Field(min_length=1, max_length=256)
    #: Least clearance the corpus requires (from the deployment's ``[corpora.<id>]``).
    classification: Classification = Classification.PUBLIC


class RequestContext(_Model):
    query: str = Field(default="", max_length=10_000)
    classification_ceiling: Classification = Classification.PUBLIC
    route_id: str = ""
    #: The proposed tool's ``risk_tier`` (its manifest's): ``low``, ``medium`` or ``high``.
    risk_tier: RiskTier = "low"


class SaracRequest(_Model):
    subject: Subject
    action: Ident
    #: The group of ``action`` (the proposed tool's kind).
    kind: ActionKind = "retrieve"
    resource: Resource
    context: RequestContext = RequestContext()


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: Reason
    #: The bundle that decided, e.g. ``pgar.retrieval.corpus/v3`` (``none`` without a PDP call).
    policy_version: str
    #: For operators and the audit log (an error message, the policies that matched).
    detail: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict == "ALLOW"
