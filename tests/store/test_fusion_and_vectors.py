"""RRF by hand, and the vector index's masking, ties, updates and compaction, and its 1-bit
prefilter against a reference model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import govrag
from govrag.store.binary_codes import BinaryPrefilter, binary_code
from govrag.store.fusion import rrf
from govrag.store.kept_filters import KEPT, KeptFilters
from govrag.store.records import IndexedChunk
from govrag.store.vectors import VectorIndex

from conftest import examples


def test_rrf_by_hand() -> None:
    fused = dict(rrf([([1, 2, 3], 1.0), ([3, 1], 2.0)], k=60))
    assert fused[1] == pytest.approx(1 / 61 + 2 / 62)
    assert fused[2] == pytest.approx(1 / 62)
    assert fused[3] == pytest.approx(1 / 63 + 2 / 61)
    assert [i for i, _ in rrf([([1, 2, 3], 1.0), ([3, 1], 2.0)], k=60)] == [3, 1, 2]


def test_rrf_ties_and_zero_weight() -> None:
    assert rrf([([5], 1.0), ([4], 1.0)]) == [(4, 1 / 61), (5, 1 / 61)]
    assert rrf([([1], 0.0)]) == []
    with pytest.raises(ValueError):
        rrf([], k=0)


def chunk(cid: int, doc: int, vec: list[float], acl: tuple[str, ...], corpus: str = "c",
          cls: int = 0) -> IndexedChunk:  # fmt: skip
    v = np.asarray(vec, dtype=np.float32)
    return IndexedChunk(cid, doc, "", acl, corpus, cls, vector=v / np.linalg.norm(v))


def search(index: VectorIndex, tokens: list[str] | None, **kw: object) -> list[int]:
    args = {"corpora": ["c"], "max_classification": 3, "doc_ids": None, "limit": 10, **kw}
    q = np.asarray([1.0, 0.0], dtype=np.float32)
    return [c for c, _ in index.search(q, acl_tokens=tokens, **args)]  # type: ignore[arg-type]


def test_mask_before_top_k() -> None:
    index = VectorIndex(2)
    # The best vectors belong to documents the caller may not read.
    index.replace([], [chunk(i, i, [1.0, 0.01 * i], ("other",)) for i in range(1, 50)])
    index.replace([], [chunk(100, 100, [0.1, 1.0], ("me",))])
    assert search(index, ["me"], limit=1) == [100]
    assert search(index, None, limit=1) == [1]
    assert search(index, []) == []


def test_filters_ties_updates_and_compaction() -> None:
    index = VectorIndex(2)
    index.replace([], [chunk(i, i, [1.0, 0.0], ("*",), cls=i % 4) for i in range(2000)])
    assert search(index, ["*"], limit=3) == [0, 1, 2]  # ties ordered by chunk id
    assert search(index, ["*"], limit=3, max_classification=0) == [0, 4, 8]
    assert search(index, ["*"], limit=3, doc_ids=[7, 5]) == [5, 7]
    assert search(index, ["*"], corpora=["nope"]) == []
    index.replace(range(1500), [])  # drop most documents: triggers compaction
    assert len(index) == 500 and index._dead == 0
    assert search(index, ["*"], limit=2) == [1500, 1501]
    index.replace([1500], [chunk(9999, 1500, [1.0, 0.0], ("x",))])  # revoked and re-added
    assert search(index, ["*"], limit=2) == [1501, 1502]
    assert search(index, ["x"]) == [9999]


# -- the 1-bit prefilter ---------------------------------------------------------------------------
def _reference_prefiltered(
    vectors: np.ndarray, allowed: list[int], query: np.ndarray, keep: int, limit: int
) -> list[tuple[int, float]]:
    """Written without govrag's code: the allowed rows whose sign patterns differ from the
    query's in the fewest components (every row tied with the ``keep``-th kept), then the
    exact cosine top ``limit`` among them, ties by row."""

    def distance(row: int) -> int:
        return sum((vectors[row][j] > 0) != (query[j] > 0) for j in range(len(query)))

    by_distance = sorted(distance(r) for r in allowed)
    bound = by_distance[min(keep, len(allowed)) - 1] if allowed else 0
    kept = [r for r in allowed if distance(r) <= bound]
    scored = [(r, float(np.dot(vectors[r], query))) for r in kept]
    return sorted(scored, key=lambda p: (-p[1], p[0]))[:limit]


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 120),
    dim=st.sampled_from([3, 8, 64, 70]),
    rescore=st.integers(1, 5),
    limit=st.integers(1, 8),
)
def test_the_prefilter_matches_its_reference_model(
    seed: int, n: int, dim: int, rescore: int, limit: int
) -> None:
    """Random vectors and ACLs: the prefiltered search returns exactly the reference model's
    rows and scores, only rows the caller may read, and as many as an exact search would."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    acl = [("me",) if rng.random() < 0.5 else ("other",) for _ in range(n)]
    index = VectorIndex(dim)
    index.replace([], [IndexedChunk(i + 1, i + 1, "", acl[i], "c", 0, vector=vectors[i])
                       for i in range(n)])  # fmt: skip
    query = rng.normal(size=dim).astype(np.float32)
    args = {"corpora": None, "acl_tokens": ["me"], "max_classification": None,
            "doc_ids": None, "limit": limit}  # fmt: skip
    got = index.search(query, **args, prefilter=BinaryPrefilter(0, rescore))  # type: ignore[arg-type]
    allowed = [i for i in range(n) if acl[i] == ("me",)]
    want = _reference_prefiltered(vectors, allowed, query, rescore * limit, limit)
    assert [c - 1 for c, _ in got] == [r for r, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)
    exact = index.search(query, **args)  # type: ignore[arg-type]
    assert len(got) == len(exact) == min(limit, len(allowed))


