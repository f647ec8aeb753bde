"""Attack: make the result cache answer a request with another request's ranking.

The cache sits between the store and the pack, so a key that misses a field that changes the
ranking lets one request poison the next: a high ``min_score`` empties a later low one, a
filtered request hides (or a plain one leaks past) a later filter, a shallow ``top_k`` cuts
a deeper one short; and a key that misses a change of rights or ranking inputs serves what
the store would no longer give. Each attack runs on both backends; the victim's pack must be
exactly what a gateway without a cache gives at that moment.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from govrag.gateway import ContextPack, Gateway
from govrag.gateway.cache import CacheKey, ResultCache, acl_fingerprint
from govrag.harvest.records import IdentityRecord, Record
from govrag.store.protocol import KnowledgeStore
from govrag.types import (
    Classification,
    MetadataFilter,
    Principal,
    QueryExpansion,
    SearchRequest,
    Strategy,
    TimeRange,
)

from conftest import StoreFactory, doc, group, ident, load, principal

ANA = principal("ana@x.example", clearance="confidential")
KEYWORD = SearchRequest(query="wire transfer limits", strategy=Strategy.KEYWORD, top_k=5)
MEMO = MetadataFilter(key="doc_type", value="memo")


def bank_records() -> list[Record]:
    return [
        ident("ana@x.example", "A"),
        group("risk", ["A"]),
        doc("limits", "wire transfer limits wire transfer limits per day", ["risk"],
            metadata={"doc_type": "policy"}),
        doc("limits-eu", "EU wire transfer limits for corporates", ["A"],
            metadata={"doc_type": "policy"}, classification="confidential"),
        doc("memo", "a memo that mentions a wire once", ["*"], metadata={"doc_type": "memo"}),
    ]  # fmt: skip


@pytest.fixture
def bank(store: KnowledgeStore) -> KnowledgeStore:
    load(store, bank_records())
    return store


def seen(pack: ContextPack) -> dict[str, Any]:
    return pack.model_dump(mode="json", exclude={"context_pack_id", "cache_hit"})


def fresh(store: KnowledgeStore, who: Principal, request: SearchRequest) -> dict[str, Any]:
    """What the store gives now, through a gateway without a cache."""
    pack = Gateway(store, cache=ResultCache(0)).retrieve(who, "main", request,
                                                         policy_version="p/1")  # fmt: skip
    return seen(pack)


def docs_of(pack: ContextPack) -> list[str]:
    return [c.doc_id for c in pack.chunks]


def by_score(store: KnowledgeStore) -> tuple[float, float]:
    """A min_score between the best and the worst hit of KEYWORD for Ana."""
    pack = Gateway(store, cache=ResultCache(0)).retrieve(ANA, "main", KEYWORD,
                                                         policy_version="p/1")  # fmt: skip
    scores = sorted(c.score for c in pack.chunks)
    assert len(scores) >= 2 and scores[0] < scores[-1]
    return scores[0], scores[-1]


# Two requests that differ in one field: the first fills the cache, the second must not get
# its ranking.
def _variants(store: KnowledgeStore) -> list[tuple[str, SearchRequest, SearchRequest]]:
    low, high = by_score(store)
    between = (low + high) / 2
    strict = KEYWORD.model_copy(update={"min_score": between})
    return [
        ("min_score high, then low", strict, KEYWORD),
        ("min_score low, then high", KEYWORD, strict),
        ("filter, then none", KEYWORD.model_copy(update={"filters": (MEMO,)}), KEYWORD),
        ("none, then filter", KEYWORD, KEYWORD.model_copy(update={"filters": (MEMO,)})),
        ("top_k 1, then 5", KEYWORD.model_copy(update={"top_k": 1}), KEYWORD),
        ("keyword, then semantic", KEYWORD,
         KEYWORD.model_copy(update={"strategy": Strategy.SEMANTIC})),
        ("another query", KEYWORD, KEYWORD.model_copy(update={"query": "memo"})),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(7))
def test_one_changed_field_is_never_answered_from_the_cache(
    bank: KnowledgeStore, case: int
) -> None:
    name, first, second = _variants(bank)[case]
    gateway = Gateway(bank)
    gateway.retrieve(ANA, "main", first, policy_version="p/1")
    victim = gateway.retrieve(ANA, "main", second, policy_version="p/1")
    assert not victim.cache_hit, name
    assert seen(victim) == fresh(bank, ANA, second), name
    # The same request again is a hit, and still the same answer.
    again = gateway.retrieve(ANA, "main", second, policy_version="p/1")
    assert again.cache_hit and seen(again) == seen(victim), name


def test_a_high_min_score_does_not_empty_a_later_plain_request(bank: KnowledgeStore) -> None:
    """The concrete poisoning: whoever asks first with a high threshold hides everything
    below it from the next plain request (the cache held the thinned list)."""
    gateway = Gateway(bank)
    assert docs_of(gateway.retrieve(ANA, "main", KEYWORD.model_copy(update={"min_score": 1e6}),
                                    policy_version="p/1")) == []  # fmt: skip
    plain = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1")
    assert set(docs_of(plain)) == {"limits", "limits-eu", "memo"}


Change = Callable[[KnowledgeStore], None]
#: Changes of rights (and of ranking inputs) made by another process between two identical
#: requests: none of them may be answered by the ranking cached before it.
CHANGES: dict[str, tuple[Change, set[str]]] = {
    "document ACL narrowed": (
        lambda s: load(s, [doc("limits", "wire transfer limits wire transfer limits per day",
                               ["nobody"], metadata={"doc_type": "policy"})]),
        {"limits-eu", "memo"},
    ),
    "group membership removed": (lambda s: load(s, [group("risk", [])]), {"limits-eu", "memo"}),
    "identity unbound": (
        lambda s: load(s, [IdentityRecord(type="identity", email="ana@x.example",
                                          source_system="sp", account_id="A", active=False)]),
        set(),  # no identity: not even "*"
    ),
    "reclassified above the caller's clearance": (
        lambda s: load(s, [doc("limits-eu", "EU wire transfer limits for corporates", ["A"],
                               metadata={"doc_type": "policy"}, classification="restricted")]),
        {"limits", "memo"},
    ),
    "document deleted": (
        lambda s: s.delete_document("t1", "sp", "limits"),
        {"limits-eu", "memo"},
    ),
    "access widened": (
        lambda s: load(s, [doc("other", "wire transfer limits for branches", ["*"])]),
        {"limits", "limits-eu", "memo", "other"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_in_another_process_is_never_served_from_the_cache(
    open_store: StoreFactory, change: str
) -> None:
    server, harvester = open_store("bank"), open_store("bank")  # two handles: two processes
    load(harvester, bank_records())
    gateway = Gateway(server)
    before = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1")
    assert set(docs_of(before)) == {"limits", "limits-eu", "memo"}
    apply, expected = CHANGES[change]
    apply(harvester)
    after = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1")
    assert not after.cache_hit, change
    assert set(docs_of(after)) == expected, change
    assert seen(after) == fresh(server, ANA, KEYWORD)


def test_a_curation_pass_is_never_served_from_the_cache(open_store: StoreFactory) -> None:
    """Trust scores rank: after a Curation Pass, the cached scores are stale."""
    server, curator = open_store("bank"), open_store("bank")
    load(curator, [ident("ana@x.example", "A")]
         + [doc(f"d{i}", f"wire transfer limits d{i}", ["*"]).model_copy(
             update={"authority_tier": 1 + 2 * i}) for i in range(3)])  # fmt: skip
    gateway = Gateway(server)
    before = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1")
    assert curator.curate("t1").moved > 0
    after = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1")
    assert not after.cache_hit
    assert seen(after) == fresh(server, ANA, KEYWORD) != seen(before)


def test_a_lower_clearance_never_gets_a_higher_clearance_entry(bank: KnowledgeStore) -> None:
    """Same sub, same email: a token with a lower clearance is another cache partition."""
    gateway = Gateway(bank)
    gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1")
    lowered = ANA.model_copy(update={"clearance": Classification.INTERNAL})
    pack = gateway.retrieve(lowered, "main", KEYWORD, policy_version="p/1")
    assert not pack.cache_hit and "limits-eu" not in docs_of(pack)


# -- the key is the whole request: a field added later cannot be forgotten --------------------

#: For every SearchRequest field, a value other than KEYWORD's. A new field fails this test
#: until it gets one here, and then its key differs without any change to the cache.
OTHER_VALUE: dict[str, object] = {
    "query": "memo",
    "corpora": ("main", "other"),
    "strategy": Strategy.HYBRID,
    "top_k": 6,
    "filters": (MEMO,),
    "query_expansion": QueryExpansion.NONE,  # the only value today: nothing to tell apart
    "min_score": 0.25,
    # The marker a cached ranking carries was judged on these words: another question,
    # another entry.
    "marker_query": "who approves large wires",
    "as_of": datetime(2026, 1, 1, tzinfo=UTC),
    "time_range": TimeRange(start=datetime(2025, 1, 1, tzinfo=UTC)),
}
#: Fields whose other value cannot change the key, and why.
SAME_KEY = {
    "corpora": "the gateway runs the one corpus the PEP decided on, whatever the list said",
    "query_expansion": "'none' is the only expansion there is",
}


def key(request: SearchRequest, who: Principal = ANA) -> CacheKey:
    return CacheKey.build(who, (1, 1), "main", request, depth=50, policy_version="p/1",
                          ranker_version="r")  # fmt: skip


@pytest.mark.parametrize("field", sorted(SearchRequest.model_fields))
def test_every_request_field_is_in_the_key(field: str) -> None:
    assert field in OTHER_VALUE, f"give SearchRequest.{field} another value in OTHER_VALUE"
    changed = SearchRequest.model_validate({**dict(KEYWORD), field: OTHER_VALUE[field]})
    assert changed != KEYWORD or field in SAME_KEY
    assert (key(changed) == key(KEYWORD)) == (field in SAME_KEY), field


#: Claims that grant nothing: who is asking (the sub) and until when (a token's expiry).
NOT_RIGHTS = {"sub", "expires_at"}


@pytest.mark.parametrize("field", sorted(set(Principal.model_fields) - NOT_RIGHTS))
def test_every_claim_but_the_sub_is_in_the_fingerprint(field: str) -> None:
    other: dict[str, object] = {
        "email": "ben@x.example", "tenant": "t2", "roles": ("r",),
        "doc_entitlements": ("main:read",), "clearance": "public",
    }  # fmt: skip
    assert field in other, f"give Principal.{field} another value here"
    changed = Principal.model_validate({**dict(ANA), field: other[field]})
    assert acl_fingerprint(changed) != acl_fingerprint(ANA)
    assert key(KEYWORD, changed) != key(KEYWORD)


def test_two_tokens_of_one_caller_share_the_cache_whatever_their_expiry() -> None:
    # The expiry grants nothing, so it must not split the cache either (nor open a way to
    # make one's own entries by minting short tokens): it is left out of the fingerprint.
    soon = Principal.model_validate({**dict(ANA), "expires_at": "2030-01-01T00:00:00Z"})
    later = Principal.model_validate({**dict(ANA), "expires_at": "2031-01-01T00:00:00Z"})
    assert acl_fingerprint(soon) == acl_fingerprint(later) == acl_fingerprint(ANA)
