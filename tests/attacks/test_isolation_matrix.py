"""Attack: learn that an id exists, or whose it is, by naming it where a caller may name one.

An id is a question an attacker can ask: a guessed session id, another tenant's document, a
colleague's request. The promise (issue 34, item 4) is that naming an id one may not use is
refused, and refused in the very words an id nobody has gets, on every edge: the library
(:class:`~govrag.app.Callers`, :class:`~govrag.app.Examiners`), the HTTP API, the MCP
endpoint (the official client over streamable HTTP, and ``govrag mcp`` over stdio) and the
command line. If one forbidden id were answered differently from an absent one, in a status,
an exception type, a header, a word or a field, the answer would say "this exists, it is just
not yours", and a guessing attacker would enumerate sessions, documents and requests.

So every place an edge takes an id is tried with (a) an id that does not exist, (b) ids that
exist in another tenant (one whose owner has the caller's own ``sub``; a document whose
other-tenant ACL names the caller's email) and (c) ids that exist in the caller's tenant but
are not the caller's to use (a colleague's session, request or memory entry; a document its
ACL, its clearance, its corpus's entitlement or its route keeps away, or one deleted; a corpus
outside the route; a tool of another route, or one the route's manifest has but offers no
caller). The kinds: session ids, document ids (source system and external id), corpus ids,
tool names, request ids (replay), write-back entry ids (``supersedes``), MCP session ids
(``Mcp-Session-Id``), and tenants and principals (``sub``) named in a body or in tool
arguments. Every attempt must be refused, and the refusal (library: exception type and
message; HTTP: status, media type, header names and JSON body; MCP: the tool error or the
protocol error; CLI: exit code, stdout and stderr) must equal the absent id's, named by the
same caller through the same operation, once the id itself and the ids that are random per
request are replaced. A refusal that is a result (a corpus decided DENY, memory not admitted)
counts as one only with nothing found. Nothing may name a title, a text, an owner, another
tenant or another route: every answer is checked against the world's secrets. The matrix is
``edge x kind x case``, on SQLite and on PostgreSQL. Each operation also serves an id the
caller may use, so that no probe is refused for a reason of its own (a malformed body would
refuse every id alike, and prove nothing).

What is out of the matrix, and why: a route is never forbidden to a caller (the policy gate
decides corpora, not routes), so only an absent route is tried, which may name no other
(``test_route_enumeration.py`` tries every place); a tenant in a query string is not read at
all (the answer is the one without it); a corpus of the route's scope that the caller is not
entitled to is named in the session's pinned scope to every caller of the route, so its
``no_entitlement`` decision tells nothing new; chunk ids and internal document ids are taken
by no edge (a click and the metadata tool name a document by source system and external id);
replay on the command line is the operator's, who holds the deployment's files; and
``Callers.writeback_admit`` takes no principal (its caller names the writer), so only its
session check is in the matrix.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from http_world import (
    BANK,
    OTHER,
    PEOPLE,
    SECRET,
    SECRET_ENV,
    auth_settings,
    bearer,
    doc,
    ident,
    pem_public,
    records,
    rsa_key,
    token,
)
from pydantic import BaseModel
from typer.testing import CliRunner

import govrag
from govrag.app import AdmissionGate, Memory
from govrag.cli.main import app as CLI
from govrag.errors import GovragError
from govrag.types import Principal
from server.serving import UNLIMITED, serving, subprocess_env

from conftest import BACKENDS, pg_store_settings
from test_http_parity import RANDOM

mcp = pytest.importorskip("mcp")  # the dev extra installs it; a bare checkout skips

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

# -- the world --------------------------------------------------------------------------------
#
# Tenant bank: ana and ben (analysts), eve (examiner). Tenant other: zed, and principals who
# share a sub with bank's (ana@other, eve@other: the same ``sub``, another tenant). The
# default route ``search`` has scope policy, fresh, vault (nobody here is entitled to it) and
# ledger (kept to tenant other: for bank it does not exist); ``board-investigations`` is a
# second route with its own tool and scope board (which nobody here is entitled to). Bank
# also holds documents in payroll, which no route allows. The documents are http_world's, and
# those below.

ROUTE = {
    "route_id": "search",
    "intent": "search",
    "tool_manifest": "retrieval",
    "retrieval": {"mode": "tool", "scope": ["policy", "fresh", "vault", "ledger"]},
}
PRIVATE_ROUTE = "board-investigations"
PRIVATE_TOOL = "board_lookup"
#: A tool of the route's own manifest that no caller may call (kind ``other``).
UNCALLABLE_TOOL = "open_ticket"
QUERY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["query"],
    "properties": {
        "query": {"type": "string", "maxLength": 256},
        "corpus": {"type": "string", "maxLength": 256},
    },
}
#: Words of every document: a search that leaked one would find it.
Q = "wire desk limit memo merger totals quarter fees keys minutes"

BANK_DOCS = [
    doc(
        "wire-memo",
        "Restricted memo: the corporate wire limit will rise to EUR 90,000.",
        ["S-1", "S-2"],
        classification="restricted",
    ),
    doc(
        "payroll-wire",
        "Payroll wire exceptions for corporate desk clients.",
        ["S-1"],
        corpus="payroll",
    ),
    doc("vault-keys", "Vault keys rotate quarterly for the wire desk.", ["S-1"], corpus="vault"),
    doc(
        "board-minutes", "Board minutes: the wire desk merger is approved.", ["S-1"], corpus="board"
    ),
    # ana's once, deleted since (retired.jsonl): as absent as one never made.
    doc("retired-memo", "Retired memo: the old wire desk limit of the quarter.", ["S-1"]),
]
OTHER_DOCS = [
    ident("ana@bank.example", "O-2"),  # ana's email has an account in tenant other too
    doc("ana-abroad", "Tenant other: the wire note on the Lisbon desk.", ["O-2"]),
    doc(
        "other-ledger",
        "Ledger of tenant other: wire totals of the quarter.",
        ["O-1", "O-2"],
        corpus="ledger",
    ),
]
#: What no answer to a bank caller may name (titles, texts, owners, other routes, a corpus
#: kept to another tenant); a caller's own tenant and sub are left out for that caller.
SECRETS = sorted(
    {r["title"] for r in BANK + OTHER + BANK_DOCS + OTHER_DOCS if r["type"] == "document"}
    | {r["text"][:24] for r in BANK + OTHER + BANK_DOCS + OTHER_DOCS if r["type"] == "document"}
    | {"owner@bank.example", "ben@bank.example", "zed@other.example", "S-9", "O-1", "O-2"}
    | {"'ben'", "'zed'", "'eve'", PRIVATE_ROUTE, PRIVATE_TOOL, "ledger", "board", "payroll"}
)
#: Who calls: a ``sub`` of :data:`PEOPLE` and, after ``@``, another tenant than its own.
CALLERS = ["ana", "ben", "zed", "eve", "ana@other", "eve@other"]


def configure(root: Path, key: rsa.RSAPrivateKey, store: dict[str, str] | None) -> None:
    """The deployment's files: tenant bank scaffolded on ``store`` (default: SQLite), the
    routes and manifests above, a principals file for the command line (the same claims the
    tokens carry). Settings are in ``govrag.toml``, so the command line and ``govrag mcp``
    open the same deployment the server does."""
    govrag.init(root, tenant="bank", corpora=["policy", "fresh"])
    (root / "keys" / "idp-rsa.pem").write_bytes(pem_public(key))
    toml = (root / "govrag.toml").read_text()
    if store is not None:
        sqlite = 'url = "sqlite:///govrag.db"'
        assert sqlite in toml
        toml = toml.replace(sqlite, f'url = "{store["url"]}"\nadmin_url = "{store["admin_url"]}"')
    (root / "govrag.toml").write_text(toml + '\n[corpora.ledger]\ntenants = ["other"]\n')
    (root / "routes" / "search.json").write_text(json.dumps(ROUTE))
    (root / "routes" / "private.json").write_text(
        json.dumps(
            [
                {
                    "route_id": PRIVATE_ROUTE,
                    "tool_manifest": "board",
                    "retrieval": {"mode": "tool", "scope": ["board"]},
                }
            ]
        )
    )
    (root / "manifests" / "board.json").write_text(
        json.dumps(
            {
                "manifest_id": "board",
                "version": "1",
                "tools": [
                    {
                        "name": PRIVATE_TOOL,
                        "description": "Board papers.",
                        "parameters": QUERY,
                        "pdp_action": "retrieve_documents",
                        "kind": "retrieve",
                        "corpus": "board",
                    }
                ],
            }
        )
    )
    manifest = json.loads((root / "manifests" / "retrieval.json").read_text())
    manifest["tools"].append(
        {
            "name": UNCALLABLE_TOOL,
            "description": "Open a ticket.",
            "parameters": QUERY,
            "pdp_action": "open_ticket",
            "kind": "other",
        }
    )
    (root / "manifests" / "retrieval.json").write_text(json.dumps(manifest))
    people = [{"sub": sub, **claims} for sub, claims in PEOPLE.items()]
    (root / "principals.json").write_text(json.dumps({"principals": people}))
    (root / "bank.jsonl").write_text(records(*BANK, *BANK_DOCS))
    retired = {"type": "delete", "source_system": "sp", "external_id": "retired-memo"}
    (root / "retired.jsonl").write_text(records(retired))
    (root / "other.jsonl").write_text(records(*OTHER, *OTHER_DOCS))


def memory(supersedes: str | None = None, content: str = "Ana prefers short answers.") -> Memory:
    return Memory(
        source_turn_id="turn-1",
        gate=AdmissionGate.USER_CONFIRMED,
        content=content,
        confidence=0.9,
        expires_at=datetime.now(UTC) + timedelta(days=1),
        supersedes=supersedes,
    )


def memory_body(session: str, supersedes: str | None = None) -> dict[str, Any]:
    m = memory(supersedes)
    return {
        "session": session,
        "source_turn_id": m.source_turn_id,
        "gate": m.gate.value,
        "content": m.content,
        "confidence": m.confidence,
        "expires_at": m.expires_at.isoformat(),
        "supersedes": supersedes,
    }


def absent_id(prefix: str) -> str:
    """An id of the deployment's own format that nothing has (made now, so never guessed)."""
    return f"{prefix}{secrets.token_hex(8)}"


