"""Sessions on both backends: routing, pinning that survives route-table edits, violations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from govrag.errors import InputError, NotFoundError, UnknownRouteError
from govrag.routes import load_config
from govrag.routes.session import PinViolation, Sessions, select_route
from govrag.types import Principal

from conftest import StoreFactory

ROUTES = [
    {"route_id": "policy_qa", "intent": "policy_question",
     "retrieval": {"mode": "deterministic_prefetch", "scope": ["policy-engine"]}},
    {"route_id": "investigate", "intent": "investigation",
     "retrieval": {"mode": "tool", "scope": ["policy-engine", "hr-policies"]}},
    {"route_id": "email_summarize"},
]  # fmt: skip
ANA = Principal(sub="ana", email="ana@bank.example", tenant="bank",
                doc_entitlements=("policy-engine:read",))  # fmt: skip


def deployment(root: Path, routes: list[dict[str, object]]) -> Path:
    (root / "routes").mkdir(parents=True, exist_ok=True)
    (root / "routes" / "all.json").write_text(json.dumps(routes))
    return root


def test_the_intent_router(tmp_path: Path) -> None:
    config = load_config(deployment(tmp_path, ROUTES))
    assert select_route(config, route_id="investigate").route_id == "investigate"
    assert select_route(config, intent="policy_question").route_id == "policy_qa"
    assert select_route(config, intent="chit-chat", default_route="email_summarize").route_id == (
        "email_summarize"
    )
    with pytest.raises(UnknownRouteError, match="unknown route 'nope'; name a route") as raised:
        select_route(config, route_id="nope")
    assert "email_summarize" in raised.value.known_routes  # for the CLI, not the message
    assert "known routes: 'email_summarize'" in raised.value.for_operator()
    with pytest.raises(NotFoundError, match="no default_route"):
        select_route(config, intent="chit-chat")
    duplicate = {"route_id": "qa2", "intent": "policy_question"}
    twice = load_config(deployment(tmp_path / "b", [*ROUTES, duplicate]))
    with pytest.raises(InputError, match="matches several routes"):
        select_route(twice, intent="policy_question")


def test_a_pin_outlives_a_route_table_edit_and_serves_any_process(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    root = deployment(tmp_path / "dep", ROUTES)
    config = load_config(root)
    store = open_store()
    session = Sessions(store, config).open(ANA, intent="investigation", request_id="r1")
    assert session.retrieval.scope == ("policy-engine", "hr-policies")

    # The route table changes (a route-table bump); the open session keeps its pin.
    narrowed = [ROUTES[0], {**ROUTES[1], "retrieval": {"mode": "tool", "scope": ["x"]}}]
    new_config = load_config(deployment(root, narrowed))
    assert new_config.route_table_version != config.route_table_version
    other = open_store()  # another process, with the new table
    resumed = Sessions(other, new_config).resume(ANA, session.session_id)
    assert resumed.retrieval == session.retrieval
    assert (resumed.route_id, resumed.route_table_version) == (
        "investigate", config.route_table_version,
    )  # fmt: skip
    pinned = store.audit_events("bank", request_id="r1")
    assert [e.kind for e in pinned] == ["route_pinned"]
    scope = ["policy-engine", "hr-policies"]
    assert pinned[0].payload["retrieval"] == {"mode": "tool", "scope": scope}


def test_only_its_principal_resumes_a_session(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    sessions = Sessions(store, load_config(deployment(tmp_path, ROUTES)))
    session = sessions.open(ANA, route_id="policy_qa", request_id="r1")
    eve = ANA.model_copy(update={"sub": "eve"})
    for who, sid in ((eve, session.session_id), (ANA, "ses-unknown")):
        with pytest.raises(NotFoundError, match="for this principal"):
            sessions.resume(who, sid)


@pytest.mark.parametrize(
    "change",
    [{"mode": "tool"}, {"scope": ["policy-engine", "hr-policies"]}, {"route_id": "investigate"}],
)
def test_a_mid_session_change_is_refused_and_audited(
    open_store: StoreFactory, tmp_path: Path, change: dict[str, object]
) -> None:
    store = open_store()
    sessions = Sessions(store, load_config(deployment(tmp_path, ROUTES)))
    session = sessions.open(ANA, route_id="policy_qa", request_id="r1")
    with pytest.raises(PinViolation, match="cannot change mid-session"):
        sessions.change(session, request_id="r2", **change)  # type: ignore[arg-type]
    violation = store.audit_events("bank", request_id="r2")
    assert [e.kind for e in violation] == ["pin_violation"]
    assert violation[0].payload["attempted"] == change
    assert sessions.resume(ANA, session.session_id).retrieval == session.retrieval
    assert store.verify_audit("bank").ok


def test_a_malformed_change_is_still_refused_and_audited_bounded(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    """A caller's attempt is on record whatever it held: odd types as given, huge values
    only as their hash, length and prefix (the log never grows with the input)."""
    store = open_store()
    sessions = Sessions(store, load_config(deployment(tmp_path, ROUTES)))
    session = sessions.open(ANA, route_id="policy_qa", request_id="r1")
    huge = "investigate" * 1000
    with pytest.raises(PinViolation, match="cannot change mid-session"):
        sessions.change(session, request_id="r2", route_id=huge, scope=[1, {"x": None}])  # type: ignore[list-item]
    (violation,) = store.audit_events("bank", request_id="r2")
    attempted = violation.payload["attempted"]
    assert attempted["scope"] == [1, {"x": None}]
    assert attempted["route_id"]["chars"] == len(huge) and len(violation.payload_json) < 2000
    assert store.verify_audit("bank").ok
