"""``search_knowledge``: the governed search as one tool, for agents govrag does not orchestrate.

Seed ``004_*.txt``: the chat model calls ``search_knowledge``; it takes the query and filters
*as values*, never SQL, and the identity comes from the session, never from the model's
arguments. It is offered only when the knowledge store holds something for the caller's
tenant (an empty store offers no tool to call) and only on a route whose retrieval mode is
``tool`` (prefetch and none strip every retrieve tool).

A call is the governed search of ``govrag search``: one proposal per corpus (the ones named,
else the pinned route's whole scope), each decided by the PEP and audited before it runs; a
corpus outside the scope is a DENY like any other. The tool's JSON schema is fixed here, not
in a manifest, because what it may carry is govrag's contract, not a deployment's choice:
no field names a principal, a tenant, a route or a session, and unknown fields are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from govrag.agent.retrieve import RETRIEVE_TOOL
from govrag.errors import InputError, describe_validation
from govrag.policy.pep import Proposal
from govrag.routes.models import Tool
from govrag.types import MetadataFilter, RiskTier

NAME = "search_knowledge"

_VALUE: dict[str, Any] = {"type": ["string", "number"]}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 512,
                  "description": "What to look for"},
        "corpora": {
            "type": "array", "items": {"type": "string", "maxLength": 128},
            "minItems": 1, "maxItems": 16, "uniqueItems": True,
            "description": "Corpus ids from list_corpora (default: every corpus of this route)",
        },
        "filters": {
            "type": "array", "maxItems": 8,
            "description": "Metadata filters; each only narrows what you may read",
            "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "minLength": 1, "maxLength": 64},
                    "op": {"enum": ["eq", "in", "range", "prefix"]},
                    "value": _VALUE,
                    "values": {"type": "array", "items": _VALUE, "minItems": 1,
                               "maxItems": 32},
                    "gte": _VALUE,
                    "lte": _VALUE,
                },
                "required": ["key"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}  # fmt: skip

TOOL = Tool(
    name=NAME,
    description=(
        "Search the knowledge base for passages relevant to a query: every corpus of this "
        "route you may read, or the ones named, narrowed by metadata filters."
    ),
    parameters=SCHEMA,
    pdp_action=RETRIEVE_TOOL,
    kind="other",
)


@dataclass(frozen=True)
class SearchPlan:
    """What one ``search_knowledge`` call will search (built by :func:`search_request`)."""

    query: str
    corpora: tuple[str, ...]
    filters: tuple[MetadataFilter, ...]
    proposals: list[Proposal]


def search_request(
    arguments: dict[str, Any],
    scope: tuple[str, ...],
    action: tuple[str, RiskTier],
) -> SearchPlan:
    """The corpora, query and typed filters of checked ``arguments`` (schema-valid); each
    corpus is decided as ``action`` (the route's retrieve tool's PDP action and risk tier)."""
    query = str(arguments["query"])
    corpora = tuple(arguments.get("corpora") or scope)
    filters = []
    for i, given in enumerate(arguments.get("filters", ())):
        try:
            filters.append(MetadataFilter.model_validate(given))
        except ValueError as exc:
            raise InputError(
                f"arguments of {NAME!r}: filters[{i}]: {describe_validation(exc)}"
            ) from exc
    name, tier = action
    proposals = [Proposal(tool=NAME, action=name, corpus=c, query=query, risk_tier=tier)
                 for c in corpora]  # fmt: skip
    return SearchPlan(query=query, corpora=corpora, filters=tuple(filters), proposals=proposals)
