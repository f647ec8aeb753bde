"""A route's ``model_profile`` picks the model that serves it: ``[llm.profiles.<name>]``, each
key it leaves out being ``[llm]``'s. The profile serving a request is in its trace, on every
``llm_call`` audit record and in the replay; a route naming none (or one not defined, which
``govrag config check`` warns about) is served by ``[llm]``.

The two profiles here differ from ``[llm]`` in what every call records: the output limit
(``max_tokens`` on ``llm_call``). One of them also points at an OpenAI-compatible server, faked
at the transport, so the model that answered is the profile's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import govrag
from govrag.agent.answer import Answer
from govrag.app import local_principal
from govrag.audit import replay
from govrag.deployment import Deployment

from conftest import wire_bank

QUESTION = "What is the wire limit?"


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    return wire_bank(
        tmp_path / "bank",
        routes={
            "search": {"model_profile": "short"},
            "plain": {},
            "typo": {"model_profile": "shrot"},
        },
        toml="[llm]\nmax_tokens = 900\n\n[llm.profiles.short]\nmax_tokens = 64\n",
    )


def llm_calls(dep: Deployment, answer: Answer) -> list[dict[str, Any]]:
    return [e.payload for e in dep.store.audit_events("bank", request_id=answer.request_id)
            if e.kind == "llm_call"]  # fmt: skip


def ask(dep: Deployment, route: str) -> Answer:
    return dep.orchestrator.ask(dep.principal("ana"), QUESTION, route_id=route)


def test_a_route_is_served_by_the_profile_it_names(deployment: Path) -> None:
    with Deployment.load(deployment) as dep:
        short, plain = ask(dep, "search"), ask(dep, "plain")
        calls = {a.route_id: llm_calls(dep, a) for a in (short, plain)}
        replayed = replay(dep.store, "bank", short.request_id).as_dict()
    assert not short.abstained and "EUR 50,000" in short.answer
    assert short.trace["model_profile"] == "short" and "model_profile" not in plain.trace
    assert {(c["model_profile"], c["max_tokens"]) for c in calls["search"]} == {("short", 64)}
    assert {(c.get("model_profile"), c["max_tokens"]) for c in calls["plain"]} == {(None, 900)}
    assert {c["model_profile"] for c in replayed["llm_calls"]} == {"short"}


def test_an_undefined_profile_is_served_by_llm_and_config_check_says_so(
    deployment: Path,
) -> None:
    with govrag.open(deployment) as app:
        answer = app.callers.ask(local_principal(app.settings, "ana"), QUESTION, route="typo")
        warned = [p for p in app.operators.config_check().problems if p.field == "model_profile"]
    assert "model_profile" not in answer.trace and not answer.abstained
    assert len(warned) == 1 and warned[0].warning
    assert "'shrot', which [llm.profiles] does not define" in warned[0].message


def test_a_profile_can_point_at_another_model(deployment: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # The profile names an OpenAI-compatible server (faked at the transport): its model, not
    # [llm]'s extractive responder, writes the answer, and the record names it.
    seen: list[dict[str, object]] = []

    def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"url": str(request.url), "model": body["model"],
                     "max_tokens": body.get("max_tokens")})  # fmt: skip
        reply = {"role": "assistant", "content": "I cannot tell from here."}
        return httpx.Response(200, json={"choices": [{"message": reply, "finish_reason": "stop"}],
                                         "model": body["model"]})  # fmt: skip

    real = httpx.Client

    def faked(*args: object, **kw: object) -> httpx.Client:
        return real(*args, **{**kw, "transport": httpx.MockTransport(server)})  # type: ignore[arg-type]

    monkeypatch.setattr(httpx, "Client", faked)
    toml = deployment / "govrag.toml"
    toml.write_text(toml.read_text() + 'provider = "openai"\nbase_url = "http://model.test/v1"\n'
                    'model = "small-model"\n')  # fmt: skip
    with Deployment.load(deployment) as dep:
        calls = llm_calls(dep, ask(dep, "search"))
    assert seen and all(s["url"] == "http://model.test/v1/chat/completions" for s in seen)
    assert {s["model"] for s in seen} == {"small-model"}
    assert {(c["model"], c["model_profile"]) for c in calls} == {("openai:small-model", "short")}


def test_a_profile_on_another_server_never_gets_llms_key() -> None:
    from govrag.settings import LlmSettings

    base = LlmSettings(provider="openai", base_url="https://api.example/v1",
                       api_key_env="MAIN_KEY",
                       profiles={"local": {"base_url": "http://127.0.0.1:8080/v1"},
                                 "tuned": {"model": "tuned-model"},
                                 "named": {"base_url": "http://other/v1",
                                           "api_key_env": "OTHER_KEY"}})  # fmt: skip
    local, tuned, named = (base.profile(n) for n in ("local", "tuned", "named"))
    assert local is not None and local.api_key_env is None  # another server: no inherited key
    assert tuned is not None and tuned.api_key_env == "MAIN_KEY"  # the same server
    assert named is not None and named.api_key_env == "OTHER_KEY"
