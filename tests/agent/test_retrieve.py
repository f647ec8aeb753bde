"""Governed retrieves end to end on a deployment (both backends): sessions, one PEP decision
and audit record per corpus, the gateway only after a committed ALLOW."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from govrag.deployment import Deployment
from govrag.errors import ConfigError, NotFoundError, StoreError, UnknownRouteError
from govrag.routes.session import PinViolation
from govrag.types import Principal, SearchRequest, SearchResult, Strategy

from conftest import BACKENDS, PG_APP_ROLE, doc, drop_pg_database, ident, load, new_pg_database

ROUTES = [
    {"route_id": "qa", "intent": "policy_qa", "tool_manifest": "none",
     "retrieval": {"mode": "tool", "scope": ["policy-engine", "hr-policies", "secret"]}},
    {"route_id": "prefetch", "retrieval": {"mode": "deterministic_prefetch",
                                           "scope": ["policy-engine"]}},
    {"route_id": "chat", "retrieval": {"mode": "none"}},
]  # fmt: skip
#: The seed's worked example: officer-123 may read policy-engine, not hr-policies.
OFFICER = {
    "sub": "officer-123",
    "email": "officer@bank.example",
    "tenant": "t1",
    "doc_entitlements": ["policy-engine:read", "secret:read"],
    "clearance": "internal",
}
RECORDS = [
    ident("officer@bank.example", "A"),
    doc("wire", acl=["A"], text="wire transfer limits for corporates", corpus="policy-engine"),
    doc("leave", acl=["A"], text="wire transfer of parental leave days", corpus="hr-policies"),
    doc("vault", acl=["A"], text="wire transfer vault codes", corpus="secret"),
]  # fmt: skip
MakeDeployment = Callable[..., Deployment]


@pytest.fixture(params=BACKENDS)
def make_deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    """``make_deployment(**toml)``: a deployment directory on the parametrized backend,
    loaded with :data:`RECORDS`; each call is a new process's view of the same files."""
    root = tmp_path / "dep"
    (root / "routes").mkdir(parents=True)
    (root / "routes" / "routes.json").write_text(json.dumps(ROUTES))
    (root / "principals.json").write_text(json.dumps({"principals": [OFFICER]}))
    store: dict[str, Any] = {"url": f"sqlite:///{root / 'govrag.db'}"}
    dsn = None
    if request.param == "postgres":
        dsn = new_pg_database(request.getfixturevalue("pg_cluster"))
        store = {"url": dsn.replace("://postgres", f"://{PG_APP_ROLE}", 1), "admin_url": dsn}
    opened: list[Deployment] = []

    def factory(**toml: Any) -> Deployment:
        settings = {"default_tenant": "t1", "default_route": "qa", "store": store,
                    "embedder": {"name": "hash", "dim": 64}} | toml  # fmt: skip
        dep = Deployment.load(root, **settings)
        opened.append(dep)
        return dep

    load(factory().store, RECORDS)
    yield factory
    for dep in opened:
        dep.close()
    if dsn is not None:
        drop_pg_database(request.getfixturevalue("pg_cluster"), dsn)


@pytest.fixture
def dep(make_deployment: MakeDeployment) -> Deployment:
    return make_deployment()


def officer(dep: Deployment) -> Principal:
    return dep.principal("officer-123")


def verdicts(result: Any) -> list[tuple[str, str, str]]:
    return [(d.corpus, d.verdict, d.reason) for d in result.decisions]


def test_the_seed_worked_example(dep: Deployment) -> None:
    result = dep.governed.search(officer(dep), "wire transfer", strategy=Strategy.KEYWORD)
    assert verdicts(result) == [
        ("policy-engine", "ALLOW", "allowed"),
        ("hr-policies", "DENY", "no_entitlement"),
        ("secret", "ALLOW", "allowed"),
    ]
    assert {h.doc_id for h in result.results} == {"wire", "vault"}
    assert [d.policy_version for d in result.decisions] == ["pgar.retrieval.corpus/v3"] * 3
    # Scores merge across corpora: highest first.
    assert [h.score for h in result.results] == sorted((h.score for h in result.results),
                                                       reverse=True)  # fmt: skip


