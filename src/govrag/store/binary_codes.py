"""1-bit codes of vectors: the vector leg's optional prefilter (SQLite).

A vector's code is the signs of its components, packed: 48 bytes for 384 dimensions, against
1,536 for the vector. Over many allowed rows, the Hamming distance of each row's code to the
query's (a popcount over a few machine words) ranks them roughly as their cosine does; only
the closest ``rescore * limit`` rows (every row tied with the last one kept) are then scored
exactly, and the result is the exact top ``limit`` among them (``vectors.py``). A row's code
and distance depend on that row and the query alone, and ties are kept whole, so which rows
are rescored, and so the result, depends only on the rows the caller may read
(noninterference, as for the exact scan). It is an approximation: an exact top-``limit`` row
whose code is far from the query's is missed. Dense semantic vectors keep recall (MiniLM at
``rescore`` 40: 0.997-0.999 on SciFact's 5k documents, 0.993-0.996 on 100k passages); the
hash embedder's do not (bench/RESULTS.md (r), (s)).

Codes are stored word-major (one array of 64-bit words per word of the code), so a distance
is a few contiguous passes rather than a reduction along a short axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
Rows = npt.NDArray[np.intp]


@dataclass(frozen=True)
class BinaryPrefilter:
    """Rank by the vectors' 1-bit codes first when more than ``min_rows`` rows are allowed,
    and score exactly only the ``rescore * limit`` closest."""

    min_rows: int
    rescore: int


def words_for(dim: int) -> int:
    """64-bit words per code of a ``dim``-dimensional vector."""
    return (dim + 63) // 64


def binary_code(vectors: npt.NDArray[np.floating], words: int) -> U64:
    """The sign bits of each row of ``vectors``, packed into ``words`` 64-bit words per row
    (zero-padded): a component above zero is a 1."""
    bits = np.packbits(np.asarray(vectors) > 0, axis=-1)
    pad = words * 8 - bits.shape[-1]
    if pad:
        bits = np.concatenate([bits, np.zeros((*bits.shape[:-1], pad), np.uint8)], axis=-1)
    return np.ascontiguousarray(bits).view(np.uint64)


def closest(codes: U64, n: int, rows: Rows, query: npt.NDArray[np.float32], keep: int) -> Rows:
    """The ``keep`` of ``rows`` whose codes (word-major, the first ``n`` columns live) are
    closest to the query's, with every row tied with the last one, in row order."""
    if keep >= len(rows):
        return rows
    words = codes.shape[0]
    code = binary_code(query[None, :], words)[0]
    # Gathering pays when few rows are allowed; else contiguous passes over every code.
    gather = len(rows) * 8 < n
    distance = np.zeros(len(rows) if gather else n, dtype=np.int16)
    for word in range(words):
        column = codes[word, rows] if gather else codes[word, :n]
        distance += np.bitwise_count(column ^ code[word])
    if not gather:
        distance = distance[rows]
    bound = np.partition(distance, keep - 1)[keep - 1]
    kept: Rows = rows[distance <= bound]
    return kept
