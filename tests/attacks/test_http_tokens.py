"""The token matrix through HTTP: every ``/v1`` route and the MCP endpoint refuse every bad
token with the same fixed 401, and a good token's rights are those of the store at each
request.

``tests/auth/test_tokens.py`` shows the verifier refuses each forged, expired, confused or
misdirected token. Over HTTP the question is whether any route forgets to ask it, or answers
a refusal differently (a status, a body, a header that tells one fault from another). So every
token of the matrix is sent to every route of the OpenAPI schema, each with a request a good
token would get past the gate with; 0 may be accepted, and every refusal is one body. The
deployment verifies with real keys (an RSA public key in a PEM file and an HS256 secret from
the environment), and tokens are signed here with the current time when they are made.

Then what a token cannot carry: rights. A right revoked after a token was issued (the
record ingested again without the caller in its access list) is gone for the same token on
the next request, in search, retrieve, document metadata, click and ask, and in the MCP tools.
And a session is its opener's: another principal's good token gets the 404 of an absent
session on every route that takes one, and the MCP endpoint's error of an absent session for
a ``Govrag-Session`` header naming it. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from http_world import (
    ISSUER,
    SECRET,
    bank,
    bearer,
    claims,
    doc,
    hs_token,
    mcp_headers,
    mcp_result,
    pem_public,
    records,
    rpc,
    rsa_key,
    token,
    tool_call,
)

import govrag
from server.serving import serving

from conftest import BACKENDS, pg_store_settings

REFUSED = {"type": "https://govrag.dev/problems/unauthorized", "title": "Unauthorized",
           "status": 401, "detail": "invalid or missing bearer token"}  # fmt: skip
NOT_FOUND = "https://govrag.dev/problems/not-found"


def memory(session: str) -> dict[str, Any]:
    return {"session": session, "source_turn_id": "turn-1", "gate": "USER_CONFIRMED",
            "content": "Prefers short answers.", "confidence": 0.5,
            "expires_at": (datetime.now(UTC) + timedelta(days=1)).isoformat()}  # fmt: skip


#: Every /v1 operation, each with a request a good token gets past the gate with.
ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/sessions", {}),
    ("GET", "/v1/sessions/ses-0000000000000000", None),
    ("POST", "/v1/search", {"query": "wire limit"}),
    ("POST", "/v1/retrieve", {"tool": "retrieve_documents",
                              "arguments": {"query": "wire limit", "corpus": "policy"}}),
    ("POST", "/v1/ask", {"question": "What is the EU corporate wire limit?"}),
    ("GET", "/v1/corpora", None),
    ("GET", "/v1/documents/sp/wire-limits", None),
    ("POST", "/v1/click", {"source_system": "sp", "external_id": "wire-limits"}),
    ("POST", "/v1/memory", memory("ses-0000000000000000")),
    ("GET", "/v1/audit/requests/req-0000000000000000", None),
    ("GET", "/v1/audit/verify", None),
]  # fmt: skip
#: The MCP endpoint, each with a request a good token gets past the gate with (a GET or a
#: DELETE is for pre-2026 MCP sessions).
MCP_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/mcp", rpc("tools/list")),
    ("POST", "/mcp", tool_call("search_knowledge", query="wire limit")),
    ("POST", "/mcp", tool_call("retrieve_documents", query="wire limit", corpus="policy")),
    ("POST", "/mcp", tool_call("list_corpora")),
    ("POST", "/mcp", tool_call("get_document_metadata", doc_id="wire-limits",
                               source_system="sp")),
    ("GET", "/mcp", None),
    ("DELETE", "/mcp", None),
]  # fmt: skip


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: str = "") -> str:
    enc = {k: int(v.timestamp()) if isinstance(v, datetime) else v for k, v in payload.items()}
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(enc).encode())}.{signature}"


def matrix(key: rsa.RSAPrivateKey) -> dict[str, dict[str, str]]:
    """Every bad token (as request headers), made now: none may pass any route."""
    now = datetime.now(UTC)
    other_key = rsa_key()
    good = token(key, "ana")
    head, body, sig = good.split(".")
    swapped = json.loads(base64.urlsafe_b64decode(body + "==")) | {
        "sub": "eve",
        "roles": ["examiner"],
    }
    # The HS/RS confusion: an HMAC "signature" keyed with the RSA public key's PEM, under the
    # RSA key's kid (a verifier that takes the alg from the token would check it with the PEM).
    confused = unsigned({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}, claims("ana"))
    confused_sig = b64(hmac.new(pem_public(key), confused.rstrip(".").encode(),
                                "sha256").digest())  # fmt: skip
    # A token carrying its own key: whoever made it signed it (never read from the token).
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(other_key.public_key()))

    def rs(**over: Any) -> str:
        return token(key, "ana", **over)

    tokens = {
        "malformed: not a jwt": "hello",
        "malformed: four segments": "a.b.c.d",
        "malformed: header not json": f"{b64(b'not json')}.{body}.{sig}",
        "malformed: huge": "a" * 20_000 + ".b.c",
        "expired": rs(exp=now - timedelta(minutes=5), iat=now - timedelta(minutes=20),
                      nbf=now - timedelta(minutes=20)),
        "not yet valid": rs(nbf=now + timedelta(minutes=5)),
        "issued in the future": rs(iat=now + timedelta(minutes=5)),
        "no exp": rs(exp=None),
        # Validly signed, but good for a century (or backdated past [auth]
        # max_token_lifetime_s): a leaked one would be a credential for good.
        "a century's lifetime": rs(exp=now + timedelta(days=36525)),
        "a century's lifetime, hmac": hs_token("ana", exp=now + timedelta(days=36525)),
        "a day and a minute": rs(exp=now + timedelta(days=1, minutes=1)),
        "backdated iat": rs(iat=now - timedelta(days=2), nbf=now - timedelta(days=2)),
        "wrong rsa key": jwt.encode(claims("ana"), other_key, algorithm="RS256",
                                    headers={"kid": "rsa-1"}),
        "wrong hmac secret": jwt.encode(claims("ana"), "x" * 48, algorithm="HS256",
                                        headers={"kid": "hs-1"}),
        "embedded jwk": jwt.encode(claims("ana"), other_key, algorithm="RS256",
                                   headers={"kid": "rsa-1", "jwk": jwk}),
        "wrong audience": rs(aud="someone-else"),
        "no audience": rs(aud=None),
        "wrong issuer": rs(iss="https://evil.example"),
        "dev issuer from the idp key": rs(iss="govrag-dev"),
        "alg none": unsigned({"alg": "none", "kid": "rsa-1"}, claims("ana")),
        "alg None, no kid": unsigned({"alg": "None"}, claims("ana")),
        "alg none, hmac kid": unsigned({"alg": "none", "kid": "hs-1"}, claims("ana")),
        "hs/rs confusion": f"{confused.rstrip('.')}.{confused_sig}",
        "rs token under the hs kid": jwt.encode(claims("ana"), key, algorithm="RS256",
                                                headers={"kid": "hs-1"}),
        "hs token under the rs kid": jwt.encode(claims("ana"), SECRET, algorithm="HS256",
                                                headers={"kid": "rsa-1"}),
        "unknown kid": jwt.encode(claims("ana"), key, algorithm="RS256",
                                  headers={"kid": "rsa-9"}),
        "no kid with several keys": jwt.encode(claims("ana"), key, algorithm="RS256"),
        "payload swapped under a good signature":
            f"{head}.{b64(json.dumps(swapped).encode())}.{sig}",
        "signature stripped": f"{head}.{body}.",
        "a tenant not served": rs(tenant="other-bank"),
        "tenant not a string": rs(tenant=["bank"]),
        "no sub": rs(sub=None),
        "no email": rs(email=None),
        "email not verified": rs(email_verified=False),
        "clearance unknown": rs(clearance="cosmic"),
        "roles not strings": rs(roles=[1, 2]),
    }  # fmt: skip
    headers = {name: bearer(t) for name, t in tokens.items()}
    headers["missing"] = {}
    headers["empty bearer"] = {"Authorization": "Bearer"}
    headers["basic credentials"] = {"Authorization": "Basic YW5hOnB3"}
    return headers


#: The token is refused before any store is read, so the matrix runs on one backend; what a
#: good token may then see (revocation, sessions) is the store's, so that runs on both.
ONE_BACKEND = pytest.mark.parametrize("world", ["sqlite"], indirect=True)
BOTH_BACKENDS = pytest.mark.parametrize("world", BACKENDS, indirect=True)


@pytest.fixture(scope="module")
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey]]:
    key = rsa_key()
    store = None
    if request.param == "postgres":
        store = pg_store_settings(request.getfixturevalue("pg_cluster"))
    root = tmp_path_factory.mktemp("tokens") / "bank"
    with (
        bank(root, key, store=store) as app,
        serving(app, mcp=True) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield app, client, key


def send(client: httpx.Client, method: str, path: str, body: Any,
         headers: dict[str, str] | list[tuple[str, str]]) -> httpx.Response:  # fmt: skip
    if path == "/mcp":
        headers = [*(headers.items() if isinstance(headers, dict) else headers),
                   *mcp_headers(body).items()]  # fmt: skip
    return client.request(method, path, json=body, headers=headers)


@ONE_BACKEND
def test_the_routes_here_are_every_v1_operation(world: Any) -> None:
    _, client, _ = world
    schema = client.get("/openapi.json").json()
    operations = {(m.upper(), p) for p, item in schema["paths"].items() for m in item
                  if p.startswith("/v1/")}  # fmt: skip
    templates = {(m, p.replace("ses-0000000000000000", "{session_id}")
                  .replace("req-0000000000000000", "{request_id}")
                  .replace("/sp/wire-limits", "/{source_system}/{external_id}"))
                 for m, p, _ in ROUTES}  # fmt: skip
    assert templates == operations


@ONE_BACKEND
def test_no_bad_token_passes_any_route_and_every_refusal_is_one_answer(world: Any) -> None:
    _, client, key = world
    accepted, answered, challenges = [], set(), set()
    bad = matrix(key)
    assert len(bad) >= 33
    for name, headers in bad.items():
        for method, path, body in ROUTES + MCP_ROUTES:
            r = send(client, method, path, body, headers)
            if r.status_code != 401:
                accepted.append((name, method, path, r.status_code))
                continue
            answered.add((r.text, r.headers["content-type"]))
            challenges.add((path == "/mcp", r.headers["www-authenticate"]))
            assert r.json() == REFUSED, (name, path)
    assert accepted == []
    # One body and one content type for every token on every route; one challenge on /v1,
    # and one on /mcp that also says where its protected-resource metadata is.
    assert len(answered) == 1
    base = str(client.base_url).rstrip("/")
    assert challenges == {
        (False, 'Bearer realm="govrag"'),
        (True, f'Bearer realm="govrag", resource_metadata="{base}/.well-known/'
               'oauth-protected-resource/mcp"'),
    }  # fmt: skip


@ONE_BACKEND
def test_the_mcp_metadata_names_the_issuer_of_its_tokens(world: Any) -> None:
    # What a standard MCP client reads after a 401 to learn where to get a token.
    _, client, _ = world
    base = str(client.base_url).rstrip("/")
    metadata = client.get("/.well-known/oauth-protected-resource/mcp")
    assert metadata.status_code == 200
    assert metadata.json() == {"resource": f"{base}/mcp", "resource_name": "govrag",
                               "bearer_methods_supported": ["header"],
                               "authorization_servers": [ISSUER]}  # fmt: skip


@ONE_BACKEND
def test_two_authorization_headers_are_refused_even_when_both_are_good(world: Any) -> None:
    _, client, key = world
    good = token(key, "ana")
    both = [("Authorization", f"Bearer {good}"), ("Authorization", f"Bearer {hs_token('ana')}")]
    for method, path, body in ROUTES + MCP_ROUTES:
        r = send(client, method, path, body, both)
        assert r.status_code == 401 and r.json() == REFUSED, path


@ONE_BACKEND
def test_good_tokens_of_both_keys_pass_every_route(world: Any) -> None:
    # The control: the matrix is refused for its faults, not because nothing gets in.
    _, client, key = world
    for good in (token(key, "ana"), hs_token("ana"), token(key, "eve")):
        for method, path, body in ROUTES + MCP_ROUTES:
            r = send(client, method, path, body, bearer(good))
            assert r.status_code != 401, (path, r.text)
            assert r.status_code < 500, (path, r.text)
            if path == "/mcp" and method == "POST":  # answered by the MCP server itself
                assert r.status_code == 200 and "result" in r.json(), r.text


BONUS = "The 2026 bonus plan pays twelve percent to the corporate desk."


@BOTH_BACKENDS
def test_a_right_revoked_after_the_token_was_issued_is_gone_for_that_token(
    world: Any, tmp_path: Path
) -> None:
    app, client, key = world
    feed = tmp_path / "bonus.jsonl"
    feed.write_text(records(doc("bonus-plan", BONUS, ["S-1"])))
    assert app.operators.ingest(feed).ok
    ana = bearer(token(key, "ana"))  # issued while she may read it; kept for the whole test
    question = {"question": "What does the 2026 bonus plan pay the corporate desk?"}
    search = {"query": "2026 bonus plan"}
    call = {"tool": "retrieve_documents",
            "arguments": {"query": "2026 bonus plan", "corpus": "policy"}}  # fmt: skip
    click = {"source_system": "sp", "external_id": "bonus-plan"}

    def sees() -> dict[str, bool]:
        found = client.post("/v1/search", json=search, headers=ana).json()
        retrieved = client.post("/v1/retrieve", json=call, headers=ana).json()
        answer = client.post("/v1/ask", json=question, headers=ana).json()
        searched = mcp_result(client, ana, tool_call("search_knowledge", query="2026 bonus plan"))
        called = mcp_result(client, ana, tool_call("retrieve_documents", query="2026 bonus plan",
                                            corpus="policy"))  # fmt: skip
        described = mcp_result(client, ana, tool_call("get_document_metadata", doc_id="bonus-plan",
                                               source_system="sp"))  # fmt: skip
        return {
            "mcp search": "bonus-plan"
            in {h["doc_id"] for h in searched["structuredContent"]["results"]},
            "mcp retrieve": "bonus-plan"
            in {h["doc_id"] for h in called["structuredContent"]["results"]},
            "mcp metadata": not described["isError"],
            "search": "bonus-plan" in {h["doc_id"] for h in found["results"]},
            "retrieve": "bonus-plan" in {h["doc_id"] for h in retrieved["results"]},
            "metadata": client.get("/v1/documents/sp/bonus-plan", headers=ana).status_code == 200,
            "click": client.post("/v1/click", json=click, headers=ana).status_code == 204,
            "ask": "bonus-plan" in {c["doc_id"] for c in answer["citations"]}
            or "twelve" in answer["answer"],
        }

    uses = [
        "search",
        "retrieve",
        "metadata",
        "click",
        "ask",
        "mcp search",
        "mcp retrieve",
        "mcp metadata",
    ]
    assert sees() == dict.fromkeys(uses, True)
    # The source revokes her right: the record comes again with ben in the list, not ana.
    feed.write_text(records(doc("bonus-plan", BONUS, ["S-2"])))
    assert app.operators.ingest(feed).ok
    assert sees() == dict.fromkeys(uses, False)
    gone = client.get("/v1/documents/sp/bonus-plan", headers=ana)
    absent = client.get("/v1/documents/sp/never-was", headers=ana)
    assert gone.json()["detail"].replace("bonus-plan", "X") == absent.json()["detail"].replace(
        "never-was", "X"
    )


@BOTH_BACKENDS
def test_a_session_is_its_openers_on_every_route_that_takes_one(world: Any) -> None:
    _, client, key = world
    ana = bearer(token(key, "ana"))
    sid = client.post("/v1/sessions", json={}, headers=ana).json()["session_id"]
    uses: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", f"/v1/sessions/{sid}", None),
        ("POST", "/v1/search", {"query": "wire limit", "session": sid}),
        ("POST", "/v1/retrieve", {"tool": "retrieve_documents", "session": sid,
                                  "arguments": {"query": "wire limit", "corpus": "policy"}}),
        ("POST", "/v1/ask", {"question": "What is the wire limit?", "session": sid}),
        ("GET", f"/v1/corpora?session={sid}", None),
        ("GET", f"/v1/documents/sp/loan-policy?session={sid}", None),
        ("POST", "/v1/memory", memory(sid)),
    ]  # fmt: skip
    accepted = []
    for sub in ("ben", "zed", "eve"):
        other = bearer(token(key, sub))
        for method, path, body in uses:
            theirs = send(client, method, path, body, other)
            if theirs.status_code != 404 or theirs.json()["type"] != NOT_FOUND:
                accepted.append((sub, method, path, theirs.status_code))
            # Not found like a session that never was (the id is the caller's own input).
            absent = send(client, method, path.replace(sid, "ses-ffffffffffffffff"),
                          json.loads(json.dumps(body).replace(sid, "ses-ffffffffffffffff")),
                          other)  # fmt: skip
            assert absent.status_code == theirs.status_code, (sub, path)
            assert (
                absent.json()["detail"].replace("ses-ffffffffffffffff", sid)
                == (theirs.json()["detail"])
            ), (sub, path)
    # Over MCP a session is named in the Govrag-Session header: the error of an absent one.
    calls = [body for method, path, body in MCP_ROUTES if body and body["method"] == "tools/call"]
    for sub in ("ben", "zed", "eve"):
        for call in calls:
            theirs = mcp_result(client, bearer(token(key, sub)) | {"Govrag-Session": sid}, call)
            absent = mcp_result(client, bearer(token(key, sub))
                         | {"Govrag-Session": "ses-ffffffffffffffff"}, call)  # fmt: skip
            if not theirs["isError"]:
                accepted.append((sub, "mcp", call["params"]["name"], theirs))
            assert theirs["content"][0]["text"] == absent["content"][0]["text"].replace(
                "ses-ffffffffffffffff", sid
            ), (sub, call)
    assert accepted == []
    # Its opener still uses it on every route (with a fresh token of hers).
    again = bearer(token(key, "ana"))
    for method, path, body in uses:
        r = send(client, method, path, body, again)
        assert r.status_code in (200, 201), (path, r.text)
    for call in calls:
        result = mcp_result(client, again | {"Govrag-Session": sid}, call)
        assert not result["isError"] and result["structuredContent"]["session_id"] == sid
