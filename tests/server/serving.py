"""What the HTTP tests share: the bank deployment they serve, uvicorn on loopback in this
process, bearer tokens of its principals (development tokens, verified like any other), and a
hold that keeps a real request open inside the governed path (so limits are tested at their
bounds without timing anything)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

import govrag
from govrag.server import create_app

RECORDS = [
    {"type": "identity", "email": "ana@bank.example", "source_system": "sp", "account_id": "S-1"},
    {"type": "identity", "email": "ben@bank.example", "source_system": "sp", "account_id": "S-2"},
    {"type": "document", "source_system": "sp", "external_id": "wire-limits", "corpus": "policy",
     "title": "Wire transfer limits", "classification": "internal", "acl": ["S-1"],
     "text": "The EU corporate wire limit is EUR 50,000 per day."},
    {"type": "document", "source_system": "sp", "external_id": "card-fees", "corpus": "policy",
     "title": "Card fees", "classification": "internal", "acl": ["S-2"],
     "text": "Debit cards carry no annual fee."},
    {"type": "document", "source_system": "sp", "external_id": "handbook/branch-hours.md",
     "corpus": "policy", "title": "Branch hours", "classification": "internal", "acl": ["S-1"],
     "text": "Branches open at nine on weekdays."},
]  # fmt: skip
PRINCIPALS = {"principals": [
    {"sub": "ana", "email": "ana@bank.example", "tenant": "bank", "clearance": "internal",
     "doc_entitlements": ["policy:read"]},
    {"sub": "ben", "email": "ben@bank.example", "tenant": "bank", "clearance": "internal",
     "doc_entitlements": ["policy:read"]},
    {"sub": "zed", "email": "zed@other.example", "tenant": "other", "clearance": "internal",
     "doc_entitlements": ["policy:read"]},
    {"sub": "eve", "email": "eve@bank.example", "tenant": "bank", "roles": ["examiner"]},
]}  # fmt: skip

#: ``[server]`` for tests about what requests see, not how many one caller may send
#: (test_limits.py): no caller meets the rate limit, whatever the machine's speed.
UNLIMITED = {"rate_per_minute": 1_000_000, "rate_burst": 100_000}


def bank(root: Path) -> Path:
    """A scaffolded deployment of tenant ``bank`` with :data:`PRINCIPALS`; returns its feed of
    :data:`RECORDS` (not ingested)."""
    govrag.init(root, tenant="bank", corpora=["policy"])
    (root / "principals.json").write_text(json.dumps(PRINCIPALS))
    feed = root / "feed.jsonl"
    feed.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return feed


@dataclass
class Live:
    """One uvicorn server in this process."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    def stop(self) -> None:
        self.server.should_exit = True  # what uvicorn's SIGTERM and SIGINT handlers do
        self.thread.join(60)


def start(api: Any, **options: Any) -> Live:
    """Serve an ASGI app on a free loopback port (uvicorn options as keywords)."""
    options = {"lifespan": "off", "port": 0} | options
    config = uvicorn.Config(api, host="127.0.0.1", log_level="warning", **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a bound on start-up, not a timing assertion
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return Live(server, thread, f"http://127.0.0.1:{port}")


def free_port() -> int:
    """A TCP port on loopback nobody listens on now (for a server that must know its own
    port before it starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(app: govrag.Govrag, *, mcp: bool = False, **config: Any) -> Iterator[str]:
    """``app``'s HTTP API on a free loopback port (uvicorn in a thread); yields its URL. With
    ``mcp``, also the MCP endpoint at ``URL/mcp`` (its sessions need the app's lifespan)."""
    port = free_port() if mcp else 0  # the MCP endpoint names its own URL: port first
    mcp_url = f"http://127.0.0.1:{port}/mcp" if mcp else None
    live = start(create_app(app, mcp_url=mcp_url), port=port, lifespan="on" if mcp else "off",
                 **config)  # fmt: skip
    try:
        yield live.url
    finally:
        live.stop()


#: The checkout's sources, for subprocesses that import govrag.
SRC = Path(__file__).resolve().parents[2] / "src"


def subprocess_env(**overrides: str) -> dict[str, str]:
    """This environment with the checkout's sources on ``PYTHONPATH`` and ``overrides``."""
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **overrides}


class ServeProcess:
    """One ``govrag serve`` subprocess on ``root`` and an HTTP client of it."""

    def __init__(self, name: str, root: Path, env: dict[str, str]) -> None:
        port = free_port()
        self.name = name
        # Its log to a file: uvicorn logs every request, and a pipe nobody reads fills up.
        self.log = root.parent / f"serve-{name}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "govrag", "serve", "--port", str(port), "-d", str(root)],
                env=env, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120  # a bound on start-up, not a timing assertion
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"govrag serve {self.name} exited: {self.log.read_text()[-3000:]}")
            try:
                if self.client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"govrag serve {self.name} did not start"
            time.sleep(0.1)

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # uvicorn drains and exits
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def seed_bank(root: Path) -> Path:
    """:func:`bank` in ``root``, its feed ingested; returns ``root``."""
    feed = bank(root)
    with govrag.open(root) as opened:
        assert opened.operators.ingest(feed).ok
    return root


