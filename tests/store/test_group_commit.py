"""Group commit (``govrag/store/group_commit.py``): concurrent appends share a transaction,
and nobody returns before the transaction holding its item has committed.

The batching is driven without timing: the first transaction is held open on an event until
the other callers have queued, so what each transaction holds is known exactly. Then the
real thing: threads appending audit events to one store at once (both backends) leave one
valid chain holding every event each of them was told was written.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from govrag.errors import StoreError
from govrag.store.group_commit import GroupCommit
from govrag.store.protocol import KnowledgeStore


class Recorder:
    """A commit function that records its transactions; tenant t1's first one waits for
    ``release``."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.transactions: list[tuple[str, list[str]]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_on = fail_on

    def __call__(self, key: str, items: Sequence[str]) -> list[str]:
        if not self.entered.is_set() and key == "t1":
            self.entered.set()
            assert self.release.wait(30)
        self.transactions.append((key, list(items)))
        if self.fail_on is not None and self.fail_on in items:
            raise OSError("disk full")
        return [f"{key}:{item}" for item in items]


def _queued(group: GroupCommit[str, str], n: int) -> bool:
    with group._queue_lock:  # white-box: how many callers wait
        return len(group._queue) >= n


def _run_blocked(
    group: GroupCommit[str, str],
    recorder: Recorder,
    calls: list[tuple[str, str]],
    *,
    meanwhile: Sequence[tuple[str, str]] = (),
) -> dict[str, object]:
    """The first call enters its transaction and is held there; the others queue behind it,
    and each of ``meanwhile`` (other tenants) runs to its end; then the first is released.
    Returns what each call returned or raised."""
    out: dict[str, object] = {}

    def call(key: str, item: str) -> None:
        try:
            out[item] = group.submit(key, item)
        except BaseException as exc:  # recorded for the assertions
            out[item] = exc

    first = threading.Thread(target=call, args=calls[0])
    first.start()
    assert recorder.entered.wait(30)
    for c in meanwhile:
        other = threading.Thread(target=call, args=c)
        other.start()
        other.join(30)
        assert not other.is_alive(), f"{c} waited for another tenant's transaction"
    rest = [threading.Thread(target=call, args=c) for c in calls[1:]]
    for t in rest:
        t.start()
    deadline = threading.Event()
    for _ in range(3000):  # until all of them are queued (no timing: a bounded poll)
        if _queued(group, len(calls) - 1):
            break
        deadline.wait(0.01)
    recorder.release.set()
    for t in [first, *rest]:
        t.join(30)
    return out


def test_a_lone_caller_commits_alone() -> None:
    recorder = Recorder()
    recorder.release.set()
    group: GroupCommit[str, str] = GroupCommit(recorder)
    assert group.submit("t1", "a") == "t1:a"
    assert group.submit("t1", "b") == "t1:b"
    assert recorder.transactions == [("t1", ["a"]), ("t1", ["b"])]


def test_callers_queued_behind_a_commit_share_the_next_one_in_order() -> None:
    recorder = Recorder()
    group: GroupCommit[str, str] = GroupCommit(recorder)
    out = _run_blocked(group, recorder, [("t1", "a"), ("t1", "b"), ("t1", "c"), ("t1", "d")])
    assert out == {"a": "t1:a", "b": "t1:b", "c": "t1:c", "d": "t1:d"}
    assert recorder.transactions[0] == ("t1", ["a"])
    # The three that queued while "a" committed: one transaction, in the order they queued.
    assert len(recorder.transactions) == 2
    assert sorted(recorder.transactions[1][1]) == ["b", "c", "d"]


def test_tenants_never_share_a_transaction_nor_wait_for_each_other() -> None:
    """While tenant t1's first transaction is held open, t2's append commits on its own, and
    t1's later callers share t1's next transaction."""
    recorder = Recorder()
    group: GroupCommit[str, str] = GroupCommit(recorder)
    out = _run_blocked(group, recorder, [("t1", "a"), ("t1", "b"), ("t1", "c")],
                       meanwhile=[("t2", "x")])  # fmt: skip
    assert out == {"a": "t1:a", "b": "t1:b", "c": "t1:c", "x": "t2:x"}
    assert recorder.transactions[0] == ("t2", ["x"])  # while t1's was held open
    assert [(k, sorted(i)) for k, i in recorder.transactions[1:]] == [
        ("t1", ["a"]), ("t1", ["b", "c"])]  # fmt: skip


def test_a_failed_transaction_fails_every_caller_in_it_and_no_other() -> None:
    recorder = Recorder(fail_on="c")
    group: GroupCommit[str, str] = GroupCommit(recorder)
    out = _run_blocked(group, recorder, [("t1", "a"), ("t1", "b"), ("t1", "c")])
    assert out["a"] == "t1:a"  # its own transaction committed
    for item in ("b", "c"):  # they shared the one that failed
        error = out[item]
        assert isinstance(error, (OSError, StoreError)), error
        assert "disk full" in str(error)
    # The caller that ran it sees the original error, the other a StoreError naming it.
    assert sorted(type(out[i]).__name__ for i in ("b", "c")) == ["OSError", "StoreError"]


def test_the_next_caller_commits_after_a_failure() -> None:
    recorder = Recorder(fail_on="a")
    recorder.release.set()
    group: GroupCommit[str, str] = GroupCommit(recorder)
    with pytest.raises(OSError, match="disk full"):
        group.submit("t1", "a")
    assert group.submit("t1", "b") == "t1:b"


def test_concurrent_appends_leave_one_valid_chain(store: KnowledgeStore) -> None:
    """Eight threads append 25 events each at once: every event each was handed back is in
    the chain as handed back, the sequence numbers are 1..200, and the chain verifies."""
    returned: list[object] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def writer(w: int) -> None:
        start.wait()
        for i in range(25):
            event = store.append_audit(
                "t1", "test_event", {"writer": w, "i": i}, request_id=f"r{w}", session_id="s"
            )
            with lock:
                returned.append(event)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stored = store.audit_events("t1")
    assert sorted(e.seq for e in stored) == list(range(1, 201))
    assert sorted(returned, key=lambda e: e.seq) == stored  # type: ignore[attr-defined]
    report = store.verify_audit("t1")
    assert report.ok and report.events == 200
    for w in range(8):  # each writer's events in the order it wrote them
        mine = [e.payload["i"] for e in stored if e.request_id == f"r{w}"]
        assert mine == list(range(25))
