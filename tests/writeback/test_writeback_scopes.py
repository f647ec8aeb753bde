"""Scope isolation, the caps (256 scopes x 1,024 entries), purge before cap, and the lock."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from wb_helpers import SCOPE, T0, Clock, candidate, make_store

from govrag.store.analyzer import default_analyzer
from govrag.writeback import (
    MAX_ENTRIES_PER_SCOPE,
    MAX_SCOPES,
    AdmissionReason,
    RetrievalScope,
)

R = AdmissionReason
WORDS = ["wire", "limit", "fraud", "refund", "card", "loan", "audit", "budget"]
#: Same tenant other session, other tenant same session id, and a tenant/session swap.
SCOPES = [
    RetrievalScope("acme", "s1"),
    RetrievalScope("acme", "s2"),
    RetrievalScope("globex", "s1"),
    RetrievalScope("s1", "acme"),
]


@settings(max_examples=150, deadline=None)
@given(
    writes=st.lists(
        st.tuples(st.integers(0, len(SCOPES) - 1), st.lists(st.sampled_from(WORDS), min_size=1,
                                                             max_size=5)),
        max_size=25,
    ),
    queries=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), min_size=1,
                     max_size=6),
)  # fmt: skip
def test_a_scope_only_ever_sees_its_own_entries(
    writes: list[tuple[int, list[str]]], queries: list[list[str]]
) -> None:
    store = make_store()
    analyze = default_analyzer().analyze
    owner: dict[str, RetrievalScope] = {}
    terms: dict[str, set[str]] = {}
    for n, (scope_index, words) in enumerate(writes):
        scope = SCOPES[scope_index]
        result = store.admit(candidate(scope=scope, source_turn_id=f"turn-{n}",
                                       content=" ".join(words)))  # fmt: skip
        assert result.admitted and result.id is not None
        owner[result.id] = scope
        terms[result.id] = set(analyze(" ".join(words)))
    for scope in SCOPES:
        mine = {i for i, s in owner.items() if s == scope}
        for words in queries:
            query = " ".join(words)
            found = {h.id for h in store.search(scope, query, top_k=1000)}
            assert found <= mine
            # ... and every matching entry of the scope is found: isolation is not loss.
            assert found == {i for i in mine if terms[i] & set(analyze(query))}


def test_same_content_in_two_scopes_are_two_entries() -> None:
    store = make_store()
    a = store.admit(candidate(scope=SCOPES[0]))
    b = store.admit(candidate(scope=SCOPES[1]))
    assert a.id != b.id
    assert [h.id for h in store.search(SCOPES[0], "wire")] == [a.id]
    assert [h.id for h in store.search(SCOPES[1], "wire")] == [b.id]
    assert store.search(SCOPES[2], "wire") == []


def test_supersedes_cannot_reach_into_another_scope() -> None:
    store = make_store()
    other = store.admit(candidate(scope=SCOPES[1]))
    result = store.admit(candidate(scope=SCOPES[0], supersedes=other.id))
    assert result.reason is R.SUPERSEDES_NOT_IN_SCOPE
    assert [h.id for h in store.search(SCOPES[1], "wire")] == [other.id]


def test_unusable_search_scopes_find_nothing() -> None:
    store = make_store()
    store.admit(candidate())
    for scope in (
        RetrievalScope("acme", ""), RetrievalScope("acme", None), RetrievalScope(["acme"], "s"),
        None, ("acme", "session-1"), RetrievalScope("acme ", "session-1"),
    ):  # fmt: skip
        assert store.search(scope, "wire") == []  # type: ignore[arg-type]
    assert len(store.search(SCOPE, "wire")) == 1


# -- caps ------------------------------------------------------------------------------------------
def test_scope_cap_and_purge_before_it() -> None:
    clock = Clock()
    store = make_store(clock)
    # Scope 0 expires first; the others live for a day.
    for n in range(MAX_SCOPES):
        ttl = timedelta(minutes=1) if n == 0 else timedelta(days=1)
        scope = RetrievalScope("acme", f"s{n}")
        assert store.admit(candidate(scope=scope, expires_at=T0 + ttl)).admitted
    extra = candidate(scope=RetrievalScope("acme", "one-too-many"))
    assert store.admit(extra).reason is R.SCOPE_CAP
    # No silent eviction: every scope still answers.
    assert all(store.search(RetrievalScope("acme", f"s{n}"), "wire") for n in range(MAX_SCOPES))
    # Live scopes can still grow.
    assert store.admit(candidate(scope=RetrievalScope("acme", "s7"), content="more")).admitted
    # Once scope 0 expires, its slot is free (purged before the cap is judged).
    clock.advance(minutes=1)
    assert store.admit(extra).admitted
    assert store.admit(candidate(scope=RetrievalScope("acme", "yet-another"))).reason is (
        R.SCOPE_CAP
    )
    assert store.search(RetrievalScope("acme", "s0"), "wire") == []


def test_entry_cap_and_purge_before_it() -> None:
    clock = Clock()
    store = make_store(clock)
    ids = []
    for n in range(MAX_ENTRIES_PER_SCOPE):
        ttl = timedelta(minutes=1) if n < 3 else timedelta(days=1)
        result = store.admit(candidate(source_turn_id=f"t{n}", content=f"wire note {n}",
                                       expires_at=T0 + ttl))  # fmt: skip
        assert result.admitted, n
        ids.append(result.id)
    extra = candidate(source_turn_id="extra", content="wire note extra")
    assert store.admit(extra).reason is R.ENTRY_CAP
    # Nothing was evicted to make room.
    hits = store.search(SCOPE, "wire note", top_k=5000)
    assert len(hits) == MAX_ENTRIES_PER_SCOPE and {h.id for h in hits} == set(ids)
    # At the cap, a re-admission and a supersession still fit (the scope does not grow) ...
    again = candidate(source_turn_id="t10", content="wire note 10")
    assert store.admit(again).admitted
    replacement = candidate(source_turn_id="t11b", content="wire note 11 v2", supersedes=ids[11])
    assert store.admit(replacement).admitted
    assert len(store.search(SCOPE, "wire note", top_k=5000)) == MAX_ENTRIES_PER_SCOPE
    assert store.admit(extra).reason is R.ENTRY_CAP
    # ... and expired entries free room before the cap is judged.
    clock.advance(minutes=1, microseconds=1)
    for n in range(3):
        more = candidate(source_turn_id=f"late-{n}", content=f"wire note late {n}")
        assert store.admit(more).admitted
    assert store.admit(extra).reason is R.ENTRY_CAP
    # Other scopes are not limited by this one's cap.
    assert store.admit(candidate(scope=RetrievalScope("acme", "other"))).admitted


def _yielding_audit(tenant: str, session: str, payload: dict[str, Any]) -> None:
    # The audit runs between the cap check and indexing: sleeping there hands the GIL to
    # other writers, so without the lock they would all pass the same check.
    time.sleep(0.0001)


def test_concurrent_admissions_never_exceed_the_entry_cap() -> None:
    store = make_store(audit=_yielding_audit)
    results: list[AdmissionReason] = []
    lock = threading.Lock()

    def writer(worker: int) -> None:
        for n in range(150):
            r = store.admit(
                candidate(source_turn_id=f"w{worker}-{n}", content=f"wire {worker} {n}")
            )
            with lock:
                results.append(r.reason)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(R.ADMITTED) == MAX_ENTRIES_PER_SCOPE
    assert results.count(R.ENTRY_CAP) == 8 * 150 - MAX_ENTRIES_PER_SCOPE
    assert len(store.search(SCOPE, "wire", top_k=5000)) == MAX_ENTRIES_PER_SCOPE


def test_concurrent_supersessions_replace_an_entry_once() -> None:
    store = make_store(audit=_yielding_audit)
    target = store.admit(candidate()).id
    reasons: list[AdmissionReason] = []

    def writer(n: int) -> None:
        reasons.append(store.admit(candidate(source_turn_id=f"r{n}", supersedes=target)).reason)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reasons.count(R.ADMITTED) == 1
    assert reasons.count(R.SUPERSEDES_NOT_IN_SCOPE) == 7
    assert len(store.search(SCOPE, "wire", top_k=100)) == 1
