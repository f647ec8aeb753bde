"""Packing to a token budget and the deterministic reranker."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.gateway import DeterministicReranker, WordCounter
from govrag.gateway.pack import fit_to_budget
from govrag.types import SearchHit


def hit(n: int, text: str, score: float, doc: str | None = None, trust: float = 0.5) -> SearchHit:
    return SearchHit(doc_id=doc or f"d{n}", chunk_id=f"sp:{doc or f'd{n}'}#{n}", corpus="c",
                     source_system="sp", score=score, text=text, trust_score=trust)  # fmt: skip


VOCAB = ["wire", "limit", "EUR", "50,000", "approval", "internationalisation", "!", "über"]
WORDS = st.lists(st.sampled_from(VOCAB), max_size=40).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(WORDS, max_size=30), budget=st.integers(0, 300))
def test_the_budget_is_never_exceeded_and_ids_scores_order_survive(
    texts: list[str], budget: int
) -> None:
    counter = WordCounter()
    hits = [hit(i, t, 1.0 / (i + 1)) for i, t in enumerate(texts)]
    kept, total, dropped = fit_to_budget(hits, budget, counter)
    assert total == sum(c.token_count for c in kept) <= budget
    assert len(kept) + dropped == len(hits)
    by_id = {h.chunk_id: h for h in hits}
    assert all((by_id[c.chunk_id].score, by_id[c.chunk_id].text) == (c.score, c.text)
               for c in kept)  # fmt: skip
    positions = [int(c.chunk_id.rsplit("#", 1)[1]) for c in kept]
    assert positions == sorted(positions)  # rank order kept
    # Skipped only when it did not fit: each dropped chunk exceeded what was left then.
    kept_ids, used = {c.chunk_id for c in kept}, 0
    for h in hits:
        tokens = counter.count(h.text)
        if h.chunk_id in kept_ids:
            used += tokens
        else:
            assert used + tokens > budget
    assert fit_to_budget(hits, budget, counter) == (kept, total, dropped)  # deterministic


def test_the_word_counter() -> None:
    counter = WordCounter()
    assert counter.count("") == 0
    assert counter.count("EUR 50,000 per day.") == 7  # EUR 50 , 000 per day .
    assert counter.count("internationalisation") == 4  # 20 chars, 6 per token


def test_rerank_is_deterministic_and_only_thins() -> None:
    hits = [hit(i, f"text number {i} about wire limits {i * 7}", 1.0 - i / 100) for i in range(30)]
    r = DeterministicReranker()
    first = r.rerank("wire", hits, 10)
    shuffled = hits[:]
    random.Random(3).shuffle(shuffled)
    assert r.rerank("wire", shuffled, 10) == first
    assert {h.chunk_id for h in first} <= {h.chunk_id for h in hits}
    assert [h.chunk_id for h in first] == [h.chunk_id for h in hits[:10]]


def test_near_duplicates_and_per_document_cap() -> None:
    same = "EU corporate wire limit is EUR 50,000 per day"
    hits = [
        hit(1, same, 0.9, doc="a"),
        hit(2, same + ".", 0.8, doc="b"),  # the same terms: a near-duplicate
        hit(3, "tier two approval above EUR 25,000", 0.7, doc="a"),
        hit(4, "weekend cut-off times for wires", 0.6, doc="a"),  # a third chunk of doc a
        hit(5, "sanctions screening for wires", 0.5, doc="c"),
    ]
    kept = DeterministicReranker(max_per_document=2).rerank("wire limit", hits, 10)
    assert [h.chunk_id for h in kept] == ["sp:a#1", "sp:a#3", "sp:c#5"]
    loose = DeterministicReranker(duplicate_jaccard=1.0, max_per_document=5)
    assert len(loose.rerank("wire", hits, 10)) == 4  # exact duplicates only: "." is no term


def test_trust_breaks_near_ties() -> None:
    hits = [hit(1, "wire limits", 0.50, trust=0.5), hit(2, "limits for wires", 0.49, trust=1.0)]
    assert DeterministicReranker().rerank("w", hits, 2)[0].chunk_id == "sp:d2#2"
    assert DeterministicReranker(trust_weight=0.0).rerank("w", hits, 2)[0].chunk_id == "sp:d1#1"
