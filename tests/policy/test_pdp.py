"""The Cedar PDP: decision tables, a differential test against cedarpy, fail-closed faults."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cedarpy
import pytest

from govrag.policy import CedarPDP, SaracRequest, default_bundle
from govrag.policy.bundle import PolicyBundle
from govrag.policy.pdp import cedar_request, entities
from govrag.types import Classification

C = Classification


@pytest.fixture(scope="module")
def pdp() -> Iterator[CedarPDP]:
    p = CedarPDP(default_bundle())
    yield p
    p.close()


def request(
    corpus: str = "policy-engine",
    *,
    entitlements: tuple[str, ...] = ("policy-engine:read",),
    tenant: str = "bank-eu",
    corpus_tenant: str = "bank-eu",
    clearance: Classification = C.INTERNAL,
    corpus_class: Classification = C.PUBLIC,
    action: str = "retrieve_documents",
) -> SaracRequest:
    return SaracRequest.model_validate(
        {
            "subject": {"sub": "officer-123", "tenant": tenant,
                        "roles": ["corporate_banking_officer"],
                        "doc_entitlements": list(entitlements), "clearance": clearance},
            "action": action,
            "resource": {"type": "corpus", "id": corpus, "tenant": corpus_tenant,
                         "classification": corpus_class},
            "context": {"query": "wire limits corporate clients EU",
                        "classification_ceiling": clearance, "route_id": "policy_qa"},
        }
    )  # fmt: skip


def test_the_seed_worked_example(pdp: CedarPDP) -> None:
    allow = pdp.decide(request("policy-engine"))
    assert (allow.verdict, allow.reason, allow.policy_version) == (
        "ALLOW", "allowed", "pgar.retrieval.corpus/v3",
    )  # fmt: skip
    deny = pdp.decide(request("hr-policies"))
    assert (deny.verdict, deny.reason) == ("DENY", "no_entitlement")


@pytest.mark.parametrize(
    ("changes", "verdict", "reason"),
    [
        ({}, "ALLOW", "allowed"),
        ({"entitlements": ()}, "DENY", "no_entitlement"),
        ({"entitlements": ("policy-engine:write",)}, "DENY", "no_entitlement"),
        ({"entitlements": ("policy-engine",)}, "DENY", "no_entitlement"),
        ({"entitlements": ("hr-policies:read", "policy-engine:read")}, "ALLOW", "allowed"),
        ({"corpus_tenant": "bank-us"}, "DENY", "tenant"),
        ({"tenant": "bank-us"}, "DENY", "tenant"),
        ({"corpus_class": C.CONFIDENTIAL}, "DENY", "classification"),
        ({"corpus_class": C.INTERNAL}, "ALLOW", "allowed"),
        ({"corpus_class": C.RESTRICTED, "clearance": C.RESTRICTED}, "ALLOW", "allowed"),
        # forbid overrides permit: entitled, but another tenant / above clearance
        ({"corpus_tenant": "bank-us", "corpus_class": C.RESTRICTED}, "DENY", "tenant"),
        ({"entitlements": (), "corpus_tenant": "bank-us"}, "DENY", "tenant"),
        ({"action": "policy_search"}, "ALLOW", "allowed"),
    ],
)
def test_decision_table(pdp: CedarPDP, changes: dict[str, Any], verdict: str, reason: str) -> None:
    decision = pdp.decide(request(**changes))
    assert (decision.verdict, decision.reason) == (verdict, reason)


CORPORA = ["policy-engine", "hr-policies", "clause-index", "legal-playbook"]
TENANTS = ["bank-eu", "bank-us"]


def random_request(rng: random.Random) -> SaracRequest:
    ents = tuple(
        f"{c}:{rng.choice(['read', 'write'])}" for c in rng.sample(CORPORA, rng.randint(0, 3))
    )
    return request(
        rng.choice(CORPORA),
        entitlements=ents,
        tenant=rng.choice(TENANTS),
        corpus_tenant=rng.choice(TENANTS),
        clearance=C(rng.randint(0, 3)),
        corpus_class=C(rng.randint(0, 3)),
        action=rng.choice(["retrieve_documents", "policy_search", "clause_search"]),
    )


def reference(r: SaracRequest) -> bool:
    """The bundle's meaning, written independently: permitted and not forbidden."""
    permitted = f"{r.resource.id}:read" in r.subject.doc_entitlements
    forbidden = (
        r.subject.tenant != r.resource.tenant
        or r.resource.classification > r.context.classification_ceiling
    )
    return permitted and not forbidden


