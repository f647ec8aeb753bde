"""What a real model server needs from govrag, and what govrag does when a model fails.

The fake server here is as strict as llama.cpp's: every request body is validated against a
schema modelled on what llama.cpp, vLLM, Ollama and OpenAI accept (string ``content`` on every
message, ``tool_call_id`` on tool results, nothing extra), and a violation is answered the
way llama-cpp-python answers it (HTTP 500 with a validation message). The model behind it is
the offline extractive responder, so every route and pattern runs end to end through the real
OpenAI adapter over HTTP semantics (``httpx.MockTransport``: the transport is the only fake).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from test_orchestrator import QUESTION, ask, deployments, spy_on

from govrag.agent.extractive import ExtractiveResponder
from govrag.agent.openai_chat import OpenAIChatClient
from govrag.agent.run import payload_hash
from govrag.audit import replay
from govrag.deployment import Deployment

from conftest import completion


@pytest.fixture
def make_dep(tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    yield from deployments(tmp_path)


@pytest.fixture
def dep(make_dep: Callable[..., Deployment]) -> Deployment:
    return make_dep()


_TEXT = {"type": "string"}
_TOOL_CALL = {
    "type": "object", "additionalProperties": False, "required": ["id", "type", "function"],
    "properties": {"id": _TEXT, "type": {"const": "function"},
                   "function": {"type": "object", "additionalProperties": False,
                                "required": ["name", "arguments"],
                                "properties": {"name": _TEXT, "arguments": _TEXT}}},
}  # fmt: skip


def _message(role: str, extra: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False,
            "required": ["role", "content", *required],
            "properties": {"role": {"const": role}, "content": _TEXT, **extra}}  # fmt: skip


#: A chat-completions request as the strictest of llama.cpp, vLLM, Ollama and OpenAI take it.
STRICT_REQUEST = {
    "type": "object", "additionalProperties": False, "required": ["model", "messages"],
    "properties": {
        "model": _TEXT,
        "messages": {"type": "array", "minItems": 1, "items": {"oneOf": [
            _message("system", {}), _message("user", {}),
            _message("assistant", {"tool_calls": {"type": "array", "minItems": 1,
                                                  "items": _TOOL_CALL}}),
            _message("tool", {"tool_call_id": _TEXT}, ["tool_call_id"]),
        ]}},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "max_tokens": {"type": "integer", "minimum": 1},
        "stop": {"type": "array", "maxItems": 4, "items": _TEXT},
        "tools": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["type", "function"],
            "properties": {"type": {"const": "function"}, "function": {
                "type": "object", "additionalProperties": False,
                "required": ["name", "parameters"],
                "properties": {"name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                               "description": _TEXT, "parameters": {"type": "object"}}}}}},
        "tool_choice": {"enum": ["auto", "none", "required"]},
    },
}  # fmt: skip
STRICT = Draft202012Validator(STRICT_REQUEST)


def violations(body: dict[str, Any]) -> list[str]:
    """Why a strict server refuses ``body`` (empty: it accepts it)."""
    out = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in STRICT.iter_errors(body)]
    for tool in body.get("tools", ()):
        out += [f"tool schema: {e.message}" for e in
                Draft202012Validator(Draft202012Validator.META_SCHEMA).iter_errors(
                    tool["function"]["parameters"])]  # fmt: skip
    called: set[str] = set()
    for i, m in enumerate(body.get("messages", ())):
        called |= {c.get("id") for c in m.get("tool_calls") or ()}
        if m.get("role") == "tool" and m.get("tool_call_id") not in called:
            out.append(f"messages.{i}: tool_call_id answers no earlier tool call")
    return out


class StrictServer:
    """An OpenAI-compatible server as strict as llama.cpp, answering with the extractive
    responder; keeps every body it received."""

    def __init__(self, finish_reason: str | None = None) -> None:
        self.model = ExtractiveResponder()
        self.bodies: list[dict[str, Any]] = []
        self.refused: list[list[str]] = []
        self.finish_reason = finish_reason

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        problems = violations(body)
        if problems:
            self.refused.append(problems)
            detail = "; ".join(problems)
            return httpx.Response(500, json={"error": {"message": f"1 validation error for "
                                  f"CreateChatCompletionRequest: {detail}"}})  # fmt: skip
        tools = [t["function"] for t in body.get("tools", ())]
        reply = self.model.complete(body["messages"], tools)
        calls = [(c.name, c.raw_arguments) for c in reply.tool_calls]
        answer = completion(*calls, text=reply.text if not calls else None)
        if self.finish_reason is not None:
            answer["choices"][0]["finish_reason"] = self.finish_reason
        return httpx.Response(200, json=answer)

    def client(self) -> OpenAIChatClient:
        return OpenAIChatClient("http://127.0.0.1:8080/v1", "smollm2",
                                transport=httpx.MockTransport(self))  # fmt: skip


def events(dep: Deployment, request_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in dep.store.audit_events("t1", request_id=request_id)
            if e.kind == kind]  # fmt: skip


CASES = [  # (route, principal, question, text, pattern)
    ("qa", "officer-123", QUESTION, None, "1"),
    ("policy_qa", "officer-123", QUESTION, None, "0"),
    ("email_summarize", "officer-123", "Summarise this e-mail.",
     "Kestrel Freight asks whether their EUR 60,000 transfer can go out on Friday.", "none"),
    ("msa", "counsel", "Is the liability cap in the Acme MSA acceptable?", "Acme MSA text", "2"),
    ("staged", "officer-123", QUESTION, None, "3"),
]  # fmt: skip


@pytest.mark.parametrize(("route", "sub", "question", "text", "pattern"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_every_pattern_speaks_what_a_strict_server_accepts(
    dep: Deployment, route: str, sub: str, question: str, text: str | None, pattern: str
) -> None:
    """Pattern 1 sent its assistant turn with ``content: null`` after a tool call, which
    llama.cpp refuses with HTTP 500: every tool route ended in ``llm_error`` at step 2."""
    server = StrictServer()
    spy_on(dep, server.client())
    answer = ask(dep, sub, question, route_id=route, text=text)
    assert server.refused == [] and answer.reason != "llm_error", server.refused
    assert answer.pattern == pattern and not (answer.grounded and answer.abstained)
    calls, results = (events(dep, answer.request_id, k) for k in ("llm_call", "llm_result"))
    assert len(calls) == len(results) == len(server.bodies) >= 1
    # What was recorded is what the server received, call by call.
    for call, body in zip(calls, server.bodies, strict=True):
        tools = [t["function"] for t in body.get("tools", ())]
        assert call["payload_hash"] == payload_hash(body["messages"], tools)
        assert body["max_tokens"] == (1024 if call["stage"] in ("loop", "synthesis", "answer")
                                      else 64)  # fmt: skip
    assert all(r["status"] == "ok" and r["finish_reason"] for r in results)
    assert [r["step"] for r in results] == [c["step"] for c in calls]
    shown = replay(dep.store, "t1", answer.request_id)
    assert [c.result and c.result.status for c in shown.llm_calls] == ["ok"] * len(calls)
    assert all(c.result and c.result.reply_hash for c in shown.llm_calls)


def test_query_formulation_is_capped_and_stops_at_a_line_break(dep: Deployment) -> None:
    """A workflow's query-formulation call once generated 8,127 tokens with no limit."""
    server = StrictServer()
    spy_on(dep, server.client())
    ask(dep, "counsel", "Is the liability cap acceptable?", route_id="msa", text="MSA")
    formulation = [b for b in server.bodies if not b.get("tools") and b.get("stop")]
    assert len(formulation) == 2  # clause_search and policy_search
    assert all(b["max_tokens"] == 64 and b["stop"] == ["\n"] for b in formulation)
    assert all("max_tokens" in b for b in server.bodies)


