"""Attack: learn from one deployment that another tenant exists, what its corpora are called,
or what they hold.

One deployment serves many tenants with the same routes and corpus ids: a corpus is per
tenant, so ``policy-engine`` of ``t1`` and ``policy-engine`` of ``t2`` are two corpora with
their own documents (the world: ``t1`` holds the bank's wire limit and parental leave, ``t2``
its own). An id may be kept to some tenants (``[corpora.<id>] tenants``); to any other tenant
that corpus does not exist, so nothing it is shown names it: not the session's pinned scope,
not a decision, not a listing, not the tool schema a model is handed, and naming it is the
same refusal, word for word, as naming an id no tenant has. Ingest refuses a document that no
session of its tenant could ever search. On both backends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_world import (
    MakeDeployment,
    Scripted,
    answer,
    calls,
    deployment_factory,
    with_model,
)

from govrag.app.api import Govrag
from govrag.errors import NotFoundError

from conftest import BACKENDS

KEPT = {"hr-policies": {"tenants": ["t1"]}}


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, request.param)


def _decided(result: Any) -> list[tuple[str, str, str]]:
    return [(d.corpus, d.verdict, d.reason) for d in result.decisions]


def test_each_tenant_searches_its_own_corpus_of_the_same_id(make: MakeDeployment) -> None:
    dep = make()
    t1 = dep.governed.search(dep.principal("hr"), "wire limit parental leave")
    t2 = dep.governed.search(dep.principal("intruder"), "wire limit parental leave")
    # The same decisions on the same ids, each over its own tenant's documents only.
    assert _decided(t1) == _decided(t2) == [
        ("policy-engine", "ALLOW", "allowed"), ("hr-policies", "ALLOW", "allowed")]  # fmt: skip
    assert {h.doc_id for h in t1.results} == {"wire-limits", "leave"}
    assert {h.doc_id for h in t2.results} == {"t2-wire", "t2-leave"}
    assert "50,000" not in repr(t2) and "20 weeks" not in repr(t2)
    assert "EUR 1 per day" not in repr(t1)


def test_a_corpus_kept_to_one_tenant_is_never_named_to_another(make: MakeDeployment) -> None:
    dep = make(corpora=KEPT)
    intruder = dep.principal("intruder")
    app = Govrag(dep)
    # The pin: the route's scope as t2 has it.
    pinned = app.callers.open_session(intruder)
    assert pinned.scope == ("policy-engine",)
    assert app.callers.session(intruder, pinned.session_id).scope == ("policy-engine",)  # as stored
    # Its search: one decision, on its own policy-engine.
    searched = dep.governed.search(intruder, "parental leave")
    assert _decided(searched) == [("policy-engine", "ALLOW", "allowed")]
    assert "hr-policies" not in repr(searched)
    # Naming it: the refusal of an id no tenant has, word for word.
    named = dep.governed.search(intruder, "leave", corpora=("hr-policies",))
    nowhere = dep.governed.search(intruder, "leave", corpora=("no-such-corpus",))
    assert _decided(named) == [("hr-policies", "DENY", "out_of_scope")]
    assert repr(named.decisions).replace("hr-policies", "X").replace(
        named.decisions[0].audit_id or "", "ID") == repr(nowhere.decisions).replace(
        "no-such-corpus", "X").replace(nowhere.decisions[0].audit_id or "", "ID")  # fmt: skip
    # A model asked by t2 is handed no schema, listing or observation naming it.
    model = Scripted(calls(("list_corpora", {})),
                     calls(("retrieve_documents", {"corpus": "hr-policies", "query": "leave"})),
                     answer("No."))  # fmt: skip
    with_model(dep, model)
    done = dep.orchestrator.ask(intruder, "How long is parental leave?")
    assert "hr-policies" not in json.dumps(model.calls[0])  # system, question, tools
    assert model.tool_messages(1) == [{"corpora": [{"corpus": "policy-engine",
                                                    "description": ""}]}]  # fmt: skip
    assert {(d.corpus, d.verdict, d.reason) for d in done.decisions} >= {
        ("hr-policies", "DENY", "out_of_scope")
    }  # only because the model named it
    # ... while t1, which holds it, still has it.
    assert ("hr-policies", "ALLOW", "allowed") in _decided(
        dep.governed.search(dep.principal("hr"), "parental leave"))  # fmt: skip


def test_another_tenants_document_is_not_found_like_an_absent_one(make: MakeDeployment) -> None:
    dep = make()
    app, intruder = Govrag(dep), dep.principal("intruder")
    messages = []
    for doc in ("wire-limits", "no-such-document"):  # t1's, and nobody's
        with pytest.raises(NotFoundError) as caught:
            app.callers.document(intruder, "sp", doc)
        messages.append(str(caught.value).replace(doc, "X"))
    assert messages[0] == messages[1]
    assert app.callers.document(intruder, "sp", "t2-wire").document.external_id == "t2-wire"


def test_ingest_refuses_a_document_its_tenant_could_never_search(
    make: MakeDeployment, tmp_path: Path
) -> None:
    dep = make(corpora=KEPT)
    app = Govrag(dep)
    feed = tmp_path / "feed.jsonl"
    kept = {"type": "document", "source_system": "sp", "external_id": "t2-handbook",
            "corpus": "hr-policies", "title": "Handbook", "text": "Holidays are 30 days.",
            "acl": ["*"], "classification": "internal"}  # fmt: skip
    fine = {**kept, "external_id": "t2-limits", "corpus": "policy-engine"}
    feed.write_text(json.dumps(kept) + "\n" + json.dumps(fine) + "\n")
    before = dep.store.stats("t2")["documents"]
    outcome = app.operators.ingest(feed, tenant="t2")
    assert not outcome.ok
    (message,) = outcome.report.messages
    assert message.startswith(f"{feed}:1: corpus 'hr-policies' is kept to other tenants")
    assert "--tenant" in message and "'t2'" in message  # the two ways to fix it
    assert dep.store.stats("t2")["documents"] == before + 1  # the rest lands
    # t1 holds the corpus: the same line lands there.
    feed.write_text(json.dumps(kept) + "\n")
    assert app.operators.ingest(feed, tenant="t1").ok
