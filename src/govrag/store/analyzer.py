"""The single text analyzer behind every BM25 index in govrag.

Both the tantivy index (fed the analyzed terms joined by spaces, with a whitespace tokenizer)
and the in-memory BM25 overlay consume the output of :class:`Analyzer`. Documents and queries
must go through the same pipeline or lexical matching silently degrades, so there is deliberately
one analyzer with no tunable knobs that change its output.

Pipeline, in order:

1. neutralise lone surrogates (they cannot be encoded and would crash the stemmer);
2. Unicode NFKC normalisation (full-width forms, ligatures, superscripts fold to plain text);
3. casefold (stronger than ``lower``: ``"Straße"`` and ``"STRASSE"`` agree);
4. split into words: runs of letters and digits, with combining marks kept inside a word;
   punctuation, underscores, symbols and whitespace separate words;
5. drop one-character words unless they are a digit, words longer than
   :data:`MAX_TOKEN_CHARS`, and English stopwords;
6. Snowball English stemming (PyStemmer).

Bump :data:`ANALYZER_VERSION` whenever the output for some input changes, so that stored indexes
built with an older pipeline can be detected and rebuilt.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import unicodedata

import Stemmer

__all__ = [
    "ANALYZER_VERSION",
    "MAX_TOKEN_CHARS",
    "STOPWORDS",
    "Analyzer",
    "default_analyzer",
]

ANALYZER_VERSION = "1"
"""Identifies the analysis pipeline; stored with indexes to detect a stale index."""

MAX_TOKEN_CHARS = 64
"""Words longer than this (in code points, before stemming) are dropped as noise."""

# Typed from the usual IR-toolkit English list. "us" is left out on purpose: after casefolding
# it is also "US", which is a meaningful term in government text.
# fmt: off
STOPWORDS: frozenset[str] = frozenset({
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "aren", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both",
    "but", "by", "can", "cannot", "could", "couldn", "did", "didn", "do", "does", "doesn",
    "doing", "don", "down", "during", "each", "either", "few", "for", "from", "further", "had",
    "hadn", "has", "hasn", "have", "haven", "having", "he", "her", "here", "hers", "herself",
    "him", "himself", "his", "how", "i", "if", "in", "into", "is", "isn", "it", "its", "itself",
    "just", "ll", "me", "more", "most", "my", "myself", "neither", "no", "nor", "not", "now",
    "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves",
    "out", "over", "own", "re", "same", "she", "should", "shouldn", "so", "some", "such",
    "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these",
    "they", "this", "those", "through", "to", "too", "under", "until", "up", "upon", "ve",
    "very", "was", "wasn", "we", "were", "weren", "what", "when", "where", "whether", "which",
    "while", "who", "whom", "whose", "why", "will", "with", "would", "wouldn", "yet", "you",
    "your", "yours", "yourself", "yourselves",
})
"""English stopwords, matched against casefolded words before stemming."""
# fmt: on

# Variation selectors are presentation hints (emoji vs text style), not part of a word's
# spelling; keeping them would make visually identical words index as different terms.
_VARIATION_SELECTORS = range(0xFE00, 0xFE10)

# Combining marks beyond the Supplementary Multilingual Plane are only the variation selector
# supplement (U+E0100..U+E01EF), which is excluded anyway; scanning just the first two planes
# keeps building the pattern cheap (~20 ms, once per process).
_MARK_SCAN_END = min(sys.maxunicode, 0x1FFFF) + 1


def _class_body(codepoints: list[int]) -> str:
    """Render sorted code points as a regex character-class body of compressed ranges."""
    parts: list[str] = []
    i = 0
    while i < len(codepoints):
        j = i
        while j + 1 < len(codepoints) and codepoints[j + 1] == codepoints[j] + 1:
            j += 1
        lo, hi = codepoints[i], codepoints[j]
        parts.append(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}")
        i = j + 1
    return "".join(parts)


@functools.cache
def _word_pattern() -> re.Pattern[str]:
    """Compile the word regex for non-ASCII text (built once per process)."""
    marks = [
        cp
        for cp in range(_MARK_SCAN_END)
        if unicodedata.category(chr(cp)).startswith("M") and cp not in _VARIATION_SELECTORS
    ]
    bmp = _class_body([cp for cp in marks if cp <= 0xFFFF])
    astral = _class_body([cp for cp in marks if cp > 0xFFFF])
    # `[^\W_]` is "Unicode letter or digit". Marks are allowed only after a letter or digit has
    # started the word; without them, scripts such as Devanagari (vowel signs, virama) or
    # sequences casefolding leaves decomposed ("İ" -> "i̇") would be shredded into fragments.
    # sre turns an all-BMP class into an O(1) bitmap lookup but checks astral ranges one by one,
    # so the astral class hides behind a one-range lookahead that almost always fails fast.
    mark = rf"[{bmp}]"
    if astral:
        mark = rf"(?:{mark}|(?=[\U00010000-\U0010ffff])[{astral}])"
    return re.compile(rf"[^\W_]+(?:{mark}+[^\W_]*)*")


# ASCII text cannot contain marks, so the plain class suffices and skips the mark checks.
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def _normalise(text: str) -> str:
    """Return NFKC-normalised, casefolded text with lone surrogates replaced."""
    if text.isascii():
        # For ASCII, NFKC is the identity and casefold equals lower.
        return text.lower()
    # Lone surrogates are legal in a Python str but not encodable; turn them into "?" (a
    # separator) so no later stage, the stemmer in particular, ever sees one.
    text = text.encode("utf-8", "replace").decode("utf-8")
    folded = unicodedata.normalize("NFKC", text).casefold()
    # Casefolding can leave text that is no longer NFKC (full case folding decomposes a few
    # characters, e.g. "ǰ" -> "j" + U+030C); renormalising approximates Unicode's NFKC_Casefold.
    # The quick check makes this nearly free when nothing needs recomposing.
    if not unicodedata.is_normalized("NFKC", folded):
        folded = unicodedata.normalize("NFKC", folded)
    return folded


def _term_for(word: str, stem: str) -> str:
    """Map a casefolded word and its stem to its index term; "" means "drop the word"."""
    n = len(word)
    if n == 1:
        return word if word.isdigit() else ""
    if n > MAX_TOKEN_CHARS or word in STOPWORDS:
        return ""
    return stem


class Analyzer:
    """Turns text into BM25 index terms.

    Instances are thread-safe. Prefer :func:`default_analyzer` to constructing one; a private
    instance only buys an isolated term cache (useful in tests).

    Args:
        term_cache_size: how many distinct words to memoise (word -> term). The cache is
            cleared when it would grow past this bound, which keeps memory flat on noisy
            corpora at the price of an occasional cold start. ``0`` disables it.
    """

    def __init__(self, *, term_cache_size: int = 200_000) -> None:
        if term_cache_size < 0:
            raise ValueError(f"term_cache_size must be >= 0, got {term_cache_size}")
        self._stemmer = Stemmer.Stemmer("english")
        # PyStemmer objects keep per-instance buffers and are not safe to call concurrently.
        self._stemmer_lock = threading.Lock()
        # Maps a casefolded word straight to its term, with "" for dropped words, so the hot
        # path is one dict lookup per word covering filtering and stemming together; that is
        # several times faster than stemWords (even with PyStemmer's own cache), and real
        # vocabularies are Zipfian so the hit rate is very high.
        self._term_cache: dict[str, str] = {}
        self._term_cache_size = term_cache_size

    def analyze(self, text: str) -> list[str]:
        """Return the index terms of ``text`` in order of occurrence (duplicates kept).

        Never raises for a ``str`` input; every term is non-empty and contains no whitespace.
        """
        folded = _normalise(text)
        # The non-ASCII pattern takes ~0.2 s to build (a scan of the Unicode marks), so a
        # process that only ever sees ASCII (most queries) never builds it.
        word_re = _ASCII_WORD if folded.isascii() else _word_pattern()
        words = word_re.findall(folded)
        if not words:
            return []
        get = self._term_cache.get
        terms = [get(w) for w in words]
        if None in terms:
            terms = self._fill_misses(words, terms)
        return [t for t in terms if t]

    def analyze_to_string(self, text: str) -> str:
        """Return the terms of ``text`` joined by single spaces (for a whitespace tokenizer)."""
        return " ".join(self.analyze(text))

    def _fill_misses(self, words: list[str], terms: list[str | None]) -> list[str | None]:
        """Resolve the words the cache did not know, remember them, and return all terms."""
        missing = list({w for w, t in zip(words, terms, strict=True) if t is None})
        with self._stemmer_lock:
            stems: list[str] = self._stemmer.stemWords(missing)
        fresh = {w: _term_for(w, s) for w, s in zip(missing, stems, strict=True)}
        cache = self._term_cache
        if len(fresh) <= self._term_cache_size:
            if len(cache) + len(fresh) > self._term_cache_size:
                cache.clear()
            cache.update(fresh)
        # Resolve from `fresh`, not the shared cache: another thread may clear it meanwhile.
        return [fresh[w] if t is None else t for w, t in zip(words, terms, strict=True)]


_default_lock = threading.Lock()
_default: Analyzer | None = None


def default_analyzer() -> Analyzer:
    """Return the process-wide shared :class:`Analyzer` (created on first use)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Analyzer()
    return _default
