"""Two ``govrag serve`` replicas on one PostgreSQL store are one service: nothing a caller
relies on lives in one process.

Each replica is a subprocess with its own derived search index (as on another machine); they
share the deployment's files (its keys, routes and policies) and the database, nothing else.
A session opened on one is continued on the other with the same pin; another principal does
not find it on either; a rights change (a document's ACL, a group's members) or a deletion
ingested by a third process (this one, through the application API) is honoured by both on
their next request, including the very request each had just served from its result cache;
one principal's hidden-item marker budget is spent across both; and the examiner replays on
one replica a request the other served, from the audit log alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import RECORDS, ServeProcess, bank, bearer, subprocess_env

import govrag

from conftest import pg_store_settings

NOT_FOUND = "https://govrag.dev/problems/not-found"
#: Documents only ana may read, taken away from her during the module (by an ACL change and
#: by a deletion) while both replicas hold them in their caches.
REVOKED = {"type": "document", "source_system": "sp", "external_id": "drill-codes",
           "corpus": "policy", "title": "Drill codes", "classification": "internal",
           "acl": ["S-1"], "text": "The fire drill code is DRILL-7731."}  # fmt: skip
DELETED = {"type": "document", "source_system": "sp", "external_id": "vault-hours",
           "corpus": "policy", "title": "Vault hours", "classification": "internal",
           "acl": ["S-1"], "text": "The vault opens at nine on weekdays."}  # fmt: skip
#: ... and one she reads through a group, until the group loses her.
GROUP = {"type": "group", "source_system": "sp", "group_id": "G-desk", "members": ["S-1"]}
GROUPED = {"type": "document", "source_system": "sp", "external_id": "desk-keys",
           "corpus": "policy", "title": "Desk keys", "classification": "internal",
           "acl": ["G-desk"], "text": "The desk keys are kept in the top drawer."}  # fmt: skip
QUERIES = {"drill-codes": "fire drill code", "vault-hours": "vault opens weekdays",
           "desk-keys": "desk keys drawer"}  # fmt: skip
RETRIEVE = "retrieve_documents"
#: Hidden-item markers a principal may be shown per window, across the replicas.
MARKER_BUDGET = 2


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, pg_cluster: Any) -> Iterator[govrag.Govrag]:
    """The deployment as a third process sees it: it ingests and mints tokens."""
    root = tmp_path_factory.mktemp("replicas") / "bank"
    feed = bank(root)
    feed.write_text(
        "".join(json.dumps(r) + "\n" for r in [*RECORDS, REVOKED, DELETED, GROUP, GROUPED])
    )
    store = pg_store_settings(pg_cluster)
    with govrag.open(root, store={**store, "index_dir": str(root.parent / "index-api")},
                     auth={"dev_tokens": True}) as opened:  # fmt: skip
        assert opened.operators.ingest(feed).ok
        yield opened


@pytest.fixture(scope="module")
def replicas(app: govrag.Govrag) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    store = app.settings.store
    assert store.admin_url is not None
    env = subprocess_env(
        GOVRAG_AUTH__DEV_TOKENS="true",
        GOVRAG_STORE__URL=store.url.get_secret_value(),
        GOVRAG_STORE__ADMIN_URL=store.admin_url.get_secret_value(),
        GOVRAG_SEARCH__MARKER_BUDGET=str(MARKER_BUDGET),
        # Many requests of one caller, about what they see, not how many they may send.
        GOVRAG_SERVER__RATE_PER_MINUTE="1000000",
        GOVRAG_SERVER__RATE_BURST="100000",
    )
    # Each its own derived index, as on its own machine: only the database is shared.
    root = app.settings.deployment
    index = {name: str(root.parent / f"index-{name}") for name in ("a", "b")}
    started = [
        ServeProcess(name, root, {**env, "GOVRAG_STORE__INDEX_DIR": path})
        for name, path in index.items()
    ]
    try:
        for replica in started:  # both start at once; wait for each
            replica.wait_ready()
        yield started[0].client, started[1].client
    finally:
        for replica in started:
            replica.stop()


def ids(body: dict[str, Any]) -> set[str]:
    return {hit["doc_id"] for hit in body["results"]}


def test_a_session_opened_on_one_replica_continues_on_the_other_with_its_pin(
    replicas: tuple[httpx.Client, httpx.Client], app: govrag.Govrag
) -> None:
    a, b = replicas
    opened = a.post("/v1/sessions", json={}, headers=bearer(app, "ana"))
    assert opened.status_code == 201, opened.text
    session = opened.json()
    # The same session, the same pin (route, mode, scope, route table version) on B.
    assert b.get(f"/v1/sessions/{session['session_id']}", headers=bearer(app, "ana")).json() == (
        session
    )
    for replica in (b, a, b):
        r = replica.post("/v1/search", headers=bearer(app, "ana"),
                         json={"query": "wire limit", "session": session["session_id"],
                               "strategy": "keyword"})  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["session_id"] == session["session_id"]
        assert r.json()["route_id"] == session["route_id"]
        assert ids(r.json()) == {"wire-limits"}


def test_a_session_is_not_found_for_another_principal_on_either_replica(
    replicas: tuple[httpx.Client, httpx.Client], app: govrag.Govrag
) -> None:
    a, b = replicas
    session = a.post("/v1/sessions", json={}, headers=bearer(app, "ana")).json()["session_id"]
    absent = "ses-0000000000000000"
    for replica in (b, a):
        theirs = replica.get(f"/v1/sessions/{session}", headers=bearer(app, "ben"))
        none = replica.get(f"/v1/sessions/{absent}", headers=bearer(app, "ben"))
        assert theirs.status_code == none.status_code == 404
        stolen = replica.post("/v1/search", json={"query": "wire", "session": session},
                              headers=bearer(app, "ben"))  # fmt: skip
        missing = replica.post("/v1/search", json={"query": "wire", "session": absent},
                               headers=bearer(app, "ben"))  # fmt: skip
        assert stolen.status_code == missing.status_code == 404
        assert stolen.json()["type"] == NOT_FOUND
        assert stolen.text.replace(session, "ID") == missing.text.replace(absent, "ID")


def test_the_examiner_replays_on_one_replica_a_request_the_other_served(
    replicas: tuple[httpx.Client, httpx.Client], app: govrag.Govrag
) -> None:
    a, b = replicas
    served = a.post("/v1/ask", json={"question": "What is the EU corporate wire limit?"},
                    headers=bearer(app, "ana"))  # fmt: skip
    assert served.status_code == 200, served.text
    rid = served.json()["request_id"]
    replay = b.get(f"/v1/audit/requests/{rid}", headers=bearer(app, "eve"))
    assert replay.status_code == 200, replay.text
    body = replay.json()
    assert body["request_id"] == rid and body["who"]["sub"] == "ana"
    assert body["verdict_before_search"] and body["chain_ok"]
    assert b.get(f"/v1/audit/requests/{rid}", headers=bearer(app, "ana")).status_code == 404
    assert b.get("/v1/audit/verify", headers=bearer(app, "eve")).json()["ok"]


def test_the_marker_budget_is_one_for_both_replicas(
    replicas: tuple[httpx.Client, httpx.Client], app: govrag.Govrag
) -> None:
    # ben may not read wire-limits, which is relevant: each search shows him the marker
    # until his budget is spent, wherever he asks (a budget per process would show it on A
    # again at the third search).
    a, b = replicas
    shown = []
    for replica in (a, b, a):
        r = replica.post("/v1/search", headers=bearer(app, "ben"),
                         json={"query": "wire limit", "strategy": "keyword"})  # fmt: skip
        assert r.status_code == 200, r.text
        shown.append(r.json()["hidden"]["present"])
    assert shown == [True] * MARKER_BUDGET + [False]


def _search(replica: httpx.Client, app: govrag.Govrag, doc: dict[str, Any]) -> httpx.Response:
    body = {"query": QUERIES[doc["external_id"]], "strategy": "keyword"}
    search = replica.post("/v1/search", headers=bearer(app, "ana"), json=body)
    assert search.status_code == 200, search.text
    return search


def _reads(replica: httpx.Client, app: govrag.Govrag, doc: dict[str, Any]) -> dict[str, Any]:
    """What ana gets of ``doc`` from ``replica`` by every route that can show it."""
    headers = bearer(app, "ana")
    query = QUERIES[doc["external_id"]]
    search = _search(replica, app, doc)
    retrieve = replica.post("/v1/retrieve", headers=headers, json={
        "tool": RETRIEVE, "arguments": {"query": query, "corpus": "policy"}})  # fmt: skip
    ask = replica.post("/v1/ask", headers=headers, json={"question": f"{query}?"})
    meta = replica.get(f"/v1/documents/sp/{doc['external_id']}", headers=headers)
    for r in (retrieve, ask):
        assert r.status_code == 200, r.text
    return {
        "search": doc["external_id"] in ids(search.json()),
        "search_cached": [p["cache_hit"] for p in search.json()["packs"]],
        "retrieve": doc["external_id"] in ids(retrieve.json()),
        "ask": doc["external_id"] in {c["doc_id"] for c in ask.json()["citations"]},
        "metadata": meta.status_code,
    }


@pytest.mark.parametrize(
    "doc", [REVOKED, DELETED, GROUPED], ids=["acl-change", "deletion", "group-membership"]
)
def test_a_revocation_is_honoured_by_both_replicas_on_their_next_request(
    replicas: tuple[httpx.Client, httpx.Client], app: govrag.Govrag, doc: dict[str, Any],
    tmp_path: Path,
) -> None:  # fmt: skip
    a, b = replicas
    for replica in (a, b):
        first = _reads(replica, app, doc)
        assert first | {"search_cached": None} == {
            "search": True, "search_cached": None, "retrieve": True, "ask": True,
            "metadata": 200,
        }  # fmt: skip
        # The same search again is answered from this replica's result cache.
        again = _search(replica, app, doc).json()
        assert [p["cache_hit"] for p in again["packs"]] == [True]
    # Taken away by a third process: a new ACL without ana, the document deleted, or ana
    # taken out of the group the ACL names.
    change = {
        "drill-codes": {**doc, "acl": ["S-2"]},
        "vault-hours": {"type": "delete", "source_system": "sp", "external_id": "vault-hours"},
        "desk-keys": {**GROUP, "members": []},
    }[doc["external_id"]]
    feed = tmp_path / "change.jsonl"
    feed.write_text(json.dumps(change) + "\n")
    assert app.operators.ingest(feed).ok
    for replica in (a, b):
        # The very request each replica had cached: the tenant's generation moved, so it is
        # not served from the cache, and the document is gone from every route.
        assert _reads(replica, app, doc) == {
            "search": False, "search_cached": [False], "retrieve": False, "ask": False,
            "metadata": 404,
        }  # fmt: skip
