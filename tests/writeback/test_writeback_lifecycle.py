"""Expiry and supersession against a reference model, under a clock the test controls.

A Hypothesis state machine admits, supersedes, advances the clock and searches; after every
step each search must equal a brute-force BM25 over the model's live entries of that scope.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from wb_helpers import (
    AGENT,
    SCOPE,
    T0,
    Clock,
    brute_bm25,
    candidate,
    expected_id,
    make_store,
    ranked,
)

from govrag.writeback import AdmissionReason, ControlledWriteBackStore, RetrievalScope

R = AdmissionReason
WORDS = ["wire", "limit", "fraud", "refund", "card", "loan", "audit", "budget", "daily", "euro"]
SCOPES = [
    RetrievalScope("acme", "s1"),
    RetrievalScope("acme", "s2"),
    RetrievalScope("globex", "s1"),
]


class Lifecycle(RuleBasedStateMachine):
    """The model: per scope, live id -> (content, expires_at); plus ids that are gone."""

    @initialize()
    def start(self) -> None:
        self.clock = Clock()
        self.store: ControlledWriteBackStore = make_store(self.clock)
        self.live: dict[RetrievalScope, dict[str, tuple[str, datetime]]] = {s: {} for s in SCOPES}
        self.gone: list[str] = []
        self.turn = 0

    def purge(self) -> None:
        for entries in self.live.values():
            for entry_id, (_, expires_at) in list(entries.items()):
                if expires_at <= self.clock.now:
                    del entries[entry_id]
                    self.gone.append(entry_id)

    @rule(
        scope=st.sampled_from(SCOPES),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
        ttl=st.integers(1, 120),
        replaces=st.one_of(
            st.none(),
            st.tuples(st.sampled_from(["live", "gone", "other", "self"]), st.integers(0, 50)),
        ),
        reuse_turn=st.booleans(),
    )
    def admit(
        self,
        scope: RetrievalScope,
        words: list[str],
        ttl: int,
        replaces: tuple[str, int] | None,
        reuse_turn: bool,
    ) -> None:
        self.purge()
        # Reusing a turn with the same words re-admits an existing entry (same id).
        turn = f"turn-{self.turn if not reuse_turn else max(self.turn - 1, 0)}"
        self.turn += 1
        content = " ".join(words)
        own = expected_id(scope.tenant, scope.session, turn, AGENT, content)
        supersedes: str | None = None
        if replaces is not None:
            kind, k = replaces
            others = [s for s in SCOPES if s != scope and self.live[s]]
            pool = {
                "live": sorted(self.live[scope]),
                "gone": self.gone,
                "other": sorted(i for s in others for i in self.live[s]),
                "self": [own],
            }[kind]
            supersedes = pool[k % len(pool)] if pool else f"writeback:missing-{k}"
        expires_at = self.clock.now + timedelta(seconds=ttl)
        result = self.store.admit(
            candidate(scope=scope, source_turn_id=turn, content=content, expires_at=expires_at,
                      supersedes=supersedes)
        )  # fmt: skip
        entries = self.live[scope]
        ok = supersedes is None or (supersedes in entries and supersedes != own)
        assert result.reason is (R.ADMITTED if ok else R.SUPERSEDES_NOT_IN_SCOPE)
        if ok:
            assert result.id == own
            if supersedes is not None:
                del entries[supersedes]
                self.gone.append(supersedes)
            entries[own] = (content, expires_at)

    @rule(seconds=st.integers(0, 90))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds=seconds)

    @rule(
        scope=st.sampled_from(SCOPES),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        top_k=st.integers(1, 8),
    )
    def search(self, scope: RetrievalScope, words: list[str], top_k: int) -> None:
        self.purge()
        query = " ".join(words)
        docs = {i: content for i, (content, _) in self.live[scope].items()}
        expected = brute_bm25(docs, query)
        hits = self.store.search(scope, query, top_k=top_k)
        assert [h.id for h in hits] == ranked(expected)[:top_k]
        for h in hits:
            assert h.score == pytest.approx(expected[h.id], rel=1e-12)
            assert h.content == docs[h.id]
            # Nothing expired or superseded is ever observed.
            assert h.id not in self.gone or h.id in self.live[scope]


Lifecycle.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_lifecycle = Lifecycle.TestCase


def test_expiry_takes_effect_at_the_instant() -> None:
    clock = Clock()
    store = make_store(clock)
    store.admit(candidate(expires_at=T0 + timedelta(seconds=10)))
    clock.advance(seconds=9, microseconds=999_999)
    assert len(store.search(SCOPE, "wire")) == 1
    clock.advance(microseconds=1)  # expires_at <= now: gone
    assert store.search(SCOPE, "wire") == []


def test_supersession_hides_the_prior_entry_and_records_it() -> None:
    store = make_store()
    old = store.admit(candidate(content="wire limit 10,000 EUR"))
    new = store.admit(candidate(source_turn_id="turn-2", content="wire limit 20,000 EUR",
                                supersedes=old.id))  # fmt: skip
    assert new.admitted
    hits = store.search(SCOPE, "wire limit")
    assert [h.id for h in hits] == [new.id]
    assert hits[0].metadata["writeback.supersedes"] == old.id
    # The replaced entry cannot be superseded again, nor can the successor supersede itself.
    again = candidate(source_turn_id="turn-3", content="wire limit 30,000 EUR", supersedes=old.id)
    assert store.admit(again).reason is R.SUPERSEDES_NOT_IN_SCOPE
    selfish = candidate(source_turn_id="turn-2", content="wire limit 20,000 EUR", supersedes=new.id)
    assert store.admit(selfish).reason is R.SUPERSEDES_NOT_IN_SCOPE


def test_an_expired_entry_cannot_be_superseded() -> None:
    clock = Clock()
    store = make_store(clock)
    old = store.admit(candidate(expires_at=T0 + timedelta(seconds=5)))
    clock.advance(seconds=5)
    late = candidate(source_turn_id="turn-2", expires_at=T0 + timedelta(days=1), supersedes=old.id)
    assert store.admit(late).reason is R.SUPERSEDES_NOT_IN_SCOPE


def test_many_readmissions_keep_one_entry_and_expire_on_the_latest_expiry() -> None:
    clock = Clock()
    store = make_store(clock)
    for n in range(200):  # each pushes an expiry; stale ones must not expire the entry early
        store.admit(candidate(expires_at=T0 + timedelta(seconds=10 + n)))
    assert len(store.search(SCOPE, "wire")) == 1
    clock.advance(seconds=100)
    assert len(store.search(SCOPE, "wire")) == 1
    clock.advance(seconds=110)
    assert store.search(SCOPE, "wire") == []