@dataclass
class World:
    app: govrag.Govrag
    root: Path
    url: str
    client: httpx.Client
    tokens: dict[str, str]
    principals: dict[str, Principal]
    #: ``(kind, case) -> (caller, id)``.
    ids: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    #: ana's own session, which her memory probes write into.
    own_session: str = ""
    #: The absent id's outcome per (kind, edge, op, caller): computed once.
    absent: dict[tuple[str, str, str, str], Any] = field(default_factory=dict)
    #: Outcomes of ``govrag mcp --as ana`` over stdio, per (tool, its arguments as JSON).
    stdio: dict[tuple[str, str], Any] = field(default_factory=dict)


def _claims(caller: str) -> tuple[str, dict[str, Any]]:
    sub, _, tenant = caller.partition("@")
    return sub, ({"tenant": tenant} if tenant else {})


@pytest.fixture(scope="module", params=BACKENDS)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    store = None
    if request.param == "postgres":
        store = pg_store_settings(request.getfixturevalue("pg_cluster"))
    root = tmp_path_factory.mktemp(f"isolation-{request.param}") / "bank"
    key = rsa_key()
    configure(root, key, store)
    settings = {
        "auth": auth_settings(),
        "server": UNLIMITED,
        "writeback": {"enabled": True, "allowed_agents": ["ana", "ben", "zed"]},
    }
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SECRET_ENV, SECRET)
        with govrag.open(root, **settings) as app, serving(app, mcp=True) as url:
            assert app.operators.ingest(root / "bank.jsonl").ok
            assert app.operators.ingest(root / "other.jsonl", tenant="other").ok
            assert app.operators.ingest(root / "retired.jsonl").report.deleted == 1
            tokens = {c: token(key, _claims(c)[0], **_claims(c)[1]) for c in CALLERS}
            principals = {c: app.callers.verify_token(t).principal for c, t in tokens.items()}
            with httpx.Client(base_url=url, timeout=60) as client:
                w = World(app, root, url, client, tokens, principals)
                build_ids(w)
                yield w


