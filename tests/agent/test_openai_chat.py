"""The OpenAI-compatible adapter against replayed chat-completions traffic.

Only the transport is fake (``httpx.MockTransport``): the adapter's own request building,
response parsing and error handling run for real. Replies are recorded-shape JSON files under
``fixtures/openai_chat`` (OpenAI, Ollama, vLLM).
"""

from __future__ import annotations

import copy
import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from govrag.agent.llm import LlmClient, LlmReply, ToolCall
from govrag.agent.openai_chat import OpenAIChatClient
from govrag.errors import LlmError, MissingExtraError
from govrag.routes.models import Tool
from govrag.routes.payload import tool_schemas
from govrag.settings import LlmSettings

FIXTURES = Path(__file__).parent / "fixtures" / "openai_chat"
BASE_URL = "http://llm.test/v1"
URL = f"{BASE_URL}/chat/completions"
KEY = "sk-test-S3CR3T-5f2a9c81d04e7b36"
KEY_ENV = "GOVRAG_TEST_OPENAI_KEY"

#: The seed's three tools, as the manifest defines them (with what must never reach the model).
TOOLS = [
    Tool(name="retrieve_documents", description="Search a corpus the caller may read.",
         parameters={"type": "object", "required": ["corpus", "query"],
                     "properties": {"corpus": {"type": "string"}, "query": {"type": "string"}}},
         pdp_action="retrieve_documents", risk_tier="medium", kind="retrieve"),
    Tool(name="list_corpora", description="The corpora in scope.", pdp_action="list_corpora"),
    Tool(name="get_document_metadata", description="A document's title and owner.",
         parameters={"type": "object", "properties": {"doc_id": {"type": "string"}}},
         pdp_action="get_document_metadata", risk_tier="low", corpus="policy-engine"),
]  # fmt: skip
SCHEMAS = tool_schemas(TOOLS)
QUESTION = [{"role": "user", "content": "What's our wire limit for corporate clients in the EU?"}]


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


