"""A deterministic, dependency-free feature-hashing embedder.

``HashEmbedder`` is **not a semantic model**. It knows nothing about meaning: "car" and
"automobile" share no features and are unrelated to it. Two texts are similar only when they
share words or spellings. Use it for tests (fast, reproducible, no model download) and for
lexical-only deployments that want a vector index without installing ``govrag[semantic]``.

How a text becomes a vector:

1. Lower-case the text and split it into ``\\w+`` words.
2. Each word yields one *word feature* plus the character trigrams of the word padded with
   boundary marks (``cat`` -> ``^ca``, ``cat``, ``at$``), so near-identical spellings
   ("colour"/"color", "embedder"/"embeddings") share most of their features.
3. Each distinct feature is hashed with BLAKE2b (8-byte digest). The digest modulo ``dim`` picks
   the vector component and the digest's top bit picks a sign, so colliding features tend to
   cancel instead of piling up.
4. A feature seen ``tf`` times in the text contributes ``sign * (1 + ln tf)``; the vector is then
   L2-normalised.

The output depends only on the text and ``dim``: no Python ``hash()`` (salted per process), and
no dependence on what the instance embedded before (see ``_QUANTUM``), so vectors are
bit-identical across processes, machines with the same numpy, batch sizes and call order.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np
import numpy.typing as npt

from govrag.embed.base import FloatArray, ProgressCallback, check_batch_args
from govrag.errors import ConfigError

_WORD = re.compile(r"\w+")

# Features that collide in one component are summed in feature-id order, and feature ids depend
# on what the instance has seen before. Float addition is not associative, so to make the output
# independent of that history, weights are rounded to multiples of 2**-30 first: sums of such
# numbers are exact in float64 (hence order-free) while they stay below 2**23, far above any
# real text. Reordering differences would almost never survive the float32 cast anyway; this
# turns "almost never" into "never". The rounding error (< 1e-9) is invisible in float32.
_QUANTUM = float(2**30)

# The feature caches grow with the vocabulary seen. A long-lived process embedding unbounded
# user input would grow them forever, so they are dropped once this many entries accumulate.
_MAX_CACHE_ENTRIES = 2_000_000

# Texts vectorised together. Throughput peaks around 32-64 texts (the working arrays stay in
# CPU cache) and drops ~30% at 256, so larger caller batches are split; progress is still
# reported per caller batch.
_MAX_CHUNK = 64


class _GrowableInts:
    """An append-only int64 array with amortised O(1) appends (capacity doubling)."""

    def __init__(self) -> None:
        self._data = np.zeros(1024, dtype=np.int64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def _reserve(self, needed: int) -> None:
        grown = np.zeros(max(needed, 2 * len(self._data)), dtype=np.int64)
        grown[: self._size] = self._data[: self._size]
        self._data = grown

    def extend(self, values: Sequence[int]) -> None:
        needed = self._size + len(values)
        if needed > len(self._data):
            self._reserve(needed)
        self._data[self._size : needed] = values
        self._size = needed

    def append(self, value: int) -> None:
        if self._size == len(self._data):
            self._reserve(self._size + 1)
        self._data[self._size] = value
        self._size += 1

    @property
    def view(self) -> npt.NDArray[np.int64]:
        return self._data[: self._size]


class _WordTable(dict[str, int]):
    """Word -> word id; an unknown word is learned on lookup.

    Lookups then run as ``map(table.__getitem__, words)`` at C speed for known words, with no
    separate pass to find the new ones.
    """

    def __init__(self, learn: Callable[[str], int]) -> None:
        super().__init__()
        self._learn = learn

    def __missing__(self, word: str) -> int:
        word_id = self._learn(word)
        self[word] = word_id
        return word_id


def _word_features(word: str) -> list[str]:
    """The feature strings of one word: the word itself and its padded character trigrams."""
    padded = f"^{word}$"
    # Prefixes keep the word "the" and the trigram "the" apart as two features.
    return [f"w:{word}", *(f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2))]


def _feature_hash(feature: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little"
    )


class HashEmbedder:
    """Feature-hashing embedder: lexical, deterministic, needs only numpy and hashlib.

    Not semantic: similarity means shared words and spellings, never shared meaning. See the
    module documentation for the exact recipe.

    Args:
        dim: Vector length. Larger means fewer hash collisions; 384 matches MiniLM so the two
            are interchangeable in index configurations.

    Raises:
        ConfigError: ``dim`` is not a positive integer.
    """

    name: str = "hash"

    def __init__(self, dim: int = 384) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"hash embedder: dim must be a positive integer, got {dim!r}")
        self.dim: int = dim
        # A hashlib call plus feature-string building costs microseconds per feature, and text
        # vocabularies are Zipfian, so each distinct word and feature is hashed once and kept:
        #   word -> word id; word id -> its feature ids (CSR: start, length, flat ids);
        #   feature string -> feature id; feature id -> component index and signed unit.
        self._lock = threading.Lock()
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._word_ids = _WordTable(self._learn_word)
        self._word_start = _GrowableInts()
        self._word_len = _GrowableInts()
        self._word_feats = _GrowableInts()
        self._feature_ids: dict[str, int] = {}
        self._feature_index = _GrowableInts()
        self._feature_sign = _GrowableInts()

    def _learn_word(self, word: str) -> int:
        """Hash and cache the features of a word not seen before; return its new word id."""
        features = _word_features(word)
        fids: list[int] = []
        new_index: list[int] = []
        new_sign: list[int] = []
        for feature in features:
            fid = self._feature_ids.get(feature)
            if fid is None:
                fid = len(self._feature_ids)
                self._feature_ids[feature] = fid
                digest = _feature_hash(feature)
                new_index.append(digest % self.dim)
                new_sign.append(1 if digest >> 63 else -1)
            fids.append(fid)
        self._feature_index.extend(new_index)
        self._feature_sign.extend(new_sign)
        self._word_start.append(len(self._word_feats))
        self._word_len.append(len(fids))
        self._word_feats.extend(fids)
        return len(self._word_len) - 1

    def _embed_batch(self, texts: Sequence[str]) -> FloatArray:
        n = len(texts)
        token_lists = [_WORD.findall(text.lower()) for text in texts]
        words_per_text = np.fromiter(map(len, token_lists), dtype=np.int64, count=n)
        total_words = int(words_per_text.sum())
        if total_words == 0:
            return np.zeros((n, self.dim), dtype=np.float32)

        with self._lock:
            if len(self._word_ids) + len(self._feature_ids) > _MAX_CACHE_ENTRIES:
                self._reset_caches()
            word_ids = np.fromiter(
                map(self._word_ids.__getitem__, chain.from_iterable(token_lists)),
                dtype=np.int64,
                count=total_words,
            )
            # Snapshot the views: another thread may grow (reallocate) the arrays later.
            word_start = self._word_start.view[word_ids]
            word_len = self._word_len.view[word_ids]
            word_feats = self._word_feats.view
            feature_index = self._feature_index.view
            feature_sign = self._feature_sign.view
            n_features = len(self._feature_ids)

        # Expand every word occurrence into its feature ids, remembering the text (row) each
        # feature occurrence came from. Pure index arithmetic, no Python loop per word.
        word_rows = np.repeat(np.arange(n, dtype=np.int64), words_per_text)
        feat_rows = np.repeat(word_rows, word_len)
        first_of_word = np.repeat(np.cumsum(word_len) - word_len, word_len)
        within_word = np.arange(len(feat_rows), dtype=np.int64) - first_of_word
        feat_ids = word_feats[np.repeat(word_start, word_len) + within_word]

        # Term frequency of each (text, feature) pair.
        keys, tf = np.unique(feat_rows * n_features + feat_ids, return_counts=True)
        rows, fids = np.divmod(keys, n_features)
        weights = feature_sign[fids] * (1.0 + np.log(tf))
        weights = np.round(weights * _QUANTUM) / _QUANTUM

        out = np.bincount(
            rows * self.dim + feature_index[fids], weights=weights, minlength=n * self.dim
        ).reshape(n, self.dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        # Token-free texts keep their zero row rather than dividing by zero.
        np.divide(out, norms, out=out, where=norms > 0)
        return out.astype(np.float32)

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 64,
        progress: ProgressCallback | None = None,
    ) -> FloatArray:
        """Embed ``texts`` as unit-norm ``float32`` rows of shape ``(len(texts), dim)``.

        A text without any word characters (empty, whitespace, punctuation only) has no
        features and embeds as the zero vector.

        Raises:
            InputError: ``texts`` is a bare string or ``batch_size`` is below 1.
        """
        check_batch_args(texts, batch_size)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            stop = min(start + batch_size, len(texts))
            for sub in range(start, stop, _MAX_CHUNK):
                sub_stop = min(sub + _MAX_CHUNK, stop)
                out[sub:sub_stop] = self._embed_batch(texts[sub:sub_stop])
            if progress is not None:
                progress(stop - start)
        return out

    def embed_query(self, text: str) -> FloatArray:
        """Embed one query as a unit-norm ``float32`` vector of shape ``(dim,)``."""
        result: FloatArray = self._embed_batch([text])[0]
        return result

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim})"
