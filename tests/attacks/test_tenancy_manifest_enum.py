"""Attack: read the id of a corpus kept to another tenant from the tool schemas an MCP client
is handed.

The promise (README, "Tenants never meet"): an id kept to some tenants does not exist for the
others; "no decision, listing or tool schema names it". A manifest may narrow a retrieve
tool's ``corpus`` argument with its own ``enum`` (``payload.tool_schemas`` documents that "a
manifest's own list narrows the scope further"). govrag's own agent loop intersects that enum
with the session's pinned scope, so its model never sees the kept id. But
``Govrag.offered_tools`` (what ``tools/list`` of the MCP server hands over verbatim as each
tool's ``input_schema``, ``server/mcp_server.py``) returns the manifest's parameters as
written: a ``t2`` MCP client listing its tools reads ``hr-policies`` in the enum, a corpus that
to ``t2`` must not exist.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import MANIFEST, MakeDeployment, deployment_factory

from govrag.app.api import Govrag

KEPT = {"hr-policies": {"tenants": ["t1"]}}


@pytest.fixture
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, "sqlite")


def test_the_mcp_tool_schemas_never_name_a_kept_corpus(
    make: MakeDeployment, tmp_path: Path
) -> None:
    manifest = json.loads(json.dumps(MANIFEST))
    retrieve = next(t for t in manifest["tools"] if t["name"] == "retrieve_documents")
    retrieve["parameters"]["properties"]["corpus"]["enum"] = ["policy-engine", "hr-policies"]
    (tmp_path / "dep" / "manifests" / "agent.json").write_text(json.dumps(manifest))
    dep = make(corpora=KEPT)
    app = Govrag(dep)
    assert app.operators.config_check().ok
    # What the MCP server's tools/list sends t2: name, description, input_schema.
    listed = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
              for t in app.callers.offered_tools(dep.principal("intruder"))]  # fmt: skip
    assert "hr-policies" not in json.dumps(listed), json.dumps(listed)


def test_naming_an_unknown_corpus_is_not_answered_with_the_kept_one(
    make: MakeDeployment, tmp_path: Path
) -> None:
    """The same manifest: a ``t2`` call naming an id no tenant has is refused by the schema
    check, whose message quotes the manifest's enum, ``hr-policies`` included; naming the kept
    id instead passes the schema and is a DENY. Both must be the refusal of an id no tenant
    has, and neither may name the kept corpus."""
    manifest = json.loads(json.dumps(MANIFEST))
    retrieve = next(t for t in manifest["tools"] if t["name"] == "retrieve_documents")
    retrieve["parameters"]["properties"]["corpus"]["enum"] = ["policy-engine", "hr-policies"]
    (tmp_path / "dep" / "manifests" / "agent.json").write_text(json.dumps(manifest))
    dep = make(corpora=KEPT)
    app = Govrag(dep)
    intruder = dep.principal("intruder")
    try:
        outcome = app.callers.retrieve(intruder, "retrieve_documents",
                               {"corpus": "no-such-corpus", "query": "leave"})  # fmt: skip
        shown = repr(outcome)
    except Exception as exc:
        shown = str(exc)
    assert "hr-policies" not in shown, shown
