"""``govrag mcp`` over stdio, driven by the official MCP client SDK: a real subprocess, the
client speaking the protocol to its stdin and stdout.

What a client sees: the route manifest's tools with their schemas (``search_knowledge`` only
while the store holds something for the tenant), governed results as structured content,
refusals as tool errors; what it cannot do: name an identity, a tenant, a route or a session
in arguments, reach a corpus outside the route, read another's document. Every call is on the
audit log, replayable.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from serving import bank, each_tool, governed, seed_bank

import govrag

mcp = pytest.importorskip("mcp")  # the dev extra installs it; a bare checkout skips

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run(dep: Path, *args: str, body: Callable[[Any], Awaitable[Any]]) -> Any:
    """``govrag mcp ARGS`` on ``dep`` as a subprocess; ``body(client)`` over its stdio."""
    env = {**os.environ, "PYTHONPATH": SRC}
    command = ["-m", "govrag.cli", "mcp", *args, "-d", str(dep)]
    params = StdioServerParameters(command=sys.executable, args=command, env=env)

    async def main() -> Any:
        async with Client(params) as client:
            return await body(client)

    return anyio.run(main)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = seed_bank(tmp_path_factory.mktemp("mcp") / "bank")
    # Development tokens, so a test can start the server with a token instead of --as.
    toml = root / "govrag.toml"
    toml.write_text(toml.read_text() + "\n[auth]\ndev_tokens = true\n")
    return root


def test_the_tools_are_the_routes_and_search_needs_a_store(dep: Path, tmp_path: Path) -> None:
    async def listed(client: Any) -> dict[str, Any]:
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    tools = run(dep, "--as", "ana", body=listed)
    assert set(tools) == {"retrieve_documents", "list_corpora", "get_document_metadata",
                          "search_knowledge"}  # fmt: skip
    manifest = json.loads((dep / "manifests" / "retrieval.json").read_text())
    for tool in manifest["tools"]:
        assert tools[tool["name"]] == tool["parameters"]  # the manifest's schema, as written
    assert tools["search_knowledge"]["additionalProperties"] is False
    empty = tmp_path / "empty"
    bank(empty)  # scaffolded, nothing ingested
    assert "search_knowledge" not in run(empty, "--as", "ana", body=listed)


def test_calls_are_governed_and_replayable(dep: Path) -> None:
    results = run(dep, "--as", "ana", body=each_tool)
    with govrag.open(dep) as app:
        sessions = governed(results, app)
    assert len(sessions) == 1  # one connection, one pinned session; each call its own request


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("retrieve_documents", {"corpus": "policy", "query": "fees", "sub": "ben"}, "sub"),
        ("retrieve_documents", {"corpus": "policy", "query": "fees", "tenant": "other"},
         "tenant"),
        ("search_knowledge", {"query": "fees", "principal": {"sub": "ben"}}, "principal"),
        ("search_knowledge", {"query": "fees", "route": "admin"}, "route"),
        ("list_corpora", {"session_id": "ses-0"}, "session_id"),
        ("search_knowledge", {"query": "fees", "filters": [{"key": "year", "op": "in"}]},
         "filters[0]: filter on 'year': op 'in' needs a non-empty 'values' list"),
        ("drop_table", {}, "not offered"),
        ("search_knowledge", {"query": "   "}, "field 'query': query is blank"),
        ("retrieve_documents", {"corpus": "policy", "query": "a\u0000b"}, "NUL"),
    ],
)  # fmt: skip
def test_identity_in_arguments_is_refused(
    dep: Path, tool: str, arguments: dict[str, Any], named: str
) -> None:
    async def call(client: Any) -> Any:
        return await client.call_tool(tool, arguments)

    result = run(dep, "--as", "ana", body=call)
    assert result.is_error and named in result.content[0].text
    assert "Traceback" not in result.content[0].text and "Debit" not in result.content[0].text


def test_who_it_serves_is_fixed_at_start(dep: Path) -> None:
    async def call(client: Any) -> Any:
        return await client.call_tool("retrieve_documents", {"corpus": "policy",
                                                              "query": "annual fee"})  # fmt: skip

    # ben's token: ben's document, whoever the client claims to be.
    with govrag.open(dep) as app:
        token = app.operators.dev_token("ben")
    result = run(dep, "--token", token, body=call)
    assert {c["doc_id"] for c in result.structured_content["results"]} == {"card-fees"}


def test_a_revoked_right_is_gone_at_the_next_call(dep: Path, tmp_path: Path) -> None:
    bonus = {"type": "document", "source_system": "sp", "external_id": "bonus-plan",
             "corpus": "policy", "title": "Bonus plan", "classification": "internal",
             "text": "The 2026 bonus plan pays twelve percent to the corporate desk."}  # fmt: skip
    feed = tmp_path / "bonus.jsonl"

    def grant(account: str) -> None:
        feed.write_text(json.dumps(bonus | {"acl": [account]}) + "\n")
        with govrag.open(dep) as app:
            assert app.operators.ingest(feed).ok

    grant("S-1")
    seen: list[set[str]] = []

    async def twice(client: Any) -> None:
        # One connection (one pinned session): the source revokes ana's right in between.
        for account in ("S-2", None):
            found = await client.call_tool("search_knowledge", {"query": "2026 bonus plan"})
            seen.append({c["doc_id"] for c in found.structured_content["results"]})
            if account:
                grant(account)

    run(dep, "--as", "ana", body=twice)
    assert "bonus-plan" in seen[0] and "bonus-plan" not in seen[1]


def test_the_start_tokens_expiry_ends_the_service(dep: Path) -> None:
    from govrag.server.mcp_server import Binding, build

    with govrag.open(dep) as app:
        verified = app.callers.verify_token(app.operators.dev_token("ana"))
        binding = Binding(verified.principal, None, expires_at=verified.expires_at)
        server = build(app.callers, lambda ctx: binding)

        async def calls() -> tuple[Any, Any, str]:
            async with Client(server) as client:
                before = await client.call_tool("list_corpora", {})
                binding.expires_at = datetime.now(UTC) - timedelta(seconds=1)  # time passes
                after = await client.call_tool("list_corpora", {})
                with pytest.raises(mcp.MCPError) as listing:
                    await client.list_tools()
                return before, after, str(listing.value)

        before, after, listing = anyio.run(calls)
    assert not before.is_error
    assert after.is_error and "expired" in after.content[0].text
    assert "expired" in listing
