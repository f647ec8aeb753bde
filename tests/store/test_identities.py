"""Identity merges, on every backend: one owner per account, refused conflicting claims,
compare-and-set rebinds, unbinds, and the migration that removes ambiguous bindings.

The acceptance rule: a placeholder (or hostile) account never captures a real user's rights,
and an account that cannot be resolved grants nothing.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from govrag.errors import IdentityConflict
from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import BACKENDS, StoreFactory, doc, group, ident, load, make_store, principal

ANA, BEN, MALLORY = "ana@x.example", "ben@x.example", "mallory@x.example"
ALL_DOCS = {"a-doc", "risk-doc", "b-doc", "ghost-doc", "ghost-group-doc"}


@pytest.fixture
def world(store: KnowledgeStore) -> KnowledgeStore:
    load(
        store,
        [
            ident(ANA, "A"),
            ident(BEN, "B"),
            group("risk", ["A"]),
            group("ghosts", ["Z"]),  # Z: an account nobody is bound to
            doc("a-doc", "wire transfer limits", ["A"]),
            doc("risk-doc", "wire transfer risk review", ["risk"]),
            doc("b-doc", "wire transfer console", ["B"]),
            doc("ghost-doc", "wire transfer ghost", ["Z"]),
            doc("ghost-group-doc", "wire transfer ghost group", ["ghosts"]),
        ],
    )
    return store


def visible(store: KnowledgeStore, email: str) -> set[str]:
    """What ``email`` finds, by every strategy (the store's own access resolution)."""
    found: set[str] = set()
    for strategy in (Strategy.KEYWORD, Strategy.HYBRID):
        req = SearchRequest(query="wire transfer", strategy=strategy, top_k=20)
        hits = {h.doc_id for h in store.search(principal(email), req).results}
        assert not found or hits == found, strategy
        found = hits
    return found


def test_one_owner_per_account(store: KnowledgeStore) -> None:
    assert store.put_identity("t1", ANA, "sp", "A") is True
    assert store.put_identity("t1", ANA.upper(), "sp", "A") is False  # the same binding
    epoch = store.acl_epoch("t1")
    with pytest.raises(IdentityConflict) as caught:
        store.put_identity("t1", MALLORY, "sp", "A")
    message = str(caught.value)
    for part in ("account 'A'", "source system 'sp'", "already bound to 'ana@x.example'",
                 "previous_email", '"active": false'):  # fmt: skip
        assert part in message, message
    assert caught.value.__cause__ is not None  # the driver's unique violation
    assert store.source_accounts("t1", ANA, "sp") == ["A"]
    assert store.source_accounts("t1", MALLORY, "sp") == []
    assert store.acl_epoch("t1") == epoch  # nothing changed
    assert store.stats("t1")["identities"] == 1
    # One email may own several accounts; the same account id in another source system or
    # tenant is another account.
    assert store.put_identity("t1", ANA, "sp", "A2") is True
    assert store.put_identity("t1", MALLORY, "other", "A") is True
    assert store.put_identity("t2", MALLORY, "sp", "A") is True
    # What a dry run asks: each account's owner, per tenant and source system.
    assert store.account_owner("t1", "sp", "A") == ANA
    assert store.account_owner("t1", "other", "A") == MALLORY
    assert store.account_owner("t2", "sp", "A") == MALLORY
    assert store.account_owner("t1", "sp", "nobody") is None


def test_a_conflicting_claim_grants_nothing(world: KnowledgeStore) -> None:
    assert visible(world, ANA) == {"a-doc", "risk-doc"}
    epoch = world.acl_epoch("t1")
    for claimant in (MALLORY, "noreply@x.example"):
        with pytest.raises(IdentityConflict, match="already bound"):
            world.put_identity("t1", claimant, "sp", "A")
        assert visible(world, claimant) == set()
    assert visible(world, ANA) == {"a-doc", "risk-doc"}  # the owner keeps access
    assert world.acl_epoch("t1") == epoch


def test_rebind_with_the_right_previous_email_moves_access(world: KnowledgeStore) -> None:
    epoch = world.acl_epoch("t1")
    new = "ana.new@x.example"
    assert world.put_identity("t1", new, "sp", "A", previous_email=ANA) is True
    assert world.acl_epoch("t1") > epoch
    assert visible(world, ANA) == set()
    assert visible(world, new) == {"a-doc", "risk-doc"}
    assert world.source_accounts("t1", new, "sp") == ["A"]
    # Re-sending the rebind (a re-ingested file) is a no-op.
    epoch = world.acl_epoch("t1")
    assert world.put_identity("t1", new, "sp", "A", previous_email=ANA) is False
    assert world.put_identity("t1", new, "sp", "A") is False
    assert world.acl_epoch("t1") == epoch


def test_rebind_with_a_wrong_previous_email_is_refused(world: KnowledgeStore) -> None:
    epoch = world.acl_epoch("t1")
    with pytest.raises(IdentityConflict, match=r"bound to 'ana@x\.example', not to previous_email"):
        world.put_identity("t1", MALLORY, "sp", "A", previous_email=BEN)
    with pytest.raises(IdentityConflict, match="not bound to anyone"):
        world.put_identity("t1", MALLORY, "sp", "Z", previous_email=BEN)
    assert visible(world, MALLORY) == set()
    assert visible(world, ANA) == {"a-doc", "risk-doc"}
    assert visible(world, BEN) == {"b-doc"}
    assert world.acl_epoch("t1") == epoch


def test_unbind_removes_access_on_the_next_search(world: KnowledgeStore) -> None:
    epoch = world.acl_epoch("t1")
    assert world.remove_identity("t1", MALLORY, "sp", "A") is False  # not the owner
    assert world.acl_epoch("t1") == epoch
    assert visible(world, ANA) == {"a-doc", "risk-doc"}
    assert world.remove_identity("t1", ANA.upper(), "sp", "A") is True
    assert world.acl_epoch("t1") > epoch
    assert visible(world, ANA) == set()
    epoch = world.acl_epoch("t1")
    assert world.remove_identity("t1", ANA, "sp", "A") is False
    assert world.acl_epoch("t1") == epoch
    # A free account can be bound again, by anyone.
    assert world.put_identity("t1", MALLORY, "sp", "A") is True
    assert visible(world, MALLORY) == {"a-doc", "risk-doc"}


def test_an_account_nobody_is_bound_to_grants_nothing(world: KnowledgeStore) -> None:
    for email in (ANA, BEN, MALLORY):
        assert not visible(world, email) & {"ghost-doc", "ghost-group-doc"}
    # The world can show them: the account's documents appear once someone owns it.
    assert world.put_identity("t1", "zed@x.example", "sp", "Z") is True
    assert visible(world, "zed@x.example") == {"ghost-doc", "ghost-group-doc"}


def test_concurrent_claims_leave_one_owner(open_store: StoreFactory) -> None:
    handles = [open_store("main"), open_store("main")]  # two processes' worth
    handles[0].put_identity("t1", "seed@x.example", "sp", "seed")
    claimants = [f"c{i}@x.example" for i in range(4)]
    start = threading.Barrier(len(claimants))
    won: list[str] = []
    refused: list[str] = []

    def claim(i: int) -> None:
        start.wait()
        try:
            handles[i % 2].put_identity("t1", claimants[i], "sp", "K")
            won.append(claimants[i])
        except IdentityConflict:
            refused.append(claimants[i])

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(claimants))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == len(claimants) - 1
    for email in claimants:
        expected = ["K"] if email in won else []
        assert handles[1].source_accounts("t1", email, "sp") == expected


