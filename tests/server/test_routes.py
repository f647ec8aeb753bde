"""Every ``/v1`` route over real HTTP on loopback, on SQLite and on PostgreSQL: sessions, a
retrieve tool call, corpora, document metadata, click, write-back, the examiner's replay and
audit verification, readiness; each as its legitimate caller uses it and as a caller without
the right tries it (absent and forbidden are one answer)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import UNLIMITED, bank, bearer, serving

import govrag

from conftest import BACKENDS, pg_store_settings

NOT_FOUND = "https://govrag.dev/problems/not-found"
INVALID = "https://govrag.dev/problems/invalid-request"


@pytest.fixture(scope="module", params=BACKENDS)
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[govrag.Govrag]:
    feed = bank(tmp_path_factory.mktemp("routes") / "bank")
    settings: dict[str, Any] = {
        "auth": {"dev_tokens": True, "tenants": ["bank", "other"]},
        "writeback": {"enabled": True, "allowed_agents": ["ana"]},
        "server": UNLIMITED,
    }
    if request.param == "postgres":
        settings["store"] = pg_store_settings(request.getfixturevalue("pg_cluster"))
    with govrag.open(feed.parent, **settings) as opened:
        assert opened.operators.ingest(feed).ok
        yield opened


@pytest.fixture(scope="module")
def client(app: govrag.Govrag) -> Iterator[httpx.Client]:
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield c


def test_readiness_and_liveness_need_no_token(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True,
                            "checks": {"store": "ok", "routes": "ok", "policy": "ok"}}  # fmt: skip


def test_a_session_is_pinned_ends_with_its_token_and_is_only_its_principals(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    token = app.operators.dev_token("ana")
    exp = app.callers.verify_token(token).expires_at
    opened = client.post("/v1/sessions", json={}, headers={"Authorization": f"Bearer {token}"})
    assert opened.status_code == 201, opened.text
    session = opened.json()
    assert session["sub"] == "ana" and session["scope"] == ["policy"]
    # A session outlives no token: it ends when the token that opened it does.
    assert session["expires_at"] == exp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    path = f"/v1/sessions/{session['session_id']}"
    assert client.get(path, headers=bearer(app, "ana")).json() == session
    theirs = client.get(path, headers=bearer(app, "ben"))
    absent = client.get("/v1/sessions/ses-0000000000000000", headers=bearer(app, "ben"))
    assert theirs.status_code == absent.status_code == 404
    assert theirs.json()["type"] == absent.json()["type"] == NOT_FOUND
    unknown = client.post("/v1/sessions", json={"route": "nope"}, headers=bearer(app, "ana"))
    assert unknown.status_code == 404


def test_a_session_opened_by_an_expired_token_cannot_be_resumed(app: govrag.Govrag) -> None:
    # The API's side of the rule, without waiting for a clock: claims that ended a minute ago
    # open a session that is over, and no later token revives it.
    ana = govrag.local_principal(app.settings, "ana")
    ended = ana.model_copy(update={"expires_at": datetime.now(UTC) - timedelta(minutes=1)})
    session = app.callers.open_session(ended)
    assert session.expires_at is not None
    with pytest.raises(govrag.NotFoundError, match="token that opened it expired"):
        app.callers.session(ana, session.session_id)
    with pytest.raises(govrag.NotFoundError):
        app.callers.search(ana, "wire limit", session=session.session_id)


def test_retrieve_runs_a_proposed_tool_call_through_the_gate(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    call = {"tool": "retrieve_documents", "arguments": {"query": "wire limit", "corpus": "policy"}}
    ana = client.post("/v1/retrieve", json=call, headers=bearer(app, "ana")).json()
    assert [d["verdict"] for d in ana["decisions"]] == ["ALLOW"]
    assert "wire-limits" in {h["doc_id"] for h in ana["results"]}
    ben = client.post("/v1/retrieve", json=call, headers=bearer(app, "ben")).json()
    assert "wire-limits" not in {h["doc_id"] for h in ben["results"]}
    # The proposal is on record, then the decision: replayable like any request.
    replay = app.operators.replay(ana["request_id"], tenant="bank")
    assert [p.tool for p in replay.proposed][:1] == ["retrieve_documents"]
    assert replay.verdict_before_search


@pytest.mark.parametrize(
    ("call", "says"),
    [({"tool": "list_corpora", "arguments": {}}, "not offered"),
     ({"tool": "nope", "arguments": {"query": "x", "corpus": "policy"}}, "not offered"),
     ({"tool": "retrieve_documents", "arguments": {"query": "x"}}, "corpus"),
     ({"tool": "retrieve_documents",
       "arguments": {"query": "x", "corpus": "policy", "tenant": "other"}}, "tenant"),
     ({"tool": "retrieve_documents", "arguments": {"query": "x" * 300, "corpus": "policy"}},
      "query")],
    ids=["not-a-retrieve-tool", "unknown-tool", "missing-corpus", "identity-argument",
         "over-the-schema"],
)  # fmt: skip
def test_a_proposal_the_manifest_does_not_allow_is_a_400_on_record(
    client: httpx.Client, app: govrag.Govrag, call: dict[str, Any], says: str
) -> None:
    r = client.post("/v1/retrieve", json=call, headers=bearer(app, "ana"))
    assert r.status_code == 400 and r.json()["type"] == INVALID
    assert says in r.json()["detail"]


def test_a_corpus_outside_the_route_is_denied_not_searched(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    call = {"tool": "retrieve_documents", "arguments": {"query": "fee", "corpus": "hr"}}
    body = client.post("/v1/retrieve", json=call, headers=bearer(app, "ana")).json()
    assert [(d["verdict"], d["reason"]) for d in body["decisions"]] == [("DENY", "out_of_scope")]
    assert body["results"] == [] and body["packs"] == []


def test_corpora_names_only_what_the_policy_lets_the_caller_list(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    ana = client.get("/v1/corpora", headers=bearer(app, "ana")).json()
    assert [c["corpus"] for c in ana["corpora"]] == ["policy"]
    # eve holds no entitlement to the corpus: it is not even named.
    assert client.get("/v1/corpora", headers=bearer(app, "eve")).json()["corpora"] == []


def test_document_metadata_only_for_a_reader_and_never_the_text(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    r = client.get("/v1/documents/sp/wire-limits", headers=bearer(app, "ana"))
    assert r.status_code == 200, r.text
    doc = r.json()["document"]
    assert doc["title"] == "Wire transfer limits" and doc["corpus"] == "policy"
    assert doc["classification"] == "internal" and doc["chunks"] >= 1
    assert "50,000" not in r.text
    # An external id with slashes (a file's path in its source) is one document.
    nested = client.get("/v1/documents/sp/handbook/branch-hours.md", headers=bearer(app, "ana"))
    assert nested.status_code == 200 and nested.json()["document"]["title"] == "Branch hours"
    forbidden = client.get("/v1/documents/sp/wire-limits", headers=bearer(app, "ben"))
    absent = client.get("/v1/documents/sp/no-such-doc", headers=bearer(app, "ben"))
    assert forbidden.status_code == absent.status_code == 404
    # The same body but for the id the caller itself sent.
    assert forbidden.json()["detail"].replace("wire-limits", "X") == absent.json()[
        "detail"
    ].replace("no-such-doc", "X")


def test_a_click_counts_only_for_a_reader(client: httpx.Client, app: govrag.Govrag) -> None:
    click = {"source_system": "sp", "external_id": "wire-limits"}
    assert client.post("/v1/click", json=click, headers=bearer(app, "ana")).status_code == 204
    assert client.post("/v1/click", json=click, headers=bearer(app, "ben")).status_code == 404


def memory(session: str, **over: Any) -> dict[str, Any]:
    expires = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    return {"session": session, "source_turn_id": "turn-1", "gate": "USER_CONFIRMED",
            "content": "Ana prefers summaries in German.", "confidence": 0.9,
            "expires_at": expires} | over  # fmt: skip


def test_write_back_takes_the_writer_from_the_token(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    ana_session = client.post("/v1/sessions", json={}, headers=bearer(app, "ana")).json()
    sid = ana_session["session_id"]
    admitted = client.post("/v1/memory", json=memory(sid), headers=bearer(app, "ana")).json()
    assert admitted["admitted"] and admitted["reason"] == "admitted"
    # ben is not on the allow-list, and the session is not his either: not found.
    theirs = client.post("/v1/memory", json=memory(sid), headers=bearer(app, "ben"))
    assert theirs.status_code == 404
    ben_session = client.post("/v1/sessions", json={}, headers=bearer(app, "ben")).json()
    refused = client.post("/v1/memory", json=memory(ben_session["session_id"]),
                          headers=bearer(app, "ben")).json()  # fmt: skip
    assert not refused["admitted"] and refused["reason"] == "agent_not_allowed"
    raw = client.post("/v1/memory", json=memory(sid, gate="RAW_MODEL_OUTPUT"),
                      headers=bearer(app, "ana")).json()  # fmt: skip
    assert not raw["admitted"]
    # The writer and scope never come from the body.
    forged = client.post("/v1/memory", json=memory(sid, agent_id="ana", tenant="bank"),
                         headers=bearer(app, "ben"))  # fmt: skip
    assert forged.status_code == 400


def test_replay_and_audit_verify_are_the_examiners_only(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    searched = client.post("/v1/search", json={"query": "wire"}, headers=bearer(app, "ana")).json()
    rid = searched["request_id"]
    replay = client.get(f"/v1/audit/requests/{rid}", headers=bearer(app, "eve"))
    assert replay.status_code == 200, replay.text
    assert replay.json()["who"]["sub"] == "ana" and replay.json()["verdict_before_search"]
    assert replay.json()["who"]["token_exp"].endswith("Z")  # the trace has the token's expiry
    answer = client.post("/v1/ask", json={"question": "wire limit?"}, headers=bearer(app, "ana"))
    assert answer.json()["trace"]["token_exp"].endswith("Z")
    # Anyone else: the request is as absent as one that never ran.
    for sub in ("ana", "ben"):
        refused = client.get(f"/v1/audit/requests/{rid}", headers=bearer(app, sub))
        assert refused.status_code == 404 and refused.json()["type"] == NOT_FOUND
    verify = client.get("/v1/audit/verify", headers=bearer(app, "eve"))
    assert verify.status_code == 200 and verify.json()["tenants"][0]["tenant"] == "bank"
    assert client.get("/v1/audit/verify", headers=bearer(app, "ana")).status_code == 404


def test_every_v1_operation_needs_a_token_and_documents_its_answer(
    client: httpx.Client,
) -> None:
    schema = client.get("/openapi.json").json()
    operations = [(path, method, op) for path, item in schema["paths"].items()
                  for method, op in item.items()]  # fmt: skip
    assert len([p for p, _, _ in operations if p.startswith("/v1/")]) == 11
    for path, method, op in operations:
        ok = next(code for code in op["responses"] if code.startswith("2"))
        if path.startswith("/v1/"):
            assert op["security"] == [{"HTTPBearer": []}], (path, method)
            assert {"400", "401", "404", "429", "503"} <= set(op["responses"]), path
        if ok != "204" and path != "/metrics":  # the metrics are Prometheus text
            assert "schema" in op["responses"][ok]["content"]["application/json"], path
            assert _example_of(schema, op["responses"][ok]["content"]["application/json"]), path
        if "requestBody" in op:
            assert _example_of(schema, op["requestBody"]["content"]["application/json"]), path


def _example_of(schema: dict[str, Any], content: dict[str, Any]) -> list[Any]:
    """The examples the schema gives for ``content`` (directly or on its referenced model)."""
    target = content["schema"]
    if "$ref" in target:
        target = schema["components"]["schemas"][target["$ref"].rsplit("/", 1)[1]]
    return list(target.get("examples", ()))


def test_every_schema_example_is_what_its_model_accepts() -> None:
    from govrag.server import bodies, responses

    models = [m for module in (bodies, responses) for m in vars(module).values()
              if isinstance(m, type) and issubclass(m, (bodies.Body, responses.Out))]  # fmt: skip
    with_examples = [m for m in models if m.model_config.get("json_schema_extra")]
    assert len(with_examples) >= 15
    for model in with_examples:
        extra = model.model_config["json_schema_extra"]
        assert isinstance(extra, dict)
        for example in extra["examples"]:
            model.model_validate(example)


def test_without_a_token_every_v1_route_is_the_same_401(
    client: httpx.Client, tmp_path: Path
) -> None:
    schema = client.get("/openapi.json").json()
    for path, item in schema["paths"].items():
        if not path.startswith("/v1/"):
            continue
        concrete = path.replace("{session_id}", "s").replace("{request_id}", "r")
        concrete = concrete.replace("{source_system}", "sp").replace("{external_id}", "d")
        for method in item:
            r = client.request(method, concrete, json={})
            assert r.status_code == 401, (method, path, r.text)


def test_readiness_fails_closed_when_another_replica_migrated_past_this_code(
    tmp_path: Path,
) -> None:
    # FastAPI's test client this time: the same app, no socket.
    import sqlite3

    from fastapi.testclient import TestClient

    from govrag.server import create_app

    feed = bank(tmp_path / "bank")
    with govrag.open(feed.parent, auth={"dev_tokens": True}) as app:
        assert app.operators.ingest(feed).ok
        with TestClient(create_app(app)) as client:
            assert client.get("/readyz").status_code == 200
            database = sqlite3.connect(feed.parent / "govrag.db")
            with database:
                database.execute("INSERT INTO schema_migrations VALUES (999, 'newer', 'now')")
            database.close()
            r = client.get("/readyz")
            assert r.status_code == 503
            checks = {"store": "failed", "routes": "ok", "policy": "ok"}
            assert r.json() == {"ready": False, "checks": checks}
            assert "999" not in r.text  # why is the operator's, in the log
