"""``govrag serve`` as an operator starts it: it refuses to serve without token keys or to
expose development tokens beyond loopback, and once started answers over HTTP with the same
governed results as the API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from serving import free_port

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
        assert app.operators.ingest(feed).ok
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


def wait_until_healthy(url: str, server: subprocess.Popen[str], what: str) -> None:
    """Until ``url`` answers ``/healthz``; fails if ``server`` exits first."""
    deadline = time.monotonic() + 120  # a bound on start-up, not a timing assertion
    while True:
        assert server.poll() is None, server.communicate()[1][-2000:]
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.1)


@contextmanager
def running(root: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``govrag ARGS`` on a free loopback port until it answers ``/healthz``; yields its URL
    and process, and stops it as SIGINT does (uvicorn drains and exits)."""
    port = free_port()
    env = {**os.environ, "GOVRAG_AUTH__DEV_TOKENS": "true"}
    server = subprocess.Popen([sys.executable, "-m", "govrag", *args, "--port", str(port),
                               "-d", str(root)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, server, f"govrag {args[0]}")
        yield url, server
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def dev_token(root: Path, sub: str) -> str:
    token = govrag_cli(root, "token", "--as", sub, env={"GOVRAG_AUTH__DEV_TOKENS": "true"})
    assert token.returncode == 0, token.stderr
    return token.stdout.strip()


def test_it_serves_governed_search_over_http(root: Path) -> None:
    with running(root, "serve") as (url, server):
        token = dev_token(root, "ana")
        auth = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{url}/v1/search", json={"query": "wire limit", "strategy": "keyword"},
                       headers=auth, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        assert [h["doc_id"] for h in r.json()["results"]] == ["w"]
        assert httpx.post(f"{url}/v1/search", json={"query": "wire"}, timeout=60).status_code == 401
        assert httpx.post(f"{url}/mcp", json={}, headers=auth).status_code == 404  # not asked
    assert server.returncode == 0
    # One JSON access line per request on stdout (uvicorn's own, with raw paths, is off).
    out = server.stdout.read()
    assert token not in out
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    seen = [(x["route"], x["status"], x.get("sub")) for x in lines if x["route"] != "/healthz"]
    assert seen == [("/v1/search", 200, "ana"), ("/v1/search", 401, None),
                    ("<unmatched>", 404, None)]  # fmt: skip


def test_govrag_mcp_serves_the_tools_over_streamable_http(root: Path) -> None:
    mcp = pytest.importorskip("mcp")
    from mcp.client.streamable_http import streamable_http_client

    with running(root, "mcp", "--transport", "http") as (url, server):
        token = dev_token(root, "ana")

        async def session() -> tuple[list[str], Any]:
            async with (
                httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
                mcp.Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
            ):
                tools = [t.name for t in (await client.list_tools()).tools]
                return tools, await client.call_tool("search_knowledge", {"query": "wire"})

        tools, found = anyio.run(session)
        assert "search_knowledge" in tools and "retrieve_documents" in tools
        assert [h["doc_id"] for h in found.structured_content["results"]] == ["w"]
        metadata = httpx.get(f"{url}/.well-known/oauth-protected-resource/mcp").json()
        assert metadata["resource"] == f"{url}/mcp"
        assert httpx.get(f"{url}/v1/corpora", headers={"Authorization": f"Bearer {token}"}
                         ).status_code == 200  # the HTTP API beside it  # fmt: skip
    assert server.returncode == 0
    lines = [json.loads(line) for line in server.stdout.read().splitlines() if line.strip()]
    assert {(x["route"], x.get("sub")) for x in lines if x["route"] == "/mcp"} == {("/mcp", "ana")}


def test_govrag_mcp_over_http_takes_no_fixed_identity(root: Path) -> None:
    for extra in (["--as", "ana"], ["--route", "search"]):
        done = govrag_cli(root, "mcp", "--transport", "http", *extra)
        assert done.returncode == 2 and "drop --as" in done.stderr, done.stderr


def test_it_serves_from_several_worker_processes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[server] workers = 2``: two processes answer (each says so when it starts), every
    answer is governed alike, and SIGINT stops them all."""
    monkeypatch.setenv("GOVRAG_SERVER__WORKERS", "2")  # the server's environment
    with running(root, "serve") as (url, server):
        token = dev_token(root, "ana")
        auth = {"Authorization": f"Bearer {token}"}
        for _ in range(6):
            r = httpx.post(f"{url}/v1/search", json={"query": "wire limit"}, headers=auth,
                           timeout=60)  # fmt: skip
            assert r.status_code == 200, r.text
            assert [h["doc_id"] for h in r.json()["results"]] == ["w"]
        assert httpx.post(f"{url}/v1/search", json={"query": "wire"}).status_code == 401
    assert server.returncode == 0
    started = server.stderr.read()
    assert "with 2 worker processes" in started
    assert started.count("Started server process") == 2, started[-2000:]


def test_mcp_over_http_refuses_several_workers(root: Path) -> None:
    env = {"GOVRAG_AUTH__DEV_TOKENS": "true", "GOVRAG_SERVER__WORKERS": "2"}
    done = govrag_cli(root, "mcp", "--transport", "http", "--port", "1", env=env)
    assert done.returncode == 2 and "workers = 2" in done.stderr and "Traceback" not in done.stderr


def test_each_worker_allows_its_share_of_the_rate() -> None:
    from govrag.app.serving import worker_share

    assert worker_share(120.0, 30, 1) == {"rate_per_minute": 120.0, "rate_burst": 30}
    assert worker_share(120.0, 30, 4) == {"rate_per_minute": 30.0, "rate_burst": 7}
    assert worker_share(120.0, 8, 8)["rate_burst"] == 1  # serve refuses a burst below workers


@pytest.mark.parametrize(
    ("env", "says"),
    [({"GOVRAG_SERVER__RATE_BURST": "1"}, "rate_burst = 1 is below workers = 2"),
     ({"GOVRAG_WRITEBACK__ENABLED": "true"}, "write-back overlay lives in the process")],
)  # fmt: skip
def test_several_workers_refuse_what_one_process_holds(
    root: Path, env: dict[str, str], says: str
) -> None:
    """A burst the workers cannot share (each needs 1) and a write-back overlay (held by the
    process that admitted it) are refused before listening, naming the fix."""
    env = {"GOVRAG_AUTH__DEV_TOKENS": "true", "GOVRAG_SERVER__WORKERS": "2", **env}
    done = govrag_cli(root, "serve", "--port", "1", env=env)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def test_a_worker_started_again_serves_only_the_checked_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn starts every worker again on SIGHUP, and each reads govrag.toml anew: after
    an edit that `govrag serve` would refuse (development tokens on a public address), the
    restarted workers refuse to serve it and stop the server, so no dev token is ever
    accepted there."""
    dep = tmp_path / "dep"
    govrag.init(dep, tenant="bank", corpora=["policy"])
    monkeypatch.setenv("GOVRAG_SERVER__WORKERS", "2")
    port = free_port()
    # A shared-secret key, so the first start has [auth] keys and no development tokens.
    monkeypatch.setenv("IDP_SECRET", "s" * 40)
    with (dep / "govrag.toml").open("a") as fh:
        fh.write('\n[auth]\nissuer = "https://idp.example"\n'
                 'keys = [{alg = "HS256", secret_env = "IDP_SECRET"}]\n')  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "GOVRAG_AUTH__DEV_TOKENS"}
    command = [sys.executable, "-m", "govrag", "serve", "--host", "0.0.0.0",
               "--port", str(port), "-d", str(dep)]  # fmt: skip
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, server, "govrag serve")
        toml = dep / "govrag.toml"
        toml.write_text(toml.read_text().replace("[auth]\n", "[auth]\ndev_tokens = true\n"))
        server.send_signal(signal.SIGHUP)  # log rotation, `systemctl reload`, ...
        server.wait(120)  # the restarted workers refuse and stop the server
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    log = server.stderr.read() if server.stderr else ""
    assert "changed since `govrag serve` started" in log, log[-3000:]
    with pytest.raises(httpx.TransportError):  # nobody listens any more
        httpx.get(f"{url}/healthz", timeout=5)
