"""Attack: learn the id of a corpus kept to another tenant from a tool bound to it.

The promise (README, "Tenants never meet"): an id kept to some tenants
(``[corpora.<id>] tenants``) does not exist for the others: "their sessions do not pin it, no
decision, listing or tool schema names it". A manifest may bind a retrieve tool to one
corpus (``"corpus": "hr-policies"``), and ``govrag config check`` requires that corpus to be
in the route's scope, so a route shared by every tenant can carry a tool bound to the kept
corpus. The session's pinned scope leaves the corpus out for ``t2``, but the tool itself is
still offered: ``t2`` (over HTTP, MCP or its own agent loop) is handed the bound tool, and a
call of it (no corpus argument at all) comes back with a decision that names ``hr-policies``
(DENY ``out_of_scope``): the id of a corpus that, to ``t2``, must not exist. A route that
offers a tool bound to a corpus the tenant lacks should not offer that tool to it at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import MANIFEST, MakeDeployment, deployment_factory

from govrag.app.api import Govrag

KEPT = {"hr-policies": {"tenants": ["t1"]}}
BOUND = {
    "name": "search_leave_rules",
    "description": "Search the leave rules.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"], "additionalProperties": False},
    "pdp_action": "retrieve_documents",
    "kind": "retrieve",
    "corpus": "hr-policies",
}  # fmt: skip


@pytest.fixture
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, "sqlite")


def _bind(tmp_path: Path) -> None:
    manifest = {**MANIFEST, "tools": [*MANIFEST["tools"], BOUND]}
    (tmp_path / "dep" / "manifests" / "agent.json").write_text(json.dumps(manifest))


def test_a_tool_bound_to_a_kept_corpus_is_not_offered_to_another_tenant(
    make: MakeDeployment, tmp_path: Path
) -> None:
    _bind(tmp_path)
    dep = make(corpora=KEPT)
    app = Govrag(dep)
    assert app.operators.config_check().ok  # a valid deployment: config check finds no error
    intruder = dep.principal("intruder")
    # t1, which holds the corpus, is offered the tool; t2 must not be.
    assert "search_leave_rules" in [t.name for t in app.callers.offered_tools(dep.principal("hr"))]
    offered = [t.name for t in app.callers.offered_tools(intruder)]
    assert "search_leave_rules" not in offered, offered


def test_calling_a_tool_bound_to_a_kept_corpus_names_no_corpus(
    make: MakeDeployment, tmp_path: Path
) -> None:
    _bind(tmp_path)
    dep = make(corpora=KEPT)
    app = Govrag(dep)
    intruder = dep.principal("intruder")
    try:
        outcome = app.callers.call_tool(intruder, "search_leave_rules", {"query": "parental leave"})
    except Exception as exc:  # a refusal naming no corpus would do
        assert "hr-policies" not in str(exc)
        return
    # t2 never named the corpus: the decision it is handed must not name it either.
    assert "hr-policies" not in repr(outcome), [
        (d.corpus, d.verdict, d.reason) for d in getattr(outcome, "decisions", ())
    ]