def test_a_denied_stage_costs_no_model_call(make_dep: Callable[..., Deployment]) -> None:
    """The workflow used to ask the model for a query before the PEP decided the stage's
    corpus: a stage the caller may never search still cost a model call."""
    dep = make_dep()
    server = StrictServer()
    spy_on(dep, server.client())
    # officer-123 has no entitlement on clause-index or legal-playbook.
    answer = ask(dep, "officer-123", "Is the liability cap acceptable?", route_id="msa",
                 text="MSA")  # fmt: skip
    retrieves = [d for d in answer.decisions if d.kind == "retrieve"]
    assert [d.verdict for d in retrieves] == ["DENY", "DENY"]
    stages = [c["stage"] for c in events(dep, answer.request_id, "llm_call")]
    assert "clause_search" not in stages and "policy_search" not in stages
    assert answer.abstained and answer.reason == "denied"


@pytest.mark.parametrize(
    ("route", "text", "reason", "flagged"),
    [("qa", None, "truncated", False), ("policy_qa", None, "truncated", False),
     ("email_summarize", "Please confirm the EUR 60,000 transfer.", None, True)],
    ids=["tool-route", "prefetch-route", "no-retrieval-route"],
)  # fmt: skip
def test_a_reply_cut_off_by_the_token_limit_is_not_delivered_as_complete(
    dep: Deployment, route: str, text: str | None, reason: str | None, flagged: bool
) -> None:
    server = StrictServer(finish_reason="length")
    spy_on(dep, server.client())
    answer = ask(dep, "officer-123", QUESTION, route_id=route, text=text)
    assert answer.reason == reason and answer.flagged == flagged
    assert answer.trace.get("truncated") is True
    (response,) = events(dep, answer.request_id, "response")
    assert response["truncated"] is True
    results = events(dep, answer.request_id, "llm_result")
    assert results[-1]["finish_reason"] == "length"


