"""Review attacks on issue 17 ("work with real model servers"): promises of the OpenAI adapter,
the orchestrator's model-failure handling and the audit trail of model calls that still break.
Every test here FAILS on the commit it was written against (red on purpose: each is the
acceptance test of a fix); each docstring names the defect and the promise it breaks.

The deployment, the strict fake server and the helpers are those of
``tests/agent/test_model_servers.py``: real store, real Cedar, real audit log, the real OpenAI
adapter; only the transport is fake (``httpx.MockTransport``), except where a real socket is
needed to reach httpx's own header checks.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))

from test_model_servers import StrictServer, events
from test_orchestrator import QUESTION, ask, deployments, spy_on

from govrag.agent.answer import Answer
from govrag.agent.llm import LlmReply
from govrag.agent.openai_chat import OpenAIChatClient
from govrag.agent.run import payload_hash
from govrag.audit import replay
from govrag.deployment import Deployment
from govrag.errors import TRANSIENT_LLM_FAULTS, GovragError

from conftest import completion


@pytest.fixture
def make_dep(tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    yield from deployments(tmp_path)


@pytest.fixture
def dep(make_dep: Callable[..., Deployment]) -> Deployment:
    return make_dep()


def server(handler: Callable[[httpx.Request], httpx.Response],
           base_url: str = "http://10.1.2.3:8080/v1") -> OpenAIChatClient:  # fmt: skip
    return OpenAIChatClient(base_url, "m", transport=httpx.MockTransport(handler))


def ask_or_crash(dep: Deployment, sub: str, question: str, **kw: Any) -> tuple[Answer | None, str]:
    """The answer (``None`` when the request crashed) and the request's id either way."""
    try:
        answer = ask(dep, sub, question, **kw)
    except GovragError:
        answer = None
    calls = [e for e in dep.store.audit_events("t1") if e.kind == "llm_call"]
    assert calls, "no model call was recorded"
    return answer, str(calls[-1].request_id)


def calls_and_results(dep: Deployment, request_id: str) -> tuple[list[Any], list[Any]]:
    return events(dep, request_id, "llm_call"), events(dep, request_id, "llm_result")


# -- promise 3: every model call has an llm_result, whatever the adapter does ---------------


def test_an_adapter_raising_an_unexpected_error_leaves_its_llm_call_without_a_result(
    dep: Deployment,
) -> None:
    """Defect: ``Run.call_model`` records ``llm_result`` only for ``LlmError``; an adapter
    that raises anything else (a bug, a ``KeyError`` in a third-party client, a reply that is
    not an ``LlmReply``) leaves an ``llm_call`` with no outcome, and replay says "the request
    ended during the call". Promise broken: every model call has an ``llm_call`` before and
    an ``llm_result`` after, even when the adapter raises something unexpected."""

    class Broken:
        name = "broken"

        def complete(self, messages: Any, tools: Any, **kw: Any) -> LlmReply:
            raise KeyError("choices")

    spy_on(dep, Broken())
    _, request_id = ask_or_crash(dep, "officer-123", QUESTION, route_id="qa")
    calls, results = calls_and_results(dep, request_id)
    assert len(calls) == 1
    assert len(results) == 1 and results[0]["status"] == "error", results
    (shown,) = replay(dep.store, "t1", request_id).llm_calls
    assert shown.result is not None


def test_a_deeply_nested_json_reply_crashes_the_request_instead_of_a_protocol_fault(
    dep: Deployment,
) -> None:
    """Defect: ``OpenAIChatClient._parse`` catches ``ValueError`` from ``response.json()``,
    but a hostile or broken server's 200 body nested deeper than the JSON parser's recursion
    limit raises ``RecursionError``: the request fails "unexpectedly" (a stack trace in the
    server log), no ``llm_result`` is recorded and ``ask`` exits with a generic error instead
    of ``llm_error``/``protocol``. Promises broken: no crash on a hostile server reply; every
    model call has an ``llm_result``; faults are classified."""
    body = b'{"choices": ' + b"[" * 200_000
    spy_on(dep, server(lambda r: httpx.Response(200, content=body)))
    answer, request_id = ask_or_crash(dep, "officer-123", QUESTION, route_id="qa")
    assert answer is not None, "the request crashed on a hostile reply"
    assert answer.reason == "llm_error" and answer.llm_fault == "protocol"
    _, results = calls_and_results(dep, request_id)
    assert [r["fault"] for r in results] == ["protocol"]


