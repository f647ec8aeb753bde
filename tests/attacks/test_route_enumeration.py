"""A token holder cannot list the deployment's routes by naming one that does not exist.

The route table is the operator's: which routes exist (``board-investigations``, say) is
itself something a caller of one route should not learn. The attacker holds a good token and
sends a made-up route everywhere a route can be named (each ``/v1`` route that takes one, a
session's intent on a deployment without a default route, the MCP endpoint's ``?route=``),
over real HTTP on loopback. Every answer may name the route it sent, and no other. An operator
who runs the CLI on the deployment's files still gets the list (``tests/test_cli.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import govrag
from server.serving import UNLIMITED, bearer, seed_bank, serving

#: The deployment's routes besides the scaffold's ``search``: what the attacker fishes for.
PRIVATE = ["board-investigations", "hr-salaries"]
ROUTES = ["search", *PRIVATE]
SENT = "nope"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = seed_bank(tmp_path_factory.mktemp("routes") / "bank")
    private = [{"route_id": r, "tool_manifest": "retrieval",
                "retrieval": {"mode": "tool", "scope": ["policy"]}} for r in PRIVATE]  # fmt: skip
    (root / "routes" / "private.json").write_text(json.dumps(private))
    return root


def open_bank(root: Path, **settings: Any) -> govrag.Govrag:
    return govrag.open(root, auth={"dev_tokens": True, "tenants": ["bank"]}, server=UNLIMITED,
                       **settings)  # fmt: skip


def names_no_route(text: str) -> None:
    assert SENT in text, text
    for route in ROUTES:
        assert route not in text, (route, text)
    assert "known routes" not in text


def test_an_unknown_route_over_http_names_no_other_route(root: Path) -> None:
    with open_bank(root) as app, serving(app) as url, httpx.Client(base_url=url) as client:
        headers = bearer(app, "ana")
        answers = [
            client.post("/v1/sessions", json={"route": SENT}, headers=headers),
            client.post("/v1/search", json={"query": "wire limit", "route": SENT},
                        headers=headers),
            client.post("/v1/retrieve", json={"tool": "retrieve_documents", "route": SENT,
                                              "arguments": {"query": "wire", "corpus": "policy"}},
                        headers=headers),
            client.post("/v1/ask", json={"question": "What is the wire limit?", "route": SENT},
                        headers=headers),
            client.get("/v1/corpora", params={"route": SENT}, headers=headers),
            client.get("/v1/documents/sp/wire-limits", params={"route": SENT}, headers=headers),
            client.post("/v1/click", json={"source_system": "sp", "external_id": "wire-limits",
                                           "route": SENT}, headers=headers),
        ]  # fmt: skip
        for r in answers:
            assert r.status_code == 404, (r.request.url, r.text)
            names_no_route(r.text)


def test_an_intent_without_a_default_route_names_no_route(root: Path) -> None:
    with open_bank(root, default_route=None) as app, serving(app) as url:
        r = httpx.post(f"{url}/v1/sessions", json={"intent": SENT}, headers=bearer(app, "ana"))
        assert r.status_code == 404
        names_no_route(r.text)


def test_an_unknown_route_over_mcp_names_no_other_route(root: Path) -> None:
    mcp = pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def attempts(url: str, headers: dict[str, str]) -> list[str]:
        texts = []
        async with (
            httpx.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(f"{url}/mcp?route={SENT}", http_client=http)) as client,
        ):
            with pytest.raises(mcp.MCPError) as listing:
                await client.list_tools()
            texts.append(str(listing.value))
            for tool, arguments in [("list_corpora", {}),
                                    ("retrieve_documents", {"corpus": "policy", "query": "wire"}),
                                    ("search_knowledge", {"query": "wire"})]:  # fmt: skip
                called = await client.call_tool(tool, arguments)
                assert called.is_error
                texts.append(json.dumps(called.model_dump()))
        return texts

    with open_bank(root) as app, serving(app, mcp=True) as url:
        headers = bearer(app, "ana")
        for text in anyio.run(attempts, url, headers):
            names_no_route(text)
