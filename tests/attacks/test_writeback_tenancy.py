"""Attacks on write-back tenancy (issue 16, item 13), as a hostile tenant's agent or a careless
operator would try them:

- fill every scope the store has room for, so another tenant's agents can remember nothing;
- write memory for a tenant that does not exist (a typo, an invented tenant) and have it kept;
- search several corpora at once so one memory entry is packed (and cited) once per corpus,
  labelled with corpora it does not belong to;
- lose the entry's provenance (gate, writer, confidence, expiry) on the way to the model, the
  citation or the examiner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from govrag.audit import replay
from govrag.audit.events import PinnedRetrieval, RoutePinned
from govrag.deployment import Deployment
from govrag.scaffold import RETRIEVAL_MANIFEST
from govrag.store.protocol import KnowledgeStore
from govrag.types import NO_CORPUS, ChunkOrigin, SearchRequest, Strategy
from govrag.writeback import (
    MAX_SCOPES,
    META_KEYS,
    AdmissionGate,
    ControlledWriteBackStore,
    RetrievalScope,
    WriteBackCandidate,
)

from conftest import doc, ident, load

NOW = datetime.now(UTC)
MEMO = "Confirmed by the client today: the Acme wire limit exception is EUR 80,000 per day."
QUESTION = "What is the Acme wire limit exception per day?"
ROUTES = [
    {"route_id": "scan", "tool_manifest": "retrieval",
     "retrieval": {"mode": "deterministic_prefetch", "scope": ["policy-engine", "product-faq"]}},
]  # fmt: skip
PRINCIPALS = [
    {"sub": "ana", "email": "ana@bank.example", "tenant": "t1",
     "doc_entitlements": ["policy-engine:read", "product-faq:read"], "clearance": "internal"},
    {"sub": "zoe", "email": "zoe@other.example", "tenant": "t2",
     "doc_entitlements": ["policy-engine:read", "product-faq:read"], "clearance": "internal"},
]  # fmt: skip
TOML = """default_tenant = "t1"
default_route = "scan"
[embedder]
name = "hash"
dim = 64
[search]
default_strategy = "keyword"
[writeback]
enabled = true
allowed_agents = ["desk-agent"]
"""


@pytest.fixture
def dep(tmp_path: Path) -> Iterator[Deployment]:
    """A deployment with write-back on: tenant t1 (two corpora) and tenant t2 (one document)."""
    root = tmp_path / "dep"
    for sub, name, body in (("routes", "routes", ROUTES),
                            ("manifests", "retrieval", RETRIEVAL_MANIFEST)):  # fmt: skip
        (root / sub).mkdir(parents=True)
        (root / sub / f"{name}.json").write_text(json.dumps(body))
    (root / "principals.json").write_text(json.dumps({"principals": PRINCIPALS}))
    (root / "govrag.toml").write_text(TOML)
    deployment = Deployment.load(root)
    load(deployment.store, [
        ident("ana@bank.example", "A"),
        doc("wire-limits", "EU corporate wire limit: EUR 50,000 per day.", ["A"],
            corpus="policy-engine"),
        doc("faq-wire", "Wire limit exceptions are agreed per client with the desk.", ["A"],
            corpus="product-faq"),
    ])  # fmt: skip
    load(deployment.store, [doc("t2-note", "another tenant's note", ["*"])], tenant="t2")
    yield deployment
    deployment.close()


def remember(
    dep: Deployment, tenant: str, session: str, content: str = MEMO, turn: str = "turn-1"
) -> Any:
    return dep.writeback.admit(WriteBackCandidate(
        scope=RetrievalScope(tenant, session), source_turn_id=turn, agent_id="desk-agent",
        gate=AdmissionGate.USER_CONFIRMED, content=content, confidence=0.95,
        expires_at=NOW + timedelta(hours=1)))  # fmt: skip


def admissions(dep: Deployment, tenant: str) -> list[dict[str, Any]]:
    return [e.payload for e in dep.store.audit_events(tenant) if e.kind == "writeback_admission"]


# -- caps are per tenant --------------------------------------------------------------------------
def test_one_tenant_filling_its_scopes_cannot_starve_another(dep: Deployment) -> None:
    for n in range(MAX_SCOPES):
        assert remember(dep, "t1", f"flood-{n}", content=f"flood note {n}").admitted, n
    flooded = remember(dep, "t1", "one-more")
    assert not flooded.admitted and flooded.reason.value == "scope_cap"  # t1 is at its cap ...
    other = remember(dep, "t2", "ses-zoe")
    assert other.admitted, other.reason  # ... t2 is not: its caps are its own
    assert [h.id for h in dep.writeback.search(RetrievalScope("t2", "ses-zoe"), "Acme")] == [
        other.id]  # fmt: skip
    # The refusal is audited under the tenant that was refused, with its reason.
    assert admissions(dep, "t1")[-1]["reason"] == "scope_cap"


def test_expired_memory_of_another_tenant_is_not_purged_to_make_room() -> None:
    """Purging before a cap refusal touches only the admitting tenant's scopes."""
    clock = [NOW]
    store = ControlledWriteBackStore.enabled(
        allowed_agents=["a"], tenants={"t1", "t2"}, clock=lambda: clock[0]
    )

    def admit(tenant: str, session: str, ttl: timedelta) -> Any:
        return store.admit(WriteBackCandidate(
            scope=RetrievalScope(tenant, session), source_turn_id="x", agent_id="a",
            gate=AdmissionGate.TOOL_VERIFIED, content=f"note {tenant} {session}",
            confidence=1, expires_at=clock[0] + ttl))  # fmt: skip

    for n in range(MAX_SCOPES):
        assert admit("t1", f"s{n}", timedelta(days=1)).admitted
    assert admit("t2", "short", timedelta(minutes=1)).admitted
    clock[0] += timedelta(minutes=2)
    # t2's expired scope would free a global slot, but t1's cap is t1's alone.
    assert admit("t1", "more", timedelta(days=1)).reason.value == "scope_cap"
    assert admit("t2", "again", timedelta(days=1)).admitted