def test_each_corpus_is_one_audited_decision_committed_before_its_search(
    dep: Deployment,
) -> None:
    store = dep.store
    searched: list[tuple[str, bool]] = []
    real = store.search

    def spy(principal: Principal, request: SearchRequest) -> SearchResult:
        (corpus,) = request.corpora or ("<all>",)
        # At the moment of the search, a committed ALLOW for this corpus exists.
        events = store.audit_events("t1")
        allowed = any(e.kind == "pep_decision" and e.payload["resource"] == corpus
                      and e.payload["verdict"] == "ALLOW" for e in events)  # fmt: skip
        searched.append((corpus, allowed))
        return real(principal, request)

    store.search = spy  # type: ignore[method-assign]
    result = dep.governed.search(officer(dep), "wire", corpora=("hr-policies", "policy-engine"))
    assert searched == [("policy-engine", True)]  # the DENYed corpus was never searched
    events = store.audit_events("t1", request_id=result.request_id)
    kinds = ["route_pinned", "pep_decision", "pep_decision", "context_pack", "validation"]
    assert [e.kind for e in events] == kinds
    assert [e.event_id for e in events[1:3]] == [d.audit_id for d in result.decisions]
    # The pack's record: trace fields, sources, versions; it points at its ALLOW.
    (pack,) = result.packs
    record = events[3].payload
    assert record["context_pack_id"] == pack.context_pack_id
    assert (record["pep_verdict"], record["pep_audit_id"]) == ("ALLOW", events[2].event_id)
    assert record["retrieve_proposal"] == {
        "tool": "retrieve_documents",
        "corpus": "policy-engine",
        "query": "wire",
    }
    assert [s["chunk_id"] for s in record["sources"]] == [c.chunk_id for c in pack.chunks]
    assert record["policy_version"] == pack.policy_version == "pgar.retrieval.corpus/v3"
    assert record["pack_token_count"] == pack.pack_token_count <= pack.token_budget
    assert {e.session_id for e in events} == {result.session_id}
    first = events[1].payload
    assert (first["verdict"], first["resource"], first["downstream_called"]) == (
        "DENY", "hr-policies", False)  # fmt: skip
    # Validation: the trace fields, for the pack the model may see.
    checked = events[4].payload
    assert (checked["validation_passed"], checked["scope_violations"]) == (True, 0)
    assert checked["context_pack_ids"] == [pack.context_pack_id]
    assert result.validation.validation_passed
    assert {a.chunk_id for a in result.validation.attribution} == {c.chunk_id for c in pack.chunks}
    assert store.verify_audit("t1").ok


def test_a_deny_says_why_without_revealing_whether_documents_match(dep: Deployment) -> None:
    def denied(query: str) -> Any:
        r = dep.governed.search(officer(dep), query, corpora=("hr-policies",))
        return verdicts(r), r.results, r.hidden, [(d.policy_version) for d in r.decisions]

    # "leave" matches a document in hr-policies; "zebra" matches nothing anywhere.
    assert denied("parental leave") == denied("zebra")
    assert denied("zebra")[0] == [("hr-policies", "DENY", "no_entitlement")]


