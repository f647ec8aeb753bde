"""What the route's ``list`` and ``metadata`` tools give, and the ``list`` tool's governed run.

Shared by govrag's own agent loop (:mod:`govrag.agent.steps`, where a model proposes the
tool) and by callers with a model of their own (:mod:`govrag.agent.tool_calls`, the HTTP and
MCP edges): either way each corpus of the pinned scope is its own PEP decision, and a denied
corpus is not even named.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from govrag.agent.retrieve import CorpusDecision, GovernedSearch
from govrag.policy.pep import Proposal
from govrag.routes.models import Tool
from govrag.routes.session import Session
from govrag.types import DocumentInfo, Principal

#: ``tenant -> [(corpus id, description)]``: what a ``list`` tool may describe.
Catalog = Callable[[str], list[tuple[str, str]]]


@dataclass(frozen=True)
class CorpusEntry:
    corpus: str
    description: str


@dataclass(frozen=True)
class CorpusListing:
    request_id: str
    session_id: str
    route_id: str
    #: The pinned scope's corpora the PEP let the caller list, in scope order.
    corpora: tuple[CorpusEntry, ...]


@dataclass(frozen=True)
class DocumentListing:
    request_id: str
    session_id: str
    route_id: str
    document: DocumentInfo
    decision: CorpusDecision


def list_corpora(
    governed: GovernedSearch,
    catalog: Catalog,
    principal: Principal,
    session: Session,
    tool: Tool,
    request_id: str,
) -> tuple[list[CorpusEntry], list[CorpusDecision]]:
    """The session's scope as ``tool`` (a ``list`` tool) may show it: one PEP decision per
    corpus, the catalogue read once and only after an ALLOW; a denied corpus is not named."""
    described: list[dict[str, str]] = []

    def describe(corpus: str) -> str:
        if not described:
            described.append(dict(catalog(principal.tenant)))
        return described[0].get(corpus, "")

    entries: list[CorpusEntry] = []
    decisions: list[CorpusDecision] = []
    for corpus in session.retrieval.scope:
        proposal = Proposal(tool=tool.name, action=tool.pdp_action, corpus=corpus, kind="list",
                            risk_tier=tool.risk_tier)  # fmt: skip
        decision, about = governed.run_tool(
            principal, session, proposal, partial(describe, corpus), request_id
        )
        decisions.append(decision)
        if about is not None:
            entries.append(CorpusEntry(corpus, about))
    return entries, decisions


def listing_json(entries: list[CorpusEntry]) -> str:
    """A ``list`` tool's observation for a model: the listed corpora as JSON."""
    return json.dumps({"corpora": [{"corpus": e.corpus, "description": e.description}
                                   for e in entries]})  # fmt: skip
