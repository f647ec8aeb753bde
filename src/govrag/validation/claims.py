"""The optional post-synthesis check: does each answer sentence match some pack chunk?

A lexical check, deliberately simple and deterministic: a sentence is *supported* when at
least ``min_overlap`` of its distinct analysed terms occur in one chunk. It uses the index's
own analyzer, so "limits" in the answer matches "limit" in a chunk exactly as search would. It
catches sentences the pack says nothing about (invented figures, names, topics); it does not
prove entailment (a negated sentence shares its terms with the original).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from govrag.store.analyzer import default_analyzer
from govrag.types import PackChunk
from govrag.validation.report import ClaimCheck, ClaimReport

__all__ = ["check_claims", "split_sentences"]

# A sentence ends at ".", "!" or "?" followed by whitespace (the end of the text ends one too);
# a line break always ends one, so bullet lists are checked item by item.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|[\r\n]+")

# Citation markers the synthesis prompt asks for: "[1]", "[1, 2]", "[doc-id#0]",
# "[sp:policy-wire-limits-v3#2]". They name a source; they are not part of the claim.
_CITATION = re.compile(r"\[\s*[\w.:#/@-]+(?:\s*[,;]\s*[\w.:#/@-]+)*\s*\]")


def split_sentences(answer: str) -> list[str]:
    """Split ``answer`` into sentences as written (stripped; blank pieces dropped)."""
    return [s for s in (piece.strip() for piece in _SENTENCE_END.split(answer)) if s]


def check_claims(
    answer: str, chunks: Sequence[PackChunk], *, min_overlap: float = 0.5
) -> ClaimReport:
    """Check every sentence of ``answer`` against ``chunks``.

    Args:
        answer: the synthesised answer.
        chunks: the chunks the model was given (normally every chunk of the validated packs).
        min_overlap: least share (0..1) of a sentence's distinct analysed terms that must occur
            in one chunk for the sentence to count as supported.

    A sentence without analysed terms (only stopwords, punctuation or citation markers)
    asserts nothing and is supported. The best chunk is the one with the highest overlap,
    the first in ``chunks`` on ties.
    """
    analyzer = default_analyzer()
    # Each chunk is analysed once, not once per sentence.
    chunk_terms = [(c.chunk_id, frozenset(analyzer.analyze(c.text))) for c in chunks]
    claims: list[ClaimCheck] = []
    for sentence in split_sentences(answer):
        # Markers become a space, not nothing, so "limit[1]applies" cannot fuse into a new word.
        terms = set(analyzer.analyze(_CITATION.sub(" ", sentence)))
        if not terms:
            claims.append(ClaimCheck(sentence=sentence, supported=True, chunk_id=None, overlap=1.0))
            continue
        best_id: str | None = None
        best = 0.0
        for chunk_id, have in chunk_terms:
            overlap = len(terms & have) / len(terms)
            if overlap > best:  # strict: the first chunk keeps a tie
                best_id, best = chunk_id, overlap
        claims.append(
            ClaimCheck(
                sentence=sentence, supported=best >= min_overlap, chunk_id=best_id, overlap=best
            )
        )
    unsupported = tuple(c.sentence for c in claims if not c.supported)
    return ClaimReport(claims=tuple(claims), unsupported=unsupported, all_supported=not unsupported)
