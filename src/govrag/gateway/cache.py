"""The result cache: ranked candidates of a request, per caller, per data generation.

What is cached is the reranked store result for one corpus (before the live rights check,
which runs on every request, cached or not, so a revocation at the source is honoured on the
next request). The key holds everything the ranking depends on:

- the tenant and the caller's ACL fingerprint (every claim but the ``sub``): two callers
  share an entry only when the store would resolve them to the same rights;
- the tenant's data generation (ACL epoch and index outbox head): any rights change, edit or
  trust recomputation makes every older entry unreachable; entries are never trusted by age
  alone;
- the corpus and the *whole* request, as the canonical JSON of its model (query, strategy,
  top_k, min_score, filters, query expansion, and any field added later), plus the
  candidate depth;
- the policy version of the ALLOW and the ranker version (which names its configuration).

Both the request and the claims enter the key as dumps of their models, minus a named
exclusion list, never as a hand-picked list of fields: a field added to ``SearchRequest`` or
``Principal`` is part of the key without anyone remembering to add it, so a cached answer is
always the answer the store would give now (a Hypothesis test compares a cached gateway with
an uncached one over random request sequences).

The cache is in-process, bounded by entry count, least-recently-used first out.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from govrag.types import HiddenMarker, Principal, SearchHit, SearchRequest

#: ``(principal, request) -> True`` for requests that must not use the cache (write-back
#: overlay eligible requests: their results depend on the session's memory).
BypassHook = Callable[[Principal, SearchRequest], bool]


#: Claims the store's access resolution never reads: two subs with the same email, tenant,
#: clearance, roles and entitlements are resolved to the same rights, so they share entries
#: (and so do two tokens of one caller that expire at different times).
_NOT_ACCESS_CLAIMS = frozenset({"sub", "expires_at"})


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def acl_fingerprint(principal: Principal) -> str:
    """A digest of every claim but the ``sub`` (lists as sets: their order grants nothing)."""
    claims = principal.model_dump(mode="json", exclude=set(_NOT_ACCESS_CLAIMS))
    claims = {
        k: sorted({_canonical(x) for x in v}) if isinstance(v, list) else v
        for k, v in claims.items()
    }
    return hashlib.sha256(_canonical(claims).encode()).hexdigest()


def request_fingerprint(request: SearchRequest, corpus: str) -> str:
    """The canonical JSON of the whole request as the gateway runs it on ``corpus`` (the
    corpus list is the one corpus the PEP decided on, whatever the caller sent)."""
    pinned = request.model_copy(update={"corpora": (corpus,)})
    return _canonical(pinned.model_dump(mode="json"))


@dataclass(frozen=True)
class CacheKey:
    tenant: str
    fingerprint: str
    generation: tuple[int, int]
    corpus: str
    request: str
    depth: int
    policy_version: str
    ranker_version: str

    @classmethod
    def build(
        cls,
        principal: Principal,
        generation: tuple[int, int],
        corpus: str,
        request: SearchRequest,
        *,
        depth: int,
        policy_version: str,
        ranker_version: str,
    ) -> CacheKey:
        return cls(
            tenant=principal.tenant,
            fingerprint=acl_fingerprint(principal),
            generation=generation,
            corpus=corpus,
            request=request_fingerprint(request, corpus),
            depth=depth,
            policy_version=policy_version,
            ranker_version=ranker_version,
        )


@dataclass(frozen=True)
class Ranked:
    """A cached ranking: the reranked hits and what the store reported with them."""

    hits: tuple[SearchHit, ...]
    hidden: HiddenMarker
    truncated: bool


class ResultCache:
    """A thread-safe LRU of :class:`Ranked` by :class:`CacheKey`."""

    def __init__(self, max_entries: int = 1024) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries {max_entries!r} must be 0 (off) or more")
        self.max_entries = max_entries
        self._entries: OrderedDict[CacheKey, Ranked] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> Ranked | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: CacheKey, value: Ranked) -> None:
        if self.max_entries == 0:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
