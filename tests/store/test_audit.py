"""The audit log on both backends: chain, tamper evidence, concurrent writers, append-only."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from govrag.audit.events import PinnedRetrieval, RoutePinned
from govrag.errors import InputError, StoreError
from govrag.store.audit import GENESIS, NO_TENANT_ROW, AuditEvent
from govrag.store.protocol import KnowledgeStore

from conftest import StoreFactory, doc, drop_tenant_row, ident, load, tamper


def append(store: KnowledgeStore, n: int, tenant: str = "t1", request: str = "r1") -> None:
    for i in range(n):
        store.append_audit(
            tenant, "pep_decision", {"i": i, "verdict": "ALLOW", "corpus": "café"},
            request_id=request, session_id="s1",
        )  # fmt: skip


def test_events_chain_and_verify(store: KnowledgeStore) -> None:
    append(store, 3)
    append(store, 2, request="r2")
    append(store, 1, tenant="t2")
    events = store.audit_events("t1")
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert events[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(events))
    assert events[2].payload == {"i": 2, "verdict": "ALLOW", "corpus": "café"}
    assert [e.seq for e in store.audit_events("t1", request_id="r2")] == [4, 5]
    report = store.verify_audit("t1")
    assert report.ok and (report.events, report.head_seq, report.head_hash) == (
        5, 5, events[-1].hash,
    )  # fmt: skip
    assert store.verify_audit("t2").events == 1  # one chain per tenant
    assert store.verify_audit("nobody").ok


def raw(store: Any, sql: str) -> None:
    """What an attacker with direct database access does (bypassing the application)."""
    statements = sql.split(";")
    if store.backend == "sqlite":
        store._db.connection.execute("DROP TRIGGER IF EXISTS audit_events_no_update")
        store._db.connection.execute("DROP TRIGGER IF EXISTS audit_events_no_delete")
        for statement in statements:
            store._db.connection.execute(statement)
    else:
        import psycopg

        with psycopg.connect(store.admin_url, autocommit=True) as conn:  # superuser
            for statement in statements:
                conn.execute(statement)


TAMPERING = {
    "altered payload": ("UPDATE audit_events SET payload = '{\"verdict\":\"DENY\"}' "
                        "WHERE seq = 3", 3, "hash does not match"),
    "altered created_at": ("UPDATE audit_events SET created_at = '2020-01-01' WHERE seq = 2",
                           2, "hash does not match"),
    "deleted row": ("DELETE FROM audit_events WHERE seq = 2", 3, "sequence number 3"),
    "deleted last row": ("DELETE FROM audit_events WHERE seq = 5", 4, "recorded head is event 5"),
    "reordered rows": ("UPDATE audit_events SET seq = 100 WHERE seq = 3;"
                       "UPDATE audit_events SET seq = 3 WHERE seq = 4;"
                       "UPDATE audit_events SET seq = 4 WHERE seq = 100", 3,
                       "prev_hash does not match"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(TAMPERING))
def test_tampering_breaks_the_chain_at_the_row(store: KnowledgeStore, case: str) -> None:
    append(store, 5)
    events = {e.seq: e.event_id for e in store.audit_events("t1")}
    sql, seq, fragment = TAMPERING[case]
    raw(store, sql)
    report = store.verify_audit("t1")
    assert not report.ok and report.broken is not None
    assert report.broken[0] == seq and fragment in report.broken[2]
    if case == "reordered rows":
        assert report.broken[1] == events[4]  # the row now at position 3
    elif case != "deleted last row":
        assert report.broken[1] == events[seq]


def test_the_application_cannot_change_events(store: Any) -> None:
    append(store, 1)
    for sql in ("UPDATE audit_events SET kind = 'x'", "DELETE FROM audit_events"):
        with (
            pytest.raises(StoreError, match=r"append-only|permission denied"),
            store._db.tx("t1") as c,
        ):
            c.execute(sql + " WHERE tenant_id = 't1'")
    assert store.verify_audit("t1").ok


def test_concurrent_writers_keep_one_valid_chain(open_store: StoreFactory) -> None:
    handles = [open_store() for _ in range(3)]  # as three processes would
    failures: list[BaseException] = []

    def writer(store: KnowledgeStore, name: str) -> None:
        try:
            append(store, 15, request=name)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(h, f"w{i}")) for i, h in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
    report = handles[0].verify_audit("t1")
    assert report.ok and report.events == 45


def test_dropping_a_tenant_keeps_its_audit_trail(store: KnowledgeStore) -> None:
    load(store, [ident("ana@x.example", "A"), doc("d", "alpha", ["A"])])
    append(store, 2)
    epoch = store.acl_epoch("t1")
    store.drop_tenant("t1")
    assert store.stats("t1")["documents"] == 0
    assert store.verify_audit("t1").events == 2 and store.verify_audit("t1").ok
    assert store.acl_epoch("t1") > epoch  # epochs never repeat for cached results
    append(store, 1)
    assert store.verify_audit("t1").events == 3


def test_a_session_and_its_pinning_event_commit_together(store: KnowledgeStore) -> None:
    append(store, 1)
    pin = RoutePinned(sub="ana", route_id="qa",
                      retrieval=PinnedRetrieval(mode="tool", scope=("a",)),
                      route_table_version="sha256:1")  # fmt: skip
    row, event = store.create_session("t1", "ses-1", pin, request_id="r9")
    assert row.retrieval_json == '{"mode":"tool","scope":["a"]}' and row.sub == "ana"
    assert store.get_session("t1", "ses-1") == row
    assert (event.kind, event.session_id, event.request_id, event.seq) == (
        "route_pinned", "ses-1", "r9", 2)  # fmt: skip
    assert event.payload["retrieval"] == {"mode": "tool", "scope": ["a"]}
    # A session id is pinned once; the refused second pin writes no event either.
    with pytest.raises(InputError, match="already exists"):
        store.create_session("t1", "ses-1", pin.model_copy(update={"route_id": "other"}),
                             request_id="r9")  # fmt: skip
    assert [e.kind for e in store.audit_events("t1")] == ["pep_decision", "route_pinned"]
    assert store.get_session("t1", "ses-1") == row and store.verify_audit("t1").ok


def test_every_tenant_of_the_log_is_listed_even_without_its_row(store: KnowledgeStore) -> None:
    """``audit verify`` must find a chain whose tenant row was deleted and events written
    under a tenant nobody created; listing tenant rows alone finds neither."""
    append(store, 2, tenant="t1")
    append(store, 1, tenant="t2")
    store.put_identity("t3", "ana@x.example", "sp", "A")  # a tenant row, no events
    tamper(
        store,
        *drop_tenant_row(store, "t2"),
        "INSERT INTO audit_events SELECT 'ghost', seq, event_id, request_id, session_id, kind, "
        "payload, created_at, prev_hash, hash FROM audit_events WHERE tenant_id = 't1'",
    )
    assert "t2" not in store.tenants() and "ghost" not in store.tenants()
    assert store.audit_tenants() == ["ghost", "t1", "t2", "t3"]
    chain = store.audit_chain("t2")
    assert chain.head is None and len(chain.events) == 1
    report = store.verify_audit("t2")
    assert not report.ok and not report.tenant_row and report.broken is not None
    assert report.broken[2] == NO_TENANT_ROW
    assert store.verify_audit("ghost").broken is not None  # its hashes name tenant t1
    assert store.verify_audit("t3").ok and store.audit_chain("t3").head == (0, "")


def test_observers_hear_each_committed_event_and_cannot_lose_one(store: KnowledgeStore) -> None:
    heard: list[AuditEvent] = []
    store.observe_audit(heard.append)

    def broken(event: AuditEvent) -> None:
        raise OSError("the checkpoint directory is gone")

    store.observe_audit(broken)
    event = store.append_audit("t1", "pep_decision", {}, request_id="r", session_id="s")
    pin = RoutePinned(sub="ana", route_id="qa", retrieval=PinnedRetrieval(),
                      route_table_version="v")  # fmt: skip
    _, pinned = store.create_session("t1", "ses-1", pin, request_id="r")
    assert heard == [event, pinned]
    assert [e.event_id for e in store.audit_events("t1")] == [event.event_id, pinned.event_id]
    assert store.verify_audit("t1").ok
