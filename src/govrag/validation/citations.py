"""Citation markers: the one reader of ``[chunk id]`` in a model's answer.

The claim check (what a sentence cites, and whether it is supported) and the answer's citation
list (what the response audit event, replay and the access counter record) read markers with
this one parser, so what was judged is what is recorded.

A marker is a bracket whose items, separated by ``,`` or ``;``, name handed chunks: each item
is matched **literally** against the ids of the chunks handed to the call (and their documents'
ids), longest first, and counts only when a separator or the closing bracket follows it. So an
id holding ``,`` ``;`` ``[`` ``]`` or spaces (a file source's ``minutes/Board, 5 January.md``)
is cited as it is shown, with no escaping; and an item can never *be* a handed id without
spelling it out in full, so no spelling cites a chunk that was not named. A document id names
every handed chunk of that document.

A bracket without a handed id is a marker only when its items are id-shaped (no spaces): then
they are *unknown* (a forged citation: ``[1]``, ``[sp:other#0]``). Any other bracket
(``[see annex 2]``) is text. Items that name nothing handed, beside one that does, are unknown
too (``[c#0, sp:other#1]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from govrag.types import PackChunk

__all__ = ["Citations", "Marker"]

#: One item that names nothing handed: up to the next separator, bracket or line end.
_ITEM = re.compile(r"[^\[\],;\n]{0,300}")
_BLANK = re.compile(r"[ \t]*")
#: What must follow a literally matched id: optional blanks, then a separator or the close.
_AFTER_ID = r"(?=[ \t]*[,;\]])"


@dataclass(frozen=True)
class Marker:
    """One citation bracket of a text."""

    start: int
    end: int
    #: The handed chunks it names, in order, each once.
    chunk_ids: tuple[str, ...]
    #: Its items that name nothing handed.
    unknown: tuple[str, ...]


class Citations:
    """The markers of texts written by a call that was handed ``chunks``."""

    def __init__(self, chunks: Iterable[PackChunk]) -> None:
        self._names: dict[str, tuple[str, ...]] = {}
        by_doc: dict[str, list[str]] = {}
        chunk_ids: list[str] = []
        for c in chunks:
            chunk_ids.append(c.chunk_id)
            by_doc.setdefault(c.doc_id, []).append(c.chunk_id)
        for doc_id, ids in by_doc.items():
            self._names[doc_id] = tuple(dict.fromkeys(ids))
        for chunk_id in chunk_ids:  # a chunk id wins over an equal document id
            self._names[chunk_id] = (chunk_id,)
        ordered = sorted(self._names, key=lambda n: (-len(n), n))
        self._known = (
            re.compile(f"(?:{'|'.join(re.escape(n) for n in ordered)}){_AFTER_ID}")
            if ordered
            else None
        )

    def markers(self, text: str) -> list[Marker]:
        """Every marker of ``text``, in order, none overlapping."""
        out: list[Marker] = []
        pos = text.find("[")
        while pos != -1:
            marker = self._marker_at(text, pos)
            if marker is not None:
                out.append(marker)
                pos = text.find("[", marker.end)
            else:
                pos = text.find("[", pos + 1)
        return out

    def _marker_at(self, text: str, start: int) -> Marker | None:
        """The marker opening at ``text[start]`` (a ``[``), or ``None`` if it is text."""
        found: dict[str, None] = {}
        unknown: list[str] = []
        shaped = True
        i = start + 1
        while True:
            i = _BLANK.match(text, i).end()  # type: ignore[union-attr]
            known = self._known.match(text, i) if self._known is not None else None
            if known is not None:
                found.update(dict.fromkeys(self._names[known.group()]))
                i = known.end()
            else:
                item = _ITEM.match(text, i)
                assert item is not None  # it matches the empty string
                word = item.group().strip()
                if word:
                    unknown.append(word)
                    shaped = shaped and not any(ch.isspace() for ch in word)
                i = item.end()
            i = _BLANK.match(text, i).end()  # type: ignore[union-attr]
            if i >= len(text) or text[i] not in ",;]":
                return None  # a nested bracket, a line end, an over-long item: text
            i += 1
            if text[i - 1] == "]":
                break
        if not found and not (unknown and shaped):
            return None
        return Marker(start, i, tuple(found), tuple(unknown))
