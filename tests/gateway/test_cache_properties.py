"""Hypothesis: the cached gateway never hands a caller a chunk an independent model forbids,
and never an answer the store would not give now.

Random interleavings of searches by several callers (filling and hitting the result cache)
and rights changes (a document's ACL, a group's members) against one gateway on a real SQLite
store. After every search, every packed document must be readable by the caller in a plain
Python reference model of the current rights; a cache entry filled before a change must
never serve it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from govrag.gateway import ContextPack, Gateway
from govrag.gateway.cache import ResultCache
from govrag.harvest.records import DocumentRecord
from govrag.types import MetadataFilter, QueryExpansion, SearchRequest, Strategy

from conftest import doc, examples, group, ident, load, make_store, principal

EMAILS = ["u0@x.example", "u1@x.example", "u2@x.example", "nobody@x.example"]
ACCOUNTS = {"u0@x.example": "a0", "u1@x.example": "a1", "u2@x.example": "a2"}
GROUPS = ["g0", "g1"]
GRANTEES = [*ACCOUNTS.values(), *GROUPS, "*"]
DOCS = [f"d{i}" for i in range(6)]
WORDS = ["wire", "limit", "risk", "loan"]


@dataclass
class Model:
    acl: dict[str, set[str]] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=dict)

    def readable(self, email: str, doc_id: str) -> bool:
        account = ACCOUNTS.get(email)
        if account is None:
            return False  # no identity: not even "*"
        mine = {account} | {g for g, m in self.members.items() if account in m}
        return "*" in self.acl[doc_id] or bool(mine & self.acl[doc_id])


grantees = st.sets(st.sampled_from(GRANTEES), max_size=3)
search = st.tuples(st.just("search"), st.sampled_from(EMAILS), st.sampled_from(WORDS))
set_acl = st.tuples(st.just("acl"), st.sampled_from(DOCS), grantees)
set_group = st.tuples(
    st.just("group"), st.sampled_from(GROUPS), st.sets(st.sampled_from(list(ACCOUNTS.values())))
)


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.lists(grantees, min_size=len(DOCS), max_size=len(DOCS)),
    ops=st.lists(st.one_of(search, search, set_acl, set_group), min_size=1, max_size=25),
)
def test_cached_packs_never_exceed_current_rights(
    initial: list[set[str]], ops: list[tuple[str, str, object]]
) -> None:
    model = Model(acl=dict(zip(DOCS, initial, strict=True)), members={g: set() for g in GROUPS})
    text = {d: f"{' '.join(WORDS)} {d}" for d in DOCS}  # every document matches every query
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp))
        try:
            load(store, [ident(e, a) for e, a in ACCOUNTS.items()]
                 + [doc(d, text[d], sorted(model.acl[d])) for d in DOCS])  # fmt: skip
            gateway = Gateway(store)
            for op, target, value in ops:
                if op == "acl":
                    assert isinstance(value, set)
                    model.acl[target] = value
                    load(store, [doc(target, text[target], sorted(value))])
                elif op == "group":
                    assert isinstance(value, set)
                    model.members[target] = value
                    load(store, [group(target, sorted(value))])
                else:
                    request = SearchRequest(query=str(value), strategy=Strategy.KEYWORD,
                                            top_k=len(DOCS))  # fmt: skip
                    pack = gateway.retrieve(principal(target), "main", request,
                                            policy_version="p/1")  # fmt: skip
                    got = {c.doc_id for c in pack.chunks}
                    allowed = {d for d in DOCS if model.readable(target, d)}
                    assert got <= allowed, f"{target} got {got - allowed} (cache {pack.cache_hit})"
                    # Nothing readable is lost either: the pack is exactly the readable set.
                    assert got == allowed
        finally:
            store.close()


# -- a cached answer is the uncached answer ---------------------------------------------------
#
# Random sequences of requests (every SearchRequest field drawn at random, min_score and
# filters included), by callers of several clearances, interleaved with rights changes and
# curation passes, against two gateways on one real store: one with the result cache, one
# with cache_entries=0. Whatever the cache holds, the pack it gives must be the pack the
# store gives now.

CALLERS = [("u0@x.example", "restricted"), ("u0@x.example", "internal"),
           ("u1@x.example", "restricted"), ("u2@x.example", "public")]  # fmt: skip
LEVELS = ["public", "internal", "confidential"]
FILTERS = [
    (),
    (MetadataFilter(key="kind", value="memo"),),
    (MetadataFilter(key="kind", op="in", values=("memo", "policy")),),
    (MetadataFilter(key="year", op="range", gte=2021),),
    (MetadataFilter(key="year", op="range", lte=2022), MetadataFilter(key="kind", value="policy")),
    (MetadataFilter(key="kind", op="prefix", value="po"),),
]
MIN_SCORES = st.one_of(
    st.sampled_from([0.0, 0.0, 0.01, 0.02, 0.1, 0.5, 1.0]),
    st.floats(min_value=0.0, max_value=2.0, allow_nan=False),
)
QUERIES = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
#: One field of a request, drawn afresh: a search is a request of the example's small pool
#: with at most one field changed, so requests that differ in a single field (min_score,
#: filters, top_k ...) meet the cache often.
FIELDS: dict[str, st.SearchStrategy[object]] = {
    "query": QUERIES,
    "strategy": st.sampled_from(list(Strategy)),
    "top_k": st.integers(min_value=1, max_value=len(DOCS)),
    "filters": st.sampled_from(FILTERS),
    "query_expansion": st.sampled_from(list(QueryExpansion)),
    "min_score": MIN_SCORES,
}
requests = st.builds(SearchRequest, **FIELDS)


def mostly(common: object, other: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """``common`` two times in three, else a draw of ``other``."""
    return st.integers(min_value=0, max_value=2).flatmap(lambda n: st.just(common) if n else other)


variations = mostly({}, st.one_of(*(st.fixed_dictionaries({f: v}) for f, v in FIELDS.items())))
#: ``(caller, pool index, changed fields)``
ask = st.tuples(
    mostly(0, st.integers(min_value=0, max_value=len(CALLERS) - 1)),
    mostly(0, st.integers(min_value=0, max_value=2)),
    variations,
)
#: A change of the store before a search (mostly none, so the cache gets to answer).
change = st.one_of(
    st.tuples(st.just("acl"), st.integers(min_value=0, max_value=len(DOCS) - 1), grantees),
    st.tuples(st.just("group"), st.sampled_from(GROUPS),
              st.sets(st.sampled_from(list(ACCOUNTS.values())))),
    st.tuples(st.just("curate"), st.just(0), st.just(None)),
)  # fmt: skip
rounds = st.lists(st.tuples(mostly(None, change), ask), min_size=1, max_size=25)


def seen(pack: ContextPack) -> dict[str, object]:
    """Everything a caller reads in a pack, but its fresh id and whether it was cached."""
    return pack.model_dump(mode="json", exclude={"context_pack_id", "cache_hit"})


def corpus_doc(i: int, acl: set[str]) -> DocumentRecord:
    words = " ".join(WORDS[: 1 + i % len(WORDS)])  # term frequencies differ: scores differ
    return doc(DOCS[i], f"{words} {DOCS[i]}", sorted(acl),
               classification=LEVELS[i % len(LEVELS)],
               metadata={"kind": "policy" if i % 2 else "memo", "year": 2019 + i},
               ).model_copy(update={"authority_tier": 1 + i % 5})  # fmt: skip


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.lists(grantees, min_size=len(DOCS), max_size=len(DOCS)),
    pool=st.lists(requests, min_size=1, max_size=3),
    ops=rounds,
)
def test_a_cached_answer_is_the_uncached_answer(
    initial: list[set[str]],
    pool: list[SearchRequest],
    ops: list[tuple[tuple[str, object, object] | None, tuple[int, int, dict[str, object]]]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp))
        try:
            load(store, [ident(e, a) for e, a in ACCOUNTS.items()]
                 + [corpus_doc(i, acl) for i, acl in enumerate(initial)])  # fmt: skip
            cached, uncached = Gateway(store), Gateway(store, cache=ResultCache(0))
            for before, (caller, base, changed) in ops:
                if before is not None:
                    op, target, value = before
                    if op == "acl":
                        assert isinstance(target, int) and isinstance(value, set)
                        load(store, [corpus_doc(target, value)])
                    elif op == "group":
                        assert isinstance(target, str) and isinstance(value, set)
                        load(store, [group(target, sorted(value))])
                    else:
                        store.curate("t1")
                request = SearchRequest.model_validate({**dict(pool[base % len(pool)]), **changed})
                email, clearance = CALLERS[caller]
                who = principal(email, clearance=clearance)
                got = cached.retrieve(who, "main", request, policy_version="p/1")
                want = uncached.retrieve(who, "main", request, policy_version="p/1")
                assert seen(got) == seen(want), (request, got.cache_hit)
        finally:
            store.close()
