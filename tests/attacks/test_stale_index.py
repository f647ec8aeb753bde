"""A careless operator restores an old copy of the derived search index.

The lexical index is derived from the truth store, and a process trusts the outbox position
the index records. An operator who copies back last week's index files after a revocation
(but leaves the newer position file, or restores a backup taken mid-sync) gives the process
an index whose access tokens are stale while it believes it is current. Two promises hold:
the truth-store re-check of every search keeps the revoked document out of results (and
records an incident), and ``govrag index verify`` finds every stale entry, per chunk, on both
backends, until ``govrag index rebuild`` sets the index right.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from govrag.store.outbox import tenant_chunks
from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import StoreFactory, doc, ident, load, principal

ANA = principal("ana@x.example")


def index_dir(store: KnowledgeStore) -> Path:
    index, _ = store._parts.indexes.lexical_index("t1")  # type: ignore[attr-defined]
    assert index.path is not None
    return Path(index.path)


def test_a_restored_index_with_stale_rights_is_found_and_repaired(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = open_store()
    load(store, [ident("ana@x.example", "A"), doc("memo", "merger memo", ["A"]),
                 doc("faq", "merger faq", ["*"])])  # fmt: skip
    store.sync_indexes("t1")
    backup = tmp_path / "backup"
    shutil.copytree(index_dir(store), backup)  # the operator's copy, Ana still reads memo
    load(store, [doc("memo", "merger memo", ["B"])])  # revoked
    store.sync_indexes("t1")
    assert store.verify_index("t1").differences == 0
    store.close()

    # Restore the old segments but keep the current position: the index claims to be current.
    live = index_dir(open_store())
    position = (live / "applied_seq").read_text()
    shutil.rmtree(live)
    shutil.copytree(backup, live)
    (live / "applied_seq").write_text(position)

    reopened = open_store()  # a new process
    request = SearchRequest(query="merger", strategy=Strategy.KEYWORD)
    assert [h.doc_id for h in reopened.search(ANA, request).results] == ["faq"]
    assert any(kind == "acl_recheck_mismatch" for kind, _ in reopened.incidents("t1"))
    report = reopened.verify_index("t1")
    assert (report.stale_access, report.missing, report.extra) == (1, 0, 0)
    assert report.differences == 1
    reopened.rebuild_index("t1")
    assert reopened.verify_index("t1").differences == 0


def test_verify_compares_corpus_and_classification_too(open_store: StoreFactory) -> None:
    """An entry written with the wrong corpus or classification (a hand-edited or buggy
    index) is stale even when its ACL tokens are right."""
    store = open_store()
    load(store, [ident("ana@x.example", "A"), doc("memo", "merger memo", ["A"])])
    store.sync_indexes("t1")
    index, _ = store._parts.indexes.lexical_index("t1")  # type: ignore[attr-defined]
    with store._db.tx("t1", read=True) as conn:  # type: ignore[attr-defined]
        (chunk,) = tenant_chunks(conn, store.dialect, "t1", vectors=False)  # type: ignore[attr-defined]
    for forged in (replace(chunk, corpus="elsewhere"), replace(chunk, classification=0)):
        index.apply([chunk.doc_id], [forged], index.applied_seq())
        assert store.verify_index("t1").stale_access == 1
        store.rebuild_index("t1")
        assert store.verify_index("t1").differences == 0
