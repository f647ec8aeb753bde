"""Logs written before audit events were typed stay readable.

``fixtures/v1_log.json`` holds two tenants' audit rows (every kind of event) and chain heads as
commit 8fd14a5 wrote them, with the replay of each request as that code printed it
(``fixtures/make_v1_log.py`` says how it was made). Loaded into a store of today's code, the
chains verify, every row parses strictly as version 1 of its typed event and writes back to
the very payload that was hashed, and replay gives the same answers. A row of a kind or version
this code does not know is shown as stored, never guessed at, and never fatal.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from govrag.audit import replay
from govrag.audit.events import KNOWN_VERSIONS, parse_event, payload_version
from govrag.cli.render import print_replay
from govrag.errors import AuditEventError
from govrag.store.audit import AuditEvent, canonical
from govrag.store.protocol import KnowledgeStore

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "v1_log.json").read_text())
_COLUMNS = (
    "tenant_id, seq, event_id, request_id, session_id, kind, payload, created_at, prev_hash, hash"
)


def _insert(conn: Any, tenant: str, rows: list[dict[str, Any]], head: list[Any] | None) -> None:
    conn.execute("INSERT INTO tenants(tenant_id, created_at) VALUES (?, ?)", (tenant, "2026-01-01"))
    for r in rows:
        conn.execute(
            f"INSERT INTO audit_events({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (tenant, r["seq"], r["event_id"], r["request_id"], r["session_id"], r["kind"],
             r["payload"], r["created_at"], r["prev_hash"], r["hash"]),
        )  # fmt: skip
    if head is not None:
        conn.execute("UPDATE tenants SET audit_seq = ?, audit_head = ? WHERE tenant_id = ?",
                     (head[0], head[1], tenant))  # fmt: skip


def load_old_log(
    store: KnowledgeStore, extra: dict[str, list[dict[str, Any]]] | None = None
) -> None:
    """The fixture's rows, as stored by the old code (the store's own transaction)."""
    for tenant, chain in FIXTURE["tenants"].items():
        rows = chain["events"] + (extra or {}).get(tenant, [])
        head = chain["head"] if not extra else [rows[-1]["seq"], rows[-1]["hash"]]
        with store._db.tx(tenant) as conn:  # type: ignore[attr-defined]
            _insert(conn, tenant, rows, head)


#: Kinds written only since the fixture was made: an old log cannot hold them.
NEWER_KINDS = {"escalation"}


def test_the_fixture_covers_every_kind_written_today() -> None:
    kinds = {e["kind"] for t in FIXTURE["tenants"].values() for e in t["events"]}
    assert kinds == set(KNOWN_VERSIONS) - NEWER_KINDS


def test_every_old_row_parses_strictly_and_writes_back_byte_for_byte() -> None:
    for chain in FIXTURE["tenants"].values():
        for row in chain["events"]:
            payload = json.loads(row["payload"])
            assert payload_version(payload) == 1 and "v" not in payload
            event = parse_event(row["kind"], payload)
            assert event.kind == row["kind"] and event.v == 1
            assert canonical(event.payload()) == row["payload"]


def test_old_chains_verify_and_replay_as_before(store: KnowledgeStore) -> None:
    load_old_log(store)
    for tenant in FIXTURE["tenants"]:
        report = store.verify_audit(tenant)
        assert report.ok and report.events == len(FIXTURE["tenants"][tenant]["events"])
    assert len(FIXTURE["replays"]) == 9
    for case in FIXTURE["replays"]:
        now = replay(store, case["tenant"], case["request_id"]).as_dict()
        assert now.pop("unrecognised") == []
        assert json.loads(json.dumps(now)) == case["replay"], case["request_id"]


def _future(prev: dict[str, Any], seq: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A row chained after ``prev`` (as a later govrag would write it)."""
    draft = AuditEvent("t1", seq, f"aud-future-{seq}", prev["request_id"], prev["session_id"],
                       kind, canonical(payload), "2027-01-01T00:00Z", prev["hash"], "")  # fmt: skip
    row = {"seq": seq, "event_id": draft.event_id, "request_id": draft.request_id,
           "session_id": draft.session_id, "kind": kind, "payload": draft.payload_json,
           "created_at": draft.created_at, "prev_hash": draft.prev_hash,
           "hash": draft.expected_hash()}  # fmt: skip
    return row


