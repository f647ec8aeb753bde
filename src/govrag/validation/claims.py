"""The claim check: is each sentence of a model's answer supported by the evidence it was handed?

It runs when an answer is delivered, after any model, on the chunks of the validated packs
*handed to the call that wrote the answer* (nothing else is evidence: not the question, not the
caller's text, not a pack another call saw). Per sentence, as written:

- **citations** are read by :class:`~govrag.validation.citations.Citations` (the parser the
  answer's citation list uses too): a bracket whose items (separated by ``,`` or ``;``) name
  handed chunks or their documents, matched literally (so an id may hold ``,`` ``;`` brackets
  or spaces), is a citation; one whose items are id-shaped (no spaces) but name nothing handed
  is a *forged* citation, and the sentence is unsupported whatever it says. Other brackets
  (``[see annex 2]``) are text. A citation right after a sentence's full stop belongs to that
  sentence (``... per day. [sp:x#0]``); a sentence never ends inside a citation.
- a **cited** sentence must be supported by what it cites, part by part: the text up to a
  citation (the rest of the sentence for the last one) by the chunks that citation names
  (together, for ``[a, b]`` or adjacent ``[a][b]``), so a chunk cannot lend its figures to a
  citation of another. A sentence **without** a citation must be supported by some single
  handed chunk. Both sides are read through one normalisation
  (:func:`~govrag.validation.normalise.normalise`: invisible characters, full-width and
  mathematical digits, look-alike letters). *Supported* means all of: at least
  ``min_overlap`` of its distinct analysed terms occur in the chunk(s) (the index's own
  analyzer: "limits" matches "limit"); every fact it asserts (numbers, amounts, currencies,
  percentages, rate periods, dates, names, its opening word, direction words;
  :mod:`govrag.validation.facts`) occurs in them; and its negations line up: what its
  negations apply to (the first content word after each) is what those of a chunk sentence
  it matches best (most shared terms, then fewest others) apply to, or else each of its
  clauses (split at ``;`` ``:`` ``,`` "and", "but") matches a chunk clause that way. So "is
  acceptable" does not pass for "is not acceptable", nor "available ... without restriction"
  for "not available", while a sentence joining two chunk sentences still can.
- a symbol neither a term nor a fact reads (an arrow, an emoji, a private-use character) must
  occur in the chunk(s) too, and a lone letter or an over-long word is a name (facts); so a
  sentence with no analysed term, no fact and no symbol ("It is what it is.", markers alone)
  asserts nothing and is supported, while "t w e n t y  w e e k s" or a run of emoji does not
  pass for nothing.

The check is lexical and deterministic, so it is strict rather than clever: a faithful quote
always passes, a paraphrase that changes a figure, a date, a name, a direction or a negation
never does, and a free paraphrase may fail (it is then removed, never delivered as supported).
It does not prove entailment (two facts of one chunk recombined can still pass), and it checks
that the cited chunk says so, not that the chunk is right: a readable document may be wrong.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from govrag.store.analyzer import default_analyzer
from govrag.types import PackChunk
from govrag.validation.citations import Citations, Marker
from govrag.validation.facts import CLAUSE_END, Claim, Source, claim_of, missing, negated, source_of
from govrag.validation.normalise import Normalised, normalise
from govrag.validation.report import ClaimCheck, ClaimReport

__all__ = ["check_claims", "remove_unsupported", "split_sentences"]

# A sentence ends at ".", "!" or "?" followed by whitespace (the end of the text ends one too);
# a line break always ends one, so bullet lists are checked item by item. Never inside a
# citation marker (an id may hold ". ").
# (Whitespace before a line break stays in the piece, which is stripped: a separator that
# could start with a run of spaces would make the scan quadratic on long runs.)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|[\r\n]\s*")
#: White space within a line (a line break ends a sentence; any other space, a no-break one
#: included, is skipped as :func:`remove_unsupported` skips it).
_BLANKS = re.compile(r"[^\S\r\n]*")
_SPACE = re.compile(r"\s*")
_ALNUM = re.compile(r"\w")
_BETWEEN_MARKERS = re.compile(r"[\s,;]*")
#: A sentence or clause as the negation check sees it: its analysed terms, and what its
#: negations apply to (:func:`~govrag.validation.facts.negated`).
_Polarity = tuple[frozenset[str], tuple[str, ...]]


def _spans(answer: str, markers: Sequence[Marker]) -> list[tuple[int, int]]:
    """Where each sentence of ``answer`` is (module docstring), stripped, blanks dropped."""
    spans: list[tuple[int, int, bool]] = []  # start, end, ended by a line break
    pos = 0
    bounds = iter(markers)
    marker = next(bounds, None)
    for sep in [*_SENTENCE_END.finditer(answer), None]:
        if sep is not None:
            while marker is not None and marker.end <= sep.start():
                marker = next(bounds, None)
            if marker is not None and marker.start < sep.start():
                continue  # inside a citation marker
        end = sep.start() if sep else len(answer)
        piece = answer[pos:end]
        start = pos + len(piece) - len(piece.lstrip())
        stop = pos + len(piece.rstrip())
        if stop > start:
            spans.append((start, stop, sep is not None and bool(set(sep.group()) & {"\n", "\r"})))
        pos = sep.end() if sep else pos
    by_start = {m.start: m for m in markers}
    out: list[tuple[int, int]] = []
    for i, (start, stop, _) in enumerate(spans):
        marks_end = None
        at = start
        while at in by_start and by_start[at].end <= stop:
            marks_end = by_start[at].end
            at = _BLANKS.match(answer, marks_end).end()  # type: ignore[union-attr]
        if marks_end is not None and out and not spans[i - 1][2]:
            # "... per day. [sp:x#0] Next": the markers close the sentence before.
            out[-1] = (out[-1][0], marks_end)
            start = at
            if start >= stop:
                continue
        out.append((start, stop))
    return out


def split_sentences(answer: str, chunks: Sequence[PackChunk] = ()) -> list[str]:
    """Split ``answer`` into sentences as written (stripped; blank pieces dropped), reading
    its citation markers as citations of ``chunks``."""
    return [answer[a:b] for a, b in _spans(answer, Citations(chunks).markers(answer))]


@dataclass(frozen=True)
class _Evidence:
    """One handed chunk, analysed once."""

    chunk: PackChunk
    terms: frozenset[str]
    source: Source
    #: Its sentences and its clauses, for the negation check.
    sentences: tuple[_Polarity, ...]
    clauses: tuple[_Polarity, ...]
    #: The symbols it holds (:func:`_symbols`).
    symbols: frozenset[str] = frozenset()


def _evidence(chunk: PackChunk) -> _Evidence:
    return _Evidence(chunk, *_analysed(chunk.text))


@functools.lru_cache(maxsize=2048)
def _analysed(
    text: str,
) -> tuple[frozenset[str], Source, tuple[_Polarity, ...], tuple[_Polarity, ...], frozenset[str]]:
    """What a chunk's text offers (:class:`_Evidence` without the chunk). A function of the
    text alone, so kept for the texts last read: the same chunks back answer after answer,
    and reading one costs a millisecond or two."""
    pieces = split_sentences(text)
    # A quoted sentence must find all its facts, whatever its cut.
    source = source_of(text, pieces=pieces)
    # Prompts quote a chunk with its line breaks folded, so a model may quote two of its lines
    # as one sentence: those count as chunk sentences too.
    folded = [p for p in split_sentences(" ".join(text.split())) if p not in pieces]
    return (
        source.terms,
        source,
        tuple(_polarity(normalise(p)) for p in [*pieces, *folded]),
        tuple(_polarity(c) for p in pieces for c in _clauses(normalise(p))),
        _symbols(normalise(text)),
    )


class _Handed:
    """The handed chunks' evidence, each analysed when a sentence first needs it: a cited
    sentence reads only what it cites, so most answers never analyse most of their chunks."""

    def __init__(self, chunks: Sequence[PackChunk]) -> None:
        self._chunks = {c.chunk_id: c for c in chunks}
        self._done: dict[str, _Evidence] = {}

    def __getitem__(self, chunk_id: str) -> _Evidence:
        found = self._done.get(chunk_id)
        if found is None:
            found = self._done[chunk_id] = _evidence(self._chunks[chunk_id])
        return found

    def all(self) -> list[_Evidence]:
        """Every handed chunk's evidence, in the order handed."""
        return [self[cid] for cid in self._chunks]


