"""The MCP endpoint over streamable HTTP (``/mcp``), driven by the official MCP client SDK
against uvicorn on loopback.

What a client sees: the route's tools with the manifest's schemas (``search_knowledge`` only
while the store holds something), governed results as structured content, refusals as tool
errors, a 401 that says where to find the issuer. What it cannot do: call without a verified
token, name an identity in arguments, continue another principal's session, keep a right the
source revoked, reach the endpoint through a rebound host name. Whom each call is for is the
token of the request that carries it; sessions are pinned per MCP session (pre-2026 clients),
per ``Govrag-Session`` header, or one per call (protocol 2026-07-28, which has no sessions).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from serving import UNLIMITED, bank, each_tool, governed, seed_bank, serving

import govrag

mcp = pytest.importorskip("mcp")  # the dev extra installs it; a bare checkout skips

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402


def over_mcp(url: str, headers: dict[str, str], body: Callable[[Any], Awaitable[Any]],
             mode: str = "auto") -> Any:  # fmt: skip
    """``body(client)`` with the SDK's client on ``url`` (``mode``: the SDK's protocol era)."""

    async def main() -> Any:
        async with (
            httpx.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            return await body(client)

    return anyio.run(main)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[govrag.Govrag, str]]:
    root = seed_bank(tmp_path_factory.mktemp("mcp-http") / "bank")
    toml = root / "govrag.toml"
    toml.write_text(toml.read_text() + "\n[auth]\ndev_tokens = true\n")
    with govrag.open(root, server=UNLIMITED) as app, serving(app, mcp=True) as url:
        yield app, url


def token(app: govrag.Govrag, sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.operators.dev_token(sub)}"}


async def listed(client: Any) -> dict[str, Any]:
    return {t.name: t.input_schema for t in (await client.list_tools()).tools}


async def listing_error(client: Any) -> str:
    with pytest.raises(mcp.MCPError) as refused:
        await client.list_tools()
    return str(refused.value)


def test_the_tools_are_the_routes_and_search_needs_a_store(
    served: tuple[govrag.Govrag, str], tmp_path: Path
) -> None:
    app, url = served
    tools = over_mcp(f"{url}/mcp", token(app, "ana"), listed)
    assert set(tools) == {"retrieve_documents", "list_corpora", "get_document_metadata",
                          "search_knowledge"}  # fmt: skip
    manifest = json.loads((app.settings.deployment / "manifests" / "retrieval.json").read_text())
    for tool in manifest["tools"]:
        assert tools[tool["name"]] == tool["parameters"]
    empty = tmp_path / "empty"
    bank(empty)  # scaffolded, nothing ingested
    (empty / "govrag.toml").write_text((empty / "govrag.toml").read_text()
                                       + "\n[auth]\ndev_tokens = true\n")  # fmt: skip
    with govrag.open(empty) as bare, serving(bare, mcp=True) as bare_url:
        assert "search_knowledge" not in over_mcp(f"{bare_url}/mcp", token(bare, "ana"), listed)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_calls_are_governed_and_replayable(served: tuple[govrag.Govrag, str], mode: str) -> None:
    app, url = served
    sessions = governed(over_mcp(f"{url}/mcp", token(app, "ana"), each_tool, mode), app)
    # A pre-2026 MCP session pins one govrag session; 2026-07-28 has none: one per call.
    assert len(sessions) == (1 if mode == "legacy" else 3)


def test_a_session_header_continues_ones_own_session_only(
    served: tuple[govrag.Govrag, str],
) -> None:
    app, url = served
    ana = app.callers.verify_token(app.operators.dev_token("ana")).principal
    mine = app.callers.open_session(ana).session_id

    async def search(client: Any) -> Any:
        return await client.call_tool("search_knowledge", {"query": "wire limit"})

    continued = over_mcp(f"{url}/mcp", token(app, "ana") | {"Govrag-Session": mine}, search)
    assert continued.structured_content["session_id"] == mine
    # Her session pins its route: a URL naming another is refused, for a listing too.
    moved = over_mcp(f"{url}/mcp?route=elsewhere", token(app, "ana") | {"Govrag-Session": mine},
                     listing_error)  # fmt: skip
    assert "cannot change mid-session" in moved
    # ben naming ana's session: the error of a session that never was; nothing of hers.
    theirs = over_mcp(f"{url}/mcp", token(app, "ben") | {"Govrag-Session": mine}, search)
    never = over_mcp(f"{url}/mcp", token(app, "ben") | {"Govrag-Session": "ses-ffffffffffffffff"},
                     search)  # fmt: skip
    assert theirs.is_error and never.is_error
    assert theirs.content[0].text.replace(mine, "X") == never.content[0].text.replace(
        "ses-ffffffffffffffff", "X"
    )
    assert "EUR" not in json.dumps(theirs.model_dump())
    # Two headers, hers and one that is not: refused, not a guess at which one counts.
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_corpora", "arguments": {}, "_meta": meta}}  # fmt: skip
    headers = [*token(app, "ana").items(), ("Govrag-Session", mine),
               ("Govrag-Session", "ses-ffffffffffffffff"),
               ("Accept", "application/json, text/event-stream"),
               ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"),
               ("Mcp-Name", "list_corpora")]  # fmt: skip
    both = httpx.post(f"{url}/mcp", json=call, headers=headers).json()["result"]
    assert both["isError"] and "one Govrag-Session header" in both["content"][0]["text"]


def test_the_route_is_the_urls_and_arguments_carry_no_identity(
    served: tuple[govrag.Govrag, str],
) -> None:
    app, url = served

    async def refused(client: Any) -> list[Any]:
        return [
            await client.call_tool("retrieve_documents",
                                   {"corpus": "policy", "query": "fees", "sub": "ben"}),
            await client.call_tool("search_knowledge", {"query": "fees", "tenant": "other"}),
            await client.call_tool("list_corpora", {"route": "admin"}),
            await client.call_tool("drop_table", {}),
        ]  # fmt: skip

    for result, named in zip(over_mcp(f"{url}/mcp", token(app, "ana"), refused),
                             ["sub", "tenant", "route", "not offered"], strict=True):  # fmt: skip
        assert result.is_error and named in result.content[0].text
        assert "Traceback" not in result.content[0].text

    async def listing(client: Any) -> Any:
        return await client.call_tool("list_corpora", {})

    unknown = over_mcp(f"{url}/mcp?route=nope", token(app, "ana"), listing)
    assert unknown.is_error and "nope" in unknown.content[0].text
    named = over_mcp(f"{url}/mcp?route=search", token(app, "ana"), listing)
    assert not named.is_error and named.structured_content["corpora"]
    # Two routes, or two sessions: which counts would be a guess (a proxy may guess another).
    twice = over_mcp(f"{url}/mcp?route=search&route=admin", token(app, "ana"), listing)
    assert twice.is_error and "at most one route" in twice.content[0].text

    # The listing names the unknown route too, as a protocol error with one line; never the
    # deployment's routes (tests/attacks/test_route_enumeration.py).
    error = over_mcp(f"{url}/mcp?route=nope", token(app, "ana"), listing_error)
    assert error == ("unknown route 'nope'; name a route your deployment's operator gave you, "
                     "or none for the default route")  # fmt: skip


def test_a_revoked_right_is_gone_at_the_next_call(
    served: tuple[govrag.Govrag, str], tmp_path: Path
) -> None:
    app, url = served
    bonus = {"type": "document", "source_system": "sp", "external_id": "bonus-plan",
             "corpus": "policy", "title": "Bonus plan", "classification": "internal",
             "text": "The 2026 bonus plan pays twelve percent to the corporate desk."}  # fmt: skip
    feed = tmp_path / "bonus.jsonl"
    feed.write_text(json.dumps(bonus | {"acl": ["S-1"]}) + "\n")
    assert app.operators.ingest(feed).ok
    results: list[Any] = []

    async def twice(client: Any) -> None:
        # One client, one token, one pre-2026 MCP session (one pinned govrag session).
        for _ in range(2):
            results.append(await client.call_tool("search_knowledge",
                                                  {"query": "2026 bonus plan"}))  # fmt: skip
            # The source revokes ana's right between the two calls.
            feed.write_text(json.dumps(bonus | {"acl": ["S-2"]}) + "\n")
            assert app.operators.ingest(feed).ok

    over_mcp(f"{url}/mcp", token(app, "ana"), twice, "legacy")
    before, after = ([c["doc_id"] for c in r.structured_content["results"]] for r in results)
    assert "bonus-plan" in before and "bonus-plan" not in after
    assert "twelve" not in json.dumps(results[1].model_dump())


def test_a_refused_token_is_told_where_the_issuer_is(served: tuple[govrag.Govrag, str]) -> None:
    _, url = served
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        r = httpx.post(f"{url}/mcp", json=listing, headers=headers)
        assert r.status_code == 401 and r.json()["detail"] == "invalid or missing bearer token"
        assert r.headers["www-authenticate"] == (
            f'Bearer realm="govrag", resource_metadata="{url}/.well-known/'
            'oauth-protected-resource/mcp"'
        )
    metadata = httpx.get(f"{url}/.well-known/oauth-protected-resource/mcp").json()
    # Development tokens have no issuer to discover; a configured one is named (attacks).
    assert metadata == {"resource": f"{url}/mcp", "resource_name": "govrag",
                        "bearer_methods_supported": ["header"]}  # fmt: skip


def test_a_rebound_host_name_is_refused(served: tuple[govrag.Govrag, str]) -> None:
    # A page on evil.example whose name now resolves to 127.0.0.1 reaches a loopback server
    # with its own Host and Origin: refused even with a token the page could not have.
    app, url = served
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = token(app, "ana") | {"Host": "evil.example", "Origin": "http://evil.example",
                                   "Accept": "application/json, text/event-stream"}  # fmt: skip
    r = httpx.post(f"{url}/mcp", json=listing, headers=headers)
    assert r.status_code in (403, 421) and "tools" not in r.text


def test_an_mcp_session_is_its_openers(served: tuple[govrag.Govrag, str]) -> None:
    # A pre-2026 client's session id, learnt by someone else (a log, a proxy): with their own
    # good token it is a session that does not exist.
    app, url = served
    legacy = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "ana", "version": "1"}}}  # fmt: skip
    opened = httpx.post(f"{url}/mcp", json=hello, headers=legacy | token(app, "ana"))
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}

    def send(sub: str, session: str) -> httpx.Response:
        headers = legacy | token(app, sub) | {"Mcp-Session-Id": session}
        return httpx.post(f"{url}/mcp", json=listing, headers=headers)

    assert send("ana", sid).status_code == 200
    theirs, never = send("ben", sid), send("ben", "f" * 32)
    assert theirs.status_code == never.status_code == 404
    assert theirs.text == never.text
    assert httpx.delete(f"{url}/mcp", headers=legacy | token(app, "ben")
                        | {"Mcp-Session-Id": sid}).status_code == 404  # fmt: skip
    assert send("ana", sid).status_code == 200  # still hers


def test_no_stream_outlives_its_request_and_a_batch_gets_one_line(
    served: tuple[govrag.Govrag, str],
) -> None:
    # An open GET stream would hold an in-flight slot for as long as its client idles: 32
    # of them, and nobody else is served. This server sends nothing unasked, so there is none.
    app, url = served
    held = httpx.get(f"{url}/mcp", headers=token(app, "ana") | {"Accept": "text/event-stream"})
    assert held.status_code == 405 and held.headers["allow"] == "POST, DELETE"
    assert httpx.get(f"{url}/mcp").status_code == 401  # the token first, as everywhere
    # A batch (pre-2026 era): the SDK's validation would name library types and a versioned
    # help URL; the answer is one line.
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    legacy = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    r = httpx.post(f"{url}/mcp", json=batch, headers=token(app, "ana") | legacy)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "Invalid request: the body is not one JSON-RPC message (batches are not taken)"
    )
    assert int(r.headers["content-length"]) == len(r.content)


class Ctx:
    """What :meth:`McpEndpoint.bind` reads of the SDK's request context."""

    def __init__(self, principal: Any, mcp_session: str | None, version: str) -> None:
        from starlette.requests import Request

        headers = [(b"mcp-session-id", mcp_session.encode())] if mcp_session else []
        self.request = Request({"type": "http", "method": "POST", "path": "/mcp",
                                "query_string": b"", "headers": headers})  # fmt: skip
        self.request.state.mcp_principal = principal
        self.protocol_version = version


