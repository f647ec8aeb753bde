"""The CLI as a user runs it: real subprocesses, real files, stdout/stderr/exit codes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from server.serving import free_port

from conftest import check_tiny_beir_figures, tiny_beir

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "govrag" / "data" / "sample.jsonl"
CORPORA = ["policy-engine", "risk-models", "ops-runbooks"]
READ_ALL = [f"{c}:read" for c in CORPORA]
PRINCIPALS = {
    "principals": [
        {"sub": "ana", "email": "ana@bank.example", "tenant": "bank", "clearance": "confidential",
         "doc_entitlements": READ_ALL},
        {"sub": "ben", "email": "ben@bank.example", "tenant": "bank", "clearance": "confidential",
         "doc_entitlements": ["policy-engine:read", "ops-runbooks:read"]},
        {"sub": "eve", "email": "eve@elsewhere.example", "tenant": "bank",
         "doc_entitlements": READ_ALL},
    ]
}  # fmt: skip


def govrag(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "govrag.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    corpora = [arg for c in CORPORA for arg in ("--corpus", c)]
    done = govrag("init", "dep", "--embedder", "hash", "--tenant", "bank", *corpora, cwd=root)
    assert done.returncode == 0, done.stderr
    dep = root / "dep"
    (dep / "principals.json").write_text(json.dumps(PRINCIPALS))
    done = govrag("ingest", str(SAMPLE), "--json", cwd=root, env={"GOVRAG_DEPLOYMENT": str(dep)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 6
    return dep


def search(dep: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return govrag("search", *args, "--deployment", str(dep), cwd=dep)


def test_search_json_is_exactly_one_document(deployment: Path) -> None:
    done = search(
        deployment, "wire transfer approval", "--as", "ben", "--json", "--strategy", "keyword"
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)  # the whole of stdout parses as one JSON document
    assert set(payload) == {"query", "strategy", "results", "hidden", "truncated", "request_id",
                            "session_id", "route_id", "decisions", "packs",
                            "validation"}  # fmt: skip
    packs = payload["packs"]
    assert [p["corpus"] for p in packs] == ["policy-engine", "ops-runbooks"]  # the ALLOWed ones
    assert all(p["policy_version"] == "pgar.retrieval.corpus/v3" for p in packs)
    assert all(p["pack_token_count"] <= p["token_budget"] for p in packs)
    assert sorted(c["chunk_id"] for p in packs for c in p["chunks"]) == sorted(
        r["chunk_id"] for r in payload["results"])  # fmt: skip
    assert payload["route_id"] == "search"  # the deployment's default_route
    assert all({"context_pack_id", "corpus", "chunks", "pack_token_count", "withheld", "hidden",
                "rights_checks"} <= set(p) for p in packs)  # fmt: skip
    assert all(c["checker"] == "stored" and c["status"] == "ok"
               for p in packs for c in p["rights_checks"])  # fmt: skip
    validation = payload["validation"]
    assert validation["validation_passed"] is True and validation["scope_violation_count"] == 0
    assert len(validation["attribution"]) == sum(len(p["chunks"]) for p in packs)
    # One PEP decision per corpus of the route's scope: Ben lacks risk-models:read.
    assert [(d["corpus"], d["verdict"], d["reason"]) for d in payload["decisions"]] == [
        ("policy-engine", "ALLOW", "allowed"),
        ("risk-models", "DENY", "no_entitlement"),
        ("ops-runbooks", "ALLOW", "allowed"),
    ]
    assert {d["policy_version"] for d in payload["decisions"]} == {"pgar.retrieval.corpus/v3"}
    assert all(d["audit_id"] for d in payload["decisions"])
    assert set(payload["results"][0]) == {
        "doc_id",
        "chunk_id",
        "corpus",
        "source_system",
        "score",
        "text",
        "token_count",
        "origin",
        "writeback",
    }
    assert (payload["results"][0]["origin"], payload["results"][0]["writeback"]) == ("source", None)
    assert "policy-wire-limits-v3" not in done.stdout  # Ben may not read it ...
    assert payload["hidden"] == {  # ... but learns whom to ask
        "present": True,
        "sources": [{"source_system": "sharepoint", "author_email": "carla@bank.example"}],
    }


def test_two_principals_see_different_things(deployment: Path) -> None:
    def docs(sub: str) -> set[str]:
        done = search(
            deployment,
            "wire transfer",
            "--as",
            sub,
            "--json",
            "--strategy",
            "keyword",
            "--top-k",
            "20",
        )
        return {r["doc_id"] for r in json.loads(done.stdout)["results"]}

    assert "policy-wire-limits-v3" in docs("ana")
    assert "policy-wire-limits-v3" not in docs("ben")
    assert docs("eve") == set()  # no identity: nothing, not even public documents


def test_filters_and_corpus(deployment: Path) -> None:
    done = search(deployment, "wire", "--as", "ana", "--json", "--filter", "doc_type=policy",
                  "--corpus", "policy-engine", "--strategy", "keyword")  # fmt: skip
    assert {r["doc_id"] for r in json.loads(done.stdout)["results"]} == {"policy-wire-limits-v3"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["wire", "--as", "nobody"], "unknown principal 'nobody'"),
        (["wire", "--as", "ana", "--route", "nope"], "unknown route 'nope'; "),
        (["wire", "--as", "ana", "--session", "ses-0"], "no session 'ses-0' for this principal"),
        (["wire", "--as", "ana", "--filter", "novalue"], "is not KEY=VALUE"),
        (["wire", "--as", "ana", "--filter", "bad key=1"], "--filter 'bad key=1'"),
        (["   ", "--as", "ana"], "query is blank"),
        (["wire", "--as", "ana", "--top-k", "0"], "top_k"),
    ],
)
def test_bad_input_is_one_clear_line(deployment: Path, args: list[str], message: str) -> None:
    done = search(deployment, *args, "--json")
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("command", ["search", "ask"])
def test_an_unknown_route_lists_the_routes_to_the_operator(deployment: Path, command: str) -> None:
    # Whoever runs the CLI holds the deployment's files: the routes are theirs to see (an HTTP
    # or MCP caller gets the message alone: tests/attacks/test_route_enumeration.py).
    done = govrag(command, "wire limit", "--as", "ana", "--route", "nope", "--deployment",
                  str(deployment), cwd=deployment)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "unknown route 'nope'; " in done.stderr and "known routes: 'search'" in done.stderr


def test_a_denied_corpus_is_reported_not_searched(deployment: Path) -> None:
    done = search(deployment, "credit model", "--as", "ben", "--corpus", "risk-models",
                  "--corpus", "payroll")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "DENY risk-models: no entitlement (pgar.retrieval.corpus/v3, audit " in done.stdout
    assert "DENY payroll: out of scope (audit aud-" in done.stdout
    assert "credit-model" not in done.stdout
    assert "request req-" in done.stderr and "route search" in done.stderr


def test_a_session_continues_on_its_pinned_route(deployment: Path) -> None:
    first = json.loads(search(deployment, "wire", "--as", "ana", "--json").stdout)
    again = search(deployment, "runbook", "--as", "ana", "--json", "--session",
                   first["session_id"])  # fmt: skip
    assert json.loads(again.stdout)["session_id"] == first["session_id"]
    assert search(deployment, "wire", "--as", "ben", "--session",
                  first["session_id"]).returncode == 2  # not Ben's session  # fmt: skip
    (deployment / "routes" / "chat.json").write_text('{"route_id": "chat"}')
    try:
        done = search(deployment, "wire", "--as", "ana", "--session", first["session_id"],
                      "--route", "chat")  # fmt: skip
    finally:
        (deployment / "routes" / "chat.json").unlink()
    assert done.returncode == 2 and "pinned to route 'search'" in done.stderr
    assert "Traceback" not in done.stderr


def test_ingest_names_corpora_no_route_may_search(tmp_path: Path) -> None:
    done = govrag("init", "d", "--embedder", "hash", "--corpus", "policy-engine", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = govrag("ingest", str(SAMPLE), "-d", str(tmp_path / "d"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no route's scope includes 'ops-runbooks', 'risk-models'" in done.stderr


def test_a_deployment_without_routes_retrieves_nothing(tmp_path: Path) -> None:
    (tmp_path / "govrag.toml").write_text("")  # a deployment: the CLI opens no other folder
    (tmp_path / "principals.json").write_text(json.dumps(PRINCIPALS))
    done = govrag("search", "wire", "--as", "ana", "-d", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "the deployment has no routes" in done.stderr
    (tmp_path / "govrag.toml").write_text('default_route = "qa"\n')
    done = govrag("config", "check", "-d", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert "govrag.toml: default_route: 'qa' is not a route in routes/" in done.stderr


def test_non_utf8_filter_value(deployment: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "search", "wire", "--as", "ana", "--json",
         "--filter", b"doc_type=\xff", "-d", str(deployment)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert "not valid UTF-8" in done.stderr and "Traceback" not in done.stderr


def test_ingest_reports_bad_lines(deployment: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        b'{"type":"nope"}\n\n{"type":"identity","email":"x@y.z","source_system":"s","account_id":"a"}\n\xff\n'
    )
    done = govrag("ingest", str(bad), "--json", "-d", str(deployment), cwd=tmp_path)
    assert done.returncode == 1
    assert json.loads(done.stdout)["errors"] == 2 and json.loads(done.stdout)["identities"] == 1
    assert f"{bad}:1: unknown record type 'nope'" in done.stderr
    assert f"{bad}:4: is not valid UTF-8 (byte 0xff at offset 0)" in done.stderr


def test_index_verify_and_rebuild(deployment: Path) -> None:
    done = govrag("index", "verify", "--json", "-d", str(deployment), cwd=deployment)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["differences"] == 0
    done = govrag("index", "rebuild", "--json", "-d", str(deployment), cwd=deployment)
    assert json.loads(done.stdout) == {"rebuilt": {"bank": 6}}


def test_missing_deployment_and_bad_config(tmp_path: Path) -> None:
    done = govrag("search", "x", "--as", "a", "-d", str(tmp_path / "nope"), cwd=tmp_path)
    assert done.returncode == 2 and "govrag init" in done.stderr
    (tmp_path / "govrag.toml").write_text("[search]\nrrf_k = 'many'\nbogus = 1\n")
    done = govrag("index", "verify", "-d", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "govrag.toml" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "govrag.toml").write_text("[search\n")
    done = govrag("index", "verify", "-d", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "invalid TOML" in done.stderr


@pytest.mark.parametrize(
    "command",
    [["search", "x", "--as", "a"], ["ingest", str(SAMPLE)], ["config", "check"],
     ["index", "verify"], ["audit", "verify"], ["sources"], ["serve"]],
    ids=lambda c: c[0] if c[0] not in ("config", "index", "audit") else " ".join(c),
)  # fmt: skip
def test_a_folder_without_govrag_toml_is_no_deployment(tmp_path: Path, command: list[str]) -> None:
    # A mistyped -d must not quietly create a new, empty store that later commands then read.
    empty = tmp_path / "empty"
    empty.mkdir()
    done = govrag(*command, "-d", str(empty), cwd=tmp_path)
    assert done.returncode == 2, done.stderr  # the exit code of a configuration error
    assert f"{str(empty)!r} (-d) holds no govrag.toml" in done.stderr
    assert f"`govrag init {empty}`" in done.stderr and "Traceback" not in done.stderr
    assert list(empty.iterdir()) == []
    # The same from GOVRAG_DEPLOYMENT, and from the current directory.
    done = govrag(*command, cwd=tmp_path, env={"GOVRAG_DEPLOYMENT": str(empty)})
    assert done.returncode == 2 and f"(GOVRAG_DEPLOYMENT={empty}) holds no" in done.stderr
    done = govrag(*command, cwd=empty, env={"GOVRAG_DEPLOYMENT": ""})
    assert done.returncode == 2 and "(the current directory) holds no" in done.stderr
    assert list(empty.iterdir()) == []


def test_init_makes_a_folder_a_deployment(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert govrag("init", str(empty), "--embedder", "hash", cwd=tmp_path).returncode == 0
    done = govrag("config", "check", "-d", str(empty), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(tmp_path: Path, flag: str) -> None:
    from importlib.metadata import version

    done = govrag(flag, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"govrag {version('govrag')}\n", "")


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    assert govrag("init", "d", "--embedder", "hash", cwd=tmp_path).returncode == 0
    done = govrag("init", "d", "--embedder", "hash", cwd=tmp_path)
    assert done.returncode == 2 and "--force" in done.stderr


def test_eval_on_a_tiny_beir_dataset(tmp_path: Path) -> None:
    done = govrag("eval", str(tiny_beir(tmp_path)), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    check_tiny_beir_figures(json.loads(done.stdout))


def test_eval_into_a_deployment_needs_no_embedder_option(deployment: Path, tmp_path: Path) -> None:
    beir = tiny_beir(tmp_path)
    done = govrag("eval", str(beir), "-d", str(deployment), "--embedder", "hash", cwd=tmp_path)
    assert done.returncode == 2 and "drop --embedder" in done.stderr
    done = govrag("eval", str(beir), "-d", str(deployment), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    check_tiny_beir_figures(json.loads(done.stdout))
    # The throw-away tenant is gone; the deployment's own tenant is untouched.
    done = govrag("index", "verify", "--json", "-d", str(deployment), cwd=tmp_path)
    assert [t["tenant"] for t in json.loads(done.stdout)["tenants"]] == ["bank"]


def test_audit_verify_names_the_first_broken_row(tmp_path: Path) -> None:
    import sqlite3

    from govrag.deployment import Deployment

    assert govrag("init", "dep", "--embedder", "hash", cwd=tmp_path).returncode == 0
    dep = Deployment.load(tmp_path / "dep")
    events = [
        dep.store.append_audit("default", "pep_decision", {"n": i}, request_id="r", session_id="s")
        for i in range(3)
    ]
    dep.close()
    done = govrag("audit", "verify", "--json", "-d", str(tmp_path / "dep"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["tenants"][0]["events"] == 3

    with sqlite3.connect(tmp_path / "dep" / "govrag.db") as db:  # an attacker with the file
        db.execute("DROP TRIGGER audit_events_no_update")
        db.execute("UPDATE audit_events SET payload = '{\"n\":9}' WHERE seq = 2")
    done = govrag("audit", "verify", "-d", str(tmp_path / "dep"), cwd=tmp_path)
    assert done.returncode == 1
    assert f"BROKEN at event 2 ({events[1].event_id})" in done.stderr


def test_ask_and_replay(deployment: Path) -> None:
    done = govrag("ask", "Who must approve a large wire transfer?", "--as", "ana", "--json",
                  "--deployment", str(deployment), cwd=deployment)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert {"request_id", "route_id", "answer", "abstained", "reason", "citations", "hidden",
            "decisions", "packs", "validation", "trace"} <= set(answer)  # fmt: skip
    assert not answer["abstained"] and answer["citations"]
    assert {c["doc_id"] for c in answer["citations"]} <= {
        c["doc_id"] for p in answer["packs"] for c in p["chunks"]}  # fmt: skip
    done = govrag("replay", answer["request_id"], "--tenant", "bank", "--json",
                  "--deployment", str(deployment), cwd=deployment)  # fmt: skip
    assert done.returncode == 0, done.stderr
    replayed = json.loads(done.stdout)
    assert replayed["who"]["sub"] == "ana" and replayed["chain_ok"]
    assert replayed["verdict_before_search"] is True
    assert replayed["delivered"]["cited_doc_ids"] == sorted(
        {c["doc_id"] for c in answer["citations"]})  # fmt: skip
    human = govrag("replay", answer["request_id"], "--tenant", "bank",
                   "--deployment", str(deployment), cwd=deployment)  # fmt: skip
    assert human.returncode == 0 and "Verdict before search? yes" in human.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "req-nope", "--tenant", "bank"], "no audit events for request 'req-nope'"),
        (["ask", "  ", "--as", "ana"], "question is blank"),
        (["ask", "hi", "--as", "zed"], "unknown principal 'zed'"),
        (["ask", "hi", "--as", "ana", "--text", "missing.txt"], "--text 'missing.txt'"),
        (["ask", "hi", "--as", "ana", "--route", "nope"], "unknown route 'nope'"),
    ],
)
def test_ask_and_replay_bad_input(deployment: Path, args: list[str], message: str) -> None:
    done = govrag(*args, "--deployment", str(deployment), cwd=deployment)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo built once (in a folder whose name needs quoting in a shell), and its stdout."""
    root = tmp_path_factory.mktemp("demo")
    done = govrag("demo", "--dir", str(root / "my demo"), "--embedder", "hash", cwd=root,
                  env={"COLUMNS": "200"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root / "my demo", done.stdout


def test_demo_prints_the_worked_example(demo_run: tuple[Path, str]) -> None:
    _, stdout = demo_run
    # Panels wrap lines: compare text with the borders and line breaks folded away.
    out = " ".join(stdout.replace("│", " ").split())
    worked = out.split("Worked example", 1)[1].split("╰", 1)[0]
    assert "ALLOW policy-engine" in worked and "EUR 50,000 per day" in worked
    assert "cites policy-wire-limits-v3" in worked
    assert "DENY hr-policies (no_entitlement" in out
    assert "contact marta.ruiz@bank-eu.example" in out  # the hidden-item hint
    assert "pattern 2" in out and "pattern 0" in out and "pattern none" in out
    assert "Verdict before search? yes" in out and "audit chain intact" in out


def test_demo_suggests_commands_that_paste(demo_run: tuple[Path, str]) -> None:
    directory, _ = demo_run
    # A narrow terminal: rich wraps what it prints, but never the suggested commands.
    again = govrag("demo", "--dir", str(directory), "--embedder", "hash", cwd=directory.parent,
                   env={"COLUMNS": "40"})  # fmt: skip
    assert again.returncode == 0 and "44 unchanged" in again.stdout  # re-running is idempotent
    ask, replay = [line for line in again.stdout.split("Try it yourself:", 1)[1].splitlines()
                   if line.strip()]  # fmt: skip
    argv = shlex.split(ask)  # one line, quoted for a shell (an apostrophe, a space)
    question = "What's our wire limit for corporate clients in the EU?"
    assert argv == ["govrag", "ask", question, "--as", "officer-123", "--route", "investigation",
                    "-d", str(directory)]  # fmt: skip
    assert shlex.split(replay) == ["govrag", "replay", "REQUEST_ID", "-d", str(directory)]
    pasted = govrag(*argv[1:], cwd=directory.parent)  # the suggestion works as printed
    assert pasted.returncode == 0, pasted.stderr
    assert "policy-wire-limits-v3" in pasted.stdout


def test_click_and_curate(deployment: Path) -> None:
    opts = ("--deployment", str(deployment))
    done = govrag("click", "sharepoint:policy-wire-limits-v3", "--as", "ana", "--json", *opts,
                  cwd=deployment)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "document": "sharepoint:policy-wire-limits-v3",
        "counted": True,
    }  # never everyone's access count
    # Ben may not read it: the same refusal as for a document that does not exist.
    for target in ("sharepoint:policy-wire-limits-v3", "sharepoint:nope"):
        refused = govrag("click", target, "--as", "ben", *opts, cwd=deployment)
        assert refused.returncode == 2 and f"no document {target!r} that 'ben'" in refused.stderr
    bad = govrag("click", "policy-wire-limits-v3", "--as", "ana", *opts, cwd=deployment)
    assert bad.returncode == 2 and "SOURCE_SYSTEM:EXTERNAL_ID" in bad.stderr
    first = govrag("curate", "--json", *opts, cwd=deployment)
    assert first.returncode == 0, first.stderr
    (report,) = json.loads(first.stdout)["tenants"]
    assert report["tenant"] == "bank" and report["documents"] == 6


def closed_port() -> int:
    return free_port()  # closed again on return: nothing listens there


@pytest.fixture
def overloaded_llm() -> Iterator[str]:
    """A model server on loopback that answers every request HTTP 503."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": {"message": "model is loading"}}'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.mark.parametrize("case", ["connection", "overloaded"])
def test_a_failed_model_exits_non_zero_with_the_detail_on_stderr_only(
    deployment: Path, overloaded_llm: str, case: str
) -> None:
    """``ask --json`` exited 0 for configuration faults, and the raw adapter error (internal
    URLs, environment variable names) was the answer text."""
    url = f"http://127.0.0.1:{closed_port()}/v1" if case == "connection" else overloaded_llm
    env = {"GOVRAG_LLM__PROVIDER": "openai", "GOVRAG_LLM__BASE_URL": url}
    done = govrag("ask", "Who must approve a large wire transfer?", "--as", "ana", "--json",
                  "--deployment", str(deployment), cwd=deployment, env=env)  # fmt: skip
    assert done.returncode == (5 if case == "connection" else 75), done.stderr
    answer = json.loads(done.stdout)
    assert answer["reason"] == "llm_error" and answer["llm_fault"] == case
    assert "127.0.0.1" not in done.stdout and "GOVRAG_" not in done.stdout
    assert url in done.stderr and "Traceback" not in done.stderr
    assert ("GOVRAG_LLM__BASE_URL" in done.stderr) == (case == "connection")
    human = govrag("replay", answer["request_id"], "--tenant", "bank",
                   "--deployment", str(deployment), cwd=deployment)  # fmt: skip
    assert human.returncode == 0 and f"-> FAILED ({case})" in human.stdout


def test_search_by_time(deployment: Path) -> None:
    """--as-of keeps the versions in effect then, --since/--until a window; a bad instant is
    one line naming the option."""

    def found(*args: str) -> set[str]:
        done = search(deployment, "wire transfer", "--as", "ben", "--json", *args)
        assert done.returncode == 0, done.stderr
        return {r["doc_id"] for r in json.loads(done.stdout)["results"]}

    everything = found("--strategy", "temporal")
    assert "policy-wire-ops-guide" in everything  # updated 2026-05-12
    assert "policy-wire-ops-guide" not in found("--as-of", "2026-05-01")
    assert found("--since", "2026-05-01", "--until", "2026-05-31T23:59:59+00:00") == {
        "policy-wire-ops-guide"
    }
    assert found("--time-field", "updated_at", "--since", "2027-01-01") == set()
    # The examiner sees how each corpus was searched.
    done = search(deployment, "wire", "--as", "ben", "--json", "--strategy", "temporal",
                  "--as-of", "2026-05-01")  # fmt: skip
    request_id = json.loads(done.stdout)["request_id"]
    replayed = govrag("replay", request_id, "--json", "--deployment", str(deployment),
                      cwd=deployment)  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    searched = [p["retrieval"] for p in json.loads(replayed.stdout)["model_saw"]]
    assert searched and all(s == {"strategy": "temporal", "as_of": "2026-05-01T00:00:00+00:00"}
                            for s in searched)  # fmt: skip
    wrong = [(("--as-of", "yesterday"), "--as-of"),
             (("--since", "2026-06-01", "--until", "2026-01-01"), "--since/--until")]  # fmt: skip
    for args, option in wrong:
        done = search(deployment, "wire", "--as", "ben", *args)
        assert done.returncode != 0 and option in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_ask_with_a_strategy(deployment: Path) -> None:
    done = govrag("ask", "Who approves large wire transfers?", "--as", "ana", "--strategy",
                  "graph", "--json", "--deployment", str(deployment), cwd=deployment)  # fmt: skip
    assert done.returncode == 0, done.stderr
    request_id = json.loads(done.stdout)["request_id"]
    replayed = govrag("replay", request_id, "--json", "--deployment", str(deployment),
                      cwd=deployment)  # fmt: skip
    searched = [p.get("retrieval") for p in json.loads(replayed.stdout)["model_saw"]]
    assert searched and all(s == {"strategy": "graph"} for s in searched), searched
    done = govrag("ask", "wire?", "--as", "ana", "--strategy", "bm25",
                  "--deployment", str(deployment), cwd=deployment)  # fmt: skip
    assert done.returncode == 2 and "bm25" in done.stderr and "Traceback" not in done.stderr
