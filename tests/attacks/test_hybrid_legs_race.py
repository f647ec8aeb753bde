"""Attack: many callers at once on PostgreSQL, where a hybrid search's keyword leg runs on a
shared thread pool beside the vector leg.

A hostile user floods hybrid searches while other users search too, hoping a keyword leg
computed for someone else (another caller's tokens, another tenant, another ceiling) is
joined to their vector leg, or that a leg left running leaks into the next search. Each
caller here may read only its own documents, which all match every query; every result of
every concurrent search must be the caller's own, in the same order a search alone gives.
A careless operator closes the store while searches are in flight: no search may return
another caller's rows, and the close must not hang.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import StoreFactory, doc, ident, load, principal

CALLERS = [f"u{i}@x.example" for i in range(6)]
QUERIES = ["wire transfer limit", "credit risk review", "wire risk", "limit review transfer"]


def _world(store: KnowledgeStore) -> None:
    records = [ident(email, f"A{i}") for i, email in enumerate(CALLERS)]
    for i in range(len(CALLERS)):
        for j in range(4):  # each caller's own documents, all matching every query
            records.append(doc(f"own-{i}-{j}", " ".join(QUERIES) + f" note {j}", [f"A{i}"]))
    load(store, records)


def _mine(doc_id: str, caller: int) -> bool:
    return doc_id.startswith(f"own-{caller}-")


def test_concurrent_hybrid_searches_never_join_another_callers_leg(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    _world(store)
    alone = {
        (c, q): [h.chunk_id for h in store.search(principal(email), SearchRequest(
            query=q, strategy=Strategy.HYBRID, top_k=6)).results]
        for c, email in enumerate(CALLERS) for q in QUERIES
    }  # fmt: skip

    def search(n: int) -> tuple[int, str, list[tuple[str, str]]]:
        c, q = n % len(CALLERS), QUERIES[n % len(QUERIES)]
        request = SearchRequest(query=q, strategy=Strategy.HYBRID, top_k=6)
        result = store.search(principal(CALLERS[c]), request)
        return c, q, [(h.doc_id, h.chunk_id) for h in result.results]

    with ThreadPoolExecutor(max_workers=8) as pool:
        for c, q, got in pool.map(search, range(240)):
            foreign = [d for d, _ in got if not _mine(d, c)]
            assert not foreign, f"caller {c} got {foreign} for {q!r}"
            assert [cid for _, cid in got] == alone[(c, q)], "ranked unlike the search alone"


def test_closing_the_store_during_hybrid_searches_leaks_nothing_and_returns(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    _world(store)
    outcomes: list[str] = []
    go = threading.Event()

    def flood(c: int) -> None:
        go.wait()
        for q in QUERIES * 5:
            try:
                result = store.search(principal(CALLERS[c]),
                                      SearchRequest(query=q, strategy=Strategy.HYBRID))  # fmt: skip
            except Exception as exc:  # closed under it: an error, never data
                outcomes.append(type(exc).__name__)
                return
            for h in result.results:
                assert _mine(h.doc_id, c), f"caller {c} got {h.doc_id} while the store closed"
            outcomes.append("ok")

    threads = [threading.Thread(target=flood, args=(c,)) for c in range(len(CALLERS))]
    for t in threads:
        t.start()
    go.set()
    store.close()
    for t in threads:
        t.join(timeout=120)  # a bound on work that takes seconds, not a timing check
    assert not any(t.is_alive() for t in threads), "a search hung after the store closed"
    assert outcomes, "no search ran"