@pytest.mark.parametrize(
    ("route", "corpora", "expected"),
    [
        ("qa", ("payroll",), [("payroll", "DENY", "out_of_scope")]),
        ("prefetch", ("secret",), [("secret", "DENY", "out_of_scope")]),
        ("prefetch", None, [("policy-engine", "ALLOW", "allowed")]),
        ("chat", ("policy-engine",), [("policy-engine", "DENY", "out_of_scope")]),
        ("chat", None, []),  # mode none: nothing to retrieve, nothing searched
    ],
)
def test_route_scope_bounds_every_retrieve(
    dep: Deployment, route: str, corpora: tuple[str, ...] | None, expected: list[Any]
) -> None:
    result = dep.governed.search(officer(dep), "wire", route_id=route, corpora=corpora)
    assert verdicts(result) == expected
    assert {h.corpus for h in result.results} <= {c for c, v, _ in expected if v == "ALLOW"}
    out_of_scope = [d for d in result.decisions if d.reason == "out_of_scope"]
    assert all(d.policy_version == "none" for d in out_of_scope)  # the PDP was not asked


def test_a_corpus_classification_needs_the_clearance(make_deployment: MakeDeployment) -> None:
    dep = make_deployment(corpora={"secret": {"classification": "confidential"}})
    result = dep.governed.search(officer(dep), "wire", corpora=("secret", "policy-engine"))
    assert verdicts(result) == [
        ("secret", "DENY", "classification"),
        ("policy-engine", "ALLOW", "allowed"),
    ]


def test_a_session_keeps_its_route_in_every_process(make_deployment: MakeDeployment) -> None:
    first = make_deployment()
    opened = first.governed.search(officer(first), "wire", route_id="prefetch")
    other = make_deployment()  # another process: same files, its own store handle
    again = other.governed.search(officer(other), "wire", session_id=opened.session_id)
    assert (again.session_id, again.route_id) == (opened.session_id, "prefetch")
    assert verdicts(again) == [("policy-engine", "ALLOW", "allowed")]
    with pytest.raises(PinViolation, match="pinned to route 'prefetch'"):
        other.governed.search(officer(other), "wire", session_id=opened.session_id, route_id="qa")
    kinds = [e.kind for e in other.store.audit_events("t1")]
    assert kinds[-1] == "pin_violation" and "pep_decision" in kinds


def test_a_withdrawn_route_ends_its_sessions(make_deployment: MakeDeployment) -> None:
    first = make_deployment()
    opened = first.governed.search(officer(first), "wire", route_id="prefetch")
    routes = first.settings.deployment / "routes" / "routes.json"
    routes.write_text(json.dumps([r for r in ROUTES if r["route_id"] != "prefetch"]))
    later = make_deployment()
    with pytest.raises(NotFoundError, match="no longer in the route table"):
        later.governed.search(officer(later), "wire", session_id=opened.session_id)


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ({"default_route": "nope"}, "govrag.toml: default_route: 'nope' is not a route"),
        ({"policy": {"bundle": "nope"}}, "govrag.toml: policy.bundle: no policy bundle 'nope'"),
    ],
)
def test_settings_naming_missing_config_are_refused(
    make_deployment: MakeDeployment, toml: dict[str, Any], fragment: str
) -> None:
    dep = make_deployment(**toml)
    with pytest.raises(ConfigError, match=fragment):
        dep.governed.search(officer(dep), "wire")


def test_no_route_named_and_no_default(make_deployment: MakeDeployment) -> None:
    dep = make_deployment(default_route=None)
    with pytest.raises(UnknownRouteError, match="no default_route set; name a route") as raised:
        dep.governed.search(officer(dep), "wire")
    known = raised.value.known_routes
    assert "chat" in known and not any(repr(r) in str(raised.value) for r in known)