def test_the_prefilter_waits_for_enough_rows_and_keeps_what_it_cannot_cut() -> None:
    rng = np.random.default_rng(1)
    index = VectorIndex(16)
    vecs = rng.normal(size=(300, 16)).astype(np.float32)
    index.replace([], [IndexedChunk(i, i, "", ("*",), "c", 0, vector=v) for i, v in
                       enumerate(vecs)])  # fmt: skip
    q = rng.normal(size=16).astype(np.float32)
    args = {"corpora": None, "acl_tokens": ["*"], "max_classification": None, "doc_ids": None,
            "limit": 5}  # fmt: skip
    exact = index.search(q, **args)  # type: ignore[arg-type]
    # At most min_rows allowed rows, or a budget that keeps every row: the exact answer.
    assert index.search(q, **args, prefilter=BinaryPrefilter(300, 1)) == exact  # type: ignore[arg-type]
    assert index.search(q, **args, prefilter=BinaryPrefilter(0, 60)) == exact  # type: ignore[arg-type]


def test_binary_codes_are_the_signs_packed() -> None:
    codes = binary_code(np.asarray([[1.0, -1.0, 0.0, 2.0] + [0.0] * 60 + [3.0]]), 2)
    assert codes.shape == (1, 2) and codes.dtype == np.uint64
    bits = np.unpackbits(codes.view(np.uint8), axis=-1)[0]
    assert bits[:4].tolist() == [1, 0, 0, 1] and bits[64] == 1 and bits.sum() == 3


def test_config_check_warns_of_the_prefilter_on_hash_vectors(tmp_path: Path) -> None:
    """Measured: the sign codes of hash vectors say little (recall@10 0.02-0.13 at 100k), so a
    deployment that turns the prefilter on with the hash embedder is told so."""
    govrag.init(tmp_path / "hash", tenant="bank")
    with govrag.open(tmp_path / "hash", search={"binary_prefilter_rows": 10_000}) as app:
        (warned,) = [p for p in app.operators.config_check().problems
                     if p.field == "search.binary_prefilter_rows"]  # fmt: skip
        assert warned.warning and "minilm" in warned.message
    with govrag.open(tmp_path / "hash") as app:  # off by default: nothing to say
        assert not [p for p in app.operators.config_check().problems if "binary" in p.field]