class Server:
    """A fake chat-completions endpoint: records each request, answers from a handler."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    @property
    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.last.content)
        return data


def replying(body: Any, status: int = 200) -> Server:
    return Server(lambda request: httpx.Response(status, json=body))


def client(server: Server, **options: Any) -> OpenAIChatClient:
    options.setdefault("api_key", KEY)
    return OpenAIChatClient(BASE_URL, "gpt-4o-mini", transport=httpx.MockTransport(server),
                            **options)  # fmt: skip


@pytest.fixture
def text_server() -> Server:
    return replying(fixture("text"))


@pytest.fixture
def llm(text_server: Server) -> Iterator[OpenAIChatClient]:
    c = client(text_server)
    yield c
    c.close()


# -- replies --------------------------------------------------------------------------------

REPLIES = [
    # (fixture, text, [(id, name, arguments, raw_arguments)], model)
    ("text",
     "The wire limit for corporate clients in the EU is EUR 5,000,000 per day "
     "[policy-engine:wire#0].", [], "gpt-4o-mini-2024-07-18"),
    ("one_tool_call", "",
     [("call_0yQxNzQvRGBvYtXW2lS7Qd1f", "retrieve_documents",
       {"corpus": "policy-engine", "query": "wire limit corporate clients EU"},
       '{"corpus":"policy-engine","query":"wire limit corporate clients EU"}')],
     "gpt-4o-mini-2024-07-18"),
    ("parallel_tool_calls", "",
     [("call_Jd3Ht0u4jQ2yU6Gx1bTmZsKc", "retrieve_documents",
       {"corpus": "policy-engine", "query": "corporate wire limit EU"},
       '{"corpus": "policy-engine", "query": "corporate wire limit EU"}'),
      ("call_P8wq2Lr5VbNn1cXoA7eF0yHi", "get_document_metadata", {"doc_id": "wire"},
       '{"doc_id": "wire"}')],
     "gpt-4o-2024-08-06"),
    # Malformed JSON is kept raw for the app to refuse, never raised.
    ("malformed_arguments", "",
     [("call_Xr4b7QmK2sLw9VfPz1yHn3Ce", "retrieve_documents", None,
       '{"corpus": "policy-engine", "query": "wire limit')],
     "gpt-4o-mini-2024-07-18"),
    # Some servers send the arguments object itself: re-encoded, parsed the same way.
    ("arguments_object", "",
     [("call_k2x9d1qe", "retrieve_documents",
       {"corpus": "policy-engine", "query": "Überweisungslimit Firmenkunden"},
       '{"corpus": "policy-engine", "query": "Überweisungslimit Firmenkunden"}')],
     "qwen2.5:7b-instruct"),
    ("legacy_function_call", "", [("call-1", "list_corpora", {}, "{}")], "gpt-3.5-turbo-0613"),
    # Text and a call together; empty arguments mean no arguments.
    ("text_with_tool_call", "Let me look that up in the policy corpus.",
     [("call_Qm1aZx7Lp0sKd3Vb8Nc2Wf4Y", "list_corpora", {}, "")], "gpt-4o-2024-08-06"),
    # Ollama: no ids on tool calls (generated, unique), an extra ``index`` field.
    ("ollama_missing_ids", "",
     [("call-1", "retrieve_documents", {"corpus": "policy-engine", "query": "wire limit"},
       '{"corpus":"policy-engine","query":"wire limit"}'),
      ("call-2", "list_corpora", {}, "{}")],
     "llama3.1:8b"),
    # vLLM: extra fields at every level are ignored.
    ("vllm_extra_fields", "",
     [("chatcmpl-tool-6a5e7f8d2c1b4a3e9d0f", "get_document_metadata", {"doc_id": "wire"},
       '{"doc_id": "wire"}')],
     "meta-llama/Llama-3.1-8B-Instruct"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "calls", "model"), REPLIES, ids=[r[0] for r in REPLIES])
def test_a_reply_becomes_text_and_tool_call_proposals(
    name: str, text: str, calls: list[tuple[str, str, Any, str]], model: str
) -> None:
    with client(replying(fixture(name))) as llm:
        reply = llm.complete(QUESTION, SCHEMAS)
    assert isinstance(reply, LlmReply)
    assert reply.text == text
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in reply.tool_calls] == calls
    assert reply.model == model


INLINE_REPLIES = [
    # (message, text, [(id, name, arguments)])
    # llama.cpp / newer servers may send content as a list of text parts.
    ({"role": "assistant", "content": [{"type": "text", "text": "EUR "},
                                       {"type": "text", "text": "5m"}]}, "EUR 5m", []),
    # Arguments missing entirely: no arguments.
    ({"role": "assistant", "content": None,
      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "list_corpora"}}]},
     "", [("c1", "list_corpora", {})]),
    # A JSON value that is not an object is not valid arguments.
    ({"role": "assistant", "content": None,
      "tool_calls": [{"id": "c1", "type": "function",
                      "function": {"name": "list_corpora", "arguments": "[1, 2]"}}]},
     "", [("c1", "list_corpora", None)]),
    ({"role": "assistant", "content": None, "tool_calls": []}, "", []),
    ({"role": "assistant"}, "", []),
]  # fmt: skip


@pytest.mark.parametrize(("message", "text", "calls"), INLINE_REPLIES)
def test_server_variations_in_the_message(
    message: dict[str, Any], text: str, calls: list[tuple[str, str, Any]]
) -> None:
    with client(replying({"choices": [{"index": 0, "message": message}]})) as llm:
        reply = llm.complete(QUESTION, [])
    assert reply.text == text
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == calls
    assert reply.model == "gpt-4o-mini"  # no ``model`` in the reply: the configured one


def test_generated_ids_stay_unique_across_calls_of_one_client() -> None:
    with client(replying(fixture("ollama_missing_ids"))) as llm:
        first = llm.complete(QUESTION, SCHEMAS)
        second = llm.complete(QUESTION, SCHEMAS)
    ids = [c.id for c in first.tool_calls + second.tool_calls]
    assert ids == ["call-1", "call-2", "call-3", "call-4"]


# -- the request ----------------------------------------------------------------------------


def test_it_posts_to_the_chat_completions_endpoint(text_server: Server) -> None:
    llm = OpenAIChatClient(f"{BASE_URL}/", "gpt-4o-mini", timeout_s=7.5, temperature=0.3,
                           transport=httpx.MockTransport(text_server))  # fmt: skip
    llm.complete(QUESTION, [])
    request = text_server.last
    assert (request.method, str(request.url)) == ("POST", URL)
    assert request.headers["content-type"] == "application/json"
    assert request.extensions["timeout"] == dict.fromkeys(("connect", "read", "write", "pool"), 7.5)
    assert text_server.body["temperature"] == 0.3
    assert llm.name == "openai:gpt-4o-mini"


@pytest.mark.parametrize(
    ("api_key", "authorization"),
    [(KEY, f"Bearer {KEY}"), (None, None), ("", None)],
    ids=["key", "no-key", "empty-key"],
)
def test_bearer_auth_only_when_a_key_is_set(
    text_server: Server, api_key: str | None, authorization: str | None
) -> None:
    with client(text_server, api_key=api_key) as llm:
        llm.complete(QUESTION, [])
    assert text_server.last.headers.get("authorization") == authorization


@pytest.mark.parametrize(
    ("env", "authorization"),
    [(KEY, f"Bearer {KEY}"), ("", None), (None, None)],
    ids=["set", "empty", "unset"],
)
def test_from_settings_reads_the_key_from_the_named_variable(
    monkeypatch: pytest.MonkeyPatch, text_server: Server, env: str | None,
    authorization: str | None,
) -> None:  # fmt: skip
    if env is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, env)
    settings = LlmSettings(provider="openai", base_url="http://llm.test/v1/", model="llama3.1:8b",
                           api_key_env=KEY_ENV, timeout_s=12.0, temperature=0.7)  # fmt: skip
    with OpenAIChatClient.from_settings(
        settings, transport=httpx.MockTransport(text_server)
    ) as llm:
        assert llm.name == "openai:llama3.1:8b"
        llm.complete(QUESTION, [])
    request = text_server.last
    assert str(request.url) == URL
    assert request.headers.get("authorization") == authorization
    assert request.extensions["timeout"]["read"] == 12.0
    assert text_server.body == {"model": "llama3.1:8b", "messages": QUESTION, "temperature": 0.7,
                                "max_tokens": 1024}  # fmt: skip


def test_from_settings_without_a_key_variable_sends_no_key(
    monkeypatch: pytest.MonkeyPatch, text_server: Server
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # present, but no variable is configured
    settings = LlmSettings(provider="openai", base_url=BASE_URL)  # the default: none
    assert settings.api_key_env is None
    with OpenAIChatClient.from_settings(
        settings, transport=httpx.MockTransport(text_server)
    ) as llm:
        llm.complete(QUESTION, [])
    assert "authorization" not in text_server.last.headers


@pytest.mark.parametrize(
    ("tools", "keys"),
    [(SCHEMAS, {"model", "messages", "temperature", "max_tokens", "tools", "tool_choice"}),
     ([], {"model", "messages", "temperature", "max_tokens"})],
    ids=["tools", "no-tools"],
)  # fmt: skip
def test_the_body_holds_exactly_the_protocol_keys(
    text_server: Server, llm: OpenAIChatClient, tools: list[dict[str, Any]], keys: set[str]
) -> None:
    llm.complete(QUESTION, tools)
    body = text_server.body
    assert set(body) == keys
    assert body["model"] == "gpt-4o-mini"
    assert body["temperature"] == 0.0
    if tools:
        assert body["tool_choice"] == "auto"


def test_tool_schemas_are_wrapped_as_functions(text_server: Server, llm: OpenAIChatClient) -> None:
    llm.complete(QUESTION, SCHEMAS)
    assert text_server.body["tools"] == [
        {"type": "function", "function": {
            "name": "retrieve_documents", "description": "Search a corpus the caller may read.",
            "parameters": {"type": "object", "required": ["corpus", "query"],
                           "properties": {"corpus": {"type": "string"},
                                          "query": {"type": "string"}}}}},
        {"type": "function", "function": {
            "name": "list_corpora", "description": "The corpora in scope.",
            "parameters": {"type": "object"}}},
        {"type": "function", "function": {
            "name": "get_document_metadata", "description": "A document's title and owner.",
            "parameters": {"type": "object", "properties": {"doc_id": {"type": "string"}}}}},
    ]  # fmt: skip


def conversation() -> list[dict[str, Any]]:
    """A Pattern 1 loop's second call: a proposal, its tool result, unicode everywhere."""
    call = ToolCall.parse("call_0yQx", "retrieve_documents",
                          '{"corpus":"policy-engine","query":"Überweisungslimit"}')  # fmt: skip
    return [
        {"role": "system", "content": "Answer only from the evidence. Cite chunk ids."},
        {"role": "user", "content": "Quel est le plafond de virement — clients « corporate » ?"},
        {"role": "assistant", "content": None, "tool_calls": [call.as_message()]},
        {"role": "tool", "tool_call_id": "call_0yQx",
         "content": json.dumps({"hits": [{"chunk_id": "policy-engine:wire#0",
                                          "text": "EUR 5 000 000 / Tag\n\t\"quoted\""}]})},
    ]  # fmt: skip


