"""Attack: reach something through a tool that is "only" a listing, a metadata look-up or a
side tool, where no policy decision is made (seed 003: each proposal gets its own PEP/PDP
check; DESIGN.md invariant 7).

Every accepted proposal, whatever its tool's kind, gets a PEP decision with the manifest's
``pdp_action`` committed to the audit log before the tool runs; a DENY is a refusal the model
reads, never a result. A corpus is per tenant: a caller's proposals are decided on its own
tenant's corpus of that id, and an id kept to other tenants is out of its scope.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_world import (
    QUESTION,
    TOOLS_POLICY,
    MakeDeployment,
    Scripted,
    answer,
    calls,
    deployment_factory,
    events,
    with_model,
)

from govrag.deployment import Deployment
from govrag.errors import ConfigError
from govrag.policy import CedarPDP, default_bundle
from govrag.policy.marker import MarkerGate
from govrag.policy.pep import PolicyEnforcementPoint, Proposal
from govrag.routes.models import Retrieval
from govrag.store.sqlite import SQLiteStore
from govrag.types import CorpusTenancy, Principal

from conftest import BACKENDS

ABOUT = "Payment and wire transfer policies"


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, request.param)


@pytest.fixture
def make_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, "sqlite")


def every_kind() -> Scripted:
    """A model proposing each kind of tool in turn, then answering."""
    return Scripted(
        calls(("list_corpora", {})),
        calls(("retrieve_documents", {"corpus": "policy-engine", "query": "wire limit"})),
        calls(
            ("get_document_metadata", {"doc_id": "wire-limits"}),
            ("flag_for_review", {"note": "check the limit"}),
        ),
        answer(),
    )


def committed(dep: Deployment, action: str, resource: str) -> bool:
    """Whether the last committed event is an ALLOW of ``action`` on ``resource``."""
    p = dep.store.audit_events("t1")[-1].payload
    return (p.get("verdict"), p.get("action"), p.get("resource")) == ("ALLOW", action, resource)


def test_every_tool_kind_is_decided_and_committed_before_it_runs(make: MakeDeployment) -> None:
    model = every_kind()
    dep = with_model(make(policies=TOOLS_POLICY), model)
    orch = dep.orchestrator
    seen: list[tuple[str, bool]] = []
    real_catalog = orch.catalog

    def catalog(tenant: str) -> list[tuple[str, str]]:
        seen.append(("list_corpora", committed(dep, "list_corpora", "policy-engine")))
        return real_catalog(tenant)

    def flag(arguments: dict[str, Any]) -> str:
        seen.append(("flag_for_review", committed(dep, "flag_for_review", "flag_for_review")))
        return '{"flagged": true}'

    orch.catalog = catalog
    orch.executors["flag_for_review"] = flag
    done = orch.ask(dep.principal("officer"), QUESTION)
    # Each ran once, and at that moment its own ALLOW was the last committed event.
    assert seen == [("list_corpora", True), ("flag_for_review", True)]
    assert not done.abstained and done.citations[0].doc_id == "wire-limits"
    decided = [(e.payload["kind"], e.payload["action"], e.payload["resource"],
                e.payload["verdict"]) for e in events(dep, done.request_id)
               if e.kind == "pep_decision"]  # fmt: skip
    assert decided == [
        ("list", "list_corpora", "policy-engine", "ALLOW"),
        ("list", "list_corpora", "hr-policies", "DENY"),
        ("retrieve", "retrieve_documents", "policy-engine", "ALLOW"),
        ("metadata", "get_document_metadata", "policy-engine", "ALLOW"),
        ("other", "flag_for_review", "flag_for_review", "ALLOW"),
    ]
    # Every accepted proposal is followed, before the next proposal, by its decision(s).
    trail = [e for e in events(dep, done.request_id) if e.kind in ("proposal", "pep_decision")]
    for i, e in enumerate(trail):
        if e.kind == "proposal" and e.payload["accepted"]:
            assert trail[i + 1].kind == "pep_decision", e.payload
            assert trail[i + 1].payload["tool"] == e.payload["tool"]
    # The listing named only the corpus the caller may list; hr-policies was never described.
    (listed,) = model.tool_messages(1)
    assert listed == {"corpora": [{"corpus": "policy-engine", "description": ABOUT}]}


def test_the_built_in_bundle_runs_no_side_tool(make_sqlite: MakeDeployment) -> None:
    """Default deny: a tool of kind ``other`` needs a deployment bundle that permits it."""
    model = Scripted(calls(("flag_for_review", {"note": "x"})), answer("No."))
    dep = with_model(make_sqlite(), model)
    ran: list[dict[str, Any]] = []
    dep.orchestrator.executors["flag_for_review"] = lambda args: ran.append(args) or "ran"
    done = dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    assert ran == []
    assert [(d.kind, d.corpus, d.verdict, d.reason) for d in done.decisions] == [
        ("other", "flag_for_review", "DENY", "no_entitlement")]  # fmt: skip
    assert model.tool_messages(1) == [{"chunks": [], "corpus": None, "reason": "no_entitlement",
                                       "verdict": "DENY"}]  # fmt: skip


def test_a_bundle_decides_listing_and_metadata_on_their_own_actions(
    make_sqlite: MakeDeployment,
) -> None:
    """A deployment that forbids listing and describing still allows searching: each tool is
    decided on its own ``pdp_action``, not waved through with the retrieve."""
    policies = default_bundle().policies + (
        '\nforbid (principal, action in [Action::"kind:list", Action::"kind:metadata"], '
        "resource);\n"
    )
    model = Scripted(
        calls(("list_corpora", {}),
              ("retrieve_documents", {"corpus": "policy-engine", "query": "wire limit"})),
        calls(("get_document_metadata", {"doc_id": "wire-limits"})),
        answer(),
    )  # fmt: skip
    dep = with_model(make_sqlite(policies=policies), model)
    done = dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    assert [(d.action, d.corpus, d.verdict) for d in done.decisions] == [
        ("list_corpora", "policy-engine", "DENY"),
        ("list_corpora", "hr-policies", "DENY"),
        ("retrieve_documents", "policy-engine", "ALLOW"),
        ("get_document_metadata", "policy-engine", "DENY"),
    ]
    listing, pack = model.tool_messages(1)
    assert listing == {"corpora": []} and pack["chunks"]
    (described,) = model.tool_messages(2)[2:]
    assert described == {"chunks": [], "corpus": "policy-engine", "reason": "no_entitlement",
                         "verdict": "DENY"}  # fmt: skip


def test_metadata_is_only_for_documents_of_the_requests_evidence(
    make_sqlite: MakeDeployment,
) -> None:
    """``get_document_metadata`` on a document id the model guessed is a refused proposal (no
    corpus to bind it to); it neither confirms nor denies the document exists."""
    model = Scripted(calls(("get_document_metadata", {"doc_id": "leave"})), answer("No."))
    dep = with_model(make_sqlite(), model)
    done = dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    (refused,) = model.tool_messages(1)
    assert refused["error"].startswith("no document 'leave' in this request's evidence")
    assert "hr-policies" not in str([m for m, _ in model.calls])  # the messages name it nowhere
    assert done.decisions == ()
    (proposal,) = [e.payload for e in events(dep, done.request_id) if e.kind == "proposal"]
    assert proposal["accepted"] is False


def test_no_tool_runs_when_its_decision_cannot_be_recorded(make_sqlite: MakeDeployment) -> None:
    model = Scripted(calls(("list_corpora", {})), answer("No."))
    dep = with_model(make_sqlite(), model)
    orch = dep.orchestrator
    described: list[str] = []
    orch.catalog = lambda tenant: described.append(tenant) or []  # type: ignore[assignment,func-returns-value]
    real = dep.store.append_audit

    def failing(tenant: str, kind: str, payload: dict[str, Any], **kw: Any) -> Any:
        if kind == "pep_decision":
            raise OSError("disk full")
        return real(tenant, kind, payload, **kw)

    dep.store.append_audit = failing  # type: ignore[method-assign]
    done = orch.ask(dep.principal("officer"), QUESTION)
    assert described == []  # the catalogue was never read
    assert {(d.verdict, d.reason) for d in done.decisions} == {("DENY", "policy_error")}
    assert model.tool_messages(1) == [{"corpora": []}]


# -- tenancy: a corpus is per tenant ---------------------------------------------------------
def test_a_corpus_kept_to_another_tenant_does_not_exist_for_this_one(
    make: MakeDeployment,
) -> None:
    dep = make(corpora={"hr-policies": {"tenants": ["t2"]}})
    hr = dep.governed.search(dep.principal("hr"), "parental leave")
    # t1 has no hr-policies: the session's pin leaves it out, so no decision names it.
    assert [(d.corpus, d.verdict, d.reason) for d in hr.decisions] == [
        ("policy-engine", "ALLOW", "allowed")]  # fmt: skip
    assert {h.doc_id for h in hr.results} <= {"wire-limits"}
    # A caller of t2 searches t2's corpora of the same ids, and only t2's documents.
    intruder = dep.governed.search(dep.principal("intruder"), "wire limit parental leave")
    assert [(d.corpus, d.verdict, d.reason) for d in intruder.decisions] == [
        ("policy-engine", "ALLOW", "allowed"),
        ("hr-policies", "ALLOW", "allowed"),
    ]
    assert {h.doc_id for h in intruder.results} == {"t2-wire", "t2-leave"}


def test_a_caller_of_another_tenant_searches_its_own_tenants_corpora(
    make_sqlite: MakeDeployment,
) -> None:
    """No ``[corpora]`` settings at all: each tenant has its own corpus of every id, so an
    entitled caller of t2 is allowed t2's corpora and reads only t2's documents."""
    dep = make_sqlite()
    result = dep.governed.search(dep.principal("intruder"), "wire limit")
    assert [(d.corpus, d.verdict, d.reason) for d in result.decisions] == [
        ("policy-engine", "ALLOW", "allowed"),
        ("hr-policies", "ALLOW", "allowed"),
    ]
    found = {h.doc_id for h in result.results}
    assert "t2-wire" in found and found <= {"t2-wire", "t2-leave"}  # t2's documents only
    assert "EUR 50,000" not in repr(result)


def test_the_tenant_rule_guards_listing_too(make_sqlite: MakeDeployment) -> None:
    model = Scripted(calls(("list_corpora", {})), answer("No."))
    dep = with_model(make_sqlite(corpora={"hr-policies": {"tenant": "t2"}}), model)
    dep.orchestrator.ask(dep.principal("hr"), QUESTION)
    assert model.tool_messages(1) == [
        {"corpora": [{"corpus": "policy-engine", "description": ABOUT}]}
    ]


def test_the_pep_never_decides_a_corpus_the_callers_tenant_lacks(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    pdp = CedarPDP(default_bundle())
    tenancy = CorpusTenancy({"b-docs": frozenset({"B"})})
    pep = PolicyEnforcementPoint(pdp, store, markers=MarkerGate(store), tenancy=tenancy)
    scope = Retrieval(mode="tool", scope=("a-docs", "b-docs"))
    caller = Principal(sub="u", email="u@a.example", tenant="A",
                       doc_entitlements=("a-docs:read", "b-docs:read"))  # fmt: skip
    try:
        # In scope, entitled, and kept to tenant B: for A it does not exist (no PDP call).
        for corpus, reason in (("a-docs", "allowed"), ("b-docs", "out_of_scope")):
            proposal = Proposal(tool="retrieve_documents", action="retrieve_documents",
                                corpus=corpus, query="q")  # fmt: skip
            done = pep.enforce(caller, scope, proposal, lambda d: "ran", route_id="r",
                               request_id=f"req-{corpus}", session_id="s")  # fmt: skip
            assert done.decision.reason == reason
            assert done.result == ("ran" if reason == "allowed" else None)
    finally:
        pdp.close()
        store.close()


def test_a_manifest_cannot_name_an_action_group(make_sqlite: MakeDeployment) -> None:
    dep = make_sqlite()
    manifest = dep.settings.deployment / "manifests" / "agent.json"
    manifest.write_text(manifest.read_text().replace('"flag_for_review", "kind"',
                                                     '"kind:retrieve", "kind"'))  # fmt: skip
    with pytest.raises(ConfigError, match="names govrag's action groups"):
        _ = make_sqlite().config
