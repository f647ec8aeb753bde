"""Several processes on one SQLite deployment lose nothing.

``govrag serve``, ``govrag mcp``, CLI commands and library users run side by side on one
deployment, as a user runs them: each a subprocess of its own on the same ``govrag.db`` and
the same derived index folder. In each round, while the server answers HTTP searches, a CLI
search, a library session, an MCP server's tool call and a CLI ingest that revokes a document
the server has just served (and cached) all run at once. Afterwards:

- the server never held a deleted database file (``/proc/<pid>/fd``): SQLite's locks are the
  process's, and a process that opens and closes its own database file through another handle
  drops them, after which another process's exit deletes the WAL it still writes to;
- the revocation is honoured by the server's next request;
- every request any process answered is replayable from the audit log alone, with its
  decision before its search, and ``govrag audit verify`` finds every chain intact.

``GOVRAG_SHARED_RUNS`` sets the rounds (``make test``: 2; the issue's soak: 50 under load).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from serving import ServeProcess, seed_bank, subprocess_env

import govrag

ROUNDS = int(os.environ.get("GOVRAG_SHARED_RUNS", "2"))
#: A library user in its own process: a session opened, two searches, the request ids out.
LIBRARY = textwrap.dedent("""
    import json, sys
    import govrag
    with govrag.open(sys.argv[1]) as app:
        ben = govrag.local_principal(app.settings, "ben")
        ids = [app.callers.search(ben, q).request_id for q in ("card fee", "wire limit")]
    print(json.dumps(ids))
""")


def _drill(round_: int, acl: list[str]) -> dict[str, Any]:
    text = f"The fire drill code of round {round_} is DRILL-{round_}."
    return {"type": "document", "source_system": "sp", "external_id": f"drill-{round_}",
            "corpus": "policy", "title": "Drill codes", "classification": "internal",
            "acl": acl, "text": text}  # fmt: skip


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "govrag", *args, "-d", str(root)]
    done = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, f"govrag {' '.join(args)}: {done.stderr[-2000:]}"
    return done


def _deleted_files(pid: int) -> list[str]:
    """The database files process ``pid`` holds that no longer exist under their names."""
    fds = Path(f"/proc/{pid}/fd")
    out = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if "govrag.db" in target and target.endswith("(deleted)"):
            out.append(target)
    return out


def _mcp_call(root: Path, token: str) -> list[str]:
    """One ``govrag mcp`` stdio server (the SDK's client): a retrieve; its request id."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    args = ["-m", "govrag", "mcp", "--token", token, "-d", str(root)]
    params = StdioServerParameters(command=sys.executable, args=args, env=subprocess_env())

    async def main() -> list[str]:
        async with Client(params) as client:
            got = await client.call_tool("retrieve_documents",
                                         {"corpus": "policy", "query": "branch hours"})  # fmt: skip
            assert not got.is_error, got
            return [str(got.structured_content["request_id"])]

    return anyio.run(main)


def _together(tasks: dict[str, Callable[[], list[str]]]) -> dict[str, list[str]]:
    """Run every task in a thread of its own at once; their request ids by name."""
    out: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def run(name: str, task: Callable[[], list[str]]) -> None:
        try:
            out[name] = task()
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=item) for item in tasks.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]
    return out


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[Path, ServeProcess, dict[str, str]]]:
    root = seed_bank(tmp_path / "bank")
    toml = root / "govrag.toml"
    toml.write_text(toml.read_text() + "\n[auth]\ndev_tokens = true\n\n"
                    "[server]\nrate_per_minute = 1000000\nrate_burst = 100000\n")  # fmt: skip
    with govrag.open(root) as app:
        tokens = {sub: app.operators.dev_token(sub) for sub in ("ana", "ben")}
    server = ServeProcess("shared", root, subprocess_env())
    try:
        server.wait_ready()
        yield root, server, tokens
    finally:
        server.stop()


def test_serve_cli_mcp_and_library_processes_share_one_sqlite_deployment(
    deployment: tuple[Path, ServeProcess, dict[str, str]], tmp_path: Path
) -> None:
    pytest.importorskip("mcp")
    root, server, tokens = deployment
    ana = {"Authorization": f"Bearer {tokens['ana']}"}
    answered: list[str] = []

    def http_search(query: str) -> dict[str, Any]:
        r = server.client.post("/v1/search", headers=ana,
                               json={"query": query, "strategy": "keyword"})  # fmt: skip
        assert r.status_code == 200, r.text
        answered.append(r.json()["request_id"])
        return dict(r.json())

    def found(body: dict[str, Any]) -> set[str]:
        return {hit["doc_id"] for hit in body["results"]}

    for round_ in range(ROUNDS):
        drill = f"drill-{round_}"
        feed, revoke = tmp_path / f"grant-{round_}.jsonl", tmp_path / f"revoke-{round_}.jsonl"
        feed.write_text(json.dumps(_drill(round_, ["S-1"])) + "\n")
        revoke.write_text(json.dumps(_drill(round_, ["S-2"])) + "\n")
        _cli(root, "ingest", str(feed))
        query = f"fire drill code round {round_}"
        assert drill in found(http_search(query))  # the server reads the CLI's ingest ...
        assert http_search(query)["packs"][0]["cache_hit"]  # ... and now holds it cached

        def cli_search() -> list[str]:
            out = _cli(root, "search", "--as", "ben", "--json", "card fee")
            return [json.loads(out.stdout)["request_id"]]

        def library() -> list[str]:
            done = subprocess.run([sys.executable, "-c", LIBRARY, str(root)],
                                  env=subprocess_env(), capture_output=True, text=True,
                                  timeout=300)  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            return list(json.loads(done.stdout))

        def served() -> list[str]:
            return [http_search(q)["request_id"] for q in ("wire limit", "branches open")]

        def revocation(feed: Path = revoke) -> list[str]:
            _cli(root, "ingest", str(feed))
            return []

        ids = _together({
            "cli": cli_search, "library": library, "served": served, "revoke": revocation,
            "mcp": lambda: _mcp_call(root, tokens["ana"]),
        })  # fmt: skip
        answered += ids["cli"] + ids["library"] + ids["mcp"]
        # The revocation, committed by another process, counts at the server's next request.
        assert drill not in found(http_search(query)), f"round {round_}: revocation not seen"
        assert _deleted_files(server.process.pid) == [], f"round {round_}"

    server.stop()
    assert server.process.returncode == 0, server.log.read_text()[-3000:]
    with govrag.open(root) as app:
        for request_id in answered:
            replay = app.operators.replay(request_id)
            assert replay.decisions and replay.verdict_before_search, request_id
            assert replay.model_saw, request_id  # the pack it answered is on the log
        verified = app.operators.audit_verify()
        assert verified.ok, verified.as_dict()
    # Each round: 5 served, a CLI search, 2 library searches, 1 MCP call.
    assert len(set(answered)) == len(answered) == ROUNDS * 9