def test_a_callers_cached_rows_never_outlive_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter's rows (and gathered vectors) are kept between searches, and any change to
    the index drops them: a revocation shows in the very next search with the same filter,
    and the kept filters stay within their byte budget."""
    index = VectorIndex(2)
    index.replace([], [chunk(i, i, [1.0, 0.01 * i], ("me",)) for i in range(1, 20)])
    assert search(index, ["me"], limit=2) == [1, 2]
    assert search(index, ["me"], limit=2) == [1, 2]  # from the kept rows
    index.replace([1], [chunk(1, 1, [1.0, 0.01], ("other",))])  # revoked for "me"
    assert search(index, ["me"], limit=2) == [2, 3]
    monkeypatch.setattr("govrag.store.kept_filters.BUDGET_BYTES", 600)
    other = VectorIndex(2)  # the budget is the process's: every index shares it
    other.replace([], [chunk(i, i, [1.0, 0.02 * i], ("me",)) for i in range(1, 20)])
    for token in ("me", "other", "*", "x"):
        search(index, [token])
        search(other, [token])
        assert KEPT.nbytes() <= 600
    index.release()
    other.release()


def test_kept_filters_drop_their_owner_and_stay_within_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("govrag.store.kept_filters.BUDGET_BYTES", 1_000)
    kept = KeptFilters()
    rows = np.arange(50, dtype=np.intp)  # 400 bytes
    kept.put(1, "a", (rows, None))
    kept.put(2, "a", (rows, None))
    assert kept.get(1, "a") is not None and kept.nbytes() == 800
    kept.put(1, "b", (rows, None))  # over budget: the least recently used goes (owner 2's)
    assert kept.get(2, "a") is None and kept.nbytes() == 800
    kept.drop(1)
    assert kept.nbytes() == 0 and kept.get(1, "a") is None and kept.get(1, "b") is None


def test_the_kept_budget_grows_with_the_vectors_held_and_shrinks_when_they_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A quarter of what the indexes hold may be kept (at least the floor): a large index's
    filters stay kept, and an index holding nothing stops widening the budget (trimming what is
    over it)."""
    monkeypatch.setattr("govrag.store.kept_filters.BUDGET_BYTES", 1_000)
    kept = KeptFilters()
    rows = np.arange(100, dtype=np.intp)  # 800 bytes
    assert kept.budget() == 1_000 and not kept.may_gather(800)
    kept.hold(7, 8_000)
    assert kept.budget() == 2_000 and kept.may_gather(800)
    kept.put(7, "a", (rows, None))
    kept.put(7, "b", (rows, None))
    assert kept.nbytes() == 1_600
    kept.hold(7, 0)  # its vectors shrank to nothing: back to the floor, the oldest entry out
    assert kept.budget() == 1_000 and kept.nbytes() == 800 and kept.get(7, "a") is None


def test_an_index_says_what_it_holds_until_released() -> None:
    before = KEPT.budget()
    index = VectorIndex(256)
    index.replace([], [chunk(i, i, [1.0] * 256, ("me",)) for i in range(1, 5)])
    assert KEPT._held[index._owner] == 4 * 256 * 4  # white-box: what the index said
    index.release()
    assert index._owner not in KEPT._held and KEPT.budget() == before


def test_an_index_collected_without_release_is_forgotten() -> None:
    import gc

    index = VectorIndex(2)
    index.replace([], [chunk(i, i, [1.0, 0.01 * i], ("me",)) for i in range(1, 5)])
    search(index, ["me"])
    owner = index._owner  # white-box: the index's name in the kept filters
    del index
    gc.collect()
    KEPT.nbytes()  # any call forgets what was collected
    assert owner not in KEPT._held
    assert not [k for k in KEPT._entries if k[0] == owner]


def test_rows_added_in_batches_are_the_rows_added_one_by_one() -> None:
    """A streamed load (more rows than one batch, from a generator) holds each row as adding
    it alone would: vector, code, chunk, document, corpus and classification, in order."""
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((5000, 16)).astype(np.float32)
    rows = [IndexedChunk(i + 1, i // 3, "", (f"g{i % 7}",), f"c{i % 2}", i % 4, vector=v)
            for i, v in enumerate(vectors)]  # fmt: skip
    streamed, alone = VectorIndex(16), VectorIndex(16)
    streamed.replace([], (r for r in rows))
    for r in rows:
        alone.replace([], [r])
    for name in ("_vecs", "_codes", "_cid", "_didx", "_corpus", "_cls", "_alive"):
        a, b = getattr(streamed, name), getattr(alone, name)  # white-box: the stored rows
        assert np.array_equal(a[..., : streamed._n], b[..., : alone._n]), name
    assert streamed._doc_rows == alone._doc_rows
    q = vectors[42]
    args: dict[str, object] = {"corpora": None, "acl_tokens": ["g0", "g3"],
                               "max_classification": 2, "doc_ids": None, "limit": 10}  # fmt: skip
    assert streamed.search(q, **args) == alone.search(q, **args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vector of chunk 9 has shape"):
        streamed.replace([], [IndexedChunk(9, 9, "", (), "c", 0, vector=np.zeros(3, np.float32))])
