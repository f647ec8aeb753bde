"""Hostile requests over HTTP that once broke the edge or the use case behind it: each must be
a 4xx that names the rule (never a 500), and none may take identity from anywhere but the
token.

Found by playing the attacker against the served bank (``http_world``):

- a tool call whose arguments nest a few hundred lists deep is short (``[[[...]]]``), so the
  audit record of the refused proposal kept it as is, and the event model's validator then
  hit its recursion limit: a 500 where the caller had sent a bad request, and a proposal with
  no audit record;
- a click was decided on the document's corpus alone, never on a route's scope: a 204 for a
  document in a corpus no route of the caller's allows (and the 404 of an absent one
  otherwise), so a click confirmed what noninterference says a route must not show, and
  moved the access counter of documents outside any route;
- a token whose identity claims hold a NUL character (an identity provider's bug, or a
  profile field it copies unchecked) was accepted: on SQLite as a principal nobody else is,
  on PostgreSQL as a 503 "store unavailable" for every request it made.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from http_world import World, bearer, doc, records, served_bank, token

import govrag
from govrag.audit.trail import RECORD_DEPTH, recorded

INVALID = "https://govrag.dev/problems/invalid-request"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("hostile") / "bank"
    with served_bank(root) as world:
        yield world


def nested(opening: str, closing: str, depth: int, inner: str = "") -> str:
    return opening * depth + inner + closing * depth


@pytest.mark.parametrize("depth", [20, 100, 300, 500, 900, 3000])
@pytest.mark.parametrize("where", ["corpus", "extra"])
@pytest.mark.parametrize("kind", ["list", "object"])
def test_deeply_nested_tool_arguments_are_a_400_never_a_500(
    world: tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey], depth: int, where: str,
    kind: str,
) -> None:  # fmt: skip
    _, client, key = world
    value = nested("[", "]", depth) if kind == "list" else nested('{"a":', "}", depth, "{}")
    arguments = (f'{{"query":"wire","corpus":{value}}}' if where == "corpus"
                 else f'{{"query":"wire","corpus":"policy","n":{value}}}')  # fmt: skip
    body = f'{{"tool":"retrieve_documents","arguments":{arguments}}}'
    headers = {**bearer(token(key, "ana")), "content-type": "application/json"}
    r = client.post("/v1/retrieve", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["type"] == INVALID


def test_a_refused_deep_proposal_is_on_the_audit_record(
    world: tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey],
) -> None:
    app, _, key = world
    ana = app.callers.verify_token(token(key, "ana")).principal
    deep: list[object] = []
    for _ in range(500):
        deep = [deep]
    with pytest.raises(govrag.InputError, match="nested deeper"):
        app.callers.retrieve(ana, "retrieve_documents", {"query": "wire", "corpus": deep})
    # The refusal is the tenant's last proposal, the deep value summarised: a digest an
    # examiner can match against the value, never the value itself.
    proposals = [e.payload for e in app._dep.store.audit_events(ana.tenant)
                 if "accepted" in e.payload]  # fmt: skip
    assert proposals[-1]["accepted"] is False and "nested deeper" in proposals[-1]["error"]
    assert set(proposals[-1]["arguments"]) == {"sha256", "chars", "prefix"}


def test_recorded_summarises_a_value_nested_deeper_than_its_bound() -> None:
    shallow = {"a": [[1, 2], {"b": "c"}]}
    assert recorded(shallow) is shallow
    deep: list[object] = []
    for _ in range(RECORD_DEPTH + 1):
        deep = [deep]
    summary = recorded(deep)
    assert set(summary) == {"sha256", "chars", "prefix"}
    assert summary["chars"] == 2 * (RECORD_DEPTH + 2)
    at_bound: list[object] = []
    for _ in range(RECORD_DEPTH - 1):
        at_bound = [at_bound]
    assert recorded(at_bound) is at_bound


def test_identity_headers_and_query_parameters_change_nothing(
    world: tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey],
) -> None:
    _, client, key = world
    ben = bearer(token(key, "ben"))
    plain = client.post("/v1/search", json={"query": "corporate wire limit"}, headers=ben)
    smuggled = client.post(
        "/v1/search?sub=ana&tenant=other&email=ana@bank.example",
        json={"query": "corporate wire limit"},
        headers={**ben, "X-Forwarded-User": "ana", "X-Remote-User": "ana",
                 "X-Tenant": "other", "X-Email": "ana@bank.example"},
    )  # fmt: skip
    assert plain.status_code == smuggled.status_code == 200
    seen = [{h["doc_id"] for h in r.json()["results"]} for r in (plain, smuggled)]
    assert seen[0] == seen[1] and "wire-limits" not in seen[1]


def test_a_click_outside_the_routes_scope_is_the_404_of_an_absent_document(
    world: tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey], tmp_path: Path
) -> None:
    app, client, key = world
    # ana is entitled to hr and on the document's access list, but her route is policy/fresh.
    feed = tmp_path / "hr.jsonl"
    feed.write_text(records(doc("hr-bonus", "HR bonus memo.", ["S-1"], corpus="hr")))
    assert app.operators.ingest(feed).ok
    ana = bearer(token(key, "ana"))
    outside = client.post("/v1/click", json={"source_system": "sp", "external_id": "hr-bonus"},
                          headers=ana)  # fmt: skip
    absent = client.post("/v1/click", json={"source_system": "sp", "external_id": "hr-gone!"},
                         headers=ana)  # fmt: skip
    assert outside.status_code == absent.status_code == 404
    assert outside.json()["detail"].replace("hr-bonus", "X") == absent.json()["detail"].replace(
        "hr-gone!", "X"
    )
    # Outside the route's scope the document is absent before any decision: nothing is on
    # record for its corpus (a decision made only when such a document exists would say so
    # in the audit log and the metrics), and nothing was counted.
    decisions = [e.payload for e in app._dep.store.audit_events("bank")
                 if e.payload.get("resource") == "hr"]  # fmt: skip
    assert decisions == []
    # In her route's scope the same click counts; a session that is not hers, or a route that
    # does not exist, is the same 404 whether the document exists or not.
    inside = {"source_system": "sp", "external_id": "wire-limits"}
    assert client.post("/v1/click", json=inside, headers=ana).status_code == 204
    ben_session = client.post("/v1/sessions", json={}, headers=bearer(token(key, "ben")))
    for extra in ({"session": ben_session.json()["session_id"]}, {"route": "nope"}):
        mine = client.post("/v1/click", json=inside | extra, headers=ana)
        gone = client.post("/v1/click", json={**inside, "external_id": "gone"} | extra,
                           headers=ana)  # fmt: skip
        assert mine.status_code == gone.status_code == 404
        assert mine.json() == gone.json()


@pytest.mark.parametrize(
    "claim",
    [{"sub": "ana\x00"}, {"email": "ana@bank.example\x00"}, {"tenant": "bank\x00"},
     {"roles": ["analyst", "examiner\x00"]}, {"doc_entitlements": ["policy:read\x00"]}],
    ids=["sub", "email", "tenant", "roles", "entitlements"],
)  # fmt: skip
def test_a_token_whose_identity_holds_a_nul_is_refused(
    world: tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey], claim: dict[str, object]
) -> None:
    _, client, key = world
    r = client.post(
        "/v1/search", json={"query": "wire"}, headers=bearer(token(key, "ana", **claim))
    )
    assert r.status_code == 401, r.text
    with pytest.raises(ValueError, match="NUL"):
        govrag.Principal(**{"sub": "ana", "email": "ana@bank.example", "tenant": "bank", **claim})
