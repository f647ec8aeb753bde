"""A served bank for attacks over HTTP and MCP: real token keys, real principals, hostile
neighbours.

The deployment verifies bearer tokens as a production one does (``[auth] keys``: an RSA
public key in a PEM file and an HS256 secret read from the environment; no development
tokens), so every token a test sends is signed here with real keys, made with the current
time when it is made. Tenant ``bank`` routes ``policy`` and ``fresh`` (which holds nothing);
``hr`` is a corpus the route does not allow; tenant ``other`` is served too (``zed``).
``extra`` records are the "other world" of the noninterference attacks: a document above the
caller's clearance, one in the unrouted corpus, one in the other tenant, each holding the
words the caller searches for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import govrag

ISSUER = "https://idp.bank.example"
AUDIENCE = "govrag-bank"
SECRET_ENV = "GOVRAG_TEST_HTTP_HMAC"
SECRET = "hs256-secret-for-the-http-attacks-0123456789"

#: The claims each principal's tokens carry (the identity provider's view of them).
PEOPLE: dict[str, dict[str, Any]] = {
    "ana": {"email": "ana@bank.example", "tenant": "bank", "clearance": "internal",
            "roles": ["analyst"],
            "doc_entitlements": ["policy:read", "fresh:read", "hr:read"]},
    "ben": {"email": "ben@bank.example", "tenant": "bank", "clearance": "internal",
            "roles": ["analyst"], "doc_entitlements": ["policy:read", "fresh:read"]},
    "zed": {"email": "zed@other.example", "tenant": "other", "clearance": "confidential",
            "roles": ["analyst"], "doc_entitlements": ["policy:read", "hr:read"]},
    "eve": {"email": "eve@bank.example", "tenant": "bank", "clearance": "public",
            "roles": ["examiner"], "doc_entitlements": []},
}  # fmt: skip


def ident(email: str, account: str) -> dict[str, Any]:
    return {"type": "identity", "email": email, "source_system": "sp", "account_id": account}


def doc(external_id: str, text: str, acl: list[str], **kw: Any) -> dict[str, Any]:
    record = {"type": "document", "source_system": "sp", "external_id": external_id,
              "corpus": "policy", "title": external_id.replace("-", " ").title(),
              "classification": "internal", "author": "S-9", "acl": acl, "text": text,
              "updated_at": "2026-07-01T00:00:00Z", "metadata": {"doc_type": "policy"}}  # fmt: skip
    return record | kw


WIRE = "The EU corporate wire limit is EUR 50,000 per day for corporate clients."
BANK = [
    ident("ana@bank.example", "S-1"),
    ident("ben@bank.example", "S-2"),
    ident("owner@bank.example", "S-9"),
    doc("wire-limits", WIRE, ["S-1"]),
    doc("card-fees", "Debit cards carry no annual fee; the wire fee is EUR 5.", ["S-2"]),
    doc("loan-policy", "Corporate loan approvals need two signatures above EUR 1m.", ["*"]),
]  # fmt: skip
OTHER = [ident("zed@other.example", "O-1"),
         doc("their-wire", "Tenant other: the wire limit is EUR 7 per day.", ["O-1"])]  # fmt: skip
#: The other world: documents ana may not see that hold her words (and would change her
#: results, scores or marker if they leaked).
EXTRA_BANK = [
    doc("wire-memo", "Restricted memo: the corporate wire limit will rise to EUR 90,000.",
        ["S-1", "S-2"], classification="restricted"),
    doc("hr-wire", "HR: wire limit exceptions for corporate payroll clients.", ["S-1"],
        corpus="hr"),
]  # fmt: skip
#: In the other tenant's corpus of the same id, above zed's clearance: nothing zed may see
#: either (below it, it would rightly raise zed's marker).
EXTRA_OTHER = [
    ident("ana@bank.example", "O-2"),
    doc(
        "other-wire",
        "The corporate wire limit for EU clients is EUR 1 per day.",
        ["O-2"],
        classification="restricted",
    ),
]


def records(*rows: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_public(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def auth_settings() -> dict[str, Any]:
    return {
        "issuer": ISSUER, "audience": AUDIENCE, "tenants": ["bank", "other"],
        "keys": [{"kid": "rsa-1", "alg": "RS256", "public_key": "keys/idp-rsa.pem"},
                 {"kid": "hs-1", "alg": "HS256", "secret_env": SECRET_ENV}],
    }  # fmt: skip


@contextmanager
def bank(
    root: Path, key: rsa.RSAPrivateKey, *, store: dict[str, Any] | None = None,
    other_world: bool = False, **settings: Any,
) -> Iterator[govrag.Govrag]:  # fmt: skip
    """The bank deployment in ``root``, ingested (with the other world's extra documents when
    ``other_world``), verifying tokens of ``key``; the HMAC secret is in the environment for
    as long as it is open."""
    govrag.init(root, tenant="bank", corpora=["policy", "fresh"])
    (root / "keys" / "idp-rsa.pem").write_bytes(pem_public(key))
    (root / "bank.jsonl").write_text(records(*BANK, *(EXTRA_BANK if other_world else [])))
    (root / "other.jsonl").write_text(records(*OTHER, *(EXTRA_OTHER if other_world else [])))
    overrides: dict[str, Any] = {
        "auth": auth_settings(),
        "writeback": {"enabled": True, "allowed_agents": ["ana", "zed"]},
        # These tests are about what a request may see, not how many one caller may send
        # (tests/server/test_limits.py): no caller here should meet the rate limit.
        "server": {"rate_per_minute": 1_000_000, "rate_burst": 100_000},
        **settings,
    }
    if store is not None:
        overrides["store"] = store
    before = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET
    try:
        with govrag.open(root, **overrides) as app:
            assert app.operators.ingest(root / "bank.jsonl").ok
            assert app.operators.ingest(root / "other.jsonl", tenant="other").ok
            yield app
    finally:
        if before is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = before


World = tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey]


@contextmanager
def served_bank(root: Path) -> Iterator[World]:
    """:func:`bank` in ``root`` verifying a new key, served on loopback: the app, a client of
    the server, and the key its tokens are signed with."""
    from server.serving import serving

    key = rsa_key()
    with (
        bank(root, key) as app,
        serving(app) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield app, client, key


def claims(sub: str, /, **over: Any) -> dict[str, Any]:
    """``sub``'s claims as the identity provider issues them now (``None`` drops a claim)."""
    now = datetime.now(UTC)
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, **PEOPLE[sub], "iat": now, "nbf": now,
            "exp": now + timedelta(minutes=30)}  # fmt: skip
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def token(key: rsa.RSAPrivateKey, sub: str, /, **over: Any) -> str:
    """A valid RS256 token of ``sub`` (unless ``over`` spoils it)."""
    return jwt.encode(claims(sub, **over), key, algorithm="RS256", headers={"kid": "rsa-1"})