def test_a_base_url_httpx_cannot_parse_crashes_the_request_instead_of_a_fault(
    dep: Deployment,
) -> None:
    """Defect: ``complete`` catches ``httpx.HTTPError`` only; ``httpx.InvalidURL`` (not an
    ``HTTPError``) escapes for a base_url the settings accept: a trailing newline from an env
    file (``GOVRAG_LLM__BASE_URL``), a typo'd port (``:80a``), an unclosed IPv6 bracket. The
    request fails "unexpectedly" with no ``llm_result``, and the operator is not told which
    setting to fix. Promises broken: every model call has an ``llm_result``; a configuration
    fault is classified (``connection``, exit 5) with advice, not a crash."""
    from govrag.settings import LlmSettings

    settings = LlmSettings(provider="openai", base_url="http://llm.internal:8080/v1\n", model="m")
    spy_on(dep, OpenAIChatClient.from_settings(settings))
    answer, request_id = ask_or_crash(dep, "officer-123", QUESTION, route_id="qa")
    assert answer is not None, "the request crashed on a bad base_url"
    assert answer.reason == "llm_error" and answer.llm_fault not in TRANSIENT_LLM_FAULTS
    assert answer.llm_detail is not None and "base_url" in answer.llm_detail
    _, results = calls_and_results(dep, request_id)
    assert len(results) == 1 and results[0]["status"] == "error"


