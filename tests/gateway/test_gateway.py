"""The gateway on a real store: result cache partitioning, revocation, the live rights check."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.gateway import Gateway
from govrag.gateway.cache import CacheKey, Ranked, ResultCache, acl_fingerprint
from govrag.gateway.rights import RightsTrim, StoredAclChecker
from govrag.gateway.rights_http import HttpRightsChecker
from govrag.store.protocol import KnowledgeStore
from govrag.types import HiddenMarker, Principal, SearchRequest, Strategy
from rights_server import RightsSource, serve

from conftest import doc, group, ident, load, principal

ANA, BEN, CARLA = (principal(f"{n}@x.example") for n in ("ana", "ben", "carla"))
QUERY = SearchRequest(query="wire transfer limits", strategy=Strategy.KEYWORD, top_k=5)


@pytest.fixture
def bank(store: KnowledgeStore) -> KnowledgeStore:
    load(
        store,
        [
            ident("ana@x.example", "A"),
            ident("ben@x.example", "B"),
            ident("carla@x.example", "C"),
            group("risk", ["A", "C"]),
            doc("limits", "wire transfer limits per day", ["risk"]),
            doc("limits-eu", "EU wire transfer limits for corporates", ["A"]),
            doc("faq", "wire transfer questions", ["*"]),
        ],
    )
    return store


def docs(gateway: Gateway, who: Principal) -> list[str]:
    pack = gateway.retrieve(who, "main", QUERY, policy_version="p/1")
    return [c.doc_id for c in pack.chunks]


def test_cache_partition_no_cross_principal_hits(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank)
    assert set(docs(gateway, ANA)) == {"limits", "limits-eu", "faq"}
    assert (gateway.cache.hits, gateway.cache.misses) == (0, 1)
    # Ben asks the same query: his own entry, never Ana's.
    assert docs(gateway, BEN) == ["faq"]
    assert (gateway.cache.hits, gateway.cache.misses) == (0, 2)
    # Each caller's repeat is a hit on their own entry, with their own results.
    assert set(docs(gateway, ANA)) == {"limits", "limits-eu", "faq"}
    assert docs(gateway, BEN) == ["faq"]
    assert (gateway.cache.hits, len(gateway.cache)) == (2, 2)
    pack = gateway.retrieve(BEN, "main", QUERY, policy_version="p/1")
    assert pack.cache_hit and pack.withheld.count == 0


def test_a_revocation_in_the_store_misses_the_cache(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank)
    assert "limits" in docs(gateway, CARLA)
    load(bank, [group("risk", ["A"])])  # Carla leaves risk: the ACL epoch moves
    assert docs(gateway, CARLA) == ["faq"]  # 0 stale hits
    assert gateway.cache.hits == 0


def test_an_edit_misses_the_cache(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank)
    assert "limits" in docs(gateway, ANA)
    load(bank, [doc("limits", "the daily cap on payments", ["risk"])])  # content only
    assert "limits" not in docs(gateway, ANA)
    assert gateway.cache.hits == 0


def test_the_rights_check_runs_on_cache_hits_too(bank: KnowledgeStore) -> None:
    """A ranking cached before a revocation reaches the store is still trimmed."""
    gateway = Gateway(bank)
    key_docs = docs(gateway, CARLA)
    assert "limits" in key_docs
    stale = gateway.cache
    # Revoke, then pretend the store's generation did not move (a cache that missed it).
    load(bank, [group("risk", ["A"])])
    bank.generation = lambda tenant: (0, 0)  # type: ignore[method-assign]
    gateway.cache = ResultCache()
    for key, value in list(stale._entries.items()):
        gateway.cache.put(
            CacheKey(**{**key.__dict__, "generation": (0, 0)}),  # type: ignore[arg-type]
            value,
        )
    pack = gateway.retrieve(CARLA, "main", QUERY, policy_version="p/1")
    assert pack.cache_hit
    assert [c.doc_id for c in pack.chunks] == ["faq"]
    assert pack.withheld.reasons == {"revoked": 1}


def test_the_bypass_hook_neither_reads_nor_fills_the_cache(bank: KnowledgeStore) -> None:
    seen: list[str] = []

    def overlay_eligible(who: Principal, request: SearchRequest) -> bool:
        seen.append(who.sub)
        return request.strategy == Strategy.KEYWORD

    gateway = Gateway(bank, cache_bypass=overlay_eligible)
    docs(gateway, ANA)
    docs(gateway, ANA)
    assert len(gateway.cache) == 0 and gateway.cache.hits == 0 and seen == ["ana", "ana"]
    semantic = QUERY.model_copy(update={"strategy": Strategy.SEMANTIC})
    gateway.retrieve(ANA, "main", semantic, policy_version="p/1")
    assert len(gateway.cache) == 1


def test_a_temporal_ranking_of_now_is_never_cached(bank: KnowledgeStore) -> None:
    """What is in effect "now" changes with the clock, which no cache key holds; a ranking
    as of a named instant depends on the data alone and is cached like any other."""
    gateway = Gateway(bank)
    now = QUERY.model_copy(update={"strategy": Strategy.TEMPORAL})
    for _ in range(2):
        assert not gateway.retrieve(ANA, "main", now, policy_version="p/1").cache_hit
    assert len(gateway.cache) == 0
    then = now.model_copy(update={"as_of": datetime(2026, 1, 1, tzinfo=UTC)})
    gateway.retrieve(ANA, "main", then, policy_version="p/1")
    assert gateway.retrieve(ANA, "main", then, policy_version="p/1").cache_hit


def test_the_cache_can_be_turned_off(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank, cache=ResultCache(0))
    docs(gateway, ANA)
    docs(gateway, ANA)
    assert len(gateway.cache) == 0 and gateway.cache.hits == 0


@pytest.fixture
def source() -> Iterator[tuple[RightsSource, str]]:
    s = RightsSource()
    s.grant("A", "limits", "limits-eu", "faq")
    s.grant("C", "limits", "faq")
    with serve(s) as url:
        yield s, url


def test_a_revocation_at_the_source_only_is_withheld_on_the_next_request(
    bank: KnowledgeStore, source: tuple[RightsSource, str]
) -> None:
    rights_source, url = source
    checker = HttpRightsChecker(url, bank.source_accounts, deadline_ms=2000)
    gateway = Gateway(bank, rights=RightsTrim(StoredAclChecker(bank), {"sp": checker}))
    try:
        assert set(docs(gateway, CARLA)) == {"limits", "faq"}
        rights_source.revoke("C", "limits")  # the stored ACL still grants it (stale)
        pack = gateway.retrieve(CARLA, "main", QUERY, policy_version="p/1")
        assert pack.cache_hit  # same generation: the cached ranking is used ...
        assert [c.doc_id for c in pack.chunks] == ["faq"]  # ... and trimmed live
        assert pack.withheld.model_dump() == {"count": 1, "reasons": {"revoked": 1}}
        (check,) = pack.rights_checks
        assert (check.checker, check.status, check.checked, check.withheld) == (
            "http", "ok", 2, 1)  # fmt: skip
        rights_source.mode = "5xx"
        pack = gateway.retrieve(CARLA, "main", QUERY, policy_version="p/1")
        assert pack.chunks == () and pack.withheld.reasons == {"source_unavailable": 2}
        assert pack.rights_checks[0].status == "source_unavailable"
    finally:
        checker.close()


def test_stored_checker_and_source_accounts(bank: KnowledgeStore) -> None:
    assert bank.readable_documents(CARLA, "sp", ["limits", "limits-eu", "faq", "nope"]) == {
        "limits", "faq"}  # fmt: skip
    assert bank.readable_documents(CARLA, "other", ["limits"]) == set()
    stranger = principal("zed@x.example")
    assert bank.readable_documents(stranger, "sp", ["faq"]) == set()  # "*" needs an identity
    assert bank.source_accounts("t1", "ANA@x.example", "sp") == ["A"]
    assert bank.source_accounts("t1", "ana@x.example", "other") == []
    before = bank.generation("t1")
    load(bank, [doc("faq", "wire transfer answers", ["*"])])  # an edit, same rights
    after = bank.generation("t1")
    assert after[0] == before[0] and after[1] > before[1]  # content moved, rights did not
    load(bank, [group("risk", ["A"])])
    assert bank.generation("t1")[0] > after[0]
    assert bank.generation("nobody") == (0, 0)


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = ResultCache(2)
    value = Ranked((), HiddenMarker(), False)
    keys = [
        CacheKey.build(
            ANA,
            (1, 1),
            "main",
            QUERY.model_copy(update={"query": q}),
            depth=50,
            policy_version="p/1",
            ranker_version="r",
        )
        for q in ("a", "b", "c")
    ]
    cache.put(keys[0], value)
    cache.put(keys[1], value)
    assert cache.get(keys[0]) is value  # a is now the most recent
    cache.put(keys[2], value)
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is value and len(cache) == 2


CLAIMS = st.fixed_dictionaries(
    {
        "email": st.sampled_from(["a@x.example", "b@x.example"]),
        "tenant": st.sampled_from(["t1", "t2"]),
        "clearance": st.sampled_from(["public", "internal", "restricted"]),
        "roles": st.lists(st.sampled_from(["r1", "r2"]), unique=True).map(tuple),
        "doc_entitlements": st.lists(st.sampled_from(["c:read", "d:read"]), unique=True).map(tuple),
    }
)


@settings(max_examples=300, deadline=None)
@given(a=CLAIMS, b=CLAIMS, sub_a=st.sampled_from(["u1", "u2"]), sub_b=st.sampled_from(["u1"]))
def test_two_callers_share_a_fingerprint_only_with_the_same_claims(
    a: dict[str, object], b: dict[str, object], sub_a: str, sub_b: str
) -> None:
    pa = Principal(sub=sub_a, **a)  # type: ignore[arg-type]
    pb = Principal(sub=sub_b, **b)  # type: ignore[arg-type]

    def claims(p: Principal) -> tuple[object, ...]:
        # What the store's access resolution reads; the sub is not among it.
        return (p.email, p.tenant, p.clearance, set(p.roles), set(p.doc_entitlements))

    assert (acl_fingerprint(pa) == acl_fingerprint(pb)) == (claims(pa) == claims(pb))
