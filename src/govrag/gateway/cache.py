"""The result cache: ranked candidates of a request, per caller, per data generation.

What is cached is the reranked store result for one corpus (before the live rights check,
which runs on every request, cached or not, so a revocation at the source is honoured on the
next request). The key holds everything the ranking depends on:

- the tenant and the caller's ACL fingerprint (email, clearance, roles, entitlements): two
  callers share an entry only when the store would resolve them to the same rights;
- the tenant's data generation (ACL epoch and index outbox head): any rights change or edit
  makes every older entry unreachable; entries are never trusted by age alone;
- the corpus, the query and the retrieval configuration (strategy, depth, filters);
- the policy version of the ALLOW and the ranker version.

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


def acl_fingerprint(principal: Principal) -> str:
    """A digest of every claim the store's access resolution reads."""
    claims = {
        "tenant": principal.tenant,
        "email": principal.email,
        "clearance": int(principal.clearance),
        "roles": sorted(principal.roles),
        "entitlements": sorted(principal.doc_entitlements),
    }
    return hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class CacheKey:
    tenant: str
    fingerprint: str
    generation: tuple[int, int]
    corpus: str
    query: str
    config: str
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
        config = json.dumps(
            {
                "strategy": request.strategy.value,
                "top_k": request.top_k,
                "depth": depth,
                "filters": [f.model_dump(mode="json") for f in request.filters],
            },
            sort_keys=True,
        )
        return cls(
            tenant=principal.tenant,
            fingerprint=acl_fingerprint(principal),
            generation=generation,
            corpus=corpus,
            query=request.query,
            config=config,
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