# -- promise 2: the API key never appears in an error, audit event, log line or replay -----


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def test_an_api_key_with_a_trailing_carriage_return_is_written_into_the_error(
    dep: Deployment,
    listening_port: int,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Defect: a key read from a CRLF env file (``docker --env-file``, systemd
    ``EnvironmentFile``) ends in ``\\r``; httpx refuses the header with ``LocalProtocolError:
    Illegal header value b'Bearer sk-...\\r'``. ``_scrub`` looks for the raw key (with a real
    CR) and misses its ``repr`` (``\\\\r``), so the key is quoted in the ``connection`` error:
    in ``Answer.llm_detail`` (stderr of ``ask``), the ``llm_result`` audit event, the replay
    and the log. The advice ("check llm.base_url") is wrong too. Promise broken: the API key
    never appears in any error, audit event, log line or replay."""
    from govrag.settings import LlmSettings

    secret = "sk-live-0123456789abcdefSECRET"
    monkeypatch.setenv("GOVRAG_REVIEW_KEY", secret + "\r")
    settings = LlmSettings(provider="openai", base_url=f"http://127.0.0.1:{listening_port}/v1",
                           model="m", api_key_env="GOVRAG_REVIEW_KEY", timeout_s=5)  # fmt: skip
    spy_on(dep, OpenAIChatClient.from_settings(settings))
    with caplog.at_level(logging.INFO):
        answer, request_id = ask_or_crash(dep, "officer-123", QUESTION, route_id="qa")
    assert answer is not None and answer.reason == "llm_error"
    seen = {
        "llm_detail": answer.llm_detail or "",
        "audit": json.dumps([e.payload for e in dep.store.audit_events("t1")]),
        "replay": json.dumps(replay(dep.store, "t1", request_id).as_dict()["llm_calls"]),
        "log": caplog.text,
    }
    assert [where for where, text in seen.items() if secret in text] == []


# -- promise 7: fault classes, advice and exit codes -----------------------------------------


def fault_of(dep: Deployment, status: int, body: Any, headers: dict[str, str] | None = None
             ) -> Answer:  # fmt: skip
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, bytes | str):
            return httpx.Response(status, content=body, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    spy_on(dep, server(handler))
    answer = ask(dep, "officer-123", QUESTION, route_id="qa")
    assert answer.reason == "llm_error"
    return answer


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_called_a_transient_overload(dep: Deployment, status: int) -> None:
    """Defect: every status that is neither 200 nor 4xx nor a recognised 500 falls through to
    ``overloaded`` ("the LLM server failed, retry later", ``ask`` exits 75). A redirect is the
    answer of a misconfigured base_url (``http://`` to an ``https://`` endpoint, a missing
    ``/v1``, a proxy login page): retrying can never help, a supervisor retries forever, and
    the end user is told to try again later. Promise broken: a configuration fault is not
    classified transient (and the advice names the setting to fix)."""
    answer = fault_of(dep, status, b"", {"Location": "https://llm.internal/v1/chat/completions"})
    assert answer.llm_fault not in TRANSIENT_LLM_FAULTS, answer.llm_fault
    assert "Try again later" not in answer.answer
    assert answer.llm_detail is not None and "base_url" in answer.llm_detail


@pytest.mark.parametrize(
    ("status", "body", "transient"),
    [(408, "Request Timeout", True),
     (501, {"error": {"message": "tools are not supported by this server"}}, False)],
    ids=["408-request-timeout", "501-not-implemented"],
)  # fmt: skip
def test_408_and_501_get_the_opposite_class(
    dep: Deployment, status: int, body: Any, transient: bool
) -> None:
    """Defect: 408 (the server or a proxy timed the request out: a retry may well succeed)
    is classified ``rejected`` ("retrying will not help", exit 5); 501 (the server does not
    implement what was asked, e.g. tool calls: no retry can help) is classified
    ``overloaded`` ("retry later", exit 75). Promise broken: the fault class says whether a
    retry may help, and the exit code follows it."""
    answer = fault_of(dep, status, body)
    assert (answer.llm_fault in TRANSIENT_LLM_FAULTS) == transient, answer.llm_fault


def test_out_of_quota_is_called_transient(dep: Deployment) -> None:
    """Defect: OpenAI answers an exhausted quota or spend limit with HTTP 429 ``{"type":
    "insufficient_quota"}`` ("You exceeded your current quota, please check your plan and
    billing details"); govrag classifies every 429 ``rate_limited``: transient, exit 75, and
    the end user reads "Try again later". No retry helps until someone pays. Promise broken:
    the class (and the exit code) says whether retrying may help."""
    body = {"error": {"message": "You exceeded your current quota, please check your plan and "
                                 "billing details.", "type": "insufficient_quota",
                      "param": None, "code": "insufficient_quota"}}  # fmt: skip
    answer = fault_of(dep, 429, body)
    assert answer.llm_fault not in TRANSIENT_LLM_FAULTS, answer.llm_fault
    assert "Try again later" not in answer.answer


def test_an_error_object_in_a_200_reply_is_called_a_protocol_fault(dep: Deployment) -> None:
    """Defect: OpenAI-compatible routers (OpenRouter, LiteLLM proxies) answer some upstream
    failures with HTTP 200 and an ``error`` object instead of ``choices`` (``{"error":
    {"code": 429, "message": "Rate limit exceeded"}}``). ``_parse`` calls every such reply
    ``protocol`` ("check that llm.base_url points at an OpenAI-compatible /v1 API", exit 5):
    the wrong advice, and a transient rate limit is reported as a configuration fault.
    Promise broken: the fault class follows what the server said (the error's code)."""
    answer = fault_of(dep, 200, {"error": {"code": 429, "message": "Rate limit exceeded: "
                                           "free-models-per-min"}})  # fmt: skip
    assert answer.llm_fault == "rate_limited", answer.llm_fault


@pytest.mark.parametrize(
    ("status", "body"),
    [(422, {"error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
                     "4096. Given: 3900 `inputs` tokens and 1024 `max_new_tokens`",
            "error_type": "validation"}),
     (400, [{"error": {"code": 400, "message": "The input token count (1211520) exceeds the "
                       "maximum number of tokens allowed (1048576).",
                       "status": "INVALID_ARGUMENT"}}])],
    ids=["tgi", "gemini"],
)  # fmt: skip
def test_a_context_overflow_worded_differently_is_called_a_rejected_request(
    dep: Deployment, status: int, body: Any
) -> None:
    """Defect: ``_CONTEXT_OVERFLOW`` misses how Hugging Face TGI ("`inputs` tokens +
    `max_new_tokens` must be <= 4096") and Google's OpenAI-compatible endpoint ("The input
    token count ... exceeds the maximum number of tokens allowed") report a prompt that does
    not fit; both become ``rejected`` ("check llm.model ... report it if it names a field
    govrag sent") instead of ``context_overflow`` with its advice (lower token_budget /
    top_k / max_tokens). Promise broken: context overflow is recognised on real servers."""
    answer = fault_of(dep, status, body)
    assert answer.llm_fault == "context_overflow", answer.llm_fault


# -- promise 5: a workflow stage decided before its query costs no model call ----------------


class Formulating(StrictServer):
    """The strict server, writing ``query`` for every query-formulation call."""

    def __init__(self, query: str) -> None:
        super().__init__()
        self.query = query

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("stop") == ["\n"]:
            self.bodies.append(body)
            return httpx.Response(200, json=completion(text=self.query))
        return super().__call__(request)


def test_a_workflow_search_records_the_query_it_searched(dep: Deployment) -> None:
    """Defect: to spare a denied stage its model call, the workflow decides the stage's corpus
    before the model formulates the query (the decision is asked, and records, the question),
    but the ``context_pack`` record's ``retrieve_proposal.query`` and the trace also held the
    question, while the gateway searched the model's query: the audit trail did not say what
    was searched. Promise: the decision records what the PDP was asked; the pack records the
    query that ran."""
    model_query = "zebra indemnity carve-out"
    fake = Formulating(model_query)
    spy_on(dep, fake.client())
    answer = ask(dep, "counsel", "Is the liability cap in the Acme MSA acceptable?",
                 route_id="msa", text="Acme MSA text")  # fmt: skip
    assert [s.get("query") for s in answer.trace["stages"] if "verdict" in s] == [model_query] * 2
    decided = [e["query"] for e in events(dep, answer.request_id, "pep_decision")
               if e["kind"] == "retrieve"]  # fmt: skip
    packed = [e["retrieve_proposal"]["query"]
              for e in events(dep, answer.request_id, "context_pack")]  # fmt: skip
    traced = [r["retrieve_proposal"]["query"] for r in answer.trace["retrievals"]]
    assert len(decided) == len(traced) == 2 and packed, (decided, packed, traced)
    assert set(decided) == {"Is the liability cap in the Acme MSA acceptable?"}
    assert {*packed, *traced} == {model_query}, (decided, packed, traced)


def test_a_server_that_drips_its_reply_is_never_timed_out(dep: Deployment) -> None:
    """Defect: ``llm.timeout_s`` is documented as "seconds to wait for one model reply", but
    it is passed as ``httpx.Timeout(timeout_s)``: a per-read timeout that restarts with every
    byte. A server (or proxy) that sends keep-alive whitespace while it generates, or a
    hostile one dripping a byte a second, holds the request past any ``timeout_s``: here
    1 s is configured and the server drips for as long as the client listens (at most 60 s),
    and no ``timeout`` fault is raised. Promise broken: a model call is bounded by
    ``timeout_s`` (fault ``timeout``, exit 75). No elapsed time is asserted: the server
    never completes its reply, so only a bounded call can end with ``timeout``."""
    import threading
    import time

    body = json.dumps(completion(text="Thank you for the e-mail.")).encode()
    drips = 120
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % (len(body) + drips))  # fmt: skip
            try:
                for _ in range(drips):
                    time.sleep(0.5)
                    conn.sendall(b" ")
                conn.sendall(body)
            except OSError:
                return  # the client gave up (what a bounded call does)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        spy_on(dep, OpenAIChatClient(url, "m", timeout_s=1.0))
        answer = ask(dep, "officer-123", "Summarise this.", route_id="email_summarize",
                     text="An e-mail.")  # fmt: skip
    finally:
        thread.join(5)
        listener.close()
    assert answer.llm_fault == "timeout", answer.reason


# -- promise 4: nothing empty is delivered --------------------------------------------------


@pytest.mark.parametrize("reply", ["\u200b", "\ufeff", "\u2060\u200b\n", "\x00"],
                         ids=["zwsp", "bom", "word-joiner", "nul"])  # fmt: skip
def test_an_invisible_reply_is_delivered_as_an_answer(dep: Deployment, reply: str) -> None:
    """Defect: ``_deliver`` tests emptiness with ``str.strip()``, which keeps zero-width and
    format characters (U+200B, U+FEFF, U+2060) and NUL; a model (or a chat template leaking
    a BOM) that replies only those gets an ungrounded route to deliver an invisible
    "answer", ``abstained: false``. Promise broken: an empty or whitespace-only reply is
    never delivered (``empty_reply``)."""
    spy_on(dep, server(lambda r: httpx.Response(200, json=completion(text=reply))))
    answer = ask(dep, "officer-123", "Summarise this.", route_id="email_summarize",
                 text="An e-mail.")  # fmt: skip
    assert answer.abstained and answer.reason == "empty_reply", repr(answer.answer)


# -- promise 3: the llm_call record commits to what the server received ---------------------


def test_the_llm_call_record_does_not_commit_to_the_output_cap_or_stop_sent(
    make_dep: Callable[..., Deployment],
) -> None:
    """Defect: ``llm_call`` holds ``payload_hash(messages, tools)`` and nothing else of the
    body: ``max_tokens``, ``stop``, ``temperature`` and the model name sent are in neither
    the hash nor the record. A call capped at 16 tokens and one capped at 1024 (or one with
    ``stop: ["\\n"]`` and one without) leave the same hash, so an examiner cannot tell from
    the audit log that a reply was capped (why it was truncated) or that a query call stopped
    at a line break. Promise broken: the ``llm_call`` hash is of what the server received."""
    received: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        received.append(json.loads(request.content))
        return httpx.Response(200, json=completion(text="Thank you for the e-mail."))

    dep = make_dep(llm={"max_tokens": 16})  # the adapter is built from the same setting
    spy_on(dep, OpenAIChatClient("http://127.0.0.1:8080/v1", "m", max_tokens=16,
                                 transport=httpx.MockTransport(handler)))  # fmt: skip
    answer = ask(dep, "officer-123", "Summarise this.", route_id="email_summarize",
                 text="An e-mail.")  # fmt: skip
    (call,) = events(dep, answer.request_id, "llm_call")
    (body,) = received
    assert body["max_tokens"] == 16
    uncapped = {**body, "max_tokens": 1024, "stop": ["\n"]}
    # The recorded hash is the same for the body sent and for a differently capped one.
    same_for_both = call["payload_hash"] == payload_hash(uncapped["messages"], [])
    assert not same_for_both or call.get("max_tokens") == 16, call