# -- unknown tenants are refused ------------------------------------------------------------------
@pytest.mark.parametrize("tenant", ["ghost", "T1", "t1 ", "t3"])
def test_memory_for_an_unknown_tenant_is_refused_and_the_refusal_audited(
    dep: Deployment, tenant: str
) -> None:
    before = set(dep.store.tenants())
    result = remember(dep, tenant, "ses-1")
    assert not result.admitted and result.reason.value == "unknown_tenant"
    assert dep.writeback.search(RetrievalScope(tenant, "ses-1"), "Acme wire") == []
    # The refusal is on record (in the deployment's tenant: the invented one gets no chain) ...
    refused = admissions(dep, "t1")[-1]
    assert (refused["admitted"], refused["reason"], refused["tenant"]) == (
        False, "unknown_tenant", tenant)  # fmt: skip
    # ... and refusing it gave the invented tenant no presence in the store.
    assert set(dep.store.tenants()) == before


def test_the_tenant_directory_is_the_truth_store_on_both_backends(store: KnowledgeStore) -> None:
    """A tenant becomes known when data is ingested for it or a verified principal of it
    pins a session; the store's answer is read at each admission (no stale snapshot)."""
    writeback = ControlledWriteBackStore.enabled(
        allowed_agents=["a"], tenants=lambda t: t in store.tenants()
    )

    def admit(tenant: str) -> str:
        return writeback.admit(WriteBackCandidate(
            scope=RetrievalScope(tenant, "ses-1"), source_turn_id="x", agent_id="a",
            gate=AdmissionGate.EVAL_GATED, content="a note", confidence=0.5,
            expires_at=NOW + timedelta(hours=1))).reason.value  # fmt: skip

    assert admit("t1") == "unknown_tenant"
    load(store, [doc("d", "some text", ["*"])], tenant="t1")
    assert admit("t1") == "admitted"
    assert admit("t2") == "unknown_tenant"
    pin = RoutePinned(sub="zoe", route_id="r", retrieval=PinnedRetrieval(),
                      route_table_version="v")  # fmt: skip
    store.create_session("t2", "ses-1", pin, request_id="req-1")
    assert admit("t2") == "admitted"