def hs_token(sub: str, /, **over: Any) -> str:
    """A valid HS256 token of ``sub`` under the shared secret."""
    return jwt.encode(claims(sub, **over), SECRET, algorithm="HS256", headers={"kid": "hs-1"})


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


#: A request to the MCP endpoint in protocol 2026-07-28: one self-contained POST, the
#: client's identity in ``_meta``, routing headers that must match the body.
MCP_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "attacker", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip


def rpc(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params | {"_meta": MCP_META}}


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return rpc("tools/call", name=name, arguments=arguments)


def mcp_headers(body: dict[str, Any] | None) -> dict[str, str]:
    """The protocol's headers for ``body`` (a proxy routes by them; they must match it)."""
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28"}  # fmt: skip
    if body:
        headers["Mcp-Method"] = body["method"]
        if body["method"] == "tools/call":
            headers["Mcp-Name"] = body["params"]["name"]
    return headers


def mcp_result(client: httpx.Client, headers: dict[str, str], body: dict[str, Any]
               ) -> dict[str, Any]:  # fmt: skip
    """A tool call's result over the MCP endpoint (a refusal: ``isError`` and its text)."""
    r = client.post("/mcp", json=body, headers=headers | mcp_headers(body))
    assert r.status_code == 200 and "result" in r.json(), r.text
    result: dict[str, Any] = r.json()["result"]
    return result