def test_differential_against_cedarpy_and_a_reference_model(pdp: CedarPDP) -> None:
    rng = random.Random(20261129)
    requests = [random_request(rng) for _ in range(10_000)]
    decided = [pdp.decide(r) for r in requests]
    bundle = default_bundle()
    direct = [
        cedarpy.is_authorized(cedar_request(r), bundle.policies, entities(r)).allowed
        for r in requests
    ]
    assert [d.allowed for d in decided] == direct
    assert [d.allowed for d in decided] == [reference(r) for r in requests]
    assert 500 < sum(direct) < 9_500  # both verdicts are well represented
    assert {d.reason for d in decided} == {"allowed", "no_entitlement", "tenant", "classification"}


def bundle_with(policies: str) -> PolicyBundle:
    return PolicyBundle(name="t", version="v1", path=Path("."), policies=policies)


def test_unparsable_policies_deny_everything() -> None:
    p = CedarPDP(bundle_with("permit(principal"))
    decision = p.decide(request())
    assert (decision.verdict, decision.reason) == ("DENY", "policy_error")
    assert "does not parse" in decision.detail
    p.close()


def test_an_evaluation_error_is_deny() -> None:
    # The attribute does not exist: Cedar reports an error for the policy, and nothing permits.
    p = CedarPDP(bundle_with('permit(principal, action, resource) when { principal.dept == "x" };'))
    decision = p.decide(request())
    assert (decision.verdict, decision.reason) == ("DENY", "policy_error")
    p.close()


def test_default_deny_with_no_policies() -> None:
    p = CedarPDP(bundle_with("// nothing permits"))
    assert p.decide(request()).verdict == "DENY"
    p.close()


@pytest.mark.parametrize("fault", ["raises", "hangs"])
def test_a_pdp_fault_is_deny(monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    p = CedarPDP(default_bundle(), timeout_s=0.2)

    def broken(*args: object, **kwargs: object) -> object:
        if fault == "hangs":
            time.sleep(1.0)
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(p._cedar, "is_authorized", broken)
    decision = p.decide(request())
    assert (decision.verdict, decision.reason) == ("DENY", "policy_error")
    assert ("no decision within" if fault == "hangs" else "engine exploded") in decision.detail
    p.close()


@pytest.mark.parametrize(
    ("action", "kind", "resource_type", "verdict"),
    [
        ("policy_search", "retrieve", "corpus", "ALLOW"),  # any search action, by its group
        ("list_corpora", "list", "corpus", "ALLOW"),
        ("get_document_metadata", "metadata", "corpus", "ALLOW"),
        ("draft_memo", "other", "tool", "DENY"),  # default deny: no permit for side tools
        ("retrieve_documents", "other", "tool", "DENY"),  # a search name does not help a tool
    ],
)
def test_actions_are_decided_by_their_kinds_group(
    pdp: CedarPDP, action: str, kind: str, resource_type: str, verdict: str
) -> None:
    body = request(action=action).model_dump(mode="json")
    body["kind"] = kind
    if resource_type == "tool":
        body["resource"] = {"type": "tool", "id": action, "tenant": "bank-eu"}
    assert pdp.decide(SaracRequest.model_validate(body)).verdict == verdict
