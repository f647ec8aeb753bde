"""An allowed corpus with no documents is an empty pack, never an error that lists corpora.

A route may name a corpus that holds nothing yet for the caller's tenant (a new corpus, a
tenant that has not ingested it). The caller is allowed to search it, and the honest answer
is "no evidence". An error here would be worse than unhelpful: it used to list every corpus
of the tenant ("known corpora: 'policy-engine', 'm-and-a-deals'"), naming corpora the caller
has no route to, and it would tell an empty corpus from one holding documents it cannot
read. On both backends, through search and ask.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from govrag.deployment import Deployment
from govrag.types import Principal

from conftest import BACKENDS, PG_APP_ROLE, doc, drop_pg_database, ident, load, new_pg_database

ROUTES = [
    {"route_id": "qa", "retrieval": {"mode": "tool", "scope": ["c1", "fresh"]}},
    {"route_id": "prefetch", "retrieval": {"mode": "deterministic_prefetch",
                                           "scope": ["fresh"]}},
]  # fmt: skip
ANA = Principal(sub="ana", email="ana@x.example", tenant="t1", clearance="internal",
                doc_entitlements=("c1:read", "fresh:read"))  # fmt: skip


@pytest.fixture(params=BACKENDS)
def dep(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    root = tmp_path / "dep"
    (root / "routes").mkdir(parents=True)
    (root / "routes" / "routes.json").write_text(json.dumps(ROUTES))
    store: dict[str, Any] = {"url": f"sqlite:///{root / 'govrag.db'}"}
    dsn = None
    if request.param == "postgres":
        dsn = new_pg_database(request.getfixturevalue("pg_cluster"))
        store = {"url": dsn.replace("://postgres", f"://{PG_APP_ROLE}", 1), "admin_url": dsn}
    deployment = Deployment.load(root, default_tenant="t1", default_route="qa", store=store,
                                 embedder={"name": "hash", "dim": 64})  # fmt: skip
    load(deployment.store, [
        ident("ana@x.example", "A"),
        doc("wire", "wire transfer limits", ["A"], corpus="c1"),
        doc("deal", "wire transfer for the halvorsen deal", ["B"], corpus="m-and-a-deals"),
    ])  # fmt: skip
    yield deployment
    deployment.close()
    if dsn is not None:
        drop_pg_database(request.getfixturevalue("pg_cluster"), dsn)


def test_searching_an_allowed_empty_corpus_gives_an_empty_pack(dep: Deployment) -> None:
    result = dep.governed.search(ANA, "wire transfer")
    assert [(d.corpus, d.verdict) for d in result.decisions] == [("c1", "ALLOW"),
                                                                 ("fresh", "ALLOW")]  # fmt: skip
    fresh = next(p for p in result.packs if p.corpus == "fresh")
    assert fresh.chunks == () and not fresh.hidden.present
    assert [c.doc_id for c in result.results] == ["wire"]
    kinds = [e.kind for e in dep.store.audit_events("t1", request_id=result.request_id)]
    assert "error" not in kinds
    only_fresh = dep.governed.search(ANA, "wire transfer", corpora=("fresh",))
    assert only_fresh.results == () and only_fresh.validation.reason == "no_evidence"
    assert "m-and-a-deals" not in json.dumps(only_fresh.as_dict())


def test_asking_over_an_empty_corpus_is_an_ungrounded_answer(dep: Deployment) -> None:
    """A route whose corpora hold nothing the caller could read or ask for is an empty
    knowledge store to that caller (seed 004): no search tool, no search, the model's answer
    marked ungrounded. The policy gate still decides each corpus of the route (a caller it
    refuses every one is refused, not answered from nothing); here it allows, and no search
    follows. Not an error, and nothing about other corpora."""
    answer = dep.orchestrator.ask(ANA, "What are the wire transfer limits?", route_id="prefetch")
    assert not answer.grounded and answer.packs == ()
    assert answer.decisions and all(d.verdict == "ALLOW" for d in answer.decisions)
    assert "m-and-a-deals" not in json.dumps(answer.as_dict(), default=str)
    kinds = [e.kind for e in dep.store.audit_events("t1", request_id=answer.request_id)]
    assert "error" not in kinds and kinds[-1] == "response"