@pytest.mark.parametrize(
    ("directory", "reason"),
    [
        (lambda t: (_ for _ in ()).throw(OSError("directory down")), "tenant_unverified"),
        (lambda t: "yes", "tenant_unverified"),  # truthy is not an answer
        (lambda t: None, "tenant_unverified"),
        (lambda t: False, "unknown_tenant"),
    ],
    ids=["raises", "truthy-string", "none", "false"],
)
def test_a_broken_tenant_directory_fails_closed(directory: Any, reason: str) -> None:
    calls: list[dict[str, Any]] = []
    writeback = ControlledWriteBackStore.enabled(
        allowed_agents=["a"], tenants=directory, audit=lambda t, s, p: calls.append(p)
    )
    result = writeback.admit(WriteBackCandidate(
        scope=RetrievalScope("t1", "s"), source_turn_id="x", agent_id="a",
        gate=AdmissionGate.USER_CONFIRMED, content="a note", confidence=0.5,
        expires_at=NOW + timedelta(hours=1)))  # fmt: skip
    assert not result.admitted and result.reason.value == reason
    assert [c["reason"] for c in calls] == [reason]


@pytest.mark.parametrize("tenants", ["t1", ["t1", 7], 42])
def test_an_unusable_tenant_list_is_refused_when_the_store_is_built(tenants: Any) -> None:
    from govrag.errors import ConfigError

    with pytest.raises(ConfigError, match="tenants="):
        ControlledWriteBackStore.enabled(allowed_agents=["a"], tenants=tenants)


# -- one entry, once per request, in no corpus ----------------------------------------------------
def test_a_memory_entry_appears_once_in_a_multi_corpus_search(dep: Deployment) -> None:
    ana = dep.principal("ana")
    first = dep.governed.search(ana, QUESTION, strategy=Strategy.KEYWORD)
    entry = remember(dep, "t1", first.session_id)
    assert entry.admitted
    result = dep.governed.search(ana, QUESTION, strategy=Strategy.KEYWORD,
                                 session_id=first.session_id)  # fmt: skip
    assert [d.verdict for d in result.decisions] == ["ALLOW", "ALLOW"]  # two corpus retrieves
    packed = [(p.corpus, p.origin, c.chunk_id) for p in result.packs for c in p.chunks]
    assert [x for x in packed if x[2] == entry.id] == [
        (NO_CORPUS, ChunkOrigin.SESSION_MEMORY, entry.id)
    ]  # once, in its own pack, no corpus
    assert [c.chunk_id for c in result.results].count(entry.id) == 1
    corpus_packs = [p for p in result.packs if p.origin is ChunkOrigin.SOURCE]
    assert [p.corpus for p in corpus_packs] == ["policy-engine", "product-faq"]
    assert all(c.origin is ChunkOrigin.SOURCE and c.corpus == p.corpus
               for p in corpus_packs for c in p.chunks)  # fmt: skip
    assert result.validation.validation_passed and result.validation.scope_violation_count == 0
    # The pack audit: one memory pack for the request, its chunk listed as unchecked.
    records = [e.payload for e in dep.store.audit_events("t1", request_id=result.request_id)
               if e.kind == "context_pack"]  # fmt: skip
    assert [r["origin"] for r in records] == ["source", "source", "session_memory"]
    assert records[-1]["unchecked"] == [{"chunk_id": entry.id, "reason": "session_memory"}]
    assert records[-1]["corpus"] == NO_CORPUS and records[-1]["retrieve_proposal"] is None


def test_memory_never_joins_a_request_whose_retrieves_were_all_denied(dep: Deployment) -> None:
    ana = dep.principal("ana").model_copy(update={"doc_entitlements": ()})
    first = dep.governed.search(ana, QUESTION, strategy=Strategy.KEYWORD)
    assert remember(dep, "t1", first.session_id).admitted
    result = dep.governed.search(ana, QUESTION, strategy=Strategy.KEYWORD,
                                 session_id=first.session_id)  # fmt: skip
    assert [d.verdict for d in result.decisions] == ["DENY", "DENY"]
    assert result.packs == () and result.results == ()


