"""govrag's BM25, with statistics over what the caller may read.

A ranking function whose collection statistics (document count, document frequency, average
length) span the whole index leaks: adding a document the caller cannot read changes the
idf of the terms it holds, and so the scores, and even the order, of documents the caller
can read. A single-term query's score alone would tell how many unreadable chunks hold that
term. So govrag computes every statistic over the caller's own candidate set (the chunks
the access predicate lets through, in the requested corpora, at or below the clearance,
narrowed by caller filters): nothing outside that set can move a score.

To let the engine do that, each chunk is indexed with one token per distinct term,
``term␟tf␟dl``: the term, its frequency in the chunk and the chunk's (quantised) length.
At query time the statistics come from counting those tokens under the caller's filter, and
every token gets a constant weight, ``idf(term) * saturation(tf, dl)``; the engine sums the
weights of the tokens a chunk holds, which is exactly its BM25 score. Lengths are quantised
(exact up to 32 terms, then in steps of about 10 %) so a common term has a few hundred
distinct tokens, not thousands; the quantised length is the length everywhere in the
formula, averages included.

    score(d) = sum over distinct query terms t in d of
               idf(t) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with ``N``, ``df`` and ``avgdl`` counted over the caller's candidate set.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable

K1 = 1.2
B = 0.75
#: Separates a token's parts; the analyzer never puts it inside a term.
SEP = "\x1f"


def _length_steps() -> tuple[int, ...]:
    steps = list(range(33))
    step = 32
    while step < 100_000_000:
        step = max(step + 1, step * 11 // 10)
        steps.append(step)
    return tuple(steps)


_STEPS = _length_steps()


def quantize_length(n: int) -> int:
    """The length a chunk of ``n`` terms counts as: ``n`` up to 32, then the largest step of
    the sequence 32, 35, 38, 41, ... (each about 10 % above the last) not above ``n``."""
    return _STEPS[bisect.bisect_right(_STEPS, max(0, n)) - 1]


def chunk_tokens(terms: Iterable[str]) -> tuple[list[str], int]:
    """The index tokens of a chunk's analyzed terms, and its quantised length."""
    counts = Counter(terms)
    dl = quantize_length(sum(counts.values()))
    return [f"{t}{SEP}{tf}{SEP}{dl}" for t, tf in counts.items()], dl


def parse_token(token: str) -> tuple[int, int]:
    """The ``(tf, dl)`` of an index token."""
    _, tf, dl = token.rsplit(SEP, 2)
    return int(tf), int(dl)


def idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def saturation(tf: int, dl: int, avgdl: float) -> float:
    norm = 1.0 - B + B * (dl / avgdl if avgdl > 0 else 0.0)
    return tf * (K1 + 1.0) / (tf + K1 * norm)
