"""The Curation Pass and the access counter, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.settings import CurationSettings
from govrag.store.curation import trust_score
from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import doc, ident, load, principal

CFG = CurationSettings()


def trust(store: KnowledgeStore, doc_id: str) -> float:
    req = SearchRequest(query="wire", strategy=Strategy.KEYWORD, top_k=10)
    hits = store.search(principal("ana@x.example"), req).results
    return next(h.trust_score for h in hits if h.doc_id == doc_id)


@pytest.fixture
def bank(store: KnowledgeStore) -> KnowledgeStore:
    from govrag.harvest.records import DocumentRecord

    load(store, [ident("ana@x.example", "A"), doc("used", "wire policy used", ["A"]),
                 doc("unused", "wire policy unused", ["A"])])  # fmt: skip
    # Both documents as authoritative sources (tier 1) last changed a year ago.
    old = datetime.now(UTC) - timedelta(days=365)
    load(store, [DocumentRecord.model_validate(
        {**doc(d, f"wire policy {d}", ["A"]).model_dump(), "authority_tier": 1, "updated_at": old})
        for d in ("used", "unused")])  # fmt: skip
    return store


def test_demand_keeps_weight_and_the_unused_sink_toward_neutral(bank: KnowledgeStore) -> None:
    for _ in range(5):
        bank.record_access("t1", [("sp", "used")], kind="answer")
    # Raw retrieval is not access.
    for _ in range(20):
        bank.search(principal("ana@x.example"), SearchRequest(query="wire unused", top_k=5))
    assert bank.access_counts("t1") == {"sp:used": 5}
    now = datetime.now(UTC)
    report = bank.curate("t1", CFG, now=now)
    assert (report.documents, report.moved) == (2, 2)
    used, unused = trust(bank, "used"), trust(bank, "unused")
    assert used > 0.5 + 0.9 * (0.3 + 0.2 * (1 - 2.718281828**-0.5)) > unused > 0.5
    # Idempotent: the same inputs and instant give the same scores; nothing moves.
    again = bank.curate("t1", CFG, now=now)
    assert again.moved == 0 and trust(bank, "used") == used
    # Later passes: the unused one keeps sinking toward neutral, monotonically.
    seen = [unused]
    for days in (30, 90, 365, 3650):
        bank.curate("t1", CFG, now=now + timedelta(days=days))
        seen.append(trust(bank, "unused"))
    assert all(a > b >= 0.5 for a, b in pairwise(seen))
    assert seen[-1] - 0.5 < 1e-3


@settings(max_examples=300, deadline=None)
@given(
    tier=st.integers(1, 5),
    hits=st.integers(0, 10_000),
    age=st.floats(0, 20_000),
    later=st.floats(0, 20_000),
)
def test_the_formula_is_bounded_and_decays_toward_neutral(
    tier: int, hits: int, age: float, later: float
) -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    changed = now - timedelta(days=age)
    last = changed if hits else None

    def at(t: datetime) -> float:
        return trust_score(CFG, authority_tier=tier, hits=hits, last_accessed=last,
                           changed=changed, now=t)  # fmt: skip

    first, second = at(now), at(now + timedelta(days=later))
    assert 0.0 <= first <= 1.0 and 0.0 <= second <= 1.0
    assert abs(second - 0.5) <= abs(first - 0.5) + 1e-12  # never further from neutral
    assert (first >= 0.5) == (second >= 0.5) or abs(second - 0.5) < 1e-12