def bearer(app: govrag.Govrag, sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.operators.dev_token(sub)}"}


@dataclass
class Hold:
    """An audit observer that, once armed, holds the next request that commits a
    ``pep_decision`` (on its worker thread, right after the commit) until released; it also
    keeps every committed event as ``(request_id, kind, payload)``."""

    armed: bool = False
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def arm(self) -> None:
        self.entered.clear()
        self.release.clear()
        self.armed = True

    def __call__(self, event: Any) -> None:
        self.events.append((event.request_id, event.kind, event.payload))
        if self.armed and event.kind == "pep_decision":
            self.armed = False
            self.entered.set()
            self.release.wait(120)

    def kinds(self, request_id: str) -> list[str]:
        return [kind for rid, kind, _ in self.events if rid == request_id]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition()`` holds (a bound against hanging, not a timing assertion)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


#: What ana may read of :data:`RECORDS` (card-fees is ben's).
ANAS = {"wire-limits", "handbook/branch-hours.md"}


async def each_tool(client: Any) -> list[Any]:
    """ana's calls of each MCP tool with an MCP ``client``: a retrieve, a search, the corpus
    listing, her document's metadata, ben's document's, a retrieve outside the route."""
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


def governed(results: list[Any], app: govrag.Govrag) -> set[str]:
    """Check :func:`each_tool`'s results (what ana may read, the refusals, the replay of the
    first from the audit log alone); returns the sessions of the first three."""
    retrieved, searched, listing, described, forbidden, outside = results
    got = retrieved.structured_content
    assert not retrieved.is_error and got["results"][0]["doc_id"] == "wire-limits"
    assert {c["doc_id"] for c in got["results"]} <= ANAS
    assert "EUR 50,000" in retrieved.content[0].text
    assert [d["verdict"] for d in got["decisions"]] == ["ALLOW"]
    found = searched.structured_content["results"]
    assert found[0]["doc_id"] == "handbook/branch-hours.md"
    assert {c["doc_id"] for c in found} <= ANAS
    assert [c["corpus"] for c in listing.structured_content["corpora"]] == ["policy"]
    assert described.structured_content["document"]["title"] == "Wire transfer limits"
    assert forbidden.is_error and "no document sp:card-fees" in forbidden.content[0].text
    assert "Debit" not in json.dumps(forbidden.model_dump())
    assert outside.structured_content["results"] == []
    assert [d["reason"] for d in outside.structured_content["decisions"]] == ["out_of_scope"]
    replay = app.operators.replay(got["request_id"]).as_dict()
    assert replay["request_id"] == got["request_id"]
    proposed = [p for p in replay["proposed"] if p["tool"] == "retrieve_documents"]
    assert proposed[0]["arguments"] == {"corpus": "policy", "query": "wire"}
    return {r.structured_content["session_id"] for r in (retrieved, searched, listing)}
