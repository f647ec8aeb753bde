"""Derived-index discipline: outbox, crash repair, verify/rebuild, tenant isolation."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tantivy

from govrag.errors import StoreError
from govrag.store.lexical import LexicalIndex
from govrag.store.lexical_format import schema
from govrag.store.protocol import KnowledgeStore
from govrag.store.records import IndexedChunk
from govrag.types import SearchRequest, Strategy

from conftest import StoreFactory, doc, ident, load, make_store, principal

ROOT = Path(__file__).resolve().parents[1]


def crash_after_commit(root: Path) -> subprocess.CompletedProcess[str]:
    """Ingest in a child process that dies between the SQL commit and the index write."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from govrag.store.lexical import LexicalIndex
        from conftest import doc, load, make_store
        from pathlib import Path

        def die(*args, **kwargs):
            os._exit(9)  # killed: the SQL commit is durable, the index write never happens

        store = make_store(Path({str(root)!r}))
        LexicalIndex.apply = die
        load(store, [doc("late", "crash recovery works", ["A"])])
        store.sync_indexes("t1")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT.parent / "src")},
    )  # fmt: skip


def test_crash_between_commit_and_index_write_is_repaired_on_open(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    load(store, [ident("ana@x.example", "A"), doc("early", "crash test baseline", ["A"])])
    store.close()
    child = crash_after_commit(tmp_path)
    assert child.returncode == 9, child.stderr
    reopened = make_store(tmp_path)
    report = reopened.verify_index("t1")
    assert (report.differences, report.truth_chunks, report.pending_outbox) == (0, 2, 0)
    hits = reopened.search(principal("ana@x.example"), SearchRequest(query="crash recovery"))
    assert hits.results[0].doc_id == "late"
    reopened.close()


def test_every_write_frees_the_index_lock_at_once(tmp_path: Path) -> None:
    """Another process may write right after this one, whether its write succeeded or failed:
    the writer is consumed on the spot, with no garbage collection to wait for."""
    index = LexicalIndex(tmp_path / "lex")

    def failing() -> Iterator[IndexedChunk]:
        yield IndexedChunk(1, 1, "wire limits", ("sp\x1fA",), "main", 1)
        raise ValueError("the source failed mid-write")

    gc.disable()
    try:
        index.apply([], [IndexedChunk(1, 1, "wire limits", ("sp\x1fA",), "main", 1)], 1)
        other = tantivy.Index(schema(), str(tmp_path / "lex"), reuse=True)
        other.writer(heap_size=15_000_000, num_threads=1).wait_merging_threads()  # not LockBusy
        with pytest.raises(StoreError, match="lexical index write failed") as failed:
            index.apply([1], failing(), 2)
        other.writer(heap_size=15_000_000, num_threads=1).wait_merging_threads()
        assert failed.value.__cause__ is not None  # the traceback, frames and all, still alive
    finally:
        gc.enable()
    assert index.applied_seq() == 1  # the failed write changed nothing


def test_verify_finds_drift_and_rebuild_repairs_it(store: Any) -> None:
    load(store, [ident("ana@x.example", "A"), doc("a", "alpha", ["A"]), doc("b", "beta", ["A"])])
    store.sync_indexes("t1")
    lexical, _ = store._parts.indexes.lexical_index("t1")
    doc_id = store._db.q("t1", "SELECT doc_id FROM documents WHERE external_id = 'a'")[0][0]
    lexical.apply([doc_id], [], lexical.applied_seq())  # drift: the index lost a chunk
    report = store.verify_index("t1")
    assert (report.missing, report.extra, report.differences) == (1, 0, 1)
    assert store.rebuild_index("t1") == 2
    assert store.verify_index("t1").differences == 0


def test_deleted_index_directory_is_rebuilt(tmp_path: Path) -> None:
    import shutil

    store = make_store(tmp_path)
    load(store, [ident("ana@x.example", "A"), doc("a", "alpha", ["A"])])
    store.sync_indexes("t1")
    store.close()
    shutil.rmtree(tmp_path / "index")
    reopened = make_store(tmp_path)
    assert reopened.verify_index("t1").differences == 0
    assert reopened.search(principal("ana@x.example"), SearchRequest(query="alpha")).results
    reopened.close()


def _snapshot(store: KnowledgeStore, email: str, query: str) -> list[str]:
    return [
        store.search(
            principal(email), SearchRequest(query=query, strategy=strategy, top_k=5)
        ).model_dump_json()
        for strategy in Strategy
    ]


def test_another_tenant_never_changes_my_results(store: KnowledgeStore) -> None:
    mine = [ident("ana@x.example", "A")] + [
        doc(f"m{i}", f"wire transfer limit {'risk ' * (i % 4)} note {i}", ["A"]) for i in range(30)
    ]
    load(store, mine)
    before = _snapshot(store, "ana@x.example", "wire transfer risk")
    theirs = [ident("ana@x.example", "A")] + [
        doc(f"o{i}", f"wire transfer risk limit {i} wire", ["*"]) for i in range(1000)
    ]
    load(store, theirs, tenant="t2")
    assert _snapshot(store, "ana@x.example", "wire transfer risk") == before


def test_forbidden_documents_in_my_tenant_never_appear(store: KnowledgeStore) -> None:
    load(
        store,
        [ident("ana@x.example", "A")] + [doc(f"m{i}", f"wire note {i}", ["A"]) for i in range(10)],
    )
    forbidden = [doc(f"f{i}", "wire wire wire transfer", ["B"]) for i in range(200)]
    forbidden += [
        doc(f"r{i}", "wire wire transfer", ["A"], classification="restricted") for i in range(50)
    ]
    load(store, forbidden)
    for strategy in Strategy:
        result = store.search(
            principal("ana@x.example", clearance="confidential"),
            SearchRequest(query="wire transfer", strategy=strategy, top_k=50),
        )
        assert {h.doc_id[0] for h in result.results} <= {"m"}


@pytest.mark.parametrize("strategy", list(Strategy))
def test_scores_do_not_depend_on_other_tenants(
    open_store: StoreFactory, strategy: Strategy
) -> None:
    a = open_store("a")
    b = open_store("b")
    records = [ident("ana@x.example", "A")] + [
        doc(f"d{i}", f"loan {i} fraud", ["A"]) for i in range(20)
    ]
    load(a, records)
    load(b, records)
    load(b, [doc(f"x{i}", "loan loan fraud", ["*"]) for i in range(300)], tenant="other")
    req = SearchRequest(query="loan fraud", strategy=strategy)
    p = principal("ana@x.example")
    assert a.search(p, req) == b.search(p, req)
