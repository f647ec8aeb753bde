"""Group commit (``govrag/store/group_commit.py``) under faults and misuse, as a review found
them: an exception a signal raises mid-commit, an append from inside a transaction, one
tenant's stalled commit. None may hang the audit log: a stranded caller gets an error, a
misused connection fails at once, and tenants commit independently where the database lets
them (PostgreSQL's pool)."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from govrag.errors import StoreError
from govrag.store.group_commit import GroupCommit
from govrag.store.protocol import KnowledgeStore

from conftest import StoreFactory, make_store

#: A bound on waiting for a thread that should finish at once (not a timing assertion: a
#: correct run takes milliseconds; a hang would take forever).
BOUND_S = 20.0


def _finishes(fn: Callable[[], object]) -> tuple[bool, object]:
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["r"] = fn()
        except BaseException as exc:  # recorded for the assertion
            box["r"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BOUND_S)
    return not t.is_alive(), box.get("r")


def _line(func: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_an_interrupt_while_marking_a_batch_never_hangs_the_log(tmp_path: Path) -> None:
    """A KeyboardInterrupt (a signal's) raised in the committer after its transaction, before
    the batch's tickets are marked done: the stranded caller gets an error instead of
    waiting forever, and later appends of any tenant go through."""
    store = make_store(tmp_path)
    group = store._parts.audit._group  # type: ignore[attr-defined]
    real = group._commit
    entered, release = threading.Event(), threading.Event()
    calls = {"n": 0}

    def commit(key: str, items: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            entered.set()
            assert release.wait(BOUND_S)
        return real(key, items)

    group._commit = commit
    mark = _line(GroupCommit._run, "for i, t in enumerate(batch)")
    fired = threading.Event()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is not GroupCommit._run.__code__:
            return None

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "line" and frame.f_lineno == mark and not fired.is_set() \
                    and len(frame.f_locals["batch"]) >= 2:  # fmt: skip
                fired.set()
                raise KeyboardInterrupt
            return local

        return local

    out: dict[str, object] = {}

    def append(name: str, traced: bool) -> None:
        if traced:
            sys.settrace(tracer)
        try:
            out[name] = store.append_audit("t1", "test_event", {"who": name}, request_id=name,
                                           session_id="s")  # fmt: skip
        except BaseException as exc:  # recorded for the assertions
            out[name] = exc
        finally:
            sys.settrace(None)

    first = threading.Thread(target=append, args=("a", False), daemon=True)
    first.start()
    assert entered.wait(BOUND_S)
    rest = [threading.Thread(target=append, args=(n, True), daemon=True) for n in ("b", "c")]
    for t in rest:
        t.start()
    for _ in range(2000):  # until both queued behind "a" (a bounded poll, not timing)
        with group._queue_lock:
            if len(group._queue) >= 2:
                break
        threading.Event().wait(0.01)
    release.set()
    for t in [first, *rest]:
        t.join(BOUND_S)
        assert not t.is_alive(), "an audit append hangs after an interrupted commit"
    assert fired.is_set()
    assert sum(isinstance(v, KeyboardInterrupt) for v in out.values()) == 1
    assert sum(isinstance(v, StoreError) for v in out.values()) == 1  # told, not stranded
    done, result = _finishes(
        lambda: store.append_audit("t2", "test_event", {}, request_id="d", session_id="s")
    )
    assert done and not isinstance(result, BaseException), result
    assert store.verify_audit("t1").ok and store.verify_audit("t2").ok
    store.close()


def test_an_append_inside_a_transaction_fails_at_once(tmp_path: Path) -> None:
    """SQLite: appending from inside a transaction on the store's one connection is a
    mistake; with another append waiting, it must fail at once, not deadlock with it."""
    store = make_store(tmp_path)
    db = store._parts.audit._db  # type: ignore[attr-defined]
    in_tx = threading.Event()
    other_result: dict[str, object] = {}

    def other() -> None:
        assert in_tx.wait(BOUND_S)
        try:
            other_result["r"] = store.append_audit("t1", "test_event", {"who": "other"},
                                                   request_id="o", session_id="s")  # fmt: skip
        except StoreError as exc:
            other_result["r"] = exc

    def misuse() -> object:
        with db.tx("t1"):
            in_tx.set()
            threading.Event().wait(0.2)  # let the other append queue (either order is fine)
            return store.append_audit("t1", "test_event", {}, request_id="m", session_id="s")

    helper = threading.Thread(target=other, daemon=True)
    helper.start()
    done, result = _finishes(misuse)
    assert done, "append_audit inside a transaction deadlocked with a concurrent append"
    assert isinstance(result, StoreError)
    helper.join(BOUND_S)
    assert not helper.is_alive()
    assert store.verify_audit("t1").ok
    store.close()


def test_one_tenants_stalled_commit_does_not_hold_up_another() -> None:
    slow_in, slow_go = threading.Event(), threading.Event()

    def commit(key: str, items: Any) -> list[str]:
        if key == "slow":
            slow_in.set()
            slow_go.wait(BOUND_S)
        return [f"{key}:{i}" for i in items]

    group: GroupCommit[str, str] = GroupCommit(commit)
    threading.Thread(target=group.submit, args=("slow", "x"), daemon=True).start()
    assert slow_in.wait(BOUND_S)
    try:
        done, result = _finishes(lambda: group.submit("fast", "y"))
        assert done and result == "fast:y"
    finally:
        slow_go.set()


def test_postgres_a_locked_tenant_row_holds_up_only_its_tenant(
    open_store: StoreFactory, request: pytest.FixtureRequest
) -> None:
    """Another session holds tenant ta's row (as its ingest transaction does until commit):
    tenant tb's appends in this process go on."""
    if request.node.callspec.params.get("open_store") != "postgres":
        pytest.skip("PostgreSQL commits tenants on separate connections; SQLite has one")
    store: KnowledgeStore = open_store()
    store.append_audit("ta", "test_event", {}, request_id="r0", session_id="s")
    store.append_audit("tb", "test_event", {}, request_id="r0", session_id="s")
    db = store._parts.audit._db  # type: ignore[attr-defined]
    holding, let_go = threading.Event(), threading.Event()

    def hold_tenant_a() -> None:
        with db.tx("ta") as conn:
            conn.execute("UPDATE tenants SET acl_epoch = acl_epoch + 1 WHERE tenant_id = ?",
                         ("ta",))  # fmt: skip
            holding.set()
            let_go.wait(BOUND_S)

    holder = threading.Thread(target=hold_tenant_a, daemon=True)
    holder.start()
    assert holding.wait(BOUND_S)
    waiting = threading.Thread(
        target=lambda: store.append_audit("ta", "test_event", {}, request_id="a",
                                          session_id="s"), daemon=True)  # fmt: skip
    waiting.start()
    try:
        done, result = _finishes(
            lambda: store.append_audit("tb", "test_event", {}, request_id="b", session_id="s")
        )
        assert done and not isinstance(result, BaseException), result
    finally:
        let_go.set()
        holder.join(BOUND_S)
        waiting.join(BOUND_S)
    assert store.verify_audit("ta").ok and store.verify_audit("tb").ok