#: Characters neither a term nor a fact reads: symbols (math, modifier, other: arrows, emoji)
#: and private-use or unassigned code points. Currency symbols are facts of their own.
_OPAQUE = frozenset({"Sm", "Sk", "So", "Co", "Cn"})


def _symbols(text: Normalised) -> frozenset[str]:
    return frozenset(ch for ch in text if unicodedata.category(ch) in _OPAQUE)


def _symbol_labels(symbols: Iterable[str]) -> list[str]:
    """Missing symbols as :func:`~govrag.validation.facts.missing` labels its facts."""
    return [f"symbol U+{ord(ch):04X}" for ch in sorted(symbols)]


def _polarity(text: Normalised) -> _Polarity:
    """The polarity of normalised ``text``."""
    return frozenset(default_analyzer().analyze(text)), negated(text)


def _clauses(text: Normalised) -> list[Normalised]:
    # Cut at ASCII punctuation and spaces, which never combine with a neighbour, each clause
    # of normalised text is normalised.
    return [Normalised(c) for c in CLAUSE_END.split(text) if _ALNUM.search(c)]


def check_claims(
    answer: str, chunks: Sequence[PackChunk], *, min_overlap: float = 0.5
) -> ClaimReport:
    """Check every sentence of ``answer`` against ``chunks`` (module docstring).

    Args:
        answer: the model's answer, citation markers included.
        chunks: the chunks handed to the call that wrote it (the validated evidence it may
            cite); a citation of anything else is forged.
        min_overlap: least share (0..1) of a sentence's distinct analysed terms that must
            occur in its chunk(s).
    """
    evidence = _Handed(chunks)
    markers = Citations(chunks).markers(answer)
    claims: list[ClaimCheck] = []
    first = 0
    for a, b in _spans(answer, markers):
        sentence = answer[a:b]
        while first < len(markers) and markers[first].start < a:
            first += 1
        inner = []
        for m in markers[first:]:
            if m.end > b:
                break
            inner.append(m)
        parts, unknown = _segments(answer, a, b, inner, evidence)
        cited = {k: v for _, group in parts for k, v in group.items()}
        said = [(_said(text, opens=i == 0), group) for i, (text, group) in enumerate(parts)]
        asserting = [(x, group) for x, group in said if x.asserts]
        if unknown or not asserting:
            claims.append(ClaimCheck(
                sentence=sentence, supported=not unknown, chunk_id=None, overlap=1.0,
                cited=tuple(cited), unknown=tuple(unknown), asserts=bool(asserting),
                reason="forged_citation" if unknown else None,
            ))  # fmt: skip
            continue
        if not cited:
            overlap, chunk_id, lacking, reason = _best(asserting[0][0], evidence.all(), min_overlap)
        else:
            # Each cited part answers for itself: the text up to a citation (the rest of the
            # sentence for the last one) must be supported by the chunks that citation names.
            verdicts = [_judge(x, list(group.values()), min_overlap) for x, group in asserting]
            overlap = min(v[0] for v in verdicts)
            chunk_id = next(iter(cited))
            lacking = [m for v in verdicts for m in v[2]]
            reason = next((v[3] for v in verdicts if v[3] is not None), None)
        claims.append(ClaimCheck(
            sentence=sentence, supported=reason is None, chunk_id=chunk_id, overlap=overlap,
            cited=tuple(cited), missing=tuple(lacking), reason=reason,
        ))  # fmt: skip
    unsupported = tuple(c.sentence for c in claims if not c.supported)
    return ClaimReport(claims=tuple(claims), unsupported=unsupported, all_supported=not unsupported)


