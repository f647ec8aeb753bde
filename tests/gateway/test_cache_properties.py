"""Hypothesis: the cached gateway never hands a caller a chunk an independent model forbids.

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

from govrag.gateway import Gateway
from govrag.types import SearchRequest, Strategy

from conftest import doc, group, ident, load, make_store, principal

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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
