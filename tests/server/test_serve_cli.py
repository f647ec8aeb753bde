"""``govrag serve`` as an operator starts it: it refuses to serve without token keys or to
expose development tokens beyond loopback, and once started answers over HTTP with the same
governed results as the API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import govrag


def govrag_cli(root: Path, *args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([sys.executable, "-m", "govrag", *args, "-d", str(root)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serve") / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    feed = root / "feed.jsonl"
    records = [
        {"type": "identity", "email": "ana@bank.example", "source_system": "sp",
         "account_id": "S-1"},
        {"type": "document", "source_system": "sp", "external_id": "w", "corpus": "policy",
         "title": "Wire", "acl": ["*"], "classification": "internal",
         "text": "The wire limit is EUR 50,000."},
    ]  # fmt: skip
    feed.write_text("".join(json.dumps(r) + "\n" for r in records))
    with govrag.open(root) as app:
        assert app.ingest(feed).ok
    return root


def test_without_token_keys_it_refuses_to_serve(root: Path) -> None:
    done = govrag_cli(root, "serve", "--port", "1")
    assert done.returncode == 2 and "[auth]" in done.stderr and "Traceback" not in done.stderr


def test_development_tokens_stay_on_loopback(root: Path) -> None:
    done = govrag_cli(root, "serve", "--host", "0.0.0.0", "--port", "1",
                      env={"GOVRAG_AUTH__DEV_TOKENS": "true"})  # fmt: skip
    assert done.returncode == 2 and "refusing to listen on 0.0.0.0" in done.stderr


def test_a_broken_key_stops_it_at_start(root: Path) -> None:
    env = {"GOVRAG_AUTH__ISSUER": "https://idp.example",
           "GOVRAG_AUTH__JWKS_FILE": "missing-jwks.json"}  # fmt: skip
    done = govrag_cli(root, "serve", "--port", "1", env=env)
    assert done.returncode == 2 and "auth.jwks_file" in done.stderr


def test_it_serves_governed_search_over_http(root: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GOVRAG_AUTH__DEV_TOKENS": "true"}
    server = subprocess.Popen([sys.executable, "-m", "govrag", "serve", "--port", str(port),
                               "-d", str(root)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120  # a bound on start-up, not a timing assertion
        while True:
            assert server.poll() is None, server.communicate()[1][-2000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "govrag serve did not start"
                time.sleep(0.1)
        token = govrag_cli(root, "token", "--as", "ana", env={"GOVRAG_AUTH__DEV_TOKENS": "true"})
        assert token.returncode == 0, token.stderr
        auth = {"Authorization": f"Bearer {token.stdout.strip()}"}
        r = httpx.post(f"{url}/v1/search", json={"query": "wire limit", "strategy": "keyword"},
                       headers=auth, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        assert [h["doc_id"] for h in r.json()["results"]] == ["w"]
        assert httpx.post(f"{url}/v1/search", json={"query": "wire"}, timeout=60).status_code == 401
    finally:
        server.send_signal(signal.SIGINT)  # uvicorn drains and exits
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert server.returncode == 0
    # One JSON access line per request on stdout (uvicorn's own, with raw paths, is off).
    out = server.stdout.read()
    assert token.stdout.strip() not in out
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    seen = [(x["route"], x["status"], x.get("sub")) for x in lines if x["route"] != "/healthz"]
    assert seen == [("/v1/search", 200, "ana"), ("/v1/search", 401, None)]