@pytest.mark.parametrize("route", ["qa", "policy_qa", "email_summarize"])
def test_an_empty_reply_is_an_abstention_not_an_answer(dep: Deployment, route: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("tools") and not any(m["role"] == "tool" for m in body["messages"]):
            args = json.dumps({"corpus": "policy-engine", "query": "wire limit"})
            return httpx.Response(200, json=completion(("retrieve_documents", args)))
        return httpx.Response(200, json=completion(text=""))

    spy_on(dep, OpenAIChatClient("http://127.0.0.1:8080/v1", "m",
                                 transport=httpx.MockTransport(handler)))  # fmt: skip
    answer = ask(dep, "officer-123", QUESTION, route_id=route, text="An e-mail.")
    assert answer.abstained and answer.reason == "empty_reply" and answer.answer != ""


def test_a_corpus_the_model_invents_is_not_the_callers_right(dep: Deployment) -> None:
    """SmolLM2 invents a corpus name on every run; the user was told they may not search,
    although they may. The tool's schema now offers the route's scope as an enum, and a
    proposal outside it is still decided (DENY out_of_scope) but abstains for what it is."""
    server_bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        server_bodies.append(body)
        if any(m["role"] == "tool" for m in body["messages"]):
            return httpx.Response(200, json=completion(text="I could not find it."))
        args = json.dumps({"corpus": "wire_limits_eu", "query": "wire limit"})
        return httpx.Response(200, json=completion(("retrieve_documents", args)))

    spy_on(dep, OpenAIChatClient("http://127.0.0.1:8080/v1", "m",
                                 transport=httpx.MockTransport(handler)))  # fmt: skip
    answer = ask(dep, "officer-123", QUESTION, route_id="qa")
    (decision,) = answer.decisions
    assert (decision.verdict, decision.reason) == ("DENY", "out_of_scope")
    assert answer.reason == "model_out_of_scope" and "outside this route" in answer.answer
    (tool,) = [t["function"] for t in server_bodies[0]["tools"]
               if t["function"]["name"] == "retrieve_documents"]  # fmt: skip
    assert tool["parameters"]["properties"]["corpus"]["enum"] == ["policy-engine", "hr-policies"]


def test_a_corpus_in_scope_that_policy_denies_is_still_denied(dep: Deployment) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if any(m["role"] == "tool" for m in body["messages"]):
            return httpx.Response(200, json=completion(text="Nothing."))
        args = json.dumps({"corpus": "hr-policies", "query": "leave"})
        return httpx.Response(200, json=completion(("retrieve_documents", args)))

    spy_on(dep, OpenAIChatClient("http://127.0.0.1:8080/v1", "m",
                                 transport=httpx.MockTransport(handler)))  # fmt: skip
    answer = ask(dep, "officer-123", QUESTION, route_id="qa")
    assert answer.reason == "denied"


FAULTS = [  # (status, body, fault, transient)
    (500, {"error": {"message": "1 validation error: messages.1.content Input should be a "
                                "valid string"}}, "rejected", False),
    (400, {"error": {"message": "the request exceeds the available context size"}},
     "context_overflow", False),
    (404, {"error": {"message": "model 'smollm' not found"}}, "not_found", False),
    (503, {"error": {"message": "loading model"}}, "overloaded", True),
]  # fmt: skip


@pytest.mark.parametrize(("status", "body", "fault", "transient"), FAULTS,
                         ids=[f[2] for f in FAULTS])  # fmt: skip
def test_a_failed_model_gives_the_caller_a_fixed_message_and_the_log_the_detail(
    dep: Deployment, status: int, body: dict[str, Any], fault: str, transient: bool
) -> None:
    """Raw adapter errors (internal URLs, environment variable names) reached end users as
    the answer text, and model failures were invisible in the audit log and replay."""
    spy_on(dep, OpenAIChatClient("http://10.1.2.3:8080/v1", "m",
                                 transport=httpx.MockTransport(
                                     lambda r: httpx.Response(status, json=body))))  # fmt: skip
    answer = ask(dep, "officer-123", QUESTION, route_id="qa")
    assert answer.abstained and answer.reason == "llm_error" and answer.llm_fault == fault
    for internal in (
        "10.1.2.3",
        "llm.base_url",
        "GOVRAG_",
        f"HTTP {status}",
        body["error"]["message"],
    ):
        assert internal not in answer.answer and internal not in json.dumps(answer.as_dict())
    assert answer.request_id in answer.answer and f"({fault.replace('_', ' ')})" in answer.answer
    assert ("Try again later" in answer.answer) == transient
    assert answer.llm_detail is not None and "10.1.2.3" in answer.llm_detail
    (result,) = events(dep, answer.request_id, "llm_result")
    assert result["status"] == "error" and result["fault"] == fault
    assert body["error"]["message"] in result["error"]
    (response,) = events(dep, answer.request_id, "response")
    assert response["llm_fault"] == fault and response["reason"] == "llm_error"
    (shown,) = replay(dep.store, "t1", answer.request_id).llm_calls
    assert shown.result is not None
    assert shown.result.status == "error" and shown.result.fault == fault