def test_pinned_sessions_are_the_openers_and_end_with_its_token(
    served: tuple[govrag.Govrag, str],
) -> None:
    from datetime import UTC, datetime, timedelta

    from govrag.server.mcp_http import PINNED_PER_PRINCIPAL, McpEndpoint

    app, _ = served
    endpoint = McpEndpoint(
        app.callers,
        "http://127.0.0.1:1/mcp",
        issuer=None,
        max_body_bytes=app.settings.server.max_body_bytes,
    )
    ana = app.callers.verify_token(app.operators.dev_token("ana")).principal
    ben = app.callers.verify_token(app.operators.dev_token("ben")).principal
    # 2026-07-28 has no sessions: an id a client makes up there pins nothing.
    assert endpoint.bind(Ctx(ana, "made-up", "2026-07-28")) is not endpoint.bind(
        Ctx(ana, "made-up", "2026-07-28")
    )
    first = endpoint.bind(Ctx(ana, "mcp-1", "2025-06-18"))
    assert endpoint.bind(Ctx(ana, "mcp-1", "2025-06-18")) is first
    bens = endpoint.bind(Ctx(ben, "mcp-1", "2025-06-18"))
    assert bens is not first
    # Its session ends with the token that opened it; the MCP session goes on in a new one.
    first.continued_in("ses-0000000000000001")
    assert first.session_until == ana.expires_at
    first.session_until = datetime.now(UTC) - timedelta(seconds=1)
    assert endpoint.bind(Ctx(ana, "mcp-1", "2025-06-18")).session is None
    # However many MCP sessions ana opens, she forgets only her own pins, never ben's.
    for i in range(PINNED_PER_PRINCIPAL + 5):
        endpoint.bind(Ctx(ana, f"flood-{i}", "2025-06-18"))
    assert endpoint.bind(Ctx(ben, "mcp-1", "2025-06-18")) is bens
