"""Search: hit metadata, filters and min_score before top_k, BM25 against brute force."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wb_helpers import AGENT, SCOPE, T0, brute_bm25, candidate, make_store, ranked

from govrag.errors import InputError
from govrag.writeback import (
    META_KEYS,
    AdmissionGate,
    ControlledWriteBackStore,
    RetrievalScope,
)

G = AdmissionGate
WORDS = ["wire", "limit", "fraud", "refund", "card", "loan", "audit", "budget", "daily", "euro",
         "branch", "payroll", "ledger", "swift", "iban", "mortgage"]  # fmt: skip


def test_hit_metadata_keys_and_values() -> None:
    store = make_store()
    first = store.admit(candidate(content="wire limit is 10k"))
    cest = timezone(timedelta(hours=2))
    second = store.admit(
        candidate(
            source_turn_id="turn-7",
            gate=G.TOOL_VERIFIED,
            content="wire limit is 20k",
            confidence=0.25,
            expires_at=datetime(2026, 12, 1, 12, 0, tzinfo=cest),
            supersedes=first.id,
        )
    )
    (hit,) = store.search(SCOPE, "wire limit")
    assert hit.id == second.id and hit.content == "wire limit is 20k"
    assert tuple(hit.metadata) == META_KEYS
    assert dict(hit.metadata) == {
        "writeback.gate": "TOOL_VERIFIED",
        "writeback.sourceTurnId": "turn-7",
        "writeback.agentId": AGENT,
        "writeback.confidence": "0.25",
        "writeback.expiresAt": "2026-12-01T10:00:00Z",  # the instant, in UTC
        "writeback.supersedes": first.id,
    }
    with pytest.raises(TypeError):
        hit.metadata["writeback.gate"] = "USER_CONFIRMED"  # type: ignore[index]


@pytest.mark.parametrize(
    ("confidence", "text"),
    [(0, "0.0"), (1, "1.0"), (0.9, "0.9"), (-0.0, "0.0"), (1e-05, "0.00001"), (0.1 + 0.2,
     "0.30000000000000004")],
)  # fmt: skip
def test_confidence_text(confidence: float, text: str) -> None:
    store = make_store()
    store.admit(candidate(confidence=confidence))
    assert store.search(SCOPE, "wire")[0].metadata["writeback.confidence"] == text
    assert float(text) == confidence


def test_expiry_text_keeps_microseconds_and_no_supersedes_is_none() -> None:
    store = make_store()
    store.admit(candidate(expires_at=T0 + timedelta(days=1, microseconds=5)))
    meta = store.search(SCOPE, "wire")[0].metadata
    assert meta["writeback.expiresAt"] == "2026-06-02T12:00:00.000005Z"
    assert meta["writeback.supersedes"] == "none"


def _corpus(store: ControlledWriteBackStore, n: int, seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    docs = {}
    for i in range(n):
        content = " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))
        gate = rng.choice([G.USER_CONFIRMED, G.TOOL_VERIFIED, G.EVAL_GATED])
        result = store.admit(candidate(source_turn_id=f"turn-{i}", content=content, gate=gate))
        assert result.id is not None
        docs[result.id] = content
    return docs


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 10**6),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=5),
    top_k=st.integers(1, 70),
)
def test_ranking_equals_brute_force_bm25(n: int, seed: int, query: list[str], top_k: int) -> None:
    store = make_store()
    docs = _corpus(store, n, seed)
    expected = brute_bm25(docs, " ".join(query))
    hits = store.search(SCOPE, " ".join(query), top_k=top_k)
    assert [h.id for h in hits] == ranked(expected)[:top_k]
    for h in hits:
        assert h.score == pytest.approx(expected[h.id], rel=1e-12)
        assert h.score > 0


def test_bm25_sanity() -> None:
    store = make_store()
    ids: dict[str, str] = {}
    for name, text in {
        "rare": "mortgage",
        "common1": "wire wire",
        "common2": "wire card",
        "common3": "wire loan",
        "long": "wire " + " ".join(["ledger"] * 30),
    }.items():
        entry_id = store.admit(candidate(source_turn_id=name, content=text)).id
        assert entry_id is not None
        ids[name] = entry_id
    by_id = {h.id: h.score for h in store.search(SCOPE, "wire mortgage", top_k=10)}
    # A rare term outweighs a common one; higher tf scores higher; a long entry is damped.
    assert by_id[ids["rare"]] > by_id[ids["common1"]] > by_id[ids["common2"]] > by_id[ids["long"]]
    # Repeating a query term does not change scores (distinct terms, as the corpus index).
    assert store.search(SCOPE, "wire wire mortgage") == store.search(SCOPE, "wire mortgage")
    # Ties are broken by id.
    tied = [h for h in store.search(SCOPE, "wire") if h.score == by_id[ids["common2"]]]
    assert len(tied) == 2 and [h.id for h in tied] == sorted(h.id for h in tied)


def test_filters_and_min_score_apply_before_top_k() -> None:
    store = make_store()
    docs = _corpus(store, 80, seed=3)
    query = "wire limit"
    everything = store.search(SCOPE, query, top_k=1000)
    assert len(everything) > 10
    gates = {h.id: h.metadata["writeback.gate"] for h in everything}
    # A filter narrows first, then top_k takes the best of what is left.
    for gate in ("TOOL_VERIFIED", "EVAL_GATED"):
        wanted = [h for h in everything if gates[h.id] == gate]
        got = store.search(SCOPE, query, top_k=5, filters={"writeback.gate": gate})
        assert [h.id for h in got] == [h.id for h in wanted[:5]]
        assert len(got) == min(5, len(wanted))
    # min_score the same way: the top_k above the threshold, not a threshold over the top_k.
    threshold = everything[len(everything) // 2].score
    got = store.search(SCOPE, query, top_k=3, min_score=threshold)
    assert [h.id for h in got] == [h.id for h in everything if h.score >= threshold][:3]
    low = [h for h in everything if h.score < everything[0].score]
    assert low, "the corpus should have more than one score level"
    both = store.search(SCOPE, query, top_k=4, min_score=low[0].score,
                        filters={"writeback.gate": "USER_CONFIRMED"})  # fmt: skip
    assert [h.id for h in both] == [
        h.id for h in everything
        if h.score >= low[0].score and gates[h.id] == "USER_CONFIRMED"
    ][:4]  # fmt: skip
    # Several filters must all hold; an unknown key or value matches nothing.
    one = everything[0]
    assert [h.id for h in store.search(SCOPE, query, filters=dict(one.metadata))] == [one.id]
    assert store.search(SCOPE, query, filters={"writeback.gate": "RAW_MODEL_OUTPUT"}) == []
    assert store.search(SCOPE, query, filters={"tenant": "acme"}) == []
    assert store.search(SCOPE, query, min_score=1e9) == []
    # The threshold is inclusive: a hit scoring exactly min_score is kept.
    top = everything[0]
    assert [h.id for h in store.search(SCOPE, query, top_k=1, min_score=top.score)] == [top.id]
    assert len(docs) == 80


def test_blank_queries_and_zero_top_k_find_nothing() -> None:
    store = make_store()
    store.admit(candidate())
    for query in ("", "   ", "the of and", "!!!"):
        assert store.search(SCOPE, query) == []
    assert store.search(SCOPE, "wire", top_k=0) == []
    assert store.search(SCOPE, "wire", min_score=-5) != []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"query": None}, "query"),
        ({"query": b"wire"}, "query"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"min_score": float("nan")}, "min_score"),
        ({"min_score": float("inf")}, "min_score"),
        ({"min_score": "0.5"}, "min_score"),
        ({"min_score": 10**400}, "min_score"),
        ({"filters": ["writeback.gate"]}, "filters"),
        ({"filters": {"writeback.confidence": 0.9}}, "filters"),
    ],
)
def test_malformed_search_arguments_are_loud(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"scope": SCOPE, "query": "wire", **kwargs}
    with pytest.raises(InputError, match=field):
        make_store().search(**args)


def test_a_disabled_store_finds_nothing_whatever_is_asked() -> None:
    store = ControlledWriteBackStore.disabled()
    assert store.search(SCOPE, "wire") == []
    assert store.search(RetrievalScope(None, None), None, top_k=-1) == []  # type: ignore[arg-type]
