"""A tool's ``risk_tier`` reaches the PDP: a deployment's own Cedar policy can ask more of a
caller for a high-risk tool, and the decision's audit record (and its replay) names the tier.

The deployment's manifest offers two retrieve tools over the same corpus, ``retrieve_documents``
(``risk_tier`` low) and ``bulk_export`` (high). Its bundle permits both with the corpus's read
entitlement, and forbids a high-risk tool below confidential clearance. ana (internal) may
search with the first and is refused the second; cleo (confidential) may use both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import govrag
from govrag.app import local_principal
from govrag.policy.bundle import PolicyBundle
from govrag.policy.pdp import CedarPDP
from govrag.policy.sarac import SaracRequest
from govrag.types import Classification

from conftest import wire_bank

POLICY = """
permit (principal, action in [Action::"kind:retrieve", Action::"kind:list",
                              Action::"kind:metadata"], resource is Corpus)
when { principal.doc_entitlements.contains(resource.read_entitlement) };

// A high-risk tool needs at least confidential clearance (2), whatever else permits it.
@reason("classification")
forbid (principal, action, resource)
when { context.risk_tier == "high" }
unless { principal.clearance >= 2 };
"""
SEARCH = {"type": "object", "properties": {"corpus": {"type": "string"},
                                           "query": {"type": "string"}},
          "required": ["corpus", "query"], "additionalProperties": False}  # fmt: skip


def request(risk_tier: str, clearance: Classification) -> SaracRequest:
    return SaracRequest.model_validate({
        "subject": {"sub": "ana", "tenant": "bank", "doc_entitlements": ["policy:read"],
                    "clearance": clearance},
        "action": "bulk_export", "kind": "retrieve",
        "resource": {"type": "corpus", "id": "policy", "tenant": "bank",
                     "classification": Classification.INTERNAL},
        "context": {"query": "wire", "classification_ceiling": clearance, "route_id": "search",
                    "risk_tier": risk_tier},
    })  # fmt: skip


def test_the_pdp_decides_on_the_risk_tier() -> None:
    pdp = CedarPDP(PolicyBundle(name="risk", version="v1", path=Path("risk"), policies=POLICY))
    assert pdp.decide(request("low", Classification.INTERNAL)).verdict == "ALLOW"
    high = pdp.decide(request("high", Classification.INTERNAL))
    assert (high.verdict, high.reason) == ("DENY", "classification")
    assert pdp.decide(request("high", Classification.CONFIDENTIAL)).verdict == "ALLOW"


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    root = wire_bank(tmp_path / "bank", routes={"search": {"policy_profile": "risk"}},
                     readers=("ana", "cleo"))  # fmt: skip
    manifest = json.loads((root / "manifests" / "retrieval.json").read_text())
    manifest["tools"].append({"name": "bulk_export", "description": "Every passage at once.",
                              "parameters": SEARCH, "pdp_action": "bulk_export",
                              "kind": "retrieve", "risk_tier": "high"})  # fmt: skip
    (root / "manifests" / "retrieval.json").write_text(json.dumps(manifest))
    bundle = root / "policies" / "risk"
    bundle.mkdir(parents=True)
    (bundle / "bundle.json").write_text(json.dumps({"name": "risk", "version": "v1"}))
    (bundle / "policy.cedar").write_text(POLICY)
    people = json.loads((root / "principals.json").read_text())
    ana = people["principals"][0]
    people["principals"].append(ana | {"sub": "cleo", "email": "cleo@bank.example",
                                       "clearance": "confidential"})  # fmt: skip
    (root / "principals.json").write_text(json.dumps(people))
    return root


def test_a_high_risk_tool_is_refused_below_the_clearance_and_the_record_says_why(
    deployment: Path,
) -> None:
    arguments = {"corpus": "policy", "query": "wire limit"}
    with govrag.open(deployment) as app:
        ana, cleo = (local_principal(app.settings, s) for s in ("ana", "cleo"))
        low = app.callers.retrieve(ana, "retrieve_documents", arguments)
        high = app.callers.retrieve(ana, "bulk_export", arguments)
        cleared = app.callers.retrieve(cleo, "bulk_export", arguments)
        replayed = app.operators.replay(high.request_id).as_dict()
    assert [h.doc_id for h in low.results] == ["wire"]
    assert high.results == () and [(d.verdict, d.reason) for d in high.decisions] == [
        ("DENY", "classification")
    ]
    assert [h.doc_id for h in cleared.results] == ["wire"]
    (decision,) = replayed["decisions"]
    assert (decision["tool"], decision["risk_tier"], decision["verdict"]) == (
        "bulk_export",
        "high",
        "DENY",
    )


def test_a_high_risk_retrieve_tool_holds_on_every_search_path(deployment: Path) -> None:
    # The manifest marks retrieve_documents itself high: a prefetch route and govrag search
    # are decided as that tool's calls, so they are refused below the clearance too.
    path = deployment / "manifests" / "retrieval.json"
    manifest = json.loads(path.read_text())
    for tool in manifest["tools"]:
        if tool["name"] == "retrieve_documents":
            tool["risk_tier"] = "high"
    path.write_text(json.dumps(manifest))
    route = json.loads((deployment / "routes" / "search.json").read_text())
    prefetch = route | {
        "route_id": "qa",
        "intent": "qa",
        "retrieval": {"mode": "deterministic_prefetch", "scope": ["policy"]},
    }
    (deployment / "routes" / "qa.json").write_text(json.dumps(prefetch))
    with govrag.open(deployment) as app:
        ana, cleo = (local_principal(app.settings, s) for s in ("ana", "cleo"))
        searched = app.callers.search(ana, "wire limit")
        asked = app.callers.ask(ana, "What is the wire limit?", route="qa")
        cleared = app.callers.search(cleo, "wire limit")
    assert searched.results == () and [d.reason for d in searched.decisions] == ["classification"]
    assert asked.abstained and [d.reason for d in asked.decisions] == ["classification"]
    assert [h.doc_id for h in cleared.results] == ["wire"]