def build_ids(w: World) -> None:
    """What exists: others' sessions, requests and memory, and the fixed ids of the world."""
    c, p = w.app.callers, w.principals

    def session(caller: str) -> str:
        return c.open_session(p[caller]).session_id

    def request(caller: str) -> str:
        return c.search(p[caller], Q).request_id

    def remembered(caller: str) -> str:
        own = session(caller)
        admitted = c.remember(p[caller], own, memory(content=f"{caller} keeps notes."))
        assert admitted.admitted and admitted.id, admitted
        return admitted.id

    w.own_session = session("ana")
    ids = {
        ("session", "absent"): ("ana", absent_id("ses-")),
        ("session", "other tenant"): ("ana", session("zed")),
        ("session", "other tenant, same sub"): ("ana", session("ana@other")),
        ("session", "same tenant, a colleague's"): ("ana", session("ben")),
        ("document", "absent"): ("ana", "no-such-document"),
        ("document", "other tenant"): ("ana", "their-wire"),
        ("document", "other tenant, ACL names the caller's email"): ("ana", "ana-abroad"),
        ("document", "same tenant, ACL excludes the caller"): ("ana", "card-fees"),
        ("document", "same tenant, above the caller's clearance"): ("ana", "wire-memo"),
        ("document", "same tenant, corpus outside the route"): ("ana", "payroll-wire"),
        ("document", "same tenant, corpus not entitled"): ("ana", "vault-keys"),
        ("document", "same tenant, outside the route, not entitled"): ("ana", "board-minutes"),
        ("document", "same tenant, the caller's once, deleted"): ("ana", "retired-memo"),
        ("corpus", "absent"): ("ana", "no-such-corpus"),
        ("corpus", "other tenant's, named in the route file"): ("ana", "ledger"),
        ("corpus", "same tenant, outside the route"): ("ana", "payroll"),
        ("corpus", "same tenant, outside the route, not entitled"): ("ana", "board"),
        ("tool", "absent"): ("ana", "drop_tables"),
        ("tool", "another route's"): ("ana", PRIVATE_TOOL),
        ("tool", "the route's own, not callable"): ("ana", UNCALLABLE_TOOL),
        ("tenant", "absent"): ("ana", "ghost"),
        ("tenant", "other tenant"): ("ana", "other"),
        ("tenant", "own tenant"): ("ana", "bank"),
        ("principal", "absent"): ("ana", "nobody"),
        ("principal", "same tenant, a colleague"): ("ana", "ben"),
        ("principal", "other tenant"): ("ana", "zed"),
        ("principal", "own sub"): ("ana", "ana"),
        ("memory", "absent"): ("ana", f"writeback:{secrets.token_hex(32)}"),
        ("memory", "other tenant"): ("ana", remembered("zed")),
        ("memory", "same tenant, a colleague's"): ("ana", remembered("ben")),
        ("memory", "own, another session"): ("ana", remembered("ana")),
    }
    # Requests: an examiner replays its own tenant's; an analyst replays none, not even its own.
    for caller in ("ana", "eve", "eve@other"):
        ids[("request", f"absent, as {caller}")] = (caller, absent_id("req-"))
    ids[("request", "other tenant, as examiner")] = ("eve", request("zed"))
    ids[("request", "other tenant, same sub, as examiner")] = ("eve@other", request("ana"))
    ids[("request", "same tenant, a colleague's, as analyst")] = ("ana", request("ben"))
    ids[("request", "other tenant, as analyst")] = ("ana", request("zed"))
    ids[("request", "own, as analyst")] = ("ana", request("ana"))
    # A pre-2026 MCP session of ana's, named by others with their own good tokens.
    _, mcp_session = fresh_mcp_session(w)
    for caller in ("ben", "zed", "ana@other"):
        ids[("mcp session", f"absent, as {caller}")] = (caller, secrets.token_hex(16))
    ids[("mcp session", "same tenant, a colleague's")] = ("ben", mcp_session)
    ids[("mcp session", "other tenant")] = ("zed", mcp_session)
    ids[("mcp session", "other tenant, same sub")] = ("ana@other", mcp_session)
    w.ids = ids


