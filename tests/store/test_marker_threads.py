"""The marker's work beside the caller's ranking, and what a vector index keeps, seen from a
process's life: a forked child searches (its parent's marker threads do not exist in it), a
closed store gives back what it kept, and a gathered matrix scores a row as the full one does
(so keeping one changes no score)."""

from __future__ import annotations

import gc
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from govrag.store.kept_filters import KEPT
from govrag.store.sqlite import SQLiteStore
from govrag.types import SearchRequest, Strategy

from conftest import doc, ident, load, make_store, principal

REQUEST = SearchRequest(query="wire transfer approval", strategy=Strategy.KEYWORD)


def _bank(root: Path) -> SQLiteStore:
    store = make_store(root)
    load(store, [ident("ana@x.example", "A"), ident("dora@x.example", "D"),
                 doc("wire", "wire transfer approval limits", ["A"]),
                 doc("faq", "customers send wire transfer online", ["*"],
                     classification="public")])  # fmt: skip
    return store


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_searches_with_the_marker(tmp_path: Path) -> None:
    """The parent searched (its marker threads exist), then forks: the child's search must
    run its marker on threads of its own, not wait for the parent's forever."""
    store = _bank(tmp_path / "parent")
    assert store.search(principal("dora@x.example"), REQUEST).hidden.present
    pid = os.fork()
    if pid == 0:  # the child: any failure or hang is its exit status
        signal.alarm(60)  # a bound on a search that takes milliseconds, not a timing check
        try:
            child = _bank(tmp_path / "child")
            shown = child.search(principal("dora@x.example"), REQUEST).hidden.present
            os._exit(0 if shown else 4)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (
        f"the forked child's search hung or failed (status {status})"
    )
    store.close()


def test_a_closed_store_gives_back_what_its_vector_index_kept(tmp_path: Path) -> None:
    before = KEPT.nbytes()
    store = _bank(tmp_path)
    store.search(principal("ana@x.example"),
                 SearchRequest(query="wire transfer", strategy=Strategy.SEMANTIC))  # fmt: skip
    assert KEPT.nbytes() > before
    store.close()
    gc.collect()
    assert KEPT.nbytes() == before


@pytest.mark.parametrize("dim", [3, 7, 64, 100, 384, 385])
def test_a_gathered_matrix_scores_each_row_as_the_full_one_does(dim: int) -> None:
    """einsum sums every row alike: a row's score from the matrix of the caller's rows equals
    its score in the whole matrix, bit for bit (so the kept matrix changes no score)."""
    rng = np.random.default_rng(dim)
    matrix = rng.standard_normal((3000, dim)).astype(np.float32)
    query = rng.standard_normal(dim).astype(np.float32)
    full = np.einsum("ij,j->i", matrix, query)
    for _ in range(10):
        rows = np.flatnonzero(rng.random(3000) < rng.random())
        gathered = np.einsum("ij,j->i", np.ascontiguousarray(matrix[rows]), query)
        assert np.array_equal(gathered, full[rows]), sys.version
