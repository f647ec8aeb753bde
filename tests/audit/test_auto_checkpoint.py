"""Automatic checkpoints: due every N events or T seconds, shared between processes, and a
failure never costs an audit event (it is logged, and verify reports the stale anchor)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from govrag.audit.anchor import verify_anchored
from govrag.audit.auto import Checkpointer
from govrag.audit.checkpoint import CheckpointDir, tenant_folder
from govrag.audit.keys import generate_key, load_signing_key
from govrag.store.sqlite import SQLiteStore

from conftest import make_store


class Clock:
    """A clock the test moves by hand (it starts at the wall clock, which events carry)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    s = make_store(tmp_path / "db")
    yield s  # type: ignore[misc]
    s.close()


def checkpointer(root: Path, clock: Clock, key: Path | None = None) -> Checkpointer:
    if key is None:
        key = root / "k.pem"
        if not key.exists():
            generate_key(key)
    return Checkpointer(CheckpointDir(root / "cps"), key, every_events=10, every_seconds=60,
                        clock=clock)  # fmt: skip


def heads(root: Path, tenant: str = "t1") -> list[int]:
    return [int(p.name[:20]) for p in sorted((root / "cps" / tenant_folder(tenant)).glob("*.json"))]


def append(store: SQLiteStore, n: int, tenant: str = "t1") -> None:
    for i in range(n):
        store.append_audit(tenant, "k", {"i": i}, request_id="r", session_id="s")


def test_due_at_the_first_event_then_every_n_events(store: SQLiteStore, tmp_path: Path) -> None:
    auto = checkpointer(tmp_path, Clock())
    store.observe_audit(auto.observe)
    append(store, 25)
    append(store, 1, tenant="t2")
    assert heads(tmp_path) == [1, 11, 21] and heads(tmp_path, "t2") == [1]


def test_due_at_the_first_event_t_seconds_after_the_last(
    store: SQLiteStore, tmp_path: Path
) -> None:
    clock = Clock()
    auto = checkpointer(tmp_path, clock)
    store.observe_audit(auto.observe)
    append(store, 3)
    clock.now += timedelta(seconds=59)
    append(store, 1)
    clock.now += timedelta(seconds=1)
    append(store, 2)
    assert heads(tmp_path) == [1, 5]


def test_another_process_checkpoint_counts(store: SQLiteStore, tmp_path: Path) -> None:
    clock = Clock()
    first, second = checkpointer(tmp_path, clock), checkpointer(tmp_path, clock)
    store.observe_audit(first.observe)
    append(store, 1)
    # A second process starts: it reads the history instead of signing at once.
    other = make_store(tmp_path / "db")
    other.observe_audit(second.observe)
    other.append_audit("t1", "k", {}, request_id="r", session_id="s")  # event 2
    append(store, 9)  # events 3..11: the first process signs 11
    other.append_audit("t1", "k", {}, request_id="r", session_id="s")  # 12: not due for it
    other.close()
    assert heads(tmp_path) == [1, 11] and second.written == 0