# -- the migration --------------------------------------------------------------------------
def _old_sqlite(path: Path) -> sqlite3.Connection:
    from govrag.store.migrations import migrate_sqlite, migrations

    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate_sqlite(conn, [x for x in migrations("sqlite") if x[0] < 4]) == 3
    return conn


def _old_postgres(pg: Any) -> tuple[str, Any]:
    import psycopg

    from govrag.store.migrations import migrate_postgres, migrations

    dsn = pg.create_database("identities_v4")
    conn = psycopg.connect(dsn, autocommit=True)
    assert migrate_postgres(conn, known=[x for x in migrations("postgres") if x[0] < 5]) == 4
    return dsn, conn


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_migration_removes_ambiguous_bindings(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rows = [
        ("t1", ANA, "sp", "A"),
        ("t1", MALLORY, "sp", "A"),  # ambiguous: A has two owners
        ("t1", ANA, "sp", "A2"),
        ("t1", BEN, "sp", "B"),
        ("t2", MALLORY, "sp", "A"),  # another tenant's account A: one owner
    ]
    if backend == "sqlite":
        conn = _old_sqlite(tmp_path / "govrag.db")
        insert, tenant_row = "INSERT INTO identities VALUES (?, ?, ?, ?)", "(?, 'now')"
    else:
        pg = request.getfixturevalue("pg_cluster")
        dsn, conn = _old_postgres(pg)
        insert, tenant_row = "INSERT INTO identities VALUES (%s, %s, %s, %s)", "(%s, 'now')"
    with conn:
        for tenant in ("t1", "t2"):
            conn.execute(
                f"INSERT INTO tenants(tenant_id, created_at) VALUES {tenant_row}", (tenant,)
            )
            if backend == "postgres":
                conn.execute("INSERT INTO tenant_directory VALUES (%s)", (tenant,))
        for row in rows:
            conn.execute(insert, row)
    if backend == "sqlite":
        store: KnowledgeStore = make_store(tmp_path)
    else:
        from conftest import make_pg_store

        store = make_pg_store(pg, dsn, tmp_path / "index")
    try:
        assert store.source_accounts("t1", ANA, "sp") == ["A2"]  # A was ambiguous: gone
        assert store.source_accounts("t1", MALLORY, "sp") == []
        assert store.source_accounts("t1", BEN, "sp") == ["B"]
        assert store.source_accounts("t2", MALLORY, "sp") == ["A"]
        assert store.acl_epoch("t1") == 1 and store.acl_epoch("t2") == 0
        incidents = store.incidents("t1")
        assert [k for k, _ in incidents] == ["ambiguous_identity_removed"] * 2
        assert {d["email"] for _, d in incidents} == {ANA, MALLORY}
        assert {(d["source_system"], d["account_id"]) for _, d in incidents} == {("sp", "A")}
        assert store.incidents("t2") == []
        # From now on the unique index holds the rule.
        assert store.put_identity("t1", ANA, "sp", "A") is True
        with pytest.raises(IdentityConflict):
            store.put_identity("t1", MALLORY, "sp", "A")
    finally:
        store.close()
        conn.close()
        if backend == "postgres":
            from conftest import drop_pg_database

            drop_pg_database(pg, dsn)
