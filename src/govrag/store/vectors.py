"""Exact vector search with numpy over the rows the caller's ACL allows.

An in-memory matrix per tenant, derived from the truth store like the lexical index. The ACL
is applied as a boolean mask over rows *before* any top-k selection: a document is allowed
when any of its ACL tokens is one of the caller's principal tokens. Nothing is post-filtered.
A filter's rows, and their vectors gathered into one contiguous matrix, are kept per filter
(corpora, principal tokens, ceiling) until the index changes, within one byte budget per
process (``kept_filters.py``): a caller's next search builds no mask and gathers nothing (at
half the rows readable, half the cost of a full product).

With a :class:`~govrag.store.binary_codes.BinaryPrefilter`, a search over many allowed rows
first keeps those whose 1-bit codes are closest to the query's, and scores exactly only them
(``binary_codes.py``: an approximation, opt-in, with noninterference kept).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from govrag.store.binary_codes import BinaryPrefilter, binary_code, closest, words_for
from govrag.store.kept_filters import KEPT, new_owner
from govrag.store.records import IndexedChunk

_F32 = npt.NDArray[np.float32]
#: Rows appended at a time (their vectors and codes in one numpy step).
_ADD_BATCH = 4096


class VectorIndex:
    """Vectors of one tenant with the access attributes needed to mask them."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.applied_seq = 0
        self._n = 0
        self._vecs: _F32 = np.zeros((0, dim), dtype=np.float32)
        self._words = words_for(dim)
        #: The rows' 1-bit codes, word-major (``binary_codes.py``).
        self._codes = np.zeros((self._words, 0), dtype=np.uint64)
        self._cid = np.zeros(0, dtype=np.int64)
        self._didx = np.zeros(0, dtype=np.int64)
        self._alive = np.zeros(0, dtype=bool)
        self._corpus = np.zeros(0, dtype=np.int32)
        self._cls = np.zeros(0, dtype=np.int8)
        self._corpus_codes: dict[str, int] = {}
        self._doc_index: dict[int, int] = {}  # doc_id -> dense doc index
        self._doc_rows: dict[int, list[int]] = {}  # dense doc index -> rows
        self._doc_tokens: dict[int, tuple[str, ...]] = {}
        self._token_docs: dict[str, set[int]] = {}
        self._token_arrays: dict[str, npt.NDArray[np.int64]] = {}
        self._dead = 0
        #: (query bytes, scores of every row) of the last full product; cleared on any change.
        self._memo: tuple[bytes, _F32] | None = None
        #: Who this index is in the process's kept filters (``kept_filters.py``); an index
        #: collected without :meth:`release` is forgotten there too.
        self._owner = new_owner()
        weakref.finalize(self, KEPT.forget_later, self._owner)

    def release(self) -> None:
        """Give back what this index keeps per filter (it is being dropped)."""
        KEPT.forget(self._owner)

    def __len__(self) -> int:
        return int(self._alive[: self._n].sum())

    # -- writes ----------------------------------------------------------------------------
    def replace(self, doc_ids: Iterable[int], chunks: Iterable[IndexedChunk]) -> None:
        """Drop every row of ``doc_ids``, then add ``chunks`` (whose docs must be among them)."""
        self._memo = None
        KEPT.drop(self._owner)
        for doc_id in doc_ids:
            self._drop_doc(doc_id)
        batch: list[IndexedChunk] = []
        for chunk in chunks:
            if chunk.vector is not None:
                batch.append(chunk)
            if len(batch) == _ADD_BATCH:
                self._add(batch)
                batch = []
        self._add(batch)
        if self._dead > 1024 and self._dead * 4 > self._n:
            self._compact()
        KEPT.hold(self._owner, self._n * self.dim * 4)

    def _drop_doc(self, doc_id: int) -> None:
        d = self._doc_index.get(doc_id)
        if d is None:
            return
        for row in self._doc_rows.pop(d, []):
            if self._alive[row]:
                self._alive[row] = False
                self._dead += 1
        for token in self._doc_tokens.pop(d, ()):
            docs = self._token_docs.get(token)
            if docs is not None:
                docs.discard(d)
                self._token_arrays.pop(token, None)

    def _add(self, chunks: Sequence[IndexedChunk]) -> None:
        """Append ``chunks`` (each with a vector) as rows: their vectors and codes in one
        step, their documents' bookkeeping one by one."""
        if not chunks:
            return
        vectors: list[_F32] = []
        for c in chunks:
            if c.vector is None or c.vector.shape != (self.dim,):
                shape = None if c.vector is None else c.vector.shape
                raise ValueError(f"vector of chunk {c.chunk_id} has shape {shape}")
            vectors.append(c.vector)
        vecs = np.stack(vectors)
        need = self._n + len(chunks)
        if need > len(self._cid):
            self._grow(max(1024, 2 * self._n, need))
        first = self._n
        rows = slice(first, need)
        self._vecs[rows] = vecs
        self._codes[:, rows] = binary_code(vecs, self._words).T
        self._alive[rows] = True
        for row, chunk in enumerate(chunks, start=first):
            d = self._doc_index.setdefault(chunk.doc_id, len(self._doc_index))
            if d not in self._doc_tokens:
                self._doc_tokens[d] = chunk.acl_tokens
                for token in chunk.acl_tokens:
                    self._token_docs.setdefault(token, set()).add(d)
                    self._token_arrays.pop(token, None)
            self._cid[row] = chunk.chunk_id
            self._didx[row] = d
            self._corpus[row] = self._corpus_codes.setdefault(chunk.corpus, len(self._corpus_codes))
            self._cls[row] = chunk.classification
            self._doc_rows.setdefault(d, []).append(row)
        self._n = need

    def _grow(self, capacity: int) -> None:
        def grow(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
            out = np.zeros(shape, dtype=a.dtype)
            out[: self._n] = a[: self._n]
            return out

        self._vecs = grow(self._vecs, (capacity, self.dim))
        codes = np.zeros((self._words, capacity), dtype=np.uint64)
        codes[:, : self._n] = self._codes[:, : self._n]
        self._codes = codes
        self._cid = grow(self._cid, (capacity,))
        self._didx = grow(self._didx, (capacity,))
        self._alive = grow(self._alive, (capacity,))
        self._corpus = grow(self._corpus, (capacity,))
        self._cls = grow(self._cls, (capacity,))

    def _compact(self) -> None:
        keep = np.flatnonzero(self._alive[: self._n])
        self._vecs = np.ascontiguousarray(self._vecs[keep])
        self._codes = np.ascontiguousarray(self._codes[:, keep])
        self._cid = self._cid[keep]
        self._didx = self._didx[keep]
        self._alive = self._alive[keep]
        self._corpus = self._corpus[keep]
        self._cls = self._cls[keep]
        self._n = len(keep)
        self._dead = 0
        self._doc_rows = {}
        for row, d in enumerate(self._didx.tolist()):
            self._doc_rows.setdefault(d, []).append(row)

    # -- reads -----------------------------------------------------------------------------
    def chunk_ids(self) -> set[int]:
        return {int(c) for c in self._cid[: self._n][self._alive[: self._n]]}

    def search(
        self,
        query: _F32,
        *,
        corpora: Sequence[str] | None,
        acl_tokens: Sequence[str] | None,
        max_classification: int | None,
        doc_ids: Sequence[int] | None,
        limit: int,
        prefilter: BinaryPrefilter | None = None,
    ) -> list[tuple[int, float]]:
        """Cosine top-``limit`` as (chunk id, score) over the allowed rows only: exact, or
        among the rows ``prefilter`` keeps when more than its ``min_rows`` are allowed."""
        n = self._n
        if n == 0 or (corpora is not None and not corpora):
            return []
        vecs: _F32 | None = None
        if doc_ids is None:
            rows, vecs = self._readable(corpora, acl_tokens, max_classification, prefilter)
        else:
            rows = self._rows(corpora, acl_tokens, max_classification, doc_ids)
        if len(rows) == 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32)
        if prefilter is not None and len(rows) > prefilter.min_rows:
            rows, vecs = closest(self._codes, self._n, rows, q, prefilter.rescore * limit), None
        key = q.tobytes()
        # einsum, not a BLAS product: BLAS kernels round a row's dot product differently
        # depending on where the row sits in the matrix, so a score (and an order among
        # near-ties) would depend on rows the caller cannot read. einsum sums every row
        # alike: the same row gives the same score in any matrix (the full one, a gathered
        # one, a cached one).
        if self._memo is not None and self._memo[0] == key:
            scores = self._memo[1][rows]  # same query, same matrix: reuse the full product
        elif vecs is not None:
            scores = np.einsum("ij,j->i", vecs, q)  # this filter's rows, gathered before
        elif len(rows) * 8 < n:
            # Gathering rows costs several times a product row; it pays only when selective.
            scores = np.einsum("ij,j->i", self._vecs[rows], q)
        else:
            full = np.einsum("ij,j->i", self._vecs[:n], q)
            self._memo = (key, full)
            scores = full[rows]
        k = min(limit, len(rows))
        if k < len(rows):
            kth = np.partition(scores, len(rows) - k)[len(rows) - k]
            top = np.flatnonzero(scores >= kth)  # keeps every row tied at the boundary
        else:
            top = np.arange(len(rows))
        cids = self._cid[rows[top]]
        top_scores = scores[top]
        # Order by score, then chunk id, so ties are deterministic across runs and backends.
        order = np.lexsort((cids, -top_scores))[:k]
        return [(int(cids[i]), float(top_scores[i])) for i in order]

    def _readable(
        self,
        corpora: Sequence[str] | None,
        acl_tokens: Sequence[str] | None,
        ceiling: int | None,
        prefilter: BinaryPrefilter | None,
    ) -> tuple[npt.NDArray[np.intp], _F32 | None]:
        """The rows a filter allows and, when not too large and not left to the prefilter,
        their vectors gathered: kept per filter until the index changes (a caller's next
        search rebuilds neither)."""
        key = (None if corpora is None else tuple(corpora),
               None if acl_tokens is None else tuple(acl_tokens), ceiling)  # fmt: skip
        found = KEPT.get(self._owner, key)
        if found is not None:
            return found
        rows = self._rows(corpora, acl_tokens, ceiling, None)
        vecs = None
        prefiltered = prefilter is not None and rows.size > prefilter.min_rows
        if not prefiltered and KEPT.may_gather(rows.size * self.dim * 4):
            # Gathered once, scored contiguously after: no gather per search, and at half
            # the rows readable half the cost of a full product.
            vecs = np.ascontiguousarray(self._vecs[rows])
        entry = (rows, vecs)
        KEPT.put(self._owner, key, entry)
        return entry

    def _rows(
        self,
        corpora: Sequence[str] | None,
        acl_tokens: Sequence[str] | None,
        max_classification: int | None,
        doc_ids: Sequence[int] | None,
    ) -> npt.NDArray[np.intp]:
        """The live rows in ``corpora`` at or below the ceiling that ``acl_tokens`` open,
        among ``doc_ids`` when given (``None``: no such limit)."""
        n = self._n
        mask = self._alive[:n].copy()
        if corpora is not None:  # None: every corpus of the tenant
            codes = [self._corpus_codes[c] for c in corpora if c in self._corpus_codes]
            if not codes:
                return np.zeros(0, dtype=np.intp)
            corpus_ok = self._corpus[:n] == codes[0]
            for code in codes[1:]:
                corpus_ok |= self._corpus[:n] == code
            mask &= corpus_ok
        if max_classification is not None:
            mask &= self._cls[:n] <= max_classification
        if acl_tokens is not None:
            mask &= self._doc_mask(acl_tokens)[self._didx[:n]]
        if doc_ids is not None:
            wanted = np.zeros(len(self._doc_index) + 1, dtype=bool)
            dense = [self._doc_index[i] for i in doc_ids if i in self._doc_index]
            wanted[dense] = True
            mask &= wanted[self._didx[:n]]
        rows: npt.NDArray[np.intp] = np.flatnonzero(mask)
        return rows

    def _doc_mask(self, tokens: Sequence[str]) -> npt.NDArray[np.bool_]:
        allowed = np.zeros(len(self._doc_index) + 1, dtype=bool)
        for token in tokens:
            arr = self._token_arrays.get(token)
            if arr is None:
                docs = self._token_docs.get(token)
                if not docs:
                    continue
                arr = np.fromiter(docs, dtype=np.int64, count=len(docs))
                self._token_arrays[token] = arr
            allowed[arr] = True
        return allowed
