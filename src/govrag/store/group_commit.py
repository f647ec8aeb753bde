"""Group commit: concurrent callers' writes made durable by one transaction between them.

A durable commit costs a flush to disk (on SQLite with ``synchronous=FULL``, about a
millisecond here), and an audit event is committed durably before the step it records goes
on. Under load, several requests wait to append at the same moment; committing each alone
makes them queue behind one flush after another. Here the caller that gets the turn commits
its own item *and every item queued behind it for the same key* (tenant) in one
transaction, and each caller returns once the transaction holding its item has committed.
Durability is unchanged (nobody returns before its item is on disk); only the number of
flushes falls. A lone caller commits alone, as before.

Failure is shared as the transaction is: when it fails, every item in it failed and nothing
of it was written; each of those callers gets the error (the one that ran the transaction
gets the original exception, the others a :class:`~govrag.errors.StoreError` naming it), so
no caller believes an item written that was not. Items are committed in the order queued.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, TypeVar

from govrag.errors import StoreError

I = TypeVar("I")  # noqa: E741 - the item type, beside R for the result
R = TypeVar("R")

#: At most this many items per transaction, so one commit never grows without bound.
MAX_BATCH = 64


@dataclass
class _Ticket(Generic[I, R]):
    key: str
    item: I
    done: bool = False
    result: R | None = None
    error: BaseException | None = None


class GroupCommit(Generic[I, R]):
    """Commits items through ``commit(key, items) -> results`` (one result per item, in
    order, all in one transaction), batching callers that arrive while another commits.

    ``turn(key)`` is held by the one caller running a transaction of ``key``: by default a
    lock per key, so keys (tenants) commit in parallel; a database with one connection passes
    that connection's lock, so a thread already inside one of its transactions re-enters it
    and fails at once (a transaction cannot begin inside another) instead of waiting for a
    committer that waits for it.
    """

    def __init__(
        self,
        commit: Callable[[str, Sequence[I]], Sequence[R]],
        *,
        turn: Callable[[str], AbstractContextManager[object]] | None = None,
    ) -> None:
        self._commit = commit
        self._queue: list[_Ticket[I, R]] = []
        self._queue_lock = threading.Lock()
        self._turns: dict[str, threading.Lock] = {}
        self._turn = turn if turn is not None else self._key_lock

    def _key_lock(self, key: str) -> threading.Lock:
        with self._queue_lock:
            return self._turns.setdefault(key, threading.Lock())

    def submit(self, key: str, item: I) -> R:
        """Commit ``item`` (with any queued items of ``key``) and return its result once its
        transaction has committed; raises when that transaction failed."""
        ticket: _Ticket[I, R] = _Ticket(key, item)
        with self._queue_lock:
            self._queue.append(ticket)
        ran: BaseException | None = None
        with self._turn(key):
            while not ticket.done:
                ran = self._run(key) or ran
        if ticket.error is not None:
            if ticket.error is ran:
                raise ticket.error
            raise StoreError(f"the audit commit this event was part of failed: {ticket.error}") \
                from ticket.error  # fmt: skip
        return ticket.result  # type: ignore[return-value]  # set whenever done without error

    def _run(self, key: str) -> BaseException | None:
        """One transaction of ``key``'s queued items, oldest first; returns its error. Every
        ticket taken off the queue is marked done whatever happens (an exception raised by
        a signal included), so no caller waits for a transaction that is over."""
        with self._queue_lock:
            batch = [t for t in self._queue if t.key == key][:MAX_BATCH]
            taken = {id(t) for t in batch}
            self._queue = [t for t in self._queue if id(t) not in taken]
        if not batch:  # the caller's own ticket is always queued or done: never here
            raise StoreError("audit group commit: nothing queued for a waiting caller")
        results: Sequence[R] | None = None
        error: BaseException | None = None
        try:
            results = self._commit(key, [t.item for t in batch])
        except BaseException as exc:
            error = exc
        finally:
            for i, t in enumerate(batch):
                if error is None and results is not None and len(results) == len(batch):
                    t.result = results[i]
                else:
                    t.error = error or StoreError("the audit commit was interrupted")
                t.done = True
        return error
