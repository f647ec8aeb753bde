"""The HTTP API over real HTTP on loopback (uvicorn in this process), as a hostile caller
would use it: no token, a forged one, another tenant's, identity smuggled into the body; and
as a legitimate one: the governed search and the cited answer, each caller seeing only what
its rights allow."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serving import UNLIMITED, bank, bearer, serving

import govrag

REFUSED = {"type": "https://govrag.dev/problems/unauthorized", "title": "Unauthorized",
           "status": 401, "detail": "invalid or missing bearer token"}  # fmt: skip


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[govrag.Govrag]:
    feed = bank(tmp_path_factory.mktemp("http") / "bank")
    with govrag.open(
        feed.parent, auth={"dev_tokens": True, "tenants": ["bank", "other"]}, server=UNLIMITED
    ) as opened:
        assert opened.operators.ingest(feed).ok
        yield opened


@pytest.fixture(scope="module")
def url(app: govrag.Govrag) -> Iterator[str]:
    with serving(app) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as c:
        yield c


def doc_ids(body: dict[str, Any]) -> set[str]:
    return {hit["doc_id"] for hit in body["results"]}


def test_liveness_needs_no_token(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer"}, {"Authorization": "Bearer not-a-token"},
     {"Authorization": "Basic YW5hOnB3"}, {"Authorization": "Bearer a.b.c"},
     {"Authorization": "bearer " + "x" * 20_000}],
    ids=["none", "empty", "garbage", "basic", "three-parts", "huge"],
)  # fmt: skip
def test_every_refused_token_gets_the_same_401(
    client: httpx.Client, headers: dict[str, str]
) -> None:
    for path, body in [("/v1/search", {"query": "wire"}), ("/v1/ask", {"question": "wire?"})]:
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == 401 and r.json() == REFUSED
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["www-authenticate"].startswith("Bearer")


def test_a_tampered_token_is_refused_like_no_token(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    token = app.operators.dev_token("ana")
    head, payload, sig = token.split(".")
    for forged in (f"{head}.{payload}.{sig[::-1]}", f"{head}.{payload}.", token + "x"):
        r = client.post("/v1/search", json={"query": "wire"},
                        headers={"Authorization": f"Bearer {forged}"})  # fmt: skip
        assert r.status_code == 401 and r.json() == REFUSED


def test_each_caller_finds_only_what_its_rights_allow(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    query = {"query": "wire limit card fees", "strategy": "keyword"}
    ana = client.post("/v1/search", json=query, headers=bearer(app, "ana"))
    ben = client.post("/v1/search", json=query, headers=bearer(app, "ben"))
    assert ana.status_code == 200 and ben.status_code == 200, (ana.text, ben.text)
    assert doc_ids(ana.json()) == {"wire-limits"} and doc_ids(ben.json()) == {"card-fees"}
    assert all(d["verdict"] == "ALLOW" for d in ana.json()["decisions"])


def test_another_tenants_caller_sees_nothing_of_this_tenant(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    r = client.post("/v1/search", json={"query": "wire limit", "strategy": "keyword"},
                    headers=bearer(app, "zed"))  # fmt: skip
    # A corpus is per tenant: zed searches tenant "other"'s policy corpus, which is empty,
    # and nothing of tenant "bank"'s comes back.
    assert r.status_code == 200, r.text
    body = r.json()
    assert [(d["corpus"], d["verdict"], d["reason"]) for d in body["decisions"]] == [
        ("policy", "ALLOW", "allowed")]  # fmt: skip
    assert doc_ids(body) == set() and not body["hidden"]["present"]
    assert "wire-limits" not in r.text and "50,000" not in r.text


@pytest.mark.parametrize(
    "smuggled",
    [{"tenant": "other"}, {"sub": "ben"}, {"principal": {"sub": "ben"}},
     {"email": "ben@bank.example"}, {"clearance": "restricted"},
     {"doc_entitlements": ["policy:read"]}],
)  # fmt: skip
def test_identity_in_the_body_is_refused(
    client: httpx.Client, app: govrag.Govrag, smuggled: dict[str, Any]
) -> None:
    r = client.post("/v1/search", json={"query": "wire", **smuggled}, headers=bearer(app, "ben"))
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"
    assert set(smuggled) <= set(r.json()["fields"])
    assert "wire-limits" not in r.text


def test_bad_bodies_name_the_field(client: httpx.Client, app: govrag.Govrag) -> None:
    cases = [({}, "query"), ({"query": ""}, "query"), ({"query": "x" * 5000}, "query"),
             ({"query": "x", "top_k": 0}, "top_k"), ({"query": "x", "top_k": True}, "top_k"),
             ({"query": "x", "filters": [{"key": "year", "op": "eq", "value": float("nan")}]},
              "filters.0"),
             ({"query": "x", "filters": [{"key": "year", "op": "range",
                                          "lte": float("inf")}]}, "filters.0"),
             ({"query": "x", "strategy": "magic"}, "strategy")]  # fmt: skip
    for body, field in cases:
        # NaN and Infinity as Python's JSON writes them (not standard JSON, but parsed).
        raw = json.dumps(body).encode()
        r = client.post("/v1/search", content=raw, headers={
            **bearer(app, "ana"), "content-type": "application/json"})  # fmt: skip
        assert r.status_code == 400 and field in r.json()["fields"], (body, r.text)
    r = client.post("/v1/search", content=b"{not json", headers={
        **bearer(app, "ana"), "content-type": "application/json"})  # fmt: skip
    assert r.status_code == 400


def test_a_session_is_only_its_principals(client: httpx.Client, app: govrag.Govrag) -> None:
    first = client.post("/v1/search", json={"query": "wire", "strategy": "keyword"},
                        headers=bearer(app, "ana")).json()  # fmt: skip
    session = first["session_id"]
    again = client.post(
        "/v1/search",
        headers=bearer(app, "ana"),
        json={"query": "wire", "session": session, "strategy": "keyword"},
    )
    assert again.status_code == 200 and again.json()["session_id"] == session
    stolen = client.post("/v1/search", json={"query": "wire", "session": session},
                         headers=bearer(app, "ben"))  # fmt: skip
    absent = client.post("/v1/search", json={"query": "wire", "session": "ses-0000000000000000"},
                         headers=bearer(app, "ben"))  # fmt: skip
    # "Not yours" and "absent" are one answer: the same status and body but for the id the
    # caller itself sent.
    assert stolen.status_code == absent.status_code == 404
    assert stolen.text.replace(session, "ID") == absent.text.replace("ses-0000000000000000", "ID")


def test_ask_answers_with_citations_from_the_callers_evidence(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    r = client.post("/v1/ask", json={"question": "What is the EU corporate wire limit?"},
                    headers=bearer(app, "ana"))  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert "50,000" in body["answer"]
    assert {c["doc_id"] for c in body["citations"]} == {"wire-limits"}
    # The examiner can replay it from the audit log alone.
    assert app.operators.replay(body["request_id"]).verdict_before_search


def test_the_openapi_schema_declares_bearer_auth(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    assert {"/healthz", "/v1/search", "/v1/ask"} <= set(schema["paths"])
    assert any(
        s.get("scheme") == "bearer" for s in schema["components"]["securitySchemes"].values()
    )
    search = schema["paths"]["/v1/search"]["post"]
    assert search["security"] and "401" in search["responses"]


@pytest.mark.parametrize(("module", "edge"), [("fastapi", "govrag.server.app"),
                                              ("jwt", "govrag.auth")])  # fmt: skip
def test_without_the_extra_the_import_names_it(
    monkeypatch: pytest.MonkeyPatch, module: str, edge: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes ``import <module>`` fail
    for name in [m for m in sys.modules if m == edge or m.startswith(edge + ".")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(govrag.MissingExtraError) as info:
        importlib.import_module(edge)
    assert info.value.extra == "server" and "pip install 'govrag[server]'" in str(info.value)


# -- attacks found by the red-team review of the HTTP edge ------------------------------------


def test_two_authorization_headers_are_refused(client: httpx.Client, app: govrag.Govrag) -> None:
    good = f"Bearer {app.operators.dev_token('ana')}"
    for pair in ([good, "Bearer garbage"], ["Bearer garbage", good], [good, good]):
        r = client.post("/v1/search", json={"query": "wire"},
                        headers=[("Authorization", h) for h in pair])  # fmt: skip
        assert r.status_code == 401 and r.json() == REFUSED, pair


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("POST", "/v1/nope", 404), ("POST", "//v1/search", 404), ("POST", "/v1/search/", 404),
     ("GET", "/v1/search", 405), ("PUT", "/v1/ask", 405)],
)  # fmt: skip
def test_routing_refusals_are_problem_documents(
    client: httpx.Client, app: govrag.Govrag, method: str, path: str, status: int
) -> None:
    r = client.request(method, path, json={"query": "wire"}, headers=bearer(app, "ana"))
    assert r.status_code == status and r.headers["content-type"] == "application/problem+json"
    assert r.json()["status"] == status and "location" not in r.headers
    if status == 405:
        assert r.headers["allow"] == "POST"


@pytest.mark.parametrize(
    "raw",
    [b'{"query": "\xff\xfe"}', b'{"query": "x", "corpora": ' + b"[" * 5000 + b"]" * 5000 + b"}"],
    ids=["not-utf8", "deep"],
)  # fmt: skip
def test_unparsable_bodies_are_problem_documents(
    client: httpx.Client, app: govrag.Govrag, raw: bytes
) -> None:
    r = client.post("/v1/search", content=raw,
                    headers={**bearer(app, "ana"), "content-type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [("/v1/search", b'{"query": "wire", "session": "\\ud800"}', "session"),
     ("/v1/ask", b'{"question": "wire?", "session": "\\udc00"}', "session"),
     ("/v1/search", b'{"query": "wire", "route": "\\ud800"}', "route"),
     ("/v1/search", b'{"query": "wire", "session": "ses-\\u0000"}', "session"),
     ("/v1/search", b'{"query": "wire", "corpora": ["po\\u0000licy"]}', "corpora.0")],
)  # fmt: skip
def test_names_that_are_not_text_are_a_400_not_a_500(
    client: httpx.Client, app: govrag.Govrag, path: str, raw: bytes, field: str
) -> None:
    r = client.post(path, content=raw,
                    headers={**bearer(app, "ana"), "content-type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and field in r.json()["fields"], r.text


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"filters": [{"key": "a", "op": "in", "values": list(range(5000))}]}, "filters"),
     ({"filters": [{"key": f"k{i}", "value": i} for i in range(2000)]}, "filters"),
     ({"corpora": [f"c{i}" for i in range(1000)]}, "corpora"),
     ({"session": "s" * 100_000}, "session"), ({"route": "r" * 100_000}, "route")],
    ids=["in-values", "many-filters", "many-corpora", "long-session", "long-route"],
)  # fmt: skip
def test_oversized_requests_are_refused_before_the_store(
    client: httpx.Client, app: govrag.Govrag, extra: dict[str, Any], field: str
) -> None:
    # Before: 5000 'in' values or 2000 filters were a 503 "store unavailable" (SQLite's
    # expression depth), 1000 corpora 1000 DENY audit records, a long name echoed back whole.
    r = client.post("/v1/search", json={"query": "wire", **extra}, headers=bearer(app, "ana"))
    assert r.status_code == 400 and field in r.json()["fields"], r.text[:300]


def test_every_strategy_and_the_time_filters_over_http(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    """The body takes every strategy, as_of, a time range and min_score; the answer names the
    strategy; a time outside the stored years is a 400 naming the field, not a 500."""
    for strategy in ("keyword", "semantic", "hybrid", "temporal", "graph"):
        r = client.post("/v1/search", headers=bearer(app, "ana"),
                        json={"query": "wire limit", "strategy": strategy})  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["strategy"] == strategy
    r = client.post("/v1/search", headers=bearer(app, "ana"), json={
        "query": "wire limit", "strategy": "temporal", "as_of": "2026-01-01T00:00:00Z",
        "time_range": {"field": "updated_at", "start": "2020-01-01T00:00:00Z"},
        "min_score": 0.001})  # fmt: skip
    assert r.status_code == 200, r.text
    for bad in ({"as_of": "0999-01-01T00:00:00Z"}, {"as_of": "2026-01-01T00:00:00"},
                {"time_range": {"start": "2027-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}},
                {"min_score": -1}):  # fmt: skip
        r = client.post("/v1/search", headers=bearer(app, "ana"),
                        json={"query": "wire limit", **bad})  # fmt: skip
        assert r.status_code == 400, (bad, r.status_code, r.text)
        assert r.json()["fields"] == [next(iter(bad))]
