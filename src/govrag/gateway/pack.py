"""Context packs: the bounded, attributable unit the app validates and the model may see.

Packing takes the reranked chunks in order and keeps each one whose tokens still fit the
budget; a chunk that does not fit is skipped (never cut: a pack quotes its sources whole),
and the pack records how many were dropped for the budget. The budget is never exceeded.
Token counts come from a pluggable counter; the offline default counts word pieces and
punctuation, which tracks subword tokenizers closely enough for budgeting (see
:class:`WordCounter`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from typing import Protocol

__all__ = ["ContextPack", "PackChunk", "TokenCounter", "Withheld", "WordCounter", "fit_to_budget",
           "new_pack_id"]  # fmt: skip

from govrag.types import ContextPack, PackChunk, SearchHit, Withheld


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class WordCounter:
    """Offline default: words, numbers and punctuation marks, each long word counted as
    one token per ``chars_per_token`` characters (subword tokenizers split long words)."""

    _TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)

    def __init__(self, chars_per_token: int = 6) -> None:
        self.chars_per_token = chars_per_token
        self.name = f"words/{chars_per_token}"

    def count(self, text: str) -> int:
        step = self.chars_per_token
        return sum(-(-len(t) // step) for t in self._TOKEN.findall(text))


def new_pack_id() -> str:
    return f"pack-{secrets.token_hex(8)}"


def fit_to_budget(
    hits: Sequence[SearchHit], budget: int, counter: TokenCounter
) -> tuple[list[PackChunk], int, int]:
    """``(chunks kept in rank order, their token total, chunks dropped for the budget)``."""
    kept: list[PackChunk] = []
    total = dropped = 0
    for hit in hits:
        tokens = counter.count(hit.text)
        if total + tokens > budget:
            dropped += 1
            continue
        total += tokens
        kept.append(
            PackChunk(
                doc_id=hit.doc_id,
                chunk_id=hit.chunk_id,
                corpus=hit.corpus,
                source_system=hit.source_system,
                text=hit.text,
                score=hit.score,
                token_count=tokens,
                origin=hit.origin,
                writeback=hit.writeback,
            )
        )
    return kept, total, dropped