# -- outcomes ---------------------------------------------------------------------------------

Outcome = dict[str, Any]
#: Random per request, session or admission: dropped before comparing (the parity test's).
RANDOM_KEYS = RANDOM
RANDOM_IDS = re.compile(r"\b(req|ses|aud|http)-[0-9a-f]{16}\b")


def plain(value: Any) -> Any:
    """A result as JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if hasattr(value, "as_dict"):
        return plain(value.as_dict())
    if is_dataclass(value) and not isinstance(value, type):
        return plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return json.loads(json.dumps(value, default=str))


def denied(result: Any) -> bool:
    """A result that is itself a refusal: every corpus decision DENY and nothing found, or
    memory not admitted."""
    if not isinstance(result, dict):
        return False
    if "admitted" in result:
        return result["admitted"] is False
    decisions = result.get("decisions")
    return (
        bool(decisions)
        and result.get("results") == []
        and all(d["verdict"] == "DENY" for d in decisions)
    )


def refused(o: Outcome) -> bool:
    if "raised" in o or "mcp_error" in o:
        return True
    if "tools" in o:  # a tool listing
        return False
    if "status" in o:
        return bool(o["status"] >= 400 or denied(o["body"]))
    if "is_error" in o:
        return bool(o["is_error"] or denied(o["structured"]))
    if "exit" in o:
        return bool(o["exit"] != 0 or denied(o["stdout"]))
    return denied(o["returned"])


def shown(value: Any, named: str) -> Any:
    """``value`` with the id it was asked about as ``<ID>`` and random ids and fields gone."""
    if isinstance(value, dict):
        return {k: shown(v, named) for k, v in value.items() if k not in RANDOM_KEYS}
    if isinstance(value, list):
        return [shown(v, named) for v in value]
    if isinstance(value, str):
        value = re.sub(rf"(?<![\w-]){re.escape(named)}(?![\w-])", "<ID>", value)
        return RANDOM_IDS.sub(r"\1-<random>", value)
    return value


def leaks(outcome: Any, caller: str) -> list[str]:
    """The secrets an answer to ``caller`` names (its own sub and tenant are its own)."""
    sub, _, tenant = caller.partition("@")
    tenant = tenant or PEOPLE[sub]["tenant"]
    mine = {f"'{sub}'", f"'{tenant}'", f"tenant {tenant}"}
    text = json.dumps(outcome, ensure_ascii=False)
    named = [*SECRETS, "'bank'", "'other'", "tenant bank", "tenant other"]
    return [s for s in named if s not in mine and s in text]


# -- the edges --------------------------------------------------------------------------------

#: An operation: ``(world, caller, id) -> outcome``.
Op = Callable[[World, str, str], Outcome]


def library(call: Callable[[World, Principal, str], Any]) -> Op:
    def run(w: World, caller: str, value: str) -> Outcome:
        try:
            return {"returned": plain(call(w, w.principals[caller], value))}
        except GovragError as exc:
            return {"raised": type(exc).__name__, "message": str(exc)}

    return run


def http(
    method: str,
    path: Callable[[World, str], str],
    *,
    body: Callable[[World, str], Any] | None = None,
    params: Callable[[str], dict[str, str]] | None = None,
) -> Op:
    def run(w: World, caller: str, value: str) -> Outcome:
        r = w.client.request(
            method,
            path(w, value),
            headers=bearer(w.tokens[caller]),
            json=body(w, value) if body else None,
            params=params(value) if params else None,
        )
        media = r.headers.get("content-type", "").split(";")[0]
        return {
            "status": r.status_code,
            "media": media,
            "headers": sorted(set(r.headers) - {"date", "content-length"}),
            "body": r.json() if "json" in media else r.text,
        }

    return run


def _mcp_call(tool: str, arguments: dict[str, Any]) -> Callable[[Any], Any]:
    async def act(client: Any) -> Outcome:
        result = await client.call_tool(tool, arguments)
        return {
            "is_error": result.is_error,
            "text": [c.text for c in result.content],
            "structured": result.structured_content,
        }

    return act


async def _mcp_list(client: Any) -> Outcome:
    try:
        return {"tools": sorted(t.name for t in (await client.list_tools()).tools)}
    except mcp.MCPError as exc:
        return {"mcp_error": exc.error.code, "message": exc.error.message}


def over_mcp(
    act: Callable[[str], Callable[[Any], Any]], *, session: bool = False, query: str = ""
) -> Op:
    """The official MCP client over streamable HTTP, with the caller's token; the id goes
    into the call (``act(id)``), the ``Govrag-Session`` header or the URL's ``?{query}=``."""

    def run(w: World, caller: str, value: str) -> Outcome:
        headers = bearer(w.tokens[caller]) | ({"Govrag-Session": value} if session else {})
        url = f"{w.url}/mcp" + (f"?{query}={value}" if query else "")

        async def main() -> Outcome:
            async with (
                httpx.AsyncClient(headers=headers, timeout=60) as client,
                Client(streamable_http_client(url, http_client=client)) as mcp_client,
            ):
                outcome: Outcome = await act(value)(mcp_client)
                return outcome

        return anyio.run(main)

    return run


