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
from pathlib import Path
from typing import Any

import anyio
import pytest
from serving import bank, seed_bank

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
    async def calls(client: Any) -> list[Any]:
        return [
            await client.call_tool("retrieve_documents", {"corpus": "policy", "query": "wire"}),
            await client.call_tool("search_knowledge", {"query": "branches open weekdays"}),
            await client.call_tool("list_corpora", {}),
            await client.call_tool("get_document_metadata",
                                   {"doc_id": "wire-limits", "source_system": "sp"}),
            await client.call_tool("get_document_metadata",  # ben's document
                                   {"doc_id": "card-fees", "source_system": "sp"}),
            await client.call_tool("retrieve_documents", {"corpus": "hr", "query": "salaries"}),
        ]  # fmt: skip

    retrieved, searched, listed, described, forbidden, outside = run(dep, "--as", "ana",
                                                                     body=calls)  # fmt: skip
    got = retrieved.structured_content
    assert not retrieved.is_error
    anas = {"wire-limits", "handbook/branch-hours.md"}  # what ana may read; card-fees is ben's
    assert got["results"][0]["doc_id"] == "wire-limits"
    assert {c["doc_id"] for c in got["results"]} <= anas
    assert "EUR 50,000" in retrieved.content[0].text
    assert [d["verdict"] for d in got["decisions"]] == ["ALLOW"]
    found = searched.structured_content["results"]
    assert found[0]["doc_id"] == "handbook/branch-hours.md"
    assert {c["doc_id"] for c in found} <= anas
    assert [c["corpus"] for c in listed.structured_content["corpora"]] == ["policy"]
    assert described.structured_content["document"]["title"] == "Wire transfer limits"
    assert forbidden.is_error and "no document sp:card-fees" in forbidden.content[0].text
    assert "Debit" not in json.dumps(forbidden.model_dump())
    assert outside.structured_content["results"] == []
    assert [d["reason"] for d in outside.structured_content["decisions"]] == ["out_of_scope"]
    # One connection, one pinned session; every call a request of its own, on the log.
    sessions = {r.structured_content["session_id"] for r in (retrieved, searched, listed)}
    assert len(sessions) == 1
    with govrag.open(dep) as app:
        replay = app.replay(got["request_id"]).as_dict()
    assert replay["request_id"] == got["request_id"]
    proposed = [p for p in replay["proposed"] if p["tool"] == "retrieve_documents"]
    assert proposed[0]["arguments"] == {"corpus": "policy", "query": "wire"}


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
        token = app.dev_token("ben")
    result = run(dep, "--token", token, body=call)
    assert {c["doc_id"] for c in result.structured_content["results"]} == {"card-fees"}