def test_an_unwritable_directory_loses_no_event(
    store: SQLiteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    key = tmp_path / "k.pem"
    generate_key(key)
    blocked = tmp_path / "cps"
    blocked.write_text("a file where the directory should be")  # root can't write here either
    auto = Checkpointer(CheckpointDir(blocked), key, every_events=10, every_seconds=60,
                        clock=clock)  # fmt: skip
    store.observe_audit(auto.observe)
    with caplog.at_level(logging.ERROR, logger="govrag.audit"):
        append(store, 25)
    assert store.verify_audit("t1").events == 25 and store.verify_audit("t1").ok
    errors = [r for r in caplog.records if r.name == "govrag.audit"]
    assert len(errors) == 3  # at events 1, 11 and 21: retried at due points, not per event
    assert "the event is committed" in errors[0].getMessage()
    assert auto.written == 0


def test_a_stale_anchor_is_reported(store: SQLiteStore, tmp_path: Path) -> None:
    clock = Clock()
    auto = checkpointer(tmp_path, clock)
    store.observe_audit(auto.observe)
    append(store, 1)  # anchored at 1
    folder = tmp_path / "cps" / tenant_folder("t1")
    folder.rename(tmp_path / "saved")
    folder.write_text("")  # the tenant's folder cannot be written now
    append(store, 14)  # the attempt at event 11 fails
    folder.unlink()
    (tmp_path / "saved").rename(folder)
    public = load_signing_key(tmp_path / "k.pem").public_key()
    report = verify_anchored(store, CheckpointDir(tmp_path / "cps"), public, every_events=10,
                             every_seconds=86400, now=clock.now + timedelta(hours=2))  # fmt: skip
    assert report.ok  # nothing was tampered with ...
    [warning] = report.tenants[0].warnings  # ... but the anchor is 14 events behind
    assert "14 audit events behind the head and 2.0 h old" in warning
    # The folder back in place, the next due point (10 events after the failed attempt)
    # signs again.
    append(store, 6)
    assert heads(tmp_path) == [1, 21]


def test_time_alone_makes_an_anchor_stale(store: SQLiteStore, tmp_path: Path) -> None:
    """Fewer than N events behind, but the first unanchored one came more than T seconds
    after the checkpoint: a checkpoint was due and none was written."""
    clock = Clock()
    auto = checkpointer(tmp_path, clock)
    store.observe_audit(auto.observe)
    append(store, 1)
    store._parts.audit._observers = ()  # a process that does not checkpoint (a library user)
    append(store, 2)
    public = load_signing_key(tmp_path / "k.pem").public_key()
    late = datetime.now(UTC) + timedelta(hours=1)  # events carry the wall clock
    cps = CheckpointDir(tmp_path / "cps")
    fresh = verify_anchored(store, cps, public, every_events=10, every_seconds=86400, now=late)
    assert fresh.tenants[0].warnings == []  # written right after the checkpoint
    path = sorted((cps.root / tenant_folder("t1")).glob("*.json"))[0]
    old = Checkpointer(cps, tmp_path / "k.pem", every_events=10, every_seconds=60,
                       clock=lambda: datetime(2020, 1, 1, tzinfo=UTC))  # fmt: skip
    path.unlink()
    old.observe(store.audit_events("t1")[0])  # the same head, signed long before event 2
    report = verify_anchored(store, cps, public, every_events=10, every_seconds=86400, now=late)
    assert report.ok and "2 audit events behind" in report.tenants[0].warnings[0]


def test_a_missing_key_loses_no_event(
    store: SQLiteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    auto = checkpointer(tmp_path, Clock(), key=tmp_path / "absent.pem")
    store.observe_audit(auto.observe)
    with caplog.at_level(logging.ERROR, logger="govrag.audit"):
        append(store, 3)
    assert store.verify_audit("t1").ok and store.verify_audit("t1").events == 3
    [record] = [r for r in caplog.records if r.name == "govrag.audit"]
    assert "absent.pem does not exist" in record.getMessage()
    assert not (tmp_path / "cps").exists()


def test_a_first_checkpoint_that_failed_is_taken_at_the_next_due_point(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """This process saw the tenant's event 1 (its checkpoint could not be written: no key
    yet), so its history starts there: the retry signs a later head."""
    key = tmp_path / "k.pem"
    auto = checkpointer(tmp_path, Clock(), key=key)
    store.observe_audit(auto.observe)
    append(store, 5)  # event 1: no key
    generate_key(key)
    append(store, 10)  # due at 11
    assert heads(tmp_path) == [11]


def test_events_seen_out_of_order_still_anchor_a_new_tenant(
    store: SQLiteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two first requests of a new tenant commit events 1 and 2; event 2's observer runs
    first. It may not adopt (it has not seen the chain's start), but event 1 still anchors."""
    auto = checkpointer(tmp_path, Clock())
    append(store, 2)
    first, second = store.audit_events("t1")
    with caplog.at_level(logging.WARNING, logger="govrag.audit"):
        auto.observe(second)
        auto.observe(first)
    assert heads(tmp_path) == [1] and auto.written == 1


def test_invalid_checkpoint_files_are_no_fresh_start(store: SQLiteStore, tmp_path: Path) -> None:
    """The tenant's folder holds only files that do not verify (edited, or signed by a key
    nobody kept): even at event 1 that is a history, not a new tenant."""
    auto = checkpointer(tmp_path, Clock())
    folder = tmp_path / "cps" / tenant_folder("t1")
    folder.mkdir(parents=True)
    (folder / "00000000000000000007-x.json").write_text("{}")
    store.observe_audit(auto.observe)
    append(store, 12)
    assert auto.written == 0 and heads(tmp_path) == [7]
