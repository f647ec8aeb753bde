"""Attack: make one request do unbounded work, write unbounded audit rows, or crash.

A hostile caller sends an enormous question; a hostile (or broken) model answers with
hundreds of tool calls, arguments holding lone surrogates, nesting thousands deep, NUL
characters, NaN, a megabyte of text, names and ids that are not text at all. Required: tool
calls per reply and per request are capped (the rest refused and audited, never run); every
recorded argument or query is bounded (a hash and a prefix past a size); an over-long input is
refused before anything is recorded; a hostile proposal is a refused proposal, never a crashed
request, and the audit chain still verifies.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_world import (
    QUESTION,
    MakeDeployment,
    Scripted,
    answer,
    calls,
    deployment_factory,
    events,
    with_model,
)

from govrag.agent.llm import LlmReply, ToolCall
from govrag.agent.openai_chat import OpenAIChatClient
from govrag.audit import replay
from govrag.audit.trail import RECORD_CHARS
from govrag.deployment import Deployment
from govrag.errors import InputError


@pytest.fixture
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, "sqlite")


def ask(dep: Deployment, question: str = QUESTION, **kw: Any) -> Any:
    return dep.orchestrator.ask(dep.principal("officer"), question, **kw)


def kinds(dep: Deployment, request_id: str) -> list[str]:
    return [e.kind for e in events(dep, request_id)]


# -- caps on tool calls ----------------------------------------------------------------------
def test_tool_calls_past_the_per_reply_cap_are_refused_not_run(make: MakeDeployment) -> None:
    flood = calls(*[("list_corpora", {})] * 40)
    model = Scripted(flood, answer("No."))
    dep = with_model(make(llm={"max_tool_calls_per_reply": 3}), model)
    done = ask(dep)
    proposals = [e.payload for e in events(dep, done.request_id) if e.kind == "proposal"]
    assert [p["accepted"] for p in proposals] == [True, True, True, False]
    assert proposals[-1]["calls"] == 37
    assert "llm.max_tool_calls_per_reply" in proposals[-1]["error"]
    # Three listings ran (two decisions each: the route has two corpora), nothing more.
    assert kinds(dep, done.request_id).count("pep_decision") == 6
    # The model got one tool message per call it made, the excess ones refusals.
    said = model.tool_messages(1)
    assert len(said) == 40 and all("limit" in s["error"] for s in said[3:])


def test_tool_calls_past_the_per_request_cap_are_refused_and_tools_withdrawn(
    make: MakeDeployment,
) -> None:
    model = Scripted(calls(("list_corpora", {}), ("list_corpora", {})))  # forever
    dep = with_model(make(llm={"max_tool_calls": 5, "max_steps": 6}), model)
    done = ask(dep)
    accepted = [e for e in events(dep, done.request_id)
                if e.kind == "proposal" and e.payload["accepted"]]  # fmt: skip
    assert len(accepted) == 5
    refused = [e.payload for e in events(dep, done.request_id)
               if e.kind == "proposal" and not e.payload["accepted"]]  # fmt: skip
    assert refused[0]["calls"] == 1 and "llm.max_tool_calls" in refused[0]["error"]
    # Once spent, no tool is offered any more: the model can only answer.
    offered = [[t["name"] for t in tools] for _, tools in model.calls]
    assert offered[:3] == [["retrieve_documents", "list_corpora", "get_document_metadata",
                            "flag_for_review"]] * 3  # fmt: skip
    assert all(names == [] for names in offered[3:])
    assert done.abstained and replay(dep.store, "t1", done.request_id).chain_ok


# -- bounded records -------------------------------------------------------------------------
def test_recorded_arguments_and_queries_are_a_hash_and_a_prefix(make: MakeDeployment) -> None:
    query = "wire limit " + "corporate clients in the EU " * 300  # ~8,400 characters
    model = Scripted(calls(("retrieve_documents", {"corpus": "policy-engine", "query": query})),
                     answer())  # fmt: skip
    dep = with_model(make(), model)
    done = ask(dep)
    digest = hashlib.sha256(query.encode()).hexdigest()
    trail = events(dep, done.request_id)
    # The manifest bounds a query (maxLength): the proposal is refused, and recorded short.
    (proposal,) = [e.payload for e in trail if e.kind == "proposal"]
    assert not proposal["accepted"] and proposal["error"].endswith("breaks the rule maxLength 256")
    assert proposal["arguments"]["chars"] > len(query)  # the arguments' JSON, summarised
    assert not [e for e in trail if e.kind == "pep_decision"]
    assert all(len(e.payload_json) < 3 * RECORD_CHARS for e in trail)
    # A long query that is searched (the search API takes up to 4,096 characters) is
    # recorded as its hash and a prefix in the decision and in the pack alike.
    long = query[:4000]
    found = dep.governed.search(dep.principal("officer"), long, corpora=("policy-engine",))
    trail = events(dep, found.request_id)
    decision = next(e.payload for e in trail if e.kind == "pep_decision")
    pack = next(e.payload for e in trail if e.kind == "context_pack")
    digest = hashlib.sha256(long.encode()).hexdigest()
    assert decision["query"]["sha256"] == pack["retrieve_proposal"]["query"]["sha256"] == digest
    assert decision["query"]["chars"] == len(long) and long.startswith(decision["query"]["prefix"])
    assert all(len(e.payload_json) < 3 * RECORD_CHARS for e in trail)


# -- over-long or malformed input: refused before anything is recorded ----------------------
@pytest.mark.parametrize(
    ("question", "text", "message"),
    [
        ("x" * 4001, None, "question is 4,001 characters long; the limit is 4,000 "
                           "(llm.max_question_chars)"),
        (QUESTION, "y" * 200_001, "text is 200,001 characters long; the limit is 200,000 "
                                  "(llm.max_text_chars)"),
        ("wire \ud800 limit", None, "question is not valid UTF-8 text"),
        ("wire \x00 limit", None, "question contains a NUL character"),
    ],
)  # fmt: skip
def test_an_unacceptable_input_is_refused_before_anything_is_recorded(
    make: MakeDeployment, question: str, text: str | None, message: str
) -> None:
    model = Scripted(answer())
    dep = with_model(make(), model)
    before = len(dep.store.audit_events("t1"))
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ask(dep, question, text=text)
    assert len(dep.store.audit_events("t1")) == before  # no session, no event
    assert model.calls == []


def test_the_cli_refuses_an_over_long_question_in_one_line(make: MakeDeployment) -> None:
    dep = make(llm={"max_question_chars": 50})
    before = len(dep.store.audit_events("t1"))
    done = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "ask", "w" * 51, "--as", "officer",
         "--deployment", str(dep.settings.deployment)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "GOVRAG_LLM__MAX_QUESTION_CHARS": "50"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "llm.max_question_chars" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert len(dep.store.audit_events("t1")) == before


# -- hostile tool calls ----------------------------------------------------------------------
def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def hostile() -> tuple[ToolCall, ...]:
    """One reply's worth of hostile tool calls (see the module docstring)."""
    return (
        # lone surrogates in an argument, in a key, in the tool name and in the call id
        ToolCall("call-1", "retrieve_documents", {"corpus": "policy-engine", "query": "a\ud800b"}),
        ToolCall("call-2", "retrieve_documents", {"corpus": "policy-engine", "q\udfff": "x"}),
        ToolCall("call-\ud83d", "list\udc00corpora", {}),
        # nesting far past any schema, as an object and as raw text no parser can take
        ToolCall("call-4", "retrieve_documents", {"corpus": "policy-engine", **nested(5000)}),
        ToolCall.parse("call-5", "retrieve_documents", "[" * 200_000 + "]" * 200_000),
        # garbage: NUL, NaN, a megabyte, a non-object, a name that is a megabyte of junk
        ToolCall("call-6", "retrieve_documents", {"corpus": "policy-engine", "query": "a\x00b"}),
        ToolCall.parse("call-7", "retrieve_documents", '{"corpus": "policy-engine", "query": NaN}'),
        ToolCall("call-8", "retrieve_documents", {"corpus": "policy-engine", "query": "z" * 10**6}),
        ToolCall.parse("call-9", "retrieve_documents", '["policy-engine"]'),
        ToolCall("call-10", "\x00\ud800" * 500_000, {}),
    )


