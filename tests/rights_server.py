"""A source system's rights endpoint on loopback, with switchable faults, for the tests.

The real :class:`~govrag.gateway.rights_http.HttpRightsChecker` talks to it over real HTTP.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RightsSource:
    """What the source knows: which account may read which document. ``mode`` injects a fault."""

    def __init__(self) -> None:
        self.readable: dict[str, set[str]] = {}  # doc id -> accounts
        self.known_accounts: set[str] = set()
        self.mode = "ok"
        #: ``read_timeout``: how long an answer is held back, at most (until ``release``).
        self.delay_s = 0.0
        self.release = threading.Event()
        self.requests = 0
        self.lock = threading.Lock()

    def grant(self, account: str, *doc_ids: str) -> None:
        self.known_accounts.add(account)
        for d in doc_ids:
            self.readable.setdefault(d, set()).add(account)

    def revoke(self, account: str, doc_id: str) -> None:
        self.readable.get(doc_id, set()).discard(account)

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        with self.lock:
            self.requests += 1
        mode = self.mode
        accounts, doc_ids = body["accounts"], body["doc_ids"]
        if mode == "5xx":
            return 503, b'{"error": "maintenance"}'
        if mode == "429":
            return 429, b'{"error": "slow down"}'
        if mode == "malformed_json":
            return 200, b'{"results": [{"doc_id": '
        if mode == "wrong_shape":
            return 200, json.dumps({"results": [{"doc_id": d, "allowed": "true"}
                                                for d in doc_ids]}).encode()  # fmt: skip
        results = [
            {"doc_id": d, "allowed": any(a in self.readable.get(d, ()) for a in accounts)}
            for d in doc_ids
            if d in self.readable
        ]
        unknown_docs = [d for d in doc_ids if d not in self.readable]
        unknown_accounts = [a for a in accounts if a not in self.known_accounts]
        if mode == "partial":
            results = results[: len(results) // 2]
        if mode == "unknown_account":
            unknown_accounts = [*accounts]
        payload = {"results": results, "unknown_accounts": unknown_accounts,
                   "unknown_doc_ids": unknown_docs}  # fmt: skip
        return 200, json.dumps(payload).encode()


def _handler(source: RightsSource) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            if source.mode == "read_timeout":
                source.release.wait(source.delay_s)
            status, data = source.answer(body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with suppress(OSError):  # the checker gave up (deadline) and hung up
                self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serve(source: RightsSource) -> Iterator[str]:
    """The endpoint's URL while the server runs on a free loopback port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(source))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/rights"
    finally:
        source.release.set()  # let held-back answers go, so no handler outlives the test
        server.shutdown()
        server.server_close()


@contextmanager
def unanswered_connect() -> Iterator[str]:
    """A URL whose TCP connect never completes: a listener with a full accept queue."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        with suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        fillers.append(s)
    try:
        yield f"http://127.0.0.1:{port}/rights"
    finally:
        for s in fillers:
            s.close()
        listener.close()
