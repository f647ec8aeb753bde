"""What the exact vector scan keeps per caller filter, within one byte budget per process.

A caller's next search mostly repeats its filter (corpora, principal tokens, ceiling): its
readable rows, and their vectors gathered into one contiguous matrix, are worth keeping. They
are large (a filter reading half of 100k 384-dimensional vectors gathers 77 MB), and a process
holds one vector index per tenant, so the budget is the process's, shared by every index, and
the least recently used entries go first. An index drops its own entries whenever it changes
(a revocation is never served from here).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

#: Bytes of rows and gathered vectors kept in this process, for every index together.
BUDGET_BYTES = 256 * 2**20

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
        self._lock = threading.Lock()

    def get(self, owner: int, key: object) -> Entry | None:
        with self._lock:
            found = self._entries.get((owner, key))
            if found is not None:
                self._entries.move_to_end((owner, key))
            return found

    def may_gather(self, nbytes: int) -> bool:
        """Whether vectors of ``nbytes`` are worth gathering (at most half the budget)."""
        return nbytes <= BUDGET_BYTES // 2

    def put(self, owner: int, key: object, entry: Entry) -> None:
        with self._lock:
            self._drop_entry((owner, key))
            self._entries[(owner, key)] = entry
            self._bytes += _size(entry)
            while self._bytes > BUDGET_BYTES and len(self._entries) > 1:
                self._drop_entry(next(iter(self._entries)))

    def drop(self, owner: int) -> None:
        """Forget every entry of ``owner`` (its index changed)."""
        with self._lock:
            for k in [k for k in self._entries if k[0] == owner]:
                self._drop_entry(k)

    def nbytes(self) -> int:
        with self._lock:
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
