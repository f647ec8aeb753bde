"""Attack: learn from an answer's trace that a route has a stage on a corpus kept to another
tenant (and what the operator called that stage).

The promise (README, "Tenants never meet"): an id kept to some tenants
(``[corpora.<id>] tenants``) does not exist for the others. A workflow route shared by every
tenant may have a stage per corpus (``{"id": "leave_search", "corpus": "hr-policies"}``). For
``t2``, which lacks ``hr-policies``, the stage is skipped, but the skip is written into the
answer's ``trace.stages`` (returned to the caller over HTTP and MCP):
``{"stage": "leave_search", "skipped": "not in this session's scope"}``. So ``t2`` learns that
the route searches a corpus it does not hold (one that must not exist for it) and the stage's
name, which an operator naturally names after the corpus. The same route in a deployment
without the kept corpus (no such stage) answers ``t2`` without that entry; the caller can
tell the two apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import MakeDeployment, Scripted, answer, deployment_factory, with_model

from govrag.app.api import Govrag

KEPT = {"hr-policies": {"tenants": ["t1"]}}
WORKFLOW = {
    "workflow_id": "both",
    "stages": [
        {"id": "wire_search", "tool": "retrieve_documents", "corpus": "policy-engine"},
        {"id": "leave_search", "tool": "retrieve_documents", "corpus": "hr-policies"},
        {"id": "memo", "llm_role": "synthesis"},
    ],
}
ROUTE = {"route_id": "qa", "tool_manifest": "agent", "workflow_id": "both",
         "retrieval": {"mode": "tool", "scope": ["policy-engine", "hr-policies"]}}  # fmt: skip


@pytest.fixture
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, "sqlite")


def test_a_stage_on_a_kept_corpus_leaves_no_trace_for_another_tenant(
    make: MakeDeployment, tmp_path: Path
) -> None:
    root = tmp_path / "dep"
    (root / "workflows").mkdir()
    (root / "workflows" / "both.json").write_text(json.dumps(WORKFLOW))
    (root / "routes" / "routes.json").write_text(json.dumps([ROUTE]))
    dep = make(corpora=KEPT)
    assert Govrag(dep).operators.config_check().ok
    with_model(dep, Scripted(answer("Tenant two wire limit: EUR 1 per day. [sp:t2-wire#0]")))
    done = dep.orchestrator.ask(dep.principal("intruder"), "wire limit parental leave")
    shown = json.dumps(done.as_dict())
    assert "hr-policies" not in shown
    stages = [s["stage"] for s in done.trace.get("stages", [])]
    assert "leave_search" not in stages, done.trace["stages"]
