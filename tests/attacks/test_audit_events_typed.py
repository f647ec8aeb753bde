"""Every event the code base writes has a typed model, and its row is exactly that model.

An agent world (real store on both backends, real Cedar, a scripted model, hostile input
included) runs requests that write every kind of event; then every row of every tenant is read
back strictly (:func:`govrag.audit.events.parse_event`: no unknown field, no missing one) and
written again byte for byte. A writer that adds a key its model does not know, or a kind
without a model, fails here, not in an examiner's replay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_world import (
    QUESTION,
    TOOLS_POLICY,
    MakeDeployment,
    Scripted,
    answer,
    calls,
    deployment_factory,
    with_model,
)

from govrag.audit import replay
from govrag.audit.events import KNOWN_VERSIONS, parse_event
from govrag.deployment import Deployment
from govrag.errors import LlmError
from govrag.routes.session import PinViolation
from govrag.store.audit import canonical
from govrag.types import Principal, SearchRequest, Strategy
from govrag.writeback import AdmissionGate, RetrievalScope, WriteBackCandidate

from conftest import BACKENDS, doc, ident, load


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    yield from deployment_factory(request, tmp_path, request.param)


class Failing:
    name = "failing"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise self.exc


def play_every_kind(dep: Deployment) -> None:
    """Requests that write every kind of event (see the module docstring)."""
    load(dep.store, [ident("boss@bank.example", "B"),
                     doc("wire-exceptions", "EU corporate wire limit exceptions need approval.",
                         ["H"], corpus="policy-engine", author="B")])  # fmt: skip
    officer = dep.principal("officer")
    huge = {"corpus": "policy-engine", "query": "wire \ud800 " + "x" * 5000}
    with_model(dep, Scripted(
        calls(("retrieve_documents", {"corpus": "policy-engine", "query": "wire limit"}),
              ("retrieve_documents", {"corpus": "hr-policies", "query": "leave"}),
              ("no_such_tool", "{not json"), ("flag_for_review", {"note": "check"}),
              ("retrieve_documents", huge)),
        answer(),
    )).orchestrator.ask(officer, QUESTION)  # fmt: skip
    for exc in (LlmError("model server said 503", fault="overloaded"), KeyError("t2")):
        with contextlib.suppress(Exception):
            with_model(dep, Failing(exc)).orchestrator.ask(officer, QUESTION)
    opened = dep.governed.search(officer, "wire limit", route_id="qa", corpora=("policy-engine",))
    with pytest.raises(PinViolation):
        dep.governed.search(officer, "wire", session_id=opened.session_id, route_id="other")
    for agent in ("desk-agent", "rogue-agent"):
        dep.writeback.admit(WriteBackCandidate(
            scope=RetrievalScope("t1", opened.session_id), source_turn_id=f"turn-{agent}",
            agent_id=agent, gate=AdmissionGate.USER_CONFIRMED, confidence=0.9,
            content="Confirmed: the Acme wire limit exception is EUR 80,000 per day.",
            expires_at=datetime.now(UTC) + timedelta(hours=1)))  # fmt: skip
    dep.governed.search(officer, "Acme wire limit exception", session_id=opened.session_id,
                        strategy=Strategy.KEYWORD)  # fmt: skip
    real = dep.gateway.retrieve

    def leaky(principal: Principal, corpus: str, request: SearchRequest, **kw: Any) -> Any:
        pack = real(principal, corpus, request, **kw)
        foreign = pack.chunks[0].model_copy(update={"corpus": "hr-policies",
                                                    "chunk_id": "sp:leave#0"})  # fmt: skip
        return pack.model_copy(update={"chunks": (*pack.chunks, foreign)})

    dep.gateway.retrieve = leaky  # type: ignore[method-assign]
    try:
        dep.governed.search(officer, "wire limit", corpora=("policy-engine",))
    finally:
        dep.gateway.retrieve = real  # type: ignore[method-assign]
    # A route that escalates a failed validation: an answer citing nothing is escalated.
    dep.config.routes["qa"] = dep.config.routes["qa"].model_copy(
        update={"on_validation_failure": "escalate"}
    )
    with_model(dep, Scripted(
        calls(("retrieve_documents", {"corpus": "policy-engine", "query": "wire limit"})),
        answer("The limit is whatever the client asks for."),
    )).orchestrator.ask(officer, QUESTION)  # fmt: skip


def test_every_row_written_is_its_typed_event(make: MakeDeployment) -> None:
    dep = make(TOOLS_POLICY, writeback={"enabled": True, "allowed_agents": ["desk-agent"]})
    play_every_kind(dep)
    seen: set[str] = set()
    for tenant in dep.store.audit_tenants():
        chain = dep.store.audit_chain(tenant)
        assert chain.verify().ok
        for row in chain.events:
            event = parse_event(row.kind, row.payload)  # strict: raises on any mismatch
            assert canonical(event.payload()) == row.payload_json, row.kind
            seen.add(row.kind)
        for request_id in {row.request_id for row in chain.events}:
            assert replay(dep.store, tenant, request_id).unrecognised == ()
    assert seen == set(KNOWN_VERSIONS)
