"""Attack: make a request fail after its ALLOW decisions so the audit trail just stops, and
read internals (other tenants, corpora, documents) out of the error message.

Required: a request that fails once its session is open (the gateway, validation, the model
adapter, delivery) closes its trail with an ``error`` event, so ``govrag replay`` shows how
it ended; the error reaching the caller is govrag's own one-line error, or, for an
unexpected fault, a message naming only the request.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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

from govrag.agent.llm import LlmReply, Message
from govrag.audit import replay
from govrag.deployment import Deployment
from govrag.errors import GovragError, StoreError
from govrag.types import Principal, SearchRequest, SearchResult

from conftest import BACKENDS

#: What an internal error might quote that the caller has no right to see.
SECRET = "tenant t2 corpus hr-policies document t2-leave"


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, request.param)


@pytest.fixture
def make_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, "sqlite")


def failing_search(dep: Deployment, exc: Exception) -> None:
    """The store fails at search time: after the PEP's ALLOW is committed."""

    def search(principal: Principal, request: SearchRequest) -> SearchResult:
        raise exc

    dep.store.search = search  # type: ignore[method-assign]


def retrieving() -> Scripted:
    return Scripted(
        calls(("retrieve_documents", {"corpus": "policy-engine", "query": "wire limit"})), answer()
    )


def test_a_gateway_failure_after_allow_closes_the_trail(make: MakeDeployment) -> None:
    dep = with_model(make(), retrieving())
    failing_search(dep, StoreError("the lexical index is unavailable; run govrag index verify"))
    with pytest.raises(StoreError, match="lexical index is unavailable"):
        dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    (request_id,) = {e.request_id for e in dep.store.audit_events("t1") if e.kind == "error"}
    trail = events(dep, request_id)
    assert [e.kind for e in trail][-3:] == ["proposal", "pep_decision", "error"]
    assert trail[-2].payload["verdict"] == "ALLOW"
    error = trail[-1].payload
    assert (error["stage"], error["error_type"]) == ("pattern 1", "StoreError")
    r = replay(dep.store, "t1", request_id)
    assert r.chain_ok and r.delivered is None and r.as_dict()["error"] == error


def test_an_unexpected_fault_names_only_the_request(make_sqlite: MakeDeployment) -> None:
    """A fault whose message quotes another tenant's corpus and document: the caller gets a
    message naming the request only; the log records the fault's type, not its text."""
    dep = with_model(make_sqlite(), retrieving())
    failing_search(dep, KeyError(SECRET))
    with pytest.raises(GovragError) as raised:
        dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    message = str(raised.value)
    for word in ("t2", "hr-policies", "t2-leave", "KeyError('"):
        assert word not in message
    assert message.startswith("request req-") and "failed unexpectedly (KeyError)" in message
    (error,) = [e for e in dep.store.audit_events("t1") if e.kind == "error"]
    assert error.payload["error_type"] == "KeyError" and "t2" not in error.payload_json
    assert message.split()[1] == error.request_id  # the caller can hand it to an examiner


class Exploding:
    """A model adapter that fails outside the LLM protocol (a bug, not an LlmError)."""

    name = "exploding"

    def __init__(self, after: int) -> None:
        self.after, self.calls = after, 0
        self.inner = retrieving()

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> LlmReply:
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError(SECRET)
        return self.inner.complete(messages, tools)


def test_a_model_adapter_fault_after_a_retrieve_closes_the_trail(
    make_sqlite: MakeDeployment,
) -> None:
    dep = with_model(make_sqlite(), Exploding(after=1))
    with pytest.raises(GovragError, match="failed unexpectedly"):
        dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    (request_id,) = {e.request_id for e in dep.store.audit_events("t1") if e.kind == "error"}
    kinds = [e.kind for e in events(dep, request_id)]
    assert kinds[-1] == "error" and "context_pack" in kinds and "response" not in kinds
    assert replay(dep.store, "t1", request_id).as_dict()["error"] == {
        "stage": "pattern 1", "error_type": "RuntimeError",
        "message": "unexpected error (see the log)"}  # fmt: skip


def test_a_delivery_fault_closes_the_trail(make_sqlite: MakeDeployment) -> None:
    dep = with_model(make_sqlite(), retrieving())
    real = dep.store.append_audit

    def append(tenant: str, kind: str, payload: dict[str, Any], **kw: Any) -> Any:
        if kind == "response":
            raise StoreError("the audit log is full")
        return real(tenant, kind, payload, **kw)

    dep.store.append_audit = append  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    (error,) = [e.payload for e in dep.store.audit_events("t1") if e.kind == "error"]
    assert (error["stage"], error["message"]) == ("delivery", "the audit log is full")


def test_a_governed_search_failure_closes_its_trail(make_sqlite: MakeDeployment) -> None:
    dep = make_sqlite()
    dep.governed.validator.validate = lambda *a, **k: 1 / 0  # type: ignore[method-assign]
    with pytest.raises(GovragError, match="failed unexpectedly"):
        dep.governed.search(dep.principal("officer"), "wire limit")
    (request_id,) = {e.request_id for e in dep.store.audit_events("t1") if e.kind == "error"}
    trail = events(dep, request_id)
    assert [e.kind for e in trail] == ["route_pinned", "pep_decision", "context_pack",
                                       "pep_decision", "error"]  # fmt: skip
    assert trail[-1].payload["stage"] == "validation"


def test_replay_on_the_cli_shows_how_a_failed_request_ended(make_sqlite: MakeDeployment) -> None:
    dep = with_model(make_sqlite(), retrieving())
    failing_search(dep, StoreError("the lexical index is unavailable"))
    with pytest.raises(StoreError):
        dep.orchestrator.ask(dep.principal("officer"), QUESTION)
    (request_id,) = {e.request_id for e in dep.store.audit_events("t1") if e.kind == "error"}
    done = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "replay", request_id,
         "--deployment", str(dep.settings.deployment)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "Ended: failed during pattern 1 (StoreError: the lexical index is unavailable)" in out
    assert "Delivered: nothing" in out and "Verdict before search? yes" in out
