"""The temporal strategy and time filters, on both backends (govrag/store/temporal.py).

The world: four versions of one wire-limit policy. v3 is readable by ana alone and v4 takes
effect in the future; each names its predecessor in ``supersedes``. What a caller is shown as
current depends only on versions it may read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from govrag.harvest.ingest import Ingestor
from govrag.settings import SearchSettings
from govrag.store.protocol import KnowledgeStore
from govrag.store.temporal import Version, temporal_order
from govrag.types import SearchRequest, Strategy, TimeRange

from conftest import StoreFactory, doc, ident, load, principal

QUESTION = "wire limit policy daily limit"


def versions(*, with_v3: bool = True, v3: dict[str, Any] | None = None) -> list[Any]:
    records = [
        ident("ana@x.example", "A"),
        ident("ben@x.example", "B"),
        doc("v1", "Wire limit policy: the daily limit is EUR 10,000.", ["*"],
            updated_at="2024-01-01T00:00:00Z"),
        doc("v2", "Wire limit policy: the daily limit is EUR 25,000 per client.", ["*"],
            updated_at="2025-01-01T00:00:00Z", supersedes=["v1"]),
        doc("v4", "Wire limit policy: the daily limit will be EUR 75,000.", ["*"],
            updated_at="2026-11-01T00:00:00Z", effective_at="2999-01-01T00:00:00Z",
            supersedes=["v3"]),
        doc("other", "Card rules for travel abroad.", ["*"]),
    ]  # fmt: skip
    if with_v3:
        options: dict[str, Any] = {"updated_at": "2026-06-01T00:00:00Z", "supersedes": ["v2"]}
        options.update(v3 or {})
        acl = options.pop("acl", ["A"])
        records.append(doc("v3", "Wire limit policy: the daily limit is EUR 50,000.", acl,
                           **options))  # fmt: skip
    return records


def search(store: KnowledgeStore, email: str, **kw: Any) -> list[tuple[str, float]]:
    clearance = kw.pop("clearance", "confidential")
    request = SearchRequest(query=kw.pop("query", QUESTION), **kw)
    found = store.search(principal(email, clearance=clearance), request)
    return [(h.doc_id, h.score) for h in found.results]


def ranked(store: KnowledgeStore, email: str, **kw: Any) -> list[str]:
    """The versions found, best first (the hash embedder's vector leg also finds ``other``,
    which shares no word with the question)."""
    query = kw.get("query", QUESTION)
    return [d for d, _ in search(store, email, **kw) if d != "other" or query != QUESTION]


AS_OF = datetime(2026, 7, 1, tzinfo=UTC)


@pytest.fixture
def world(store: KnowledgeStore) -> KnowledgeStore:
    load(store, versions())
    return store


def test_temporal_prefers_the_version_in_effect(world: KnowledgeStore) -> None:
    got = ranked(world, "ana@x.example", strategy=Strategy.TEMPORAL)
    # v3 is current for ana; v4 is not in effect yet, v2 and v1 are superseded.
    assert got[0] == "v3"
    assert set(got) == {"v1", "v2", "v3", "v4"}  # preferred, never dropped
    hybrid = ranked(world, "ana@x.example", strategy=Strategy.HYBRID)
    assert set(hybrid) == set(got)


def test_a_replacement_the_caller_cannot_read_changes_nothing(open_store: StoreFactory) -> None:
    with_v3 = open_store("with")
    load(with_v3, versions())
    without = open_store("without")
    load(without, versions(with_v3=False))
    # ben cannot read v3: v2 is current for him, scores and order as if v3 did not exist.
    seen = search(with_v3, "ben@x.example", strategy=Strategy.TEMPORAL, as_of=AS_OF)
    assert seen == search(without, "ben@x.example", strategy=Strategy.TEMPORAL, as_of=AS_OF)
    assert seen[0][0] == "v2"
    # Without as_of, too (ages count from the newest candidate in effect, not the clock).
    seen = search(with_v3, "ben@x.example", strategy=Strategy.TEMPORAL)
    assert seen == search(without, "ben@x.example", strategy=Strategy.TEMPORAL)


@pytest.mark.parametrize(
    ("v3", "why"),
    [
        ({"classification": "restricted", "acl": ["*"]}, "above the caller's clearance"),
        ({"corpus": "elsewhere", "acl": ["*"]}, "in a corpus not searched"),
        ({"source": "other", "acl": ["*"]}, "of another source system"),
        ({"effective_at": "2999-06-01T00:00:00Z", "acl": ["*"]}, "not in effect yet"),
    ],
)
def test_only_a_replacement_in_scope_and_in_effect_counts(
    store: KnowledgeStore, v3: dict[str, Any], why: str
) -> None:
    load(store, versions(v3=v3))
    scores = dict(search(store, "ben@x.example", strategy=Strategy.TEMPORAL, corpora=("main",)))
    # Not superseded: v2 scores like the best of the rest, not a tenth of it.
    best = max(s for d, s in scores.items() if d != "v2")
    assert scores["v2"] > 0.5 * best, why
    order = list(scores)
    assert order.index("v1") > order.index("v2")  # v1 is still superseded by v2


def test_as_of_keeps_what_was_in_effect(world: KnowledgeStore) -> None:
    for strategy in Strategy:
        if strategy is Strategy.SEMANTIC:
            continue  # the hash embedder ranks by shared words too: covered by hybrid
        got = set(ranked(world, "ana@x.example", strategy=strategy,
                         as_of=datetime(2025, 6, 1, tzinfo=UTC)))  # fmt: skip
        assert got == {"v1", "v2"}, strategy
    got = ranked(world, "ana@x.example", strategy=Strategy.TEMPORAL, as_of=AS_OF)
    assert got == ["v3", "v2", "v1"]  # v4 is not in effect on 2026-07-01
    # An undated document is in effect at every instant.
    assert ranked(world, "ana@x.example", query="card rules travel", as_of=AS_OF)[0] == "other"


def test_time_range_by_field(world: KnowledgeStore) -> None:
    window = TimeRange(field="updated_at", start=datetime(2026, 10, 1, tzinfo=UTC))
    assert ranked(world, "ana@x.example", time_range=window) == ["v4"]
    window = TimeRange(field="effective_at", start=datetime(2026, 10, 1, tzinfo=UTC))
    assert ranked(world, "ana@x.example", time_range=window) == ["v4"]
    window = TimeRange(field="effective_at", end=datetime(2026, 12, 31, tzinfo=UTC))
    assert set(ranked(world, "ana@x.example", time_range=window)) == {"v1", "v2", "v3"}
    # An undated document is in no range.
    window = TimeRange(start=datetime(1900, 1, 1, tzinfo=UTC))
    assert "other" not in ranked(world, "ana@x.example", query="card rules", time_range=window)


def test_times_compare_as_instants(store: KnowledgeStore) -> None:
    load(store, [
        ident("ana@x.example", "A"),
        doc("east", "wire limit east", ["*"], updated_at="2026-01-01T01:00:00+02:00"),
        doc("west", "wire limit west", ["*"], updated_at="2025-12-31T23:30:00-01:00"),
    ])  # fmt: skip
    # east is 2025-12-31T23:00Z, west 2026-01-01T00:30Z: as written, the strings sort the
    # other way round.
    window = TimeRange(field="updated_at", end=datetime(2025, 12, 31, 23, 30, tzinfo=UTC))
    assert ranked(store, "ana@x.example", query="wire limit", time_range=window) == ["east"]


def test_time_filters_raise_no_marker(world: KnowledgeStore) -> None:
    who = principal("ben@x.example", clearance="confidential")
    plain = world.search(who, SearchRequest(query=QUESTION, strategy=Strategy.TEMPORAL))
    assert plain.hidden.present  # v3 is withheld from ben and relevant
    for narrowed in ({"as_of": AS_OF}, {"time_range": TimeRange(start=AS_OF)}):
        found = world.search(who, SearchRequest(query=QUESTION, **narrowed))  # type: ignore[arg-type]
        assert not found.hidden.present


def test_deleting_the_replacement_restores_the_predecessor(world: KnowledgeStore) -> None:
    assert ranked(world, "ana@x.example", strategy=Strategy.TEMPORAL)[0] == "v3"
    assert world.delete_document("t1", "sp", "v3")
    assert ranked(world, "ana@x.example", strategy=Strategy.TEMPORAL)[0] == "v2"


def test_a_resent_version_drops_its_old_supersedes(world: KnowledgeStore) -> None:
    load(world, [doc("v3", "Wire limit policy: the daily limit is EUR 50,000.", ["A"],
                     updated_at="2026-06-01T00:00:00Z")])  # fmt: skip
    got = ranked(world, "ana@x.example", strategy=Strategy.TEMPORAL, as_of=AS_OF)
    # v2 is no longer replaced; v3 is newer, so it still leads, and v2 beats superseded v1.
    assert got.index("v2") < got.index("v1")
    scores = dict(search(world, "ana@x.example", strategy=Strategy.TEMPORAL, as_of=AS_OF))
    assert scores["v2"] > 0.5 * scores["v3"]


def test_top_k_past_the_readable_set(world: KnowledgeStore) -> None:
    got = ranked(world, "ben@x.example", strategy=Strategy.TEMPORAL, top_k=1000)
    assert set(got) == {"v1", "v2", "v4"}


#: The record hash faab155 (before documents had times) stored for the test's record.
PLAIN_HASH_BEFORE_TIMES = "230a7e6388d40ce52f7fa0952e2506654c0e520a1f5a72c65d04d1e4efc1a6ab"


def test_records_without_times_hash_as_before(store: KnowledgeStore) -> None:
    """A feed written before documents had times is still ``unchanged`` when re-sent: its
    records hash as the release before stored them (the new fields, unset, are left out)."""
    record = doc("plain", "a document without times", ["*"], metadata={"k": 1})
    assert "effective_at" in record.model_dump(mode="json")
    ingestor = Ingestor(store, "t1")
    ingestor.add("r", record)
    ingestor.flush()
    stored = store.stored_hashes("t1", [("sp", "plain")])[("sp", "plain")]
    assert stored.record_hash == PLAIN_HASH_BEFORE_TIMES


def test_a_superseded_version_stays_right_below_its_replacement(world: KnowledgeStore) -> None:
    """A question about the old rule still finds it: directly after the version replacing
    it, not pushed out of the list."""
    got = ranked(world, "ana@x.example", strategy=Strategy.TEMPORAL, as_of=AS_OF,
                 query="daily limit EUR 25,000 per client")  # fmt: skip
    assert got[:2] == ["v3", "v2"]
    assert got.index("v1") > got.index("v2")


def test_the_order_of_versions() -> None:
    """The ordering alone (temporal.py): ranks plus recency; a version not yet in effect and
    one whose replacement the words missed are demoted; a superseded one found with its
    replacement goes just below it, down a chain."""
    settings = SearchSettings()
    at = datetime(2026, 7, 1, tzinfo=UTC)

    def version(doc: int, year: int | None, by: set[int] | None = None) -> Version:
        when = None if year is None else f"{year}-01-01T00:00:00.000000Z"
        return Version(doc=doc, effective_at=when, superseded_by=frozenset(by or ()))

    v = {
        1: version(10, 2024, {20}),
        2: version(20, 2025, {30}),
        3: version(30, 2026),
        4: version(40, 2027),  # not yet in effect
        5: version(50, None, {99}),  # 99: not among the candidates
        6: version(60, 2026),
    }
    ranked = [(1, 9.0), (5, 8.0), (4, 7.0), (2, 6.0), (6, 5.0), (3, 4.0)]
    order = [cid for cid, _ in temporal_order(ranked, v, settings, at)]
    assert order.index(3) < order.index(2) < order.index(1)  # the chain, newest first
    assert set(order[-2:]) == {4, 5}  # the demoted ones last
    assert order.index(6) < order.index(3)  # unrelated: its own rank and recency
    # Recency (when turned on) breaks near-ties only: it never lifts a tenth place over a
    # first.
    settings = SearchSettings(temporal_recency_boost=0.02)
    far = [(cid, 1.0 - (cid - 100) / 61) for cid in range(100, 110)]  # fused-score gaps
    old = {cid: Version(doc=cid, effective_at=f"2016-01-0{cid - 99}T00:00:00.000000Z")
           for cid in range(100, 109)}  # fmt: skip
    fresh = {109: Version(doc=109, effective_at="2026-06-01T00:00:00.000000Z")}
    got = [cid for cid, _ in temporal_order(far, old | fresh, settings, at)]
    assert got[0] == 100
    assert got.index(109) < 9  # but it moves up among near-ties