_Group = dict[str, "_Evidence"]


def _segments(
    answer: str, a: int, b: int, markers: Sequence[Marker], evidence: _Handed
) -> tuple[list[tuple[str, _Group]], list[str]]:
    """The sentence ``answer[a:b]`` cut at its citation ``markers``: ``(text, the handed
    chunks cited for it)`` per part, and the cited items that name nothing handed (forged).

    A part is the text before a citation; the text after the last citation joins the last part;
    citations with only spaces, commas or semicolons between them cite one part together. A
    sentence without citations is one part citing nothing."""
    parts: list[tuple[str, _Group]] = []
    unknown: list[str] = []
    pos = a
    for m in markers:
        group: _Group = {cid: evidence[cid] for cid in m.chunk_ids}
        unknown.extend(m.unknown)
        before = answer[pos : m.start]
        if parts and _BETWEEN_MARKERS.fullmatch(before):
            parts[-1][1].update(group)
        else:
            parts.append((before, group))
        pos = m.end
    if not parts:
        return [(answer[a:b], {})], unknown
    # A space, so "limit[1]applies" cannot fuse into a new word.
    parts[-1] = (f"{parts[-1][0]} {answer[pos:b]}", parts[-1][1])
    return parts, unknown


@dataclass(frozen=True)
class _Said:
    """One answer sentence (or cited part of one), analysed: what the checks compare."""

    terms: frozenset[str]
    claim: Claim
    sentence: _Polarity
    clauses: tuple[_Polarity, ...]
    #: Its symbols: each must be in the chunk, or a run of emoji could say what no term does.
    symbols: frozenset[str] = frozenset()

    @property
    def asserts(self) -> bool:
        return bool(self.terms) or not self.claim.empty or bool(self.symbols)


