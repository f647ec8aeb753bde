"""The in-memory BM25 index of one (tenant, session) scope.

Each scope owns its own index, so term statistics (document count, document frequencies,
average length) are computed over that scope's live entries only: nothing of another scope
can shift a score, let alone surface. Entries are analysed with govrag's single analyzer (the
one behind the tantivy corpus index), so overlay and corpus scores speak about the same terms.

Scoring is standard BM25 with Lucene's idf and tantivy's term weight (so the overlay's scores
are on the corpus leg's scale when the gateway merges the two)::

    idf(t)      = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))
    score(d, q) = sum over distinct terms t of q:
                  idf(t) * (k1 + 1) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

with ``k1 = 1.2``, ``b = 0.75``; ``|d|`` counts analysed terms. Repeated query terms count
once, as in the corpus index. Unlike tantivy, lengths are exact (not quantised to a byte).

Expiry is kept in a min-heap so a purge touches only what expired: the store purges a scope
before it judges or queries it, so an expired entry is never scored or returned.

Not thread-safe: the store's lock guards every call.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from govrag.store.analyzer import default_analyzer

__all__ = ["K1", "B", "Entry", "ScopeIndex", "analyze"]

K1 = 1.2
B = 0.75


def analyze(text: str) -> list[str]:
    """The index terms of ``text`` (govrag's shared analyzer)."""
    return default_analyzer().analyze(text)


@dataclass(frozen=True)
class Entry:
    """One admitted entry as the index holds it."""

    id: str
    content: str
    term_freqs: Mapping[str, int]
    length: int
    expires_at: datetime
    metadata: Mapping[str, str]

    @classmethod
    def build(
        cls,
        entry_id: str,
        content: str,
        terms: Sequence[str],
        expires_at: datetime,
        metadata: Mapping[str, str],
    ) -> Entry:
        return cls(
            id=entry_id,
            content=content,
            term_freqs=dict(Counter(terms)),
            length=len(terms),
            expires_at=expires_at,
            metadata=dict(metadata),
        )


class ScopeIndex:
    """BM25 over the live entries of one scope, with expiry and removal."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._lengths: dict[str, int] = {}  # id -> analysed length, read per posting scored
        # term -> {entry id: term frequency}: a query touches only the entries that match.
        self._postings: dict[str, dict[str, int]] = {}
        self._total_length = 0
        # (expires_at, id); may hold stale pairs of replaced or removed entries, which a purge
        # recognises (the live entry's expiry differs, or the entry is gone) and drops.
        self._expiry: list[tuple[datetime, str]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def get(self, entry_id: str) -> Entry | None:
        return self._entries.get(entry_id)

    def put(self, entry: Entry) -> None:
        """Add ``entry``, replacing an entry with the same id (a re-admission)."""
        self.remove(entry.id)
        self._entries[entry.id] = entry
        self._lengths[entry.id] = entry.length
        for term, tf in entry.term_freqs.items():
            self._postings.setdefault(term, {})[entry.id] = tf
        self._total_length += entry.length
        heapq.heappush(self._expiry, (entry.expires_at, entry.id))
        # Re-admissions leave stale heap pairs; rebuild before they outnumber the entries.
        if len(self._expiry) > 2 * len(self._entries) + 16:
            self._expiry = [(e.expires_at, e.id) for e in self._entries.values()]
            heapq.heapify(self._expiry)

    def remove(self, entry_id: str) -> bool:
        """Remove an entry; ``False`` if it was not there."""
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return False
        del self._lengths[entry_id]
        for term in entry.term_freqs:
            posting = self._postings[term]
            del posting[entry_id]
            if not posting:
                del self._postings[term]
        self._total_length -= entry.length
        return True

    def purge(self, now: datetime) -> int:
        """Remove every entry with ``expires_at <= now``; returns how many were removed."""
        removed = 0
        heap = self._expiry
        while heap and heap[0][0] <= now:
            expires_at, entry_id = heapq.heappop(heap)
            entry = self._entries.get(entry_id)
            if entry is not None and entry.expires_at == expires_at:
                self.remove(entry_id)
                removed += 1
        return removed

    def search(
        self,
        terms: Sequence[str],
        *,
        top_k: int,
        min_score: float,
        filters: Mapping[str, str],
    ) -> list[tuple[Entry, float]]:
        """Entries matching any term, scored; ``filters`` and ``min_score`` before ``top_k``.

        Ranked by descending score, ties by ascending id. Call :meth:`purge` first.
        """
        n_docs = len(self._entries)
        if n_docs == 0 or top_k <= 0:
            return []
        avg_length = self._total_length / n_docs
        lengths = self._lengths
        # The length norm depends only on an entry's length: computed once per distinct length.
        norms: dict[int, float] = {}
        scores: dict[str, float] = {}
        for term in dict.fromkeys(terms):
            posting = self._postings.get(term)
            if not posting:
                continue
            # A posting exists, so some entry has length >= 1 and avg_length > 0.
            df = len(posting)
            weight = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)) * (K1 + 1.0)
            for entry_id, tf in posting.items():
                length = lengths[entry_id]
                norm = norms.get(length)
                if norm is None:
                    norm = norms[length] = K1 * (1.0 - B + B * length / avg_length)
                scores[entry_id] = scores.get(entry_id, 0.0) + weight * tf / (tf + norm)
        # Filters and min_score narrow first; only then is the top_k taken.
        keys = [(-score, entry_id) for entry_id, score in scores.items() if score >= min_score]
        if filters:
            entries = self._entries
            keys = [
                key
                for key in keys
                if all(entries[key[1]].metadata.get(k) == v for k, v in filters.items())
            ]
        # (-score, id) tuples compare in C: descending score, ties by ascending id.
        best = heapq.nsmallest(top_k, keys) if top_k < len(keys) else sorted(keys)
        return [(self._entries[entry_id], -neg) for neg, entry_id in best]
