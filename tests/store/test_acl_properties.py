"""Hypothesis against an independent, naive reference model of the knowledge store
(``tests/acl_model.py``), on random worlds loaded at once: for random queries in every
strategy, each result is readable, the exact legs return the reference top-k (statistics over
the caller's readable set only), and the hidden marker follows its rule; also with the vector
leg's 1-bit prefilter forced on. ``tests/reliability/test_acl_oracle.py`` changes a world step
by step against the same model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from govrag.store.protocol import KnowledgeStore
from govrag.testing import PgServer

from acl_model import (
    ACCOUNTS,
    CORPORA,
    EMAILS,
    GROUPS,
    SYSTEMS,
    TENANTS,
    VOCAB,
    RDoc,
    World,
    check_searches,
    to_records,
)
from conftest import drop_pg_database, examples, load, make_pg_store, make_store, new_pg_database


@st.composite
def worlds(draw: st.DrawFn) -> World:
    drawn = draw(
        st.lists(
            st.tuples(
                st.sampled_from(TENANTS),
                st.sampled_from(EMAILS[:3]),
                st.sampled_from(SYSTEMS),
                st.sampled_from(ACCOUNTS),
            ),
            max_size=8,
        )
    )
    owners: dict[tuple[str, str, str], str] = {}  # an account has one owner: the first
    for tenant, email, system, account in drawn:
        owners.setdefault((tenant, system, account), email)
    identities = frozenset((t, e, s, a) for (t, s, a), e in owners.items())
    groups = {}
    for tenant in TENANTS:
        for system in SYSTEMS:
            for g in GROUPS:
                members = draw(st.sets(st.sampled_from(ACCOUNTS + GROUPS), max_size=3))
                if members:  # cycles allowed: g0 in g1 in g0
                    groups[(tenant, system, g)] = frozenset(members)
    docs = []
    for i in range(draw(st.integers(min_value=1, max_value=14))):
        system = draw(st.sampled_from(SYSTEMS))
        docs.append(
            RDoc(
                tenant=draw(st.sampled_from(TENANTS)),
                system=system,
                ext=f"d{i}",
                corpus=draw(st.sampled_from(CORPORA)),
                text=" ".join(draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=10))),
                acl=frozenset(
                    draw(st.sets(st.sampled_from([*ACCOUNTS, *GROUPS, "*"]), max_size=3))
                ),
                level=draw(st.integers(min_value=0, max_value=3)),
                author=draw(st.none() | st.sampled_from(ACCOUNTS)),
            )
        )
    return World(identities=identities, groups=groups, docs=tuple(docs))


queries = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5).map(" ".join)


cases = given(
    world=worlds(),
    query=queries,
    ceiling=st.integers(min_value=0, max_value=3),
    k=st.integers(min_value=1, max_value=6),
    corpora=st.none() | st.lists(st.sampled_from(CORPORA), min_size=1, unique=True),
)


@settings(max_examples=examples(24), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@cases
def test_sqlite_matches_reference_model(
    world: World, query: str, ceiling: int, k: int, corpora: list[str] | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp))
        try:
            check_store(store, world, query, ceiling, k, corpora)
        finally:
            store.close()


@settings(max_examples=examples(24), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@cases
def test_sqlite_with_the_binary_prefilter_matches_reference_model(
    world: World, query: str, ceiling: int, k: int, corpora: list[str] | None
) -> None:
    """The 1-bit prefilter forced on (every search over more than one readable row, as few
    rows rescored as asked for): everything but the semantic top-k is as exact as without."""
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp), binary_prefilter_rows=1, binary_rescore=1)
        try:
            check_store(store, world, query, ceiling, k, corpora, approximate=True)
        finally:
            store.close()


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@cases
def test_postgres_matches_reference_model(
    pg_cluster: PgServer,
    world: World,
    query: str,
    ceiling: int,
    k: int,
    corpora: list[str] | None,
) -> None:
    dsn = new_pg_database(pg_cluster)
    store = make_pg_store(pg_cluster, dsn, None)
    try:
        check_store(store, world, query, ceiling, k, corpora)
    finally:
        store.close()
        drop_pg_database(pg_cluster, dsn)


def check_store(
    store: KnowledgeStore,
    world: World,
    query: str,
    ceiling: int,
    k: int,
    corpora: list[str] | None,
    *,
    approximate: bool = False,
) -> None:
    """Load ``world`` into ``store``, then :func:`acl_model.check_searches`."""
    for tenant in TENANTS:
        records = to_records(world, tenant)
        if records:
            load(store, records, tenant)
    check_searches(store, world, query, ceiling, k, corpora, approximate=approximate)