def test_messages_pass_through_unchanged(text_server: Server, llm: OpenAIChatClient) -> None:
    messages = conversation()
    before = copy.deepcopy(messages)
    llm.complete(messages, SCHEMAS)
    sent = text_server.body["messages"]
    assert sent == before
    assert messages == before  # the caller's list is not touched either
    # Byte for byte, once canonicalised: same keys, same strings, same order.
    assert json.dumps(sent, ensure_ascii=False) == json.dumps(before, ensure_ascii=False)
    assert sent[2]["tool_calls"][0]["function"]["arguments"] == (
        '{"corpus":"policy-engine","query":"Überweisungslimit"}'
    )


def test_a_proposal_round_trips_into_the_next_request() -> None:
    server = replying(fixture("parallel_tool_calls"))
    with client(server) as llm:
        reply = llm.complete(QUESTION, SCHEMAS)
        follow_up = [
            *QUESTION,
            {"role": "assistant", "content": None,
             "tool_calls": [c.as_message() for c in reply.tool_calls]},
            *({"role": "tool", "tool_call_id": c.id, "content": "[]"} for c in reply.tool_calls),
        ]  # fmt: skip
        llm.complete(follow_up, SCHEMAS)
    recorded = fixture("parallel_tool_calls")["choices"][0]["message"]["tool_calls"]
    assert server.body["messages"][1]["tool_calls"] == recorded
    assert [m["tool_call_id"] for m in server.body["messages"][2:]] == [
        "call_Jd3Ht0u4jQ2yU6Gx1bTmZsKc",
        "call_P8wq2Lr5VbNn1cXoA7eF0yHi",
    ]


