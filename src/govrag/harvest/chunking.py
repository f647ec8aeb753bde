"""Paragraph-aware, token-bounded chunking with one parent ("section") level.

Retrieval works on small *leaf* chunks, which are embedded and indexed. When a document needs
more than one leaf, consecutive leaves are grouped under a larger *section* chunk that is stored
but not indexed, so a hit on a leaf can be widened to its section for context ("small-to-big").

"Tokens" here are whitespace-separated words (``str.split``). That is only an approximation of
model tokens (a model tokenizer usually yields somewhat more), which is why the default budgets
sit well below typical embedding-model limits. It is cheap, deterministic and needs no model.

Leaves are built by greedy packing over *units*: a paragraph (text between blank lines) is one
unit when it fits the budget; otherwise it is cut at sentence ends, and a sentence that is still
too long is cut every ``max_tokens`` words. No word is ever dropped, split or reordered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MIN_MAX_TOKENS", "ChunkSpec", "chunk_text"]

MIN_MAX_TOKENS = 16
"""Smallest accepted ``max_tokens``; tinier leaves carry too little context to retrieve on."""

# A blank line is a line holding only whitespace; runs of them count as one separator.
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# A sentence ends at ".", "?" or "!" followed by whitespace. Abbreviations ("e.g. ") also match;
# that only produces a cut point that is a little early, never a lost word.
_SENTENCE_END = re.compile(r"[.?!]\s+")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """One chunk of a document, before storage.

    Attributes:
        ordinal: position of the chunk in the document, ``0..n-1``; parents precede children.
        text: the chunk text.
        parent: ordinal of the enclosing section chunk, or ``None`` for top-level chunks.
        indexed: ``True`` for leaves (searched and embedded), ``False`` for section chunks
            (stored only, to give a leaf hit its wider context).
        token_count: number of whitespace-separated words in ``text``.
    """

    ordinal: int
    text: str
    parent: int | None
    indexed: bool
    token_count: int


@dataclass(frozen=True, slots=True)
class _Unit:
    """A span ``paragraphs[para][start:end]`` that is never split further when packing."""

    para: int
    start: int
    end: int
    tokens: int


def chunk_text(text: str, *, max_tokens: int = 300, section_tokens: int = 1200) -> list[ChunkSpec]:
    """Split ``text`` into leaf chunks of at most ``max_tokens`` words, grouped into sections.

    * Blank or empty text yields ``[]``.
    * A text of at most ``max_tokens`` words yields one indexed chunk (ordinal 0, no parent)
      holding the whole text, stripped.
    * Otherwise leaves are packed greedily from whole paragraphs (joined by a blank line);
      oversize paragraphs are cut at sentence ends, oversize sentences every ``max_tokens``
      words. Consecutive leaves are then grouped greedily into sections of at most
      ``section_tokens`` words. Each section becomes a non-indexed chunk whose text is its
      leaves joined by ``"\\n\\n"``, emitted immediately before those leaves.

    The words of the leaves, in ordinal order, are exactly the words of ``text``.

    Raises:
        ValueError: if ``max_tokens < 16`` or ``section_tokens < max_tokens``.
    """
    if max_tokens < MIN_MAX_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_MAX_TOKENS}, got {max_tokens}")
    if section_tokens < max_tokens:
        raise ValueError(
            f"section_tokens ({section_tokens}) must be at least max_tokens ({max_tokens})"
        )
    total = len(text.split())
    if total == 0:
        return []
    if total <= max_tokens:
        return [
            ChunkSpec(ordinal=0, text=text.strip(), parent=None, indexed=True, token_count=total)
        ]

    paragraphs = [p for p in (part.strip() for part in _PARAGRAPH_BREAK.split(text)) if p]
    units = [u for i, p in enumerate(paragraphs) for u in _paragraph_units(i, p, max_tokens)]
    leaves = [(_leaf_text(paragraphs, group), tokens) for group, tokens in _pack(units, max_tokens)]
    return _with_sections(leaves, section_tokens)


def _paragraph_units(para: int, paragraph: str, max_tokens: int) -> list[_Unit]:
    """Cut one (stripped, non-empty) paragraph into units of at most ``max_tokens`` words."""
    tokens = len(paragraph.split())
    if tokens <= max_tokens:
        return [_Unit(para, 0, len(paragraph), tokens)]
    units: list[_Unit] = []
    start = 0
    # Each sentence keeps its end punctuation; the whitespace after it is left between units.
    bounds = [(m.start() + 1, m.end()) for m in _SENTENCE_END.finditer(paragraph)]
    bounds.append((len(paragraph), len(paragraph)))
    for end, next_start in bounds:
        units.extend(_sentence_units(para, paragraph, start, end, max_tokens))
        start = next_start
    return units


def _sentence_units(
    para: int, paragraph: str, start: int, end: int, max_tokens: int
) -> list[_Unit]:
    """Return the sentence ``paragraph[start:end]`` as one unit, or hard-cut it by words."""
    words = list(_WORD.finditer(paragraph, start, end))
    if len(words) <= max_tokens:
        return [_Unit(para, start, end, len(words))]
    return [
        _Unit(para, piece[0].start(), piece[-1].end(), len(piece))
        for piece in (words[i : i + max_tokens] for i in range(0, len(words), max_tokens))
    ]


def _pack(units: list[_Unit], max_tokens: int) -> list[tuple[list[_Unit], int]]:
    """Greedily group consecutive units into leaves of at most ``max_tokens`` words."""
    leaves: list[tuple[list[_Unit], int]] = []
    current: list[_Unit] = []
    used = 0
    for unit in units:
        if current and used + unit.tokens > max_tokens:
            leaves.append((current, used))
            current, used = [], 0
        current.append(unit)
        used += unit.tokens
    if current:
        leaves.append((current, used))
    return leaves


def _leaf_text(paragraphs: list[str], units: list[_Unit]) -> str:
    """Render a leaf: pieces of one paragraph keep their original text between them."""
    parts: list[str] = []
    i = 0
    while i < len(units):
        j = i
        while j + 1 < len(units) and units[j + 1].para == units[i].para:
            j += 1
        parts.append(paragraphs[units[i].para][units[i].start : units[j].end])
        i = j + 1
    return "\n\n".join(parts)


def _with_sections(leaves: list[tuple[str, int]], section_tokens: int) -> list[ChunkSpec]:
    """Group leaves greedily into sections and number parents before their children."""
    sections: list[list[tuple[str, int]]] = []
    used = 0
    for leaf in leaves:
        if not sections or used + leaf[1] > section_tokens:
            sections.append([])
            used = 0
        sections[-1].append(leaf)
        used += leaf[1]

    chunks: list[ChunkSpec] = []
    for members in sections:
        # Every leaf gets a parent once there are several leaves, even a section holding a
        # single leaf: callers can then rely on "multi-leaf document => leaves have parents".
        parent = len(chunks)
        chunks.append(
            ChunkSpec(
                ordinal=parent,
                text="\n\n".join(leaf_text for leaf_text, _ in members),
                parent=None,
                indexed=False,
                token_count=sum(tokens for _, tokens in members),
            )
        )
        first_leaf = parent + 1
        chunks.extend(
            ChunkSpec(
                ordinal=first_leaf + k,
                text=leaf_text,
                parent=parent,
                indexed=True,
                token_count=tokens,
            )
            for k, (leaf_text, tokens) in enumerate(members)
        )
    return chunks