def test_a_request_gets_at_most_one_memory_pack(dep: Deployment) -> None:
    """Asking the PEP for the request's memory again (a second prefetch batch, a buggy
    caller) returns nothing: the audit trail already holds the request's memory pack."""
    ana = dep.principal("ana")
    first = dep.governed.search(ana, QUESTION, strategy=Strategy.KEYWORD)
    assert remember(dep, "t1", first.session_id).admitted
    result = dep.governed.search(ana, QUESTION, strategy=Strategy.KEYWORD,
                                 session_id=first.session_id)  # fmt: skip
    allow = result.decisions[0]
    assert allow.audit_id is not None
    again = dep.pep.memory(
        ana, SearchRequest(query=QUESTION, strategy=Strategy.KEYWORD),
        pep_audit_id=allow.audit_id, policy_version=allow.policy_version, packs=(),
        request_id=result.request_id, session_id=result.session_id,
    )  # fmt: skip
    assert again is None


# -- provenance reaches packs, citations and replay -----------------------------------------------
def test_seed_metadata_reaches_the_pack_the_citation_and_replay(dep: Deployment) -> None:
    ana = dep.principal("ana")
    first = dep.orchestrator.ask(ana, QUESTION)
    entry = remember(dep, "t1", first.session_id, turn="turn-42")
    assert entry.admitted
    answer = dep.orchestrator.ask(ana, QUESTION, session_id=first.session_id)
    assert not answer.abstained, answer.reason
    expected = {
        "writeback.gate": "USER_CONFIRMED", "writeback.sourceTurnId": "turn-42",
        "writeback.agentId": "desk-agent", "writeback.confidence": "0.95",
        "writeback.supersedes": "none",
    }  # fmt: skip
    # The pack: once, in the request's memory pack.
    chunks = [c for p in answer.packs for c in p.chunks if c.chunk_id == entry.id]
    assert len(chunks) == 1 and chunks[0].writeback is not None
    assert set(chunks[0].writeback) == set(META_KEYS)
    assert expected.items() <= chunks[0].writeback.items()
    assert chunks[0].writeback["writeback.expiresAt"].endswith("Z")
    # The citation.
    [cited] = [c for c in answer.citations if c.chunk_id == entry.id]
    assert cited.origin is ChunkOrigin.SESSION_MEMORY and cited.corpus == NO_CORPUS
    assert cited.writeback == chunks[0].writeback
    as_json = answer.as_dict()["citations"]
    assert {"origin": "session_memory", "writeback": chunks[0].writeback}.items() <= next(
        c for c in as_json if c["chunk_id"] == entry.id).items()  # fmt: skip
    # Memory is not a document of the store: it is never access-counted.
    assert all(entry.id not in key for key in dep.store.access_counts("t1"))
    # Replay, from the audit log alone (in process, and through `govrag replay --json`).
    r = replay(dep.store, "t1", answer.request_id)
    assert r.chain_ok and r.verdict_before_search
    saw = [c.model_dump() for p in r.model_saw for c in p.chunks if c.chunk_id == entry.id]
    assert saw == [{"chunk_id": entry.id, "doc_id": entry.id, "score": chunks[0].score,
                    "origin": "session_memory", "writeback": chunks[0].writeback}]  # fmt: skip
    assert r.delivered is not None
    assert r.as_dict()["delivered"]["cited_memory"] == [{"chunk_id": entry.id,
                                            "writeback": chunks[0].writeback}]  # fmt: skip
    root = dep.settings.deployment
    done = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "replay", answer.request_id, "--json",
         "--deployment", str(root)],
        cwd=root, capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = r.as_dict()["delivered"]["cited_memory"]
    assert json.loads(done.stdout)["delivered"]["cited_memory"] == shown
