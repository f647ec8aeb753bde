"""The PEP: scope before policy, a committed audit record before any search, DENY on faults."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cedarpy
import pytest

from govrag.errors import StoreError
from govrag.policy import CedarPDP, default_bundle
from govrag.policy.bundle import PolicyBundle
from govrag.policy.marker import MarkerGate
from govrag.policy.pdp import cedar_request, entities
from govrag.policy.pep import Enforced, PolicyEnforcementPoint, Proposal
from govrag.policy.sarac import Decision, SaracRequest
from govrag.store.sqlite import SQLiteStore
from govrag.types import Classification, Principal, Retrieval

from conftest import examples

C = Classification
PREFETCH = Retrieval(mode="deterministic_prefetch", scope=("policy-engine", "product-faq"))
TOOL = Retrieval(mode="tool", scope=("policy-engine", "hr-policies", "board-minutes"))
EMPTY_TOOL = Retrieval(mode="tool", scope=())
NONE = Retrieval()
OFFICER = Principal(sub="officer-123", email="o@bank.example", tenant="bank-eu",
                    roles=("corporate_banking_officer",),
                    doc_entitlements=("policy-engine:read",), clearance="internal")  # fmt: skip
BOARD = OFFICER.model_copy(update={"sub": "sec-1", "doc_entitlements": ("board-minutes:read",)})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "audit.db")
    yield s
    s.close()


@pytest.fixture
def pep(store: SQLiteStore) -> Iterator[PolicyEnforcementPoint]:
    pdp = CedarPDP(default_bundle())
    yield PolicyEnforcementPoint(
        pdp,
        store,
        markers=MarkerGate(store),
        corpus_classification={"board-minutes": C.CONFIDENTIAL},
    )
    pdp.close()


class Spy:
    """Stands in for the gateway: records each call and what was committed at that moment."""

    def __init__(self, store: SQLiteStore, request_id: str) -> None:
        self.store, self.request_id, self.calls = store, request_id, 0
        self.committed_allow = False

    def __call__(self, decision: Decision) -> str:
        self.calls += 1
        events = self.store.audit_events("bank-eu", request_id=self.request_id)
        self.committed_allow = bool(events) and events[-1].payload["verdict"] == "ALLOW"
        return "results"


def run(
    pep: PolicyEnforcementPoint, store: SQLiteStore, principal: Principal, route: Retrieval,
    corpus: str, action: str = "retrieve_documents", request_id: str = "req-1",
) -> tuple[Enforced[str], Spy]:  # fmt: skip
    spy = Spy(store, request_id)
    proposal = Proposal(tool="retrieve_documents", action=action, corpus=corpus,
                        query="wire limits corporate clients EU")  # fmt: skip
    done = pep.enforce(principal, route, proposal, spy, route_id="r", request_id=request_id,
                       session_id="s-1")  # fmt: skip
    return done, spy


TABLE = [
    # the seed's worked example
    (OFFICER, TOOL, "policy-engine", "ALLOW", "allowed"),
    (OFFICER, TOOL, "hr-policies", "DENY", "no_entitlement"),
    # scope comes first: no entitlement widens a route
    (OFFICER, PREFETCH, "hr-policies", "DENY", "out_of_scope"),
    (OFFICER, PREFETCH, "legal-contracts", "DENY", "out_of_scope"),
    (OFFICER, EMPTY_TOOL, "policy-engine", "DENY", "out_of_scope"),
    (OFFICER, NONE, "policy-engine", "DENY", "out_of_scope"),
    (OFFICER, PREFETCH, "product-faq", "DENY", "no_entitlement"),
    # classification: board-minutes needs confidential clearance
    (BOARD, TOOL, "board-minutes", "DENY", "classification"),
    (BOARD.model_copy(update={"clearance": C.CONFIDENTIAL}), TOOL, "board-minutes", "ALLOW",
     "allowed"),
    (BOARD.model_copy(update={"clearance": C.RESTRICTED}), TOOL, "board-minutes", "ALLOW",
     "allowed"),
    (OFFICER.model_copy(update={"doc_entitlements": ()}), TOOL, "policy-engine", "DENY",
     "no_entitlement"),
]  # fmt: skip


@pytest.mark.parametrize(("principal", "route", "corpus", "verdict", "reason"), TABLE)
def test_decision_table(
    pep: PolicyEnforcementPoint, store: SQLiteStore, principal: Principal, route: Retrieval,
    corpus: str, verdict: str, reason: str,
) -> None:  # fmt: skip
    done, spy = run(pep, store, principal, route, corpus)
    assert (done.decision.verdict, done.decision.reason) == (verdict, reason)
    events = store.audit_events("bank-eu", request_id="req-1")
    assert [e.event_id for e in events] == [done.audit_id]
    record = events[0].payload
    assert record["verdict"] == verdict and record["resource"] == corpus
    assert record["downstream_called"] is False
    assert record["policy_version"] == (
        "none" if reason == "out_of_scope" else "pgar.retrieval.corpus/v3"
    )
    # Searched exactly when allowed, and only after the ALLOW was committed.
    assert spy.calls == (verdict == "ALLOW") and done.result == ("results" if spy.calls else None)
    assert spy.committed_allow == (verdict == "ALLOW")


def test_pep_verdicts_equal_cedar_on_random_requests(tmp_path: Path) -> None:
    store = SQLiteStore(":memory:")
    pdp = CedarPDP(default_bundle())
    pep = PolicyEnforcementPoint(pdp, store, markers=MarkerGate(store))
    rng = random.Random(7)
    corpora = ["policy-engine", "hr-policies", "clause-index", "product-faq"]
    bundle = default_bundle()
    searched = 0
    runs = examples(4_000)
    for i in range(runs):
        scope = tuple(rng.sample(corpora, rng.randint(0, 3)))
        principal = OFFICER.model_copy(update={
            "doc_entitlements": tuple(f"{c}:read" for c in rng.sample(corpora, rng.randint(0, 3))),
            "clearance": C(rng.randint(0, 3)),
        })  # fmt: skip
        corpus = rng.choice(corpora)
        proposal = Proposal("retrieve_documents", rng.choice(["retrieve_documents", "x_search"]),
                            corpus, "q")  # fmt: skip

        def downstream(decision: Decision) -> int:
            nonlocal searched
            searched += 1
            return 1

        done = pep.enforce(principal, Retrieval(mode="tool", scope=scope), proposal, downstream,
                           route_id="r", request_id=f"q{i}", session_id="s")  # fmt: skip
        if corpus not in scope:
            expected = False
        else:
            sarac = pep._decide(principal, Retrieval(mode="tool", scope=scope), proposal, "r")
            assert sarac.policy_version == "pgar.retrieval.corpus/v3"
            request = SaracRequest.model_validate({
                "subject": {"sub": principal.sub, "tenant": principal.tenant,
                            "roles": principal.roles,
                            "doc_entitlements": principal.doc_entitlements,
                            "clearance": principal.clearance},
                "action": proposal.action,
                "resource": {"id": corpus, "tenant": principal.tenant},
                "context": {"query": "q", "classification_ceiling": principal.clearance,
                            "route_id": "r"},
            })  # fmt: skip
            expected = cedarpy.is_authorized(
                cedar_request(request), bundle.policies, entities(request)
            ).allowed
        assert done.decision.allowed == expected, (scope, principal, corpus)
    allowed = sum(1 for e in store.audit_events("bank-eu") if e.payload["verdict"] == "ALLOW")
    assert searched == allowed > 500
    assert store.verify_audit("bank-eu").ok and store.verify_audit("bank-eu").events == runs
    pdp.close()
    store.close()


def broken_bundle() -> PolicyBundle:
    return PolicyBundle(name="broken", version="v0", path=Path("."), policies="permit(principal")


@pytest.mark.parametrize("fault", ["pdp_raises", "policies_unparsable"])
def test_a_pdp_fault_is_deny_and_searches_nothing(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    pdp = CedarPDP(broken_bundle() if fault == "policies_unparsable" else default_bundle())
    if fault == "pdp_raises":

        def boom(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("engine exploded")

        monkeypatch.setattr(pdp._cedar, "is_authorized", boom)
    pep = PolicyEnforcementPoint(pdp, store, markers=MarkerGate(store))
    done, spy = run(pep, store, OFFICER, TOOL, "policy-engine")
    assert (done.decision.verdict, done.decision.reason, spy.calls) == ("DENY", "policy_error", 0)
    assert store.audit_events("bank-eu")[0].payload["verdict"] == "DENY"  # still audited
    pdp.close()


def test_a_profile_no_bundle_serves_is_deny_not_a_fallback(store: SQLiteStore) -> None:
    pdp = CedarPDP(default_bundle())
    pep = PolicyEnforcementPoint({"pgar.retrieval.corpus": pdp}, store, markers=MarkerGate(store))
    spy = Spy(store, "req-1")
    proposal = Proposal("retrieve_documents", "retrieve_documents", "policy-engine", "q")
    done = pep.enforce(OFFICER, TOOL, proposal, spy, route_id="r", request_id="req-1",
                       session_id="s-1", policy_profile="gone")  # fmt: skip
    assert (done.decision.verdict, done.decision.reason, spy.calls) == ("DENY", "policy_error", 0)
    assert "no policy bundle serves profile 'gone'" in done.decision.detail
    # Without a profile the default decides (the seed's officer may read policy-engine).
    assert pep.enforce(OFFICER, TOOL, proposal, spy, route_id="r", request_id="req-2",
                       session_id="s-1").decision.allowed  # fmt: skip
    pdp.close()


def lock_database(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    return other


@pytest.mark.parametrize("fault", ["closed_connection", "locked", "disk_full"])
def test_an_audit_write_failure_is_deny_and_searches_nothing(tmp_path: Path, fault: str) -> None:
    store = SQLiteStore(tmp_path / "g.db")
    store.append_audit("bank-eu", "warm-up", {}, request_id="w", session_id="w")
    pdp = CedarPDP(default_bundle())
    pep = PolicyEnforcementPoint(pdp, store, markers=MarkerGate(store))
    other = None
    if fault == "closed_connection":
        store._db.connection.close()
    elif fault == "locked":
        store._db.connection.execute("PRAGMA busy_timeout=200")
        other = lock_database(tmp_path / "g.db")
    else:  # SQLite's own "database or disk is full", by capping the file's pages
        pages = store._db.connection.execute("PRAGMA page_count").fetchone()[0]
        store._db.connection.execute(f"PRAGMA max_page_count={pages}")
        for size in (2000, 200, 20, 0):  # fill the last pages, down to the last byte
            for i in range(500):
                try:
                    store.append_audit("bank-eu", "fill", {"x": "y" * size},
                                       request_id=f"f{size}-{i}", session_id="w")  # fmt: skip
                except StoreError:
                    break
    done, spy = run(pep, store, OFFICER, TOOL, "policy-engine")
    assert (done.decision.verdict, done.decision.reason) == ("DENY", "policy_error")
    assert done.audit_id is None and spy.calls == 0
    assert "could not be recorded" in done.decision.detail
    if other is not None:
        other.rollback()
        other.close()
    pdp.close()
    if fault != "closed_connection":
        # No ALLOW for the request reached the log.
        assert store.audit_events("bank-eu", request_id="req-1") == []
        store.close()