def _said(text: str, *, opens: bool) -> _Said:
    text = normalise(text)
    sentence = _polarity(text)
    return _Said(
        sentence[0],
        claim_of(text, opens_sentence=opens),
        sentence,
        tuple(_polarity(c) for c in _clauses(text)),
        _symbols(text),
    )


_Judged = tuple[float, str | None, list[str], str | None]


def _judge(said: _Said, sources: Sequence[_Evidence], min_overlap: float) -> _Judged:
    """Overlap, first chunk, missing facts and the reason ``sources`` together do not support
    the sentence (``None``: they do)."""
    terms = said.terms
    have: frozenset[str] = frozenset().union(*(e.terms for e in sources))
    overlap = len(terms & have) / len(terms) if terms else 1.0
    source = Source()
    for e in sources:
        source = source | e.source
    lacking = missing(said.claim, source)
    held: frozenset[str] = frozenset().union(*(e.symbols for e in sources))
    lacking += _symbol_labels(said.symbols - held)
    chunk_id = sources[0].chunk.chunk_id
    reason: str | None = None
    if lacking:
        reason = "missing_facts"
    elif not _negations_line_up(said, sources):
        reason = "negation"
    elif overlap < min_overlap:
        reason = "low_overlap"
    return overlap, chunk_id, lacking, reason


def _best(said: _Said, evidence: Sequence[_Evidence], min_overlap: float) -> _Judged:
    """An uncited sentence: the supporting chunk with the most overlap (first on ties), else
    the verdict of the chunk sharing the most terms (``chunk_id`` ``None`` when none shares
    any)."""
    best: _Judged | None = None
    nothing = missing(said.claim, Source()) + _symbol_labels(said.symbols)
    closest: _Judged = (0.0, None, nothing, "no_evidence" if not evidence
                        else "low_overlap")  # fmt: skip
    for e in evidence:
        judged = _judge(said, [e], min_overlap)
        if judged[3] is None and (best is None or judged[0] > best[0]):
            best = judged
        if judged[0] > closest[0]:
            closest = judged
    return best or closest


def _negations_line_up(said: _Said, sources: Sequence[_Evidence]) -> bool:
    """The sentence's negations match a best chunk sentence's, or each clause's a best chunk
    clause's (module docstring)."""
    sentences = [p for e in sources for p in e.sentences]
    if _aligned(said.sentence, sentences):
        return True
    clauses = [p for e in sources for p in e.clauses]
    return bool(said.clauses) and all(_aligned(c, clauses) for c in said.clauses)


def _aligned(said: _Polarity, units: Iterable[_Polarity]) -> bool:
    """Whether a unit matching ``said`` best (most shared terms, then fewest terms of its own
    beyond them) has the same negations, applying to the same words."""
    terms, negations = said
    best: tuple[int, int] | None = None
    found: set[tuple[str, ...]] = set()
    for have, theirs in units:
        key = (len(terms & have), -len(have - terms))
        if best is None or key > best:
            best, found = key, {theirs}
        elif key == best:
            found.add(theirs)
    return negations in found if best is not None else not negations


def remove_unsupported(answer: str, report: ClaimReport) -> str:
    """``answer`` without its unsupported sentences; each kept sentence keeps the separator
    (space, line break) that preceded the sentence it follows in the original.

    The sentences are found as the report wrote them, in order, with only whitespace around
    them (how :func:`check_claims` cut them, whichever citations it read)."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for claim in report.claims:
        start = _SPACE.match(answer, pos).end()  # type: ignore[union-attr]
        if not answer.startswith(claim.sentence, start) or not claim.sentence:
            raise ValueError("the report is not a check of this answer")
        pos = start + len(claim.sentence)
        spans.append((start, pos))
    if answer[pos:].strip():
        raise ValueError("the report is not a check of this answer")
    out: list[str] = []
    for i, ((start, stop), claim) in enumerate(zip(spans, report.claims, strict=True)):
        if not claim.supported:
            continue
        if out:
            out.append(answer[spans[i - 1][1] : start] or " ")
        out.append(answer[start:stop])
    return "".join(out)