LEGACY = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
HELLO = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "ana", "version": "1"},
    },
}


def mcp_session(method: str) -> Op:
    """A pre-2026 request naming an MCP session (``Mcp-Session-Id``): the official client
    sends only its own, so the request is made by hand."""

    def run(w: World, caller: str, value: str) -> Outcome:
        headers = LEGACY | bearer(w.tokens[caller]) | {"Mcp-Session-Id": value}
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        r = w.client.request(
            method, "/mcp", headers=headers, json=listing if method == "POST" else None
        )
        return {
            "status": r.status_code,
            "media": r.headers.get("content-type"),
            "headers": sorted(set(r.headers) - {"date", "content-length"}),
            "body": r.text,
        }

    return run


def cli(*args: str) -> Op:
    """``govrag ARGS`` as ana (``--as``: the principals file), in this process, with the id
    where ``{}`` is."""

    def run(w: World, caller: str, value: str) -> Outcome:
        assert caller == "ana"  # the only --as the matrix uses
        argv = [a.replace("{}", value) for a in args]
        done = CliRunner().invoke(CLI, [*argv, "--as", caller, "-d", str(w.root)])
        try:
            stdout: Any = json.loads(done.stdout) if done.stdout else ""
        except ValueError:
            stdout = done.stdout
        return {"exit": done.exit_code, "stdout": stdout, "stderr": done.stderr}

    return run


def stdio(tool: str | None, arguments: Callable[[str], dict[str, Any]]) -> Op:
    """A call of ``govrag mcp --as ana`` over stdio: made by :func:`stdio_outcomes` in one
    connection (a subprocess per call would cost seconds each); looked up here."""

    def run(w: World, caller: str, value: str) -> Outcome:
        return w.stdio[(tool or value, json.dumps(arguments(value), sort_keys=True))]

    run.stdio = (tool, arguments)  # type: ignore[attr-defined]
    return run


WIRE = {"source_system": "sp", "external_id": "wire-limits"}  # ana's own document
RETRIEVE = "retrieve_documents"


def retrieve_args(corpus: str = "policy", **extra: Any) -> dict[str, Any]:
    return {"query": Q, "corpus": corpus, **extra}


def session_ops() -> dict[str, dict[str, Op]]:
    def lib(name: str, *args: Any) -> Op:
        """``Callers.<name>(principal, *args, session=id)``."""
        return library(lambda w, p, v: getattr(w.app.callers, name)(p, *args, session=v))

    return {
        "library": {
            "session": library(lambda w, p, v: w.app.callers.session(p, v)),
            "search": lib("search", Q),
            "ask": lib("ask", "What is the corporate wire limit?"),
            "retrieve": lib("retrieve", RETRIEVE, retrieve_args()),
            "corpora": lib("corpora"),
            "document": lib("document", "sp", "wire-limits"),
            "click": lib("click", "sp", "wire-limits"),
            "offered_tools": lib("offered_tools"),
            "call_tool": lib("call_tool", "list_corpora", {}),
            "remember": library(lambda w, p, v: w.app.callers.remember(p, v, memory())),
            "writeback_admit": library(
                lambda w, p, v: w.app.callers.writeback_admit(
                    memory().candidate(p.tenant, v, p.sub)
                )
            ),
        },
        "http": {
            "GET /v1/sessions/{id}": http("GET", lambda w, v: f"/v1/sessions/{v}"),
            "POST /v1/search": http(
                "POST", lambda w, v: "/v1/search", body=lambda w, v: {"query": Q, "session": v}
            ),
            "POST /v1/ask": http(
                "POST",
                lambda w, v: "/v1/ask",
                body=lambda w, v: {"question": "What is the corporate wire limit?", "session": v},
            ),
            "POST /v1/retrieve": http(
                "POST",
                lambda w, v: "/v1/retrieve",
                body=lambda w, v: {"tool": RETRIEVE, "arguments": retrieve_args(), "session": v},
            ),
            "GET /v1/corpora": http(
                "GET", lambda w, v: "/v1/corpora", params=lambda v: {"session": v}
            ),
            "GET /v1/documents": http(
                "GET", lambda w, v: "/v1/documents/sp/wire-limits", params=lambda v: {"session": v}
            ),
            "POST /v1/click": http(
                "POST", lambda w, v: "/v1/click", body=lambda w, v: WIRE | {"session": v}
            ),
            "POST /v1/memory": http(
                "POST", lambda w, v: "/v1/memory", body=lambda w, v: memory_body(v)
            ),
        },
        "mcp": {
            "tools/list": over_mcp(lambda v: _mcp_list, session=True),
            "tools/call": over_mcp(lambda v: _mcp_call("list_corpora", {}), session=True),
        },
        "cli": {
            "search --session": cli("search", Q, "--session", "{}", "--json"),
            "ask --session": cli(
                "ask", "What is the corporate wire limit?", "--session", "{}", "--json"
            ),
        },
    }


