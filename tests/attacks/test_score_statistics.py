"""Scores do not leak hidden statistics: attacks on BM25's collection statistics.

With index-wide statistics, a single-term query's score is a function of how many chunks in
the whole index hold the term (idf) and of their lengths (avgdl): P could count the
unreadable documents that mention "merger" from one score, or watch two readable documents
swap places as restricted documents are added. govrag counts every statistic over what the
caller may read, so none of that moves. On both backends.
"""

from __future__ import annotations

from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import StoreFactory, doc, ident, load, principal

P = principal("p@x.example", clearance="internal")
MINE = [ident("p@x.example", "P"), ident("o@x.example", "O"),
        doc("a", "merger review notes", ["P"]), doc("b", "loan review notes", ["P"])]  # fmt: skip


def scores(store: KnowledgeStore, query: str) -> list[tuple[str, float]]:
    request = SearchRequest(query=query, strategy=Strategy.KEYWORD, top_k=10)
    return [(h.doc_id, h.score) for h in store.search(P, request).results]


def test_a_score_does_not_count_unreadable_documents(open_store: StoreFactory) -> None:
    quiet, noisy = open_store("quiet"), open_store("noisy")
    load(quiet, MINE)
    unreadable = [doc(f"h{i}", "merger merger memo", ["O"]) for i in range(30)]
    above = [doc(f"r{i}", "merger", ["P"], classification="restricted") for i in range(30)]
    load(noisy, MINE + unreadable + above)
    for query in ("merger", "loan", "merger loan", "review"):
        assert scores(quiet, query) == scores(noisy, query), query


def test_restricted_documents_cannot_reorder_what_i_read(open_store: StoreFactory) -> None:
    """'merger' and 'loan' each occur once in a readable document of the same length, so the
    two tie. 40 unreadable 'loan' documents make 'loan' common under index-wide idf, which
    would push the 'merger' document clearly first; under the caller's statistics they
    still tie, in id order."""
    quiet, noisy = open_store("quiet"), open_store("noisy")
    load(quiet, MINE)
    load(noisy, MINE + [doc(f"h{i}", "loan application", ["O"]) for i in range(40)])
    assert scores(quiet, "merger loan") == scores(noisy, "merger loan")
    assert [d for d, _ in scores(noisy, "merger loan")] == ["a", "b"]