def keys_and_strings(value: Any) -> Iterator[str]:
    """Every object key and string anywhere in a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from keys_and_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from keys_and_strings(v)
    elif isinstance(value, str):
        yield value


def test_the_adapter_adds_nothing_about_the_caller_or_the_policy(text_server: Server) -> None:
    # A careless caller hands over full manifest tools; still only the schema reaches the model.
    leaky_tools = [t.model_dump() for t in TOOLS]
    messages = conversation()
    with client(text_server) as llm:
        llm.complete(messages, leaky_tools)
    body = text_server.body
    protocol = {"model", "messages", "temperature", "max_tokens", "tools", "tool_choice", "type",
                "function", "gpt-4o-mini", "auto"}  # fmt: skip
    allowed = protocol | set(keys_and_strings(messages)) | set(keys_and_strings(SCHEMAS))
    assert set(keys_and_strings(body)) <= allowed
    assert [t["function"] for t in body["tools"]] == SCHEMAS
    raw = text_server.last.content.decode().replace('"max_tokens"', "")  # a protocol key
    for secret in (KEY, "Bearer", "pdp_action", "risk_tier", "kind", "token", "roles",
                   "doc_entitlements", "entitlement", "clearance"):  # fmt: skip
        assert secret not in raw


def test_it_is_an_llm_client(llm: OpenAIChatClient) -> None:
    typed: LlmClient = llm
    assert typed.name == "openai:gpt-4o-mini"
    assert KEY not in repr(llm)


# -- faults ---------------------------------------------------------------------------------


def raising(exc: type[httpx.HTTPError]) -> Server:
    def answer(request: httpx.Request) -> httpx.Response:
        raise exc(f"simulated {exc.__name__}", request=request)

    return Server(answer)


def status(code: int, body: str, content_type: str = "application/json") -> Server:
    return Server(lambda r: httpx.Response(code, text=body, headers={"content-type": content_type}))


ECHO = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}.",
                             "type": "invalid_request_error",
                             "code": "invalid_api_key"}})  # fmt: skip
LONG = "x" * 3000
#: What llama-cpp-python's server answers for a null assistant content (HTTP 500), and
#: llama.cpp's server for a prompt past its context (HTTP 400).
PYDANTIC_500 = json.dumps({"error": {"message": "1 validation error for "
                           "CreateChatCompletionRequest\nmessages.1.assistant.content\n  Input "
                           "should be a valid string [type=string_type, input_value=None]",
                           "type": "internal_server_error"}})  # fmt: skip
OVERFLOW_400 = json.dumps({"error": {"code": 400, "type": "exceed_context_size_error",
                           "message": "the request exceeds the available context size, try "
                           "increasing it"}})  # fmt: skip
FAULTS = [
    # (id, server, expected phrases in the message)
    ("connect", raising(httpx.ConnectError),
     ["could not connect", URL, "ConnectError", "llm.base_url", "running"]),
    ("connect-timeout", raising(httpx.ConnectTimeout),
     ["timed out after 60s", URL, "ConnectTimeout", "llm.timeout_s"]),
    ("read-timeout", raising(httpx.ReadTimeout),
     ["timed out after 60s", URL, "ReadTimeout", "llm.timeout_s"]),
    ("remote-closed", raising(httpx.RemoteProtocolError),
     ["could not connect", URL, "RemoteProtocolError"]),
    ("401", status(401, ECHO),
     ["HTTP 401", URL, "unauthorized", "a key was sent", KEY_ENV, "llm.api_key_env",
      "Incorrect API key provided: [redacted]"]),
    ("403", status(403, '{"error": {"message": "Project does not have access to model"}}'),
     ["HTTP 403", URL, "forbidden", KEY_ENV, "does not have access"]),
    ("404", status(404, '{"error": {"message": "The model `gpt-4o-mini` does not exist"}}'),
     ["HTTP 404", URL, "not found", "/v1", "llm.base_url", "'gpt-4o-mini'", "does not exist"]),
    ("404-html", status(404, "<html><body>404 page not found</body></html>", "text/html"),
     ["HTTP 404", "/v1", "404 page not found"]),
    ("429", status(429, '{"error": {"message": "Rate limit reached for gpt-4o-mini"}}'),
     ["HTTP 429", URL, "rate limited", "Rate limit reached"]),
    ("500", status(500, '{"error": {"message": "The server had an error"}}'),
     ["HTTP 500", URL, "server error", "The server had an error"]),
    ("502-empty", status(502, ""), ["HTTP 502", "(empty body)"]),
    ("503-long", status(503, LONG), ["HTTP 503", "x" * 990 + "...", "retry later"]),
    ("400", status(400, '{"error": {"message": "Invalid schema for function"}}'),
     ["HTTP 400", URL, "Invalid schema for function", "refused the request",
      "retrying will not help"]),
    ("500-validation", status(500, PYDANTIC_500),
     ["HTTP 500", "refused the request", "messages.1.assistant.content", "Input should be a "
      "valid string", "retrying will not help"]),
    ("400-context", status(400, OVERFLOW_400),
     ["HTTP 400", "does not fit the model's context", "exceeds the available context size",
      "token_budget", "top_k", "llm.max_tokens"]),
    ("html-200", status(200, "<!doctype html><title>Open WebUI</title>", "text/html"),
     ["not JSON", URL, "Open WebUI", "/v1"]),
    ("json-list", status(200, "[]"), ["outside the chat-completions protocol", "not an object"]),
    ("no-choices", status(200, '{"id": "x", "object": "chat.completion"}'),
     ["no choices[0].message", URL, "/v1"]),
    ("empty-choices", status(200, '{"choices": []}'), ["no choices[0].message"]),
    ("choice-without-message", status(200, '{"choices": [{"index": 0, "text": "hi"}]}'),
     ["no choices[0].message"]),
    ("error-body-200", status(200, '{"error": {"message": "model not loaded"}}'),
     ["no choices[0].message", "model not loaded"]),
    ("tool-calls-not-list",
     status(200, '{"choices": [{"message": {"content": null, "tool_calls": {}}}]}'),
     ["tool_calls is not a list"]),
    ("tool-call-without-name",
     status(200, '{"choices": [{"message": {"tool_calls": [{"id": "a", "function": {}}]}}]}'),
     ["tool_calls[0].function.name is missing"]),
    ("content-not-text", status(200, '{"choices": [{"message": {"content": 42}}]}'),
     ["content is a int"]),
]  # fmt: skip


#: The fault class each case is; the rest are ``protocol``.
FAULT_CLASS = {
    "connect": "connection", "connect-timeout": "timeout", "read-timeout": "timeout",
    "remote-closed": "connection", "401": "auth", "403": "auth", "404": "not_found",
    "404-html": "not_found", "429": "rate_limited", "500": "overloaded", "502-empty": "overloaded",
    "503-long": "overloaded", "400": "rejected", "500-validation": "rejected",
    "400-context": "context_overflow",
}  # fmt: skip


@pytest.mark.parametrize(("name", "server", "phrases"), FAULTS, ids=[f[0] for f in FAULTS])
def test_every_fault_is_an_llm_error_that_says_what_to_fix(
    name: str, server: Server, phrases: list[str]
) -> None:
    with client(server, api_key_env=KEY_ENV) as llm, pytest.raises(LlmError) as info:
        llm.complete(QUESTION, SCHEMAS)
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message
    assert "x" * 1001 not in message  # body snippets are capped
    assert info.value.fault == FAULT_CLASS.get(name, "protocol")
    assert info.value.transient == (info.value.fault in {"timeout", "overloaded", "rate_limited"})
    if not info.value.transient:  # a retry cannot help a refused request
        assert "retry later" not in message
    # The key never leaks, not even through the wrapped cause.
    chain = [message, repr(info.value.__cause__), str(info.value.__cause__)]
    assert all(KEY not in text for text in chain)


@pytest.mark.parametrize(
    ("exc", "cause"),
    [(httpx.ConnectError, httpx.ConnectError), (httpx.ReadTimeout, httpx.ReadTimeout)],
)
def test_driver_errors_stay_inspectable(exc: type[httpx.HTTPError], cause: type) -> None:
    with client(raising(exc)) as llm, pytest.raises(LlmError) as info:
        llm.complete(QUESTION, [])
    assert isinstance(info.value.__cause__, cause)
    assert info.value.exit_code == 5


def test_a_non_json_body_keeps_the_decode_error_as_cause() -> None:
    with client(status(200, "not json", "text/plain")) as llm, pytest.raises(LlmError) as info:
        llm.complete(QUESTION, [])
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("api_key", "api_key_env", "phrases"),
    [(None, KEY_ENV, ["no key was sent", KEY_ENV]),
     (None, None, ["no key was sent", "set llm.api_key_env (GOVRAG_LLM__API_KEY_ENV)"])],
    ids=["variable-unset", "no-variable-configured"],
)  # fmt: skip
def test_an_auth_failure_says_whether_a_key_was_sent(
    api_key: str | None, api_key_env: str | None, phrases: list[str]
) -> None:
    server = status(401, '{"error": {"message": "You didn\'t provide an API key."}}')
    llm = client(server, api_key=api_key, api_key_env=api_key_env)
    with llm, pytest.raises(LlmError) as info:
        llm.complete(QUESTION, [])
    for phrase in phrases:
        assert phrase in str(info.value)


def test_a_timeout_names_the_configured_timeout() -> None:
    with client(raising(httpx.ReadTimeout), timeout_s=2.5) as llm, pytest.raises(LlmError) as e:
        llm.complete(QUESTION, [])
    assert "timed out after 2.5s" in str(e.value)


def test_unencodable_messages_are_an_llm_error_before_anything_is_sent(
    text_server: Server, llm: OpenAIChatClient
) -> None:
    with pytest.raises(LlmError, match="could not be encoded as JSON"):
        llm.complete([{"role": "user", "content": object()}], [])
    assert text_server.requests == []


def test_without_httpx_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes ``import httpx`` fail
    monkeypatch.delitem(sys.modules, "govrag.agent.openai_chat")
    with pytest.raises(MissingExtraError) as info:
        importlib.import_module("govrag.agent.openai_chat")
    assert info.value.extra == "http"
    assert "The 'openai' LLM provider" in str(info.value)
    assert "pip install 'govrag[http]'" in str(info.value)


def test_a_compressed_reply_is_read_once_decoded() -> None:
    """The reply is read in chunks (to bound the whole call by ``timeout_s``) and rebuilt:
    a gzip body must be decoded exactly once."""
    import gzip

    reply = {"choices": [{"message": {"role": "assistant", "content": "Hello."},
                          "finish_reason": "stop"}]}  # fmt: skip
    body = gzip.compress(json.dumps(reply).encode())

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            content=body,
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )

    with OpenAIChatClient(BASE_URL, "m", transport=httpx.MockTransport(handler)) as llm:
        assert llm.complete(QUESTION, []).text == "Hello."


@pytest.mark.parametrize(
    "server",
    [raising(httpx.ConnectError), status(404, "no such model"), status(200, "[]")],
    ids=["connect", "404", "protocol"],
)
def test_credentials_in_the_base_url_never_reach_a_message(server: Server) -> None:
    # An operator may put a proxy's basic-auth password in llm.base_url: messages name the
    # server, never the password.
    llm = OpenAIChatClient("https://svc:hunter2@llm.test/v1", "m",
                           transport=httpx.MockTransport(server))  # fmt: skip
    with llm, pytest.raises(LlmError) as info:
        llm.complete(QUESTION, [])
    shown = [str(info.value), repr(llm)]
    assert all("hunter2" not in text for text in shown)
    assert all("https://svc:***@llm.test/v1/chat/completions" in text for text in shown)