def metadata_args(v: str) -> dict[str, Any]:
    return {"doc_id": v, "source_system": "sp"}


def search_args(v: str) -> dict[str, Any]:
    return {"query": Q, "corpora": [v]}


def named_ops(kind: str) -> dict[str, dict[str, Op]]:
    """A tenant or a principal (``sub``) named in tool arguments or a request body."""
    key = "tenant" if kind == "tenant" else "sub"

    def args(v: str) -> dict[str, Any]:
        return retrieve_args(**{key: v})

    return {
        "library": {
            "retrieve": library(lambda w, p, v: w.app.callers.retrieve(p, RETRIEVE, args(v))),
            "call_tool": library(lambda w, p, v: w.app.callers.call_tool(p, RETRIEVE, args(v))),
        },
        "http": {
            "POST /v1/search": http(
                "POST", lambda w, v: "/v1/search", body=lambda w, v: {"query": Q, key: v}
            ),
            "POST /v1/retrieve": http(
                "POST",
                lambda w, v: "/v1/retrieve",
                body=lambda w, v: {"tool": RETRIEVE, "arguments": args(v)},
            ),
        },
        "mcp": {"retrieve_documents": over_mcp(lambda v: _mcp_call(RETRIEVE, args(v)))},
        "mcp-stdio": {"retrieve_documents": stdio(RETRIEVE, args)},
    }


def tool_args(v: str) -> dict[str, Any]:
    return retrieve_args()


OPS: dict[str, dict[str, dict[str, Op]]] = {
    "session": session_ops(),
    "document": {
        "library": {
            "document": library(lambda w, p, v: w.app.callers.document(p, "sp", v)),
            "click": library(lambda w, p, v: w.app.callers.click(p, "sp", v)),
            "call_tool": library(
                lambda w, p, v: w.app.callers.call_tool(
                    p, "get_document_metadata", metadata_args(v)
                )
            ),
        },
        "http": {
            "GET /v1/documents/sp/{id}": http("GET", lambda w, v: f"/v1/documents/sp/{v}"),
            "POST /v1/click": http(
                "POST",
                lambda w, v: "/v1/click",
                body=lambda w, v: {"source_system": "sp", "external_id": v},
            ),
        },
        "mcp": {
            "get_document_metadata": over_mcp(
                lambda v: _mcp_call("get_document_metadata", metadata_args(v))
            )
        },
        "mcp-stdio": {"get_document_metadata": stdio("get_document_metadata", metadata_args)},
        "cli": {"click": cli("click", "sp:{}")},
    },
    "corpus": {
        "library": {
            "search": library(lambda w, p, v: w.app.callers.search(p, Q, corpora=[v])),
            "retrieve": library(
                lambda w, p, v: w.app.callers.retrieve(p, RETRIEVE, retrieve_args(v))
            ),
            "call_tool retrieve_documents": library(
                lambda w, p, v: w.app.callers.call_tool(p, RETRIEVE, retrieve_args(v))
            ),
            "call_tool search_knowledge": library(
                lambda w, p, v: w.app.callers.call_tool(p, "search_knowledge", search_args(v))
            ),
        },
        "http": {
            "POST /v1/search": http(
                "POST", lambda w, v: "/v1/search", body=lambda w, v: search_args(v)
            ),
            "POST /v1/retrieve": http(
                "POST",
                lambda w, v: "/v1/retrieve",
                body=lambda w, v: {"tool": RETRIEVE, "arguments": retrieve_args(v)},
            ),
        },
        "mcp": {
            "retrieve_documents": over_mcp(lambda v: _mcp_call(RETRIEVE, retrieve_args(v))),
            "search_knowledge": over_mcp(lambda v: _mcp_call("search_knowledge", search_args(v))),
        },
        "mcp-stdio": {
            "retrieve_documents": stdio(RETRIEVE, retrieve_args),
            "search_knowledge": stdio("search_knowledge", search_args),
        },
        "cli": {"search --corpus": cli("search", Q, "--corpus", "{}", "--json")},
    },
    "tool": {
        "library": {
            "retrieve": library(lambda w, p, v: w.app.callers.retrieve(p, v, retrieve_args())),
            "call_tool": library(lambda w, p, v: w.app.callers.call_tool(p, v, retrieve_args())),
        },
        "http": {
            "POST /v1/retrieve": http(
                "POST",
                lambda w, v: "/v1/retrieve",
                body=lambda w, v: {"tool": v, "arguments": retrieve_args()},
            )
        },
        "mcp": {"tools/call": over_mcp(lambda v: _mcp_call(v, retrieve_args()))},
        "mcp-stdio": {"tools/call": stdio(None, tool_args)},
    },
    **{kind: named_ops(kind) for kind in ("tenant", "principal")},
    "memory": {
        "library": {
            "remember supersedes": library(
                lambda w, p, v: w.app.callers.remember(p, w.own_session, memory(supersedes=v))
            )
        },
        "http": {
            "POST /v1/memory supersedes": http(
                "POST", lambda w, v: "/v1/memory", body=lambda w, v: memory_body(w.own_session, v)
            )
        },
    },
    "request": {
        "library": {"replay": library(lambda w, p, v: w.app.examiners.replay(p, v))},
        "http": {
            "GET /v1/audit/requests/{id}": http("GET", lambda w, v: f"/v1/audit/requests/{v}")
        },
    },
    "mcp session": {
        "mcp": {"POST /mcp tools/list": mcp_session("POST"), "DELETE /mcp": mcp_session("DELETE")},
    },
}