def test_hostile_tool_calls_are_refused_proposals_never_a_crash(make: MakeDeployment) -> None:
    hostile_calls = hostile()
    model = Scripted(LlmReply(tool_calls=hostile_calls), answer("Nothing usable."))
    dep = with_model(make(llm={"max_tool_calls_per_reply": 16}), model)
    done = ask(dep)
    assert done.abstained and done.decisions == ()  # nothing hostile reached the PEP
    proposals = [e for e in events(dep, done.request_id) if e.kind == "proposal"]
    assert len(proposals) == len(hostile_calls)
    assert not any(e.payload["accepted"] for e in proposals)
    assert all(len(e.payload_json) < 3 * RECORD_CHARS for e in proposals)
    errors = [e.payload["error"] for e in proposals]
    assert "not valid Unicode text" in errors[0] and "not valid Unicode text" in errors[1]
    assert "is not offered" in errors[2] and "nested deeper than 16" in errors[3]
    assert "not a JSON object" in errors[4] and "NUL" in errors[5]
    assert "NaN is not a JSON number" in errors[6] and "the limit is 16,384" in errors[7]
    assert "not a JSON object" in errors[8] and "is not offered" in errors[9]
    # The model was told, in one valid message per call, and the next payload is valid JSON.
    said = model.tool_messages(1)
    assert len(said) == len(hostile_calls) and all(s["error"] for s in said)
    json.dumps(model.calls[1][0], ensure_ascii=False).encode("utf-8")
    r = replay(dep.store, "t1", done.request_id)
    assert r.chain_ok and r.delivered is not None and len(r.proposed) == len(hostile_calls)


def completion(*tool_calls: tuple[str, str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls else "No."}
    if tool_calls:
        message["tool_calls"] = [{"id": f"c{i}", "type": "function",
                                  "function": {"name": n, "arguments": a}}
                                 for i, (n, a) in enumerate(tool_calls)]  # fmt: skip
    return {"choices": [{"index": 0, "message": message}], "model": "m"}


def test_hostile_tool_calls_through_the_openai_adapter(make: MakeDeployment) -> None:
    """The same through the real adapter: JSON escapes of lone surrogates, nesting no
    parser survives, a NUL; the transport is replayed."""
    replies = [
        completion(
            ("retrieve_documents", '{"corpus": "policy-engine", "query": "\\ud800"}'),
            ("retrieve_documents", '{"corpus": "policy-engine", "query": ' + "[" * 100_000),
            ("retrieve_documents", '{"corpus": "policy-engine", "query": "' + "[" * 50 + '"}'),
            ("list_corpora\\u0000", "{}"),
        ),
        completion(),
    ]
    sent: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=replies[min(len(sent), len(replies)) - 1])

    client = OpenAIChatClient("https://llm.example/v1", "m", transport=httpx.MockTransport(handler))
    dep = with_model(make(), client)
    done = ask(dep)
    assert len(sent) == 2 and done.abstained
    accepted = [e.payload["accepted"] for e in events(dep, done.request_id)
                if e.kind == "proposal"]  # fmt: skip
    assert accepted == [False, False, True, False]
    second = json.loads(sent[1])
    assert [m["role"] for m in second["messages"]].count("tool") == 4
