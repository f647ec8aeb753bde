"""A hybrid search's two legs, as a failure would meet them, on both backends.

On PostgreSQL the keyword leg runs on another thread beside the vector leg (which waits on
the server); on SQLite one after the other. Either way a leg that fails fails the search
with its own error, the other leg is over before the error reaches the caller (nothing
left reading an index the caller may close), and the store searches normally after.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from govrag.store.protocol import KnowledgeStore
from govrag.store.search_primitives import SearchPrimitives
from govrag.types import SearchRequest, Strategy

from conftest import doc, ident, load, principal

HYBRID = SearchRequest(query="wire transfer approval", strategy=Strategy.HYBRID)
ANA = "ana@x.example"


class LegFailed(Exception):
    pass


def _bank(store: KnowledgeStore) -> None:
    load(store, [ident(ANA, "A"),
                 doc("wire", "wire transfer approval limits", ["A"]),
                 doc("faq", "customers send a wire transfer online", ["*"],
                     classification="public")])  # fmt: skip


def _vector_leg(store: KnowledgeStore) -> Callable[..., Any]:
    """The store's own vector leg (white-box: the leg is private to the store)."""
    return store._search_backend().vector_leg  # type: ignore[attr-defined,no-any-return]


def test_a_failing_keyword_leg_fails_the_search_with_its_error(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bank(store)
    before = store.search(principal(ANA), HYBRID)
    assert {h.doc_id for h in before.results} == {"wire", "faq"}

    def failing(self: SearchPrimitives, *args: Any, **kwargs: Any) -> Any:
        raise LegFailed("the keyword leg failed")

    with monkeypatch.context() as patch:
        patch.setattr(SearchPrimitives, "_lexical_leg", failing)
        with pytest.raises(LegFailed):
            store.search(principal(ANA), HYBRID)
    after = store.search(principal(ANA), HYBRID)
    assert [h.chunk_id for h in after.results] == [h.chunk_id for h in before.results]


def test_a_failing_vector_leg_waits_for_the_keyword_leg_before_it_raises(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword leg is still running when the vector leg fails (on PostgreSQL, where it
    runs beside it): the error reaches the caller only once the keyword leg is over."""
    _bank(store)
    real_lexical = SearchPrimitives._lexical_leg
    vector_failed = threading.Event()
    keyword_over: list[str] = []

    def slow_lexical(self: SearchPrimitives, *args: Any, **kwargs: Any) -> Any:
        # Beside the vector leg this waits for its failure; run first (SQLite) it does not.
        vector_failed.wait(timeout=5)
        time.sleep(0.2)  # widens the window an early raise would fall into
        keyword_over.append(threading.current_thread().name)
        return real_lexical(self, *args, **kwargs)

    leg = _vector_leg(store)
    owner = type(getattr(leg, "__self__", None))

    def failing_vector(self: Any, *args: Any, **kwargs: Any) -> Any:
        vector_failed.set()
        raise LegFailed("the vector leg failed")

    monkeypatch.setattr(SearchPrimitives, "_lexical_leg", slow_lexical)
    monkeypatch.setattr(owner, "leg", failing_vector)
    with pytest.raises(LegFailed):
        store.search(principal(ANA), HYBRID)
    assert len(keyword_over) == 1, "the search raised while its keyword leg was still running"