#: The cases of each kind (fixed here; the ids themselves are made by :func:`build_ids`).
CASES = {
    "session": ["other tenant", "other tenant, same sub", "same tenant, a colleague's"],
    "document": [
        "other tenant",
        "other tenant, ACL names the caller's email",
        "same tenant, ACL excludes the caller",
        "same tenant, above the caller's clearance",
        "same tenant, corpus outside the route",
        "same tenant, corpus not entitled",
        "same tenant, outside the route, not entitled",
        "same tenant, the caller's once, deleted",
    ],
    "corpus": [
        "other tenant's, named in the route file",
        "same tenant, outside the route",
        "same tenant, outside the route, not entitled",
    ],
    "tool": ["another route's", "the route's own, not callable"],
    "tenant": ["other tenant", "own tenant"],
    "principal": ["same tenant, a colleague", "other tenant", "own sub"],
    "memory": ["other tenant", "same tenant, a colleague's", "own, another session"],
    "request": [
        "other tenant, as examiner",
        "other tenant, same sub, as examiner",
        "same tenant, a colleague's, as analyst",
        "other tenant, as analyst",
        "own, as analyst",
    ],
    "mcp session": ["same tenant, a colleague's", "other tenant", "other tenant, same sub"],
}
MATRIX = [
    (kind, edge, op, case)
    for kind, edges in OPS.items()
    for edge, ops in edges.items()
    for op in ops
    for case in CASES[kind]
]


def absent_case(w: World, kind: str, caller: str) -> str:
    """The absent id the caller names of ``kind``."""
    for (k, case), (who, value) in w.ids.items():
        if k == kind and case.startswith("absent") and who == caller:
            return value
    raise AssertionError(f"no absent {kind} id for {caller}")


@pytest.fixture(scope="module")
def stdio_outcomes(world: World) -> dict[tuple[str, str], Outcome]:
    """Every stdio call of the matrix, absent ids included, in one ``govrag mcp --as ana``
    connection (its first call opens the session the others continue)."""
    calls: set[tuple[str, str]] = set()
    wanted: list[tuple[str, dict[str, Any]]] = []
    for kind, edges in OPS.items():
        for op in edges.get("mcp-stdio", {}).values():
            tool, arguments = op.stdio  # type: ignore[attr-defined]
            values = {world.ids[(kind, case)][1] for case in CASES[kind]}
            values.add(absent_case(world, kind, "ana"))
            if kind in CONTROLS:
                values.add(CONTROLS[kind](world)[1])
            for v in sorted(values):
                key = (tool or v, json.dumps(arguments(v), sort_keys=True))
                if key not in calls:
                    calls.add(key)
                    wanted.append((tool or v, arguments(v)))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "govrag.cli", "mcp", "--as", "ana", "-d", str(world.root)],
        env=subprocess_env(),
    )

    async def main() -> dict[tuple[str, str], Outcome]:
        got = {}
        async with Client(params) as client:
            for tool, arguments in wanted:
                key = (tool, json.dumps(arguments, sort_keys=True))
                got[key] = await _mcp_call(tool, arguments)(client)
        return got

    world.stdio = anyio.run(main)
    return world.stdio


def attempt(w: World, kind: str, edge: str, op: str, caller: str, value: str) -> Outcome:
    return OPS[kind][edge][op](w, caller, value)


@pytest.mark.parametrize(("kind", "edge", "op", "case"), MATRIX, ids=["|".join(m) for m in MATRIX])
def test_a_foreign_id_is_refused_as_an_absent_one(
    world: World, request: pytest.FixtureRequest, kind: str, edge: str, op: str, case: str
) -> None:
    if edge == "mcp-stdio":
        request.getfixturevalue("stdio_outcomes")
    caller, value = world.ids[(kind, case)]
    nothing = absent_case(world, kind, caller)
    key = (kind, edge, op, caller)
    if key not in world.absent:
        world.absent[key] = attempt(world, kind, edge, op, caller, nothing)
    absent = world.absent[key]
    forbidden = attempt(world, kind, edge, op, caller, value)
    assert refused(absent), absent
    assert refused(forbidden), forbidden
    assert shown(forbidden, value) == shown(absent, nothing)
    assert leaks(shown(forbidden, value), caller) == []
    assert leaks(shown(absent, nothing), caller) == []


# -- the probes can succeed: an id the caller may use is served ------------------------------


def fresh_session(w: World) -> tuple[str, str]:
    return "ana", w.app.callers.open_session(w.principals["ana"]).session_id


def fresh_mcp_session(w: World) -> tuple[str, str]:
    """A new pre-2026 MCP session of ana's (the SDK's ``initialize``)."""
    opened = w.client.post("/mcp", json=HELLO, headers=LEGACY | bearer(w.tokens["ana"]))
    assert opened.status_code == 200, opened.text
    return "ana", opened.headers["mcp-session-id"]