def test_a_pack_that_cannot_be_recorded_is_not_delivered(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = dep.store
    real = store.append_audit

    def failing(tenant: str, kind: str, *args: Any, **kwargs: Any) -> Any:
        if kind == "context_pack":
            raise StoreError("disk full")
        return real(tenant, kind, *args, **kwargs)

    monkeypatch.setattr(store, "append_audit", failing)
    result = dep.governed.search(officer(dep), "wire", corpora=("policy-engine",))
    assert verdicts(result) == [("policy-engine", "DENY", "policy_error")]
    assert result.packs == () and result.results == ()
    monkeypatch.undo()
    kinds = [e.kind for e in store.audit_events("t1", request_id=result.request_id)]
    # The ALLOW, no pack on record, and a validation that found no evidence.
    assert kinds == ["route_pinned", "pep_decision", "validation"]
    assert (result.validation.validation_passed, result.validation.reason) == (
        False, "no_evidence")  # fmt: skip


def test_packs_respect_the_token_budget(make_deployment: MakeDeployment) -> None:
    dep = make_deployment(gateway={"token_budget": 16})
    result = dep.governed.search(officer(dep), "wire transfer", corpora=("policy-engine",))
    (pack,) = result.packs
    assert pack.pack_token_count <= 16 == pack.token_budget
    assert pack.dropped_for_budget + len(pack.chunks) >= 1


def test_an_injected_out_of_scope_chunk_is_an_incident_and_never_handed_out(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway fault that slips another corpus's chunk into a pack: validation catches
    it, nothing of that request reaches the caller, and the incident is on record."""
    gateway = dep.gateway
    real = gateway.retrieve

    def leaky(principal: Principal, corpus: str, request: SearchRequest, **kw: Any) -> Any:
        pack = real(principal, corpus, request, **kw)
        foreign = pack.chunks[0].model_copy(update={"corpus": "hr-policies",
                                                    "chunk_id": "sp:leave#0"})  # fmt: skip
        return pack.model_copy(update={"chunks": (*pack.chunks, foreign)})

    monkeypatch.setattr(gateway, "retrieve", leaky)
    result = dep.governed.search(officer(dep), "wire transfer", corpora=("policy-engine",))
    report = result.validation
    assert not report.validation_passed and report.abstain
    assert report.reason == "scope_violation" and report.scope_violation_count == 1
    assert result.results == () and all(p.chunks == () for p in result.packs)
    events = dep.store.audit_events("t1", request_id=result.request_id)
    incident = next(e for e in events if e.kind == "incident")
    assert incident.payload["kind"] == "scope_violation"
    assert [v["chunk_id"] for v in incident.payload["violations"]] == ["sp:leave#0"]
    validation = next(e for e in events if e.kind == "validation")
    assert (validation.payload["validation_passed"], validation.payload["scope_violations"]) == (
        False, 1)  # fmt: skip


def test_thin_evidence_abstains(make_deployment: MakeDeployment) -> None:
    dep = make_deployment(validation={"min_chunks": 3})
    result = dep.governed.search(officer(dep), "wire transfer", corpora=("policy-engine",))
    assert len(result.results) == 1  # retrieval still reports what it found ...
    assert (result.validation.validation_passed, result.validation.reason) == (
        False,
        "thin_evidence",
    )  # fmt: skip ... but it is not evidence enough to answer from


def test_a_configured_http_rights_checker_trims_at_the_source(
    make_deployment: MakeDeployment,
) -> None:
    from rights_server import RightsSource, serve

    source = RightsSource()
    source.grant("A", "wire")  # the source no longer knows "vault"
    with serve(source) as url:
        dep = make_deployment(rights={"sources": {"sp": {"kind": "http", "url": url}}})
        result = dep.governed.search(officer(dep), "wire transfer", strategy=Strategy.KEYWORD,
                                     corpora=("policy-engine", "secret"))  # fmt: skip
    assert [h.doc_id for h in result.results] == ["wire"]
    engine, secret = result.packs
    assert secret.chunks == () and secret.withheld.reasons == {"unknown_document": 1}
    assert [(c.checker, c.status) for c in engine.rights_checks] == [("http", "ok")]
    records = [e.payload for e in dep.store.audit_events("t1", request_id=result.request_id)
               if e.kind == "context_pack"]  # fmt: skip
    assert [r["withheld"]["count"] for r in records] == [0, 1]
    assert records[1]["rights_checks"][0]["checker"] == "http"