def test_future_kinds_and_versions_are_shown_as_stored_never_fatal(store: KnowledgeStore) -> None:
    last = FIXTURE["tenants"]["t1"]["events"][-1]
    n = last["seq"]
    newer = _future(last, n + 1, "tool_run", {"tool": "ocr", "ms": 12})
    v2 = _future(newer, n + 2, "validation", {"v": 2, "verdict": "pass"})
    odd = _future(v2, n + 3, "response", {"answer": "a payload of another shape"})
    load_old_log(store, {"t1": [newer, v2, odd]})
    assert store.verify_audit("t1").ok
    case = next(c for c in FIXTURE["replays"] if c["request_id"] == last["request_id"])
    now = replay(store, "t1", last["request_id"]).as_dict()
    unrecognised = now.pop("unrecognised")
    assert [(u["seq"], u["kind"], u["payload"]) for u in unrecognised] == [
        (r["seq"], r["kind"], r["payload"]) for r in (newer, v2, odd)
    ]
    assert "has no model" in unrecognised[0]["problem"]
    assert "version 2 is not known" in unrecognised[1]["problem"]
    assert "does not match its model" in unrecognised[2]["problem"]
    # What could be read is answered as before.
    assert json.loads(json.dumps(now)) == case["replay"]
    # The examiner's printout says which events it could not read, and why.
    out = io.StringIO()
    print_replay(replay(store, "t1", last["request_id"]), Console(file=out, width=400))
    text = out.getvalue()
    assert f"Not understood: event {n + 1} (tool_run)" in text and "version 2 is not" in text
    assert text.rstrip().endswith("audit chain intact")


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        ("tool_run", {}, "kind 'tool_run' has no model"),
        ("error", {"v": 7, "stage": "s", "error_type": "E", "message": "m"}, "version 7"),
        ("error", {"stage": "s", "error_type": "E", "message": "m", "extra": 1}, "extra"),
        ("error", {"stage": "s", "error_type": "E"}, "message"),
        ("pep_decision", {"@kind": "error"}, "does not match"),
    ],
)
def test_parse_event_refuses_what_it_cannot_read(
    kind: str, payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(AuditEventError, match=message):
        parse_event(kind, payload)


class Reader:
    """The store, recording which reads replay made."""

    def __init__(self, store: KnowledgeStore) -> None:
        self.store = store
        self.reads: list[tuple[str, object]] = []

    def audit_events(self, tenant: str, *, request_id: str | None = None) -> list[AuditEvent]:
        self.reads.append(("events", request_id))
        return self.store.audit_events(tenant, request_id=request_id)

    def audit_session_pinned(self, tenant: str, session_id: str) -> AuditEvent | None:
        self.reads.append(("pinned", session_id))
        return self.store.audit_session_pinned(tenant, session_id)

    def verify_audit(self, tenant: str) -> Any:
        self.reads.append(("verify", None))
        return self.store.verify_audit(tenant)


def test_replay_reads_one_request_and_its_session_pin_by_index(store: KnowledgeStore) -> None:
    load_old_log(store)
    # A later request of a session that another request opened: its pin is found all the same.
    case = next(c for c in FIXTURE["replays"] if c["request_id"].startswith("turn:"))
    reader = Reader(store)
    r = replay(reader, "t1", case["request_id"])
    assert r.who.route_id == "prefetch" and r.who.sub == "officer"
    assert reader.reads == [("events", case["request_id"]), ("pinned", r.who.session_id),
                            ("verify", None)]  # fmt: skip


def test_the_session_pin_lookup_is_an_index_seek(sqlite_store: Any) -> None:
    with sqlite_store._db.tx("t1", read=True) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT seq FROM audit_events WHERE tenant_id = ? AND "
            "session_id = ? AND kind = 'route_pinned' ORDER BY seq LIMIT 1", ("t1", "s")
        ).fetchall()  # fmt: skip
    assert "audit_events_by_session" in " ".join(str(step) for step in plan)
