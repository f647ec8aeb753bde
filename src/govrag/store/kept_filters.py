"""What the exact vector scan keeps per caller filter, within one byte budget per process.

A caller's next search mostly repeats its filter (corpora, principal tokens, ceiling): its
readable rows, and their vectors gathered into one contiguous matrix, are worth keeping. They
are large (a filter reading half of 100k 384-dimensional vectors gathers 77 MB), and a process
holds one vector index per tenant, so the budget is the process's, shared by every index, and
the least recently used entries go first. An index drops its own entries whenever it changes
(a revocation is never served from here).

The budget grows with what the process's indexes hold: a quarter of their vectors' bytes, and
at least 256 MiB. At a million 384-dimensional vectors (1.5 GB), a filter reading 10 % of them
gathers 154 MB, and gathering those rows anew on each search costs seven times scoring them
(bench/RESULTS.md (s)): the budget is what keeps such a filter.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict, deque

import numpy as np
import numpy.typing as npt

#: Bytes of rows and gathered vectors kept in this process, for every index together, at
#: least; more when the indexes hold more (:data:`HELD_SHARE`).
BUDGET_BYTES = 256 * 2**20
#: The budget is at least this share of the bytes of every index's vectors.
HELD_SHARE = 0.25

Rows = npt.NDArray[np.intp]
Vectors = npt.NDArray[np.float32]
Entry = tuple[Rows, Vectors | None]

_owners = itertools.count(1)


def new_owner() -> int:
    """A number no other index of this process has (an index's id could be reused)."""
    return next(_owners)


class KeptFilters:
    """Entries keyed by (owner, filter), least recently used first out."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[int, object], Entry] = OrderedDict()
        self._bytes = 0
        self._held: dict[int, int] = {}  # owner -> bytes of its vectors
        #: Owners collected by the garbage collector, forgotten at the next call: a
        #: finalizer may run inside any call, so it must not take the lock.
        self._gone: deque[int] = deque()
        self._lock = threading.Lock()

    def forget_later(self, owner: int) -> None:
        """``owner`` is gone (called from its finalizer): its entries and what it held are
        dropped at the next call."""
        self._gone.append(owner)

    def budget(self) -> int:
        """Bytes that may be kept now: :data:`BUDGET_BYTES`, or :data:`HELD_SHARE` of what
        the indexes hold if that is more."""
        with self._lock:
            self._reap()
            return self._budget()

    def _budget(self) -> int:
        return max(BUDGET_BYTES, int(HELD_SHARE * sum(self._held.values())))

    def hold(self, owner: int, nbytes: int) -> None:
        """Say that ``owner``'s vectors take ``nbytes``."""
        with self._lock:
            self._reap()
            self._held[owner] = nbytes
            self._trim()

    def get(self, owner: int, key: object) -> Entry | None:
        with self._lock:
            self._reap()
            found = self._entries.get((owner, key))
            if found is not None:
                self._entries.move_to_end((owner, key))
            return found

    def may_gather(self, nbytes: int) -> bool:
        """Whether vectors of ``nbytes`` are worth gathering (at most half the budget)."""
        return nbytes <= self.budget() // 2

    def put(self, owner: int, key: object, entry: Entry) -> None:
        with self._lock:
            self._reap()
            self._drop_entry((owner, key))
            self._entries[(owner, key)] = entry
            self._bytes += _size(entry)
            self._trim()

    def drop(self, owner: int) -> None:
        """Forget every entry of ``owner`` (its index changed)."""
        with self._lock:
            self._drop_owner(owner)

    def forget(self, owner: int) -> None:
        """Forget ``owner`` altogether: its entries and what it holds (it is dropped)."""
        with self._lock:
            self._forget(owner)

    def _drop_owner(self, owner: int) -> None:
        for k in [k for k in self._entries if k[0] == owner]:
            self._drop_entry(k)

    def _forget(self, owner: int) -> None:
        self._drop_owner(owner)
        self._held.pop(owner, None)

    def _reap(self) -> None:
        while self._gone:
            self._forget(self._gone.popleft())

    def _trim(self) -> None:
        """Drop the least recently used entries until within budget (keeping the newest)."""
        budget = self._budget()
        while self._bytes > budget and len(self._entries) > 1:
            self._drop_entry(next(iter(self._entries)))

    def nbytes(self) -> int:
        with self._lock:
            self._reap()
            return self._bytes

    def _drop_entry(self, k: tuple[int, object]) -> None:
        entry = self._entries.pop(k, None)
        if entry is not None:
            self._bytes -= _size(entry)


def _size(entry: Entry) -> int:
    rows, vecs = entry
    return rows.nbytes + (0 if vecs is None else vecs.nbytes)


#: The process's kept filters.
KEPT = KeptFilters()