#: Per kind, an id the caller may use (made fresh when using it changes something).
CONTROLS: dict[str, Callable[[World], tuple[str, str]]] = {
    "session": fresh_session,
    "document": lambda w: ("ana", "wire-limits"),
    "corpus": lambda w: ("ana", "policy"),
    "tool": lambda w: ("ana", RETRIEVE),
    "request": lambda w: ("eve", w.ids[("request", "same tenant, a colleague's, as analyst")][1]),
    "mcp session": fresh_mcp_session,
}
OPERATIONS = [
    (kind, edge, op) for kind, edges in OPS.items() for edge, ops in edges.items() for op in ops
]


@pytest.mark.parametrize(("kind", "edge", "op"), OPERATIONS, ids=["|".join(o) for o in OPERATIONS])
def test_an_id_the_caller_may_use_is_served(
    world: World, request: pytest.FixtureRequest, kind: str, edge: str, op: str
) -> None:
    # Else a probe refused for a reason of its own (a malformed body, a missing argument)
    # would refuse every id alike, and the matrix would prove nothing.
    if edge == "mcp-stdio":
        request.getfixturevalue("stdio_outcomes")
    if kind in ("tenant", "principal"):  # none may be named: refused for naming one
        outcome = attempt(world, kind, edge, op, "ana", "ana" if kind == "principal" else "bank")
        named = "tenant" if kind == "tenant" else "sub"
        assert refused(outcome) and re.search(rf"\b{named}\b", json.dumps(outcome)), outcome
        return
    if kind == "memory":  # superseding an entry of one's own session: a session of its own
        own = world.own_session
        try:
            caller, world.own_session = fresh_session(world)
            mine = world.app.callers.remember(
                world.principals["ana"], world.own_session, memory(content="Ana's own note.")
            )
            assert mine.id is not None
            outcome = attempt(world, kind, edge, op, caller, mine.id)
        finally:
            world.own_session = own
    else:
        caller, value = CONTROLS[kind](world)
        outcome = attempt(world, kind, edge, op, caller, value)
    assert not refused(outcome), outcome


# -- routes: none is forbidden to a caller, so only an absent one ----------------------------

ROUTE_OPS: dict[str, Op] = {
    "library open_session": library(lambda w, p, v: w.app.callers.open_session(p, route=v)),
    "library search": library(lambda w, p, v: w.app.callers.search(p, Q, route=v)),
    "library document": library(
        lambda w, p, v: w.app.callers.document(p, "sp", "card-fees", route=v)
    ),
    "http POST /v1/sessions": http(
        "POST", lambda w, v: "/v1/sessions", body=lambda w, v: {"route": v}
    ),
    "http GET /v1/corpora": http("GET", lambda w, v: "/v1/corpora", params=lambda v: {"route": v}),
    "http POST /v1/click": http(
        "POST",
        lambda w, v: "/v1/click",
        body=lambda w, v: {"source_system": "sp", "external_id": "card-fees", "route": v},
    ),
    "mcp tools/list": over_mcp(lambda v: _mcp_list, query="route"),
    "mcp tools/call": over_mcp(lambda v: _mcp_call("list_corpora", {}), query="route"),
}


@pytest.mark.parametrize("op", sorted(ROUTE_OPS))
def test_an_absent_route_is_refused_naming_no_other(world: World, op: str) -> None:
    guessed = "no-such-route"
    outcome = ROUTE_OPS[op](world, "ana", guessed)
    assert refused(outcome), outcome
    assert leaks(shown(outcome, guessed), "ana") == []
    assert "known routes" not in json.dumps(outcome) and "'search'" not in json.dumps(outcome)


def test_the_matrix_covers_every_edge_and_kind() -> None:
    # Each kind on each edge that takes it (see the module docstring for what no edge takes).
    edges = {kind: set(by_edge) for kind, by_edge in OPS.items()}
    assert edges["session"] == {"library", "http", "mcp", "cli"}
    assert edges["document"] == edges["corpus"] == {"library", "http", "mcp", "mcp-stdio", "cli"}
    assert edges["tool"] == edges["tenant"] == edges["principal"]
    assert edges["tool"] == {"library", "http", "mcp", "mcp-stdio"}
    assert edges["request"] == edges["memory"] == {"library", "http"}
    assert edges["mcp session"] == {"mcp"}
    assert set(OPS) == set(CASES)
    assert all(CASES[kind] for kind in OPS)


TENANT_IN_QUERY: dict[str, tuple[Op, Op]] = {
    f"http GET {path}": (
        http("GET", lambda w, v, path=path: path, params=lambda v: {"tenant": v}),
        http("GET", lambda w, v, path=path: path),
    )
    for path in ("/v1/corpora", "/v1/documents/sp/wire-limits", "/v1/documents/sp/their-wire")
} | {
    "mcp list_corpora": (
        over_mcp(lambda v: _mcp_call("list_corpora", {}), query="tenant"),
        over_mcp(lambda v: _mcp_call("list_corpora", {})),
    )
}


@pytest.mark.parametrize("tenant", ["ghost", "other", "bank"])
@pytest.mark.parametrize("op", sorted(TENANT_IN_QUERY))
def test_a_tenant_in_a_query_string_changes_nothing(world: World, op: str, tenant: str) -> None:
    # No body or argument takes a tenant (the matrix's tenant rows); a query string's unknown
    # parameters are not read at all: the answer is the one without it, the caller's own.
    named, unnamed = TENANT_IN_QUERY[op]
    assert shown(named(world, "ana", tenant), tenant) == shown(unnamed(world, "ana", ""), tenant)
