"""SQLite query plans of a search: no probe of a table that grows with the corpus or the
directory may be constrained by the tenant alone (a tenant-wide scan per row or per search).

SQLite plans without statistics, so an innocuous rewrite can flip a probe onto a worse index:
hydrating a chunk once read every identity of the tenant to find the author's email (caught
by this test when the index hint is removed). The statements are the ones a search really
executes, captured with their bound values.
"""

from __future__ import annotations

from pathlib import Path

from govrag.types import SearchRequest, Strategy

from conftest import doc, group, ident, load, make_store, principal

#: Tables whose rows grow with documents, chunks, accounts or memberships.
GROWING = ("doc_acl", "identities", "group_members", "chunks", "chunk_vectors", "doc_meta",
           "doc_supersedes", "entities", "chunk_entities", "relations")  # fmt: skip


def executed_plans(root: Path) -> dict[str, list[str]]:
    store = make_store(root)
    records = [ident(f"u{i}@x.example", f"A{i}") for i in range(50)]
    records += [group("G", ["A1", "A2"])]
    records += [doc(f"d{i}", f"wire limits report {i}", [f"A{i % 50}", "G"],
                    author=f"A{(i + 1) % 50}") for i in range(200)]  # fmt: skip
    load(store, records)
    me = principal("u1@x.example")
    for strategy in Strategy:  # warm: derived indexes synced, nothing left to catch up
        store.search(me, SearchRequest(query="wire limits", strategy=strategy))
    seen: list[str] = []
    store._db.connection.set_trace_callback(seen.append)
    for strategy in Strategy:
        store.search(me, SearchRequest(query="wire limits", strategy=strategy))
    store._db.connection.set_trace_callback(None)
    plans = {
        sql: [row[3] for row in store._db.connection.execute("EXPLAIN QUERY PLAN " + sql)]
        for sql in dict.fromkeys(seen)
        if sql.lstrip().upper().startswith(("SELECT", "WITH"))
    }
    store.close()
    return plans


def test_no_search_statement_probes_a_growing_table_by_tenant_only(tmp_path: Path) -> None:
    plans = executed_plans(tmp_path)
    assert any("identities" in sql for sql in plans)  # the hydration statement was seen
    wide = [
        (line, sql[:160])
        for sql, plan in plans.items()
        for line in plan
        # Plans name tables by alias, but their indexes by table: "USING INDEX <table>_...".
        if line.endswith("(tenant_id=?)") and any(t in line.split("INDEX")[-1] for t in GROWING)
    ]
    assert wide == [], wide
