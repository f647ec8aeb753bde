"""What the HTTP tests share: the bank deployment they serve, uvicorn on loopback in this
process, and bearer tokens of its principals (development tokens, verified like any other)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def bank(root: Path) -> Path:
    """A scaffolded deployment of tenant ``bank`` with :data:`PRINCIPALS`, and its feed."""
    govrag.init(root, tenant="bank", corpora=["policy"])
    (root / "principals.json").write_text(json.dumps(PRINCIPALS))
    feed = root / "feed.jsonl"
    feed.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return feed


@contextmanager
def serving(app: govrag.Govrag, **config: Any) -> Iterator[str]:
    """``app``'s HTTP API on a free loopback port (uvicorn in a thread); yields its URL."""
    server = uvicorn.Server(uvicorn.Config(create_app(app), host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="off",
                                           **config))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a bound on start-up, not a timing assertion
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def bearer(app: govrag.Govrag, sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.dev_token(sub)}"}
