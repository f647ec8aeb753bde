"""The facts a sentence asserts that term overlap cannot check: the strict half of the claim check.

Term overlap tells whether a sentence talks about what a chunk talks about; it cannot tell
"EUR 50,000" from "EUR 5,000,000", "above" from "below", "is acceptable" from "is not
acceptable", or Acme from Initech. :func:`claim_of` extracts, from a sentence, what must occur
in the chunk it cites; :func:`source_of` extracts what a chunk offers; :func:`missing` names
what a claim asserts that its sources do not hold. Both sides are read alike, through
:func:`~govrag.validation.normalise.normalise` first (so invisible characters, full-width or
mathematical digits and look-alike letters hide nothing), then:

- **figures**: numbers (digits or words), amounts, currencies, percentages and rate periods,
  each in one canonical spelling (:mod:`govrag.validation.quantities` says which spellings are
  equal);
- **dates**: ``2026-07-01``, ``1 July 2026``, ``July 1, 2026`` (month names and their
  three-letter abbreviations, capitalised) become ``2026-07-01``; ``July 2026`` becomes
  ``2026-07``. A chunk's date also offers its month, its year and its day as a number.
- **names**: words naming something (an identifier with a digit and a letter such as
  ``Tier-2``; a word with two capitals such as ``EU``; a capitalised word that is not a
  stopword; a word mixing Latin letters with another script) and **direction words**
  (``above``, ``below``, ``more``, ``less``, ``before``, ``after``, ...) must occur in the
  chunk as words, case-insensitively. A sentence's **opening word**, when capitalised, is a
  name too unless it is an ordinary word: a stopword, a common sentence opener ("However",
  "Currently", ...), a word stating a figure, date, direction or negation (checked as such),
  or a word whose stem the chunk holds ("Transfers" for "transfer").
- **negations** (``not``, ``no``, ``never``, ``without``, ``none``, ``n't``, ...) are placed:
  :func:`negated` gives what each applies to (the first analysed term after it in its clause),
  and the claim check compares those with the chunk sentence (or clauses) the claim matches
  best, so a negation added, dropped or moved to another word is caught (see
  :mod:`govrag.validation.claims`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from govrag.store.analyzer import MAX_TOKEN_CHARS, STOPWORDS, default_analyzer
from govrag.validation.normalise import mixed_script, normalise
from govrag.validation.quantities import (
    CODES,
    FIGURE_WORDS,
    all_numbers,
    quantities,
    word_currency,
)

__all__ = ["CLAUSE_END", "Claim", "Source", "claim_of", "missing", "negated", "source_of"]

_MONTHS = {name: n for n, names in enumerate((
    ("January", "Jan"), ("February", "Feb"), ("March", "Mar"), ("April", "Apr"), ("May",),
    ("June", "Jun"), ("July", "Jul"), ("August", "Aug"), ("September", "Sep", "Sept"),
    ("October", "Oct"), ("November", "Nov"), ("December", "Dec")), start=1)
    for name in names}  # fmt: skip
_MONTH = "(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\b\.?"
_DAY = r"[0-9]{1,2}(?:st|nd|rd|th)?"
_DATE = re.compile(
    r"\b(?P<iy>[0-9]{4})-(?P<im>[0-9]{2})-(?P<id>[0-9]{2})\b"
    rf"|\b(?P<dd>{_DAY})[ \t]+(?:of[ \t]+)?(?P<dm>{_MONTH}),?[ \t]+(?P<dy>[0-9]{{4}})\b"
    rf"|\b(?P<mm>{_MONTH})[ \t]+(?P<md>{_DAY}),?[ \t]+(?P<my>[0-9]{{4}})\b"
    rf"|\b(?P<om>{_MONTH})[ \t]+(?P<oy>[0-9]{{4}})\b"
)
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_LETTER = re.compile(r"[^\W\d_]")
_JOINER = re.compile(r"['’-]")
#: Where a clause ends (the claim check compares negations clause by clause; a negation
#: applies to a word of its own clause).
CLAUSE_END = re.compile(r"[;:]\s+|,\s+|(?<=\s)(?:and|but)(?=\s)")
_NEGATIONS = frozenset({
    "not", "no", "never", "without", "none", "nor", "neither", "nobody", "nothing", "nowhere",
    "cannot",
})  # fmt: skip
#: A negation: one of those words or a word ending in "n't" (a whole word of _WORD), or the
#: prefix "non-" ("non-refundable" is "not refundable").
_NEGATION = re.compile(
    rf"(?i)(?<![^\W_])(?<![^\W_]['’-])(?:(?:{'|'.join(sorted(_NEGATIONS))}|[^\W_]+n['’]t)"
    r"(?![^\W_])(?!['’-][^\W_])|non(?=-[^\W_]))"
)
#: How far after a negation the word it applies to is looked for (characters).
_SCOPE_CHARS = 120
#: Words that turn a figure or a time around: they must occur in the chunk as words.
_DIRECTIONS = frozenset({
    "above", "below", "over", "under", "more", "less", "fewer", "least", "most", "maximum",
    "minimum", "exceed", "exceeds", "exceeding", "exceeded", "higher", "lower", "before",
    "after", "earlier", "later",
})  # fmt: skip
#: Ordinary words that open sentences without naming anything (beside the stopwords).
_OPENERS = frozenset({
    # connectives and sentence adverbs
    "according", "accordingly", "additionally", "afterwards", "also", "alternatively",
    "although", "always", "answer", "anyway", "basically", "based", "besides", "briefly",
    "clearly", "consequently", "conversely", "currently", "effectively", "essentially",
    "eventually", "finally", "first", "firstly", "following", "furthermore", "generally",
    "given", "hence", "however", "importantly", "indeed", "initially", "instead", "lastly",
    "likewise", "meanwhile", "moreover", "namely", "nevertheless", "nonetheless", "note",
    "notably", "often", "otherwise", "overall", "please", "previously", "rather", "recently",
    "second", "secondly", "similarly", "simply", "since", "sometimes", "specifically", "still",
    "subsequently", "summary", "then", "thereafter", "thereby", "third", "thirdly", "though",
    "thus", "today", "together", "typically", "ultimately", "unless", "usually", "whereas",
    "whilst", "yes",
    # determiners, pronouns and prepositions the stopword list leaves out
    "across", "along", "among", "another", "anyone", "anything", "around", "behind", "beyond",
    "certain", "despite", "every", "everyone", "everything", "except", "inside", "like",
    "many", "outside", "regarding", "regardless", "several", "someone", "something",
    "towards", "toward", "unlike", "various", "via", "within",
})  # fmt: skip
#: Opening words never taken for a name: each is ordinary, or checked as what it states.
_NOT_NAMES = (
    STOPWORDS
    | _OPENERS
    | FIGURE_WORDS
    | _DIRECTIONS
    | _NEGATIONS
    | {w.casefold() for w in (*_MONTHS, *CODES)}
)


@dataclass(frozen=True)
class Claim:
    """What one sentence asserts beyond its terms (each must occur in a cited chunk)."""

    numbers: frozenset[str] = frozenset()
    amounts: frozenset[tuple[str, str]] = frozenset()
    percentages: frozenset[str] = frozenset()
    dates: frozenset[str] = frozenset()
    currencies: frozenset[str] = frozenset()
    periods: frozenset[str] = frozenset()
    #: Names and direction words, casefolded.
    names: frozenset[str] = frozenset()
    #: The capitalised opening word, casefolded, when it may be a name ("" when not), and
    #: its analysed terms (the chunk holding them is enough: "Transfers" for "transfer").
    opening: str = ""
    opening_terms: frozenset[str] = frozenset()
    negations: int = 0

    @property
    def empty(self) -> bool:
        return not (self.numbers or self.amounts or self.percentages or self.dates
                    or self.currencies or self.periods or self.names or self.opening
                    or self.negations)  # fmt: skip


@dataclass(frozen=True)
class Source:
    """What a chunk offers a claim: its facts, every word it contains (casefolded) and its
    analysed terms."""

    numbers: frozenset[str] = frozenset()
    amounts: frozenset[tuple[str, str]] = frozenset()
    percentages: frozenset[str] = frozenset()
    dates: frozenset[str] = frozenset()
    currencies: frozenset[str] = frozenset()
    periods: frozenset[str] = frozenset()
    words: frozenset[str] = frozenset()
    terms: frozenset[str] = frozenset()

    def __or__(self, other: Source) -> Source:
        return Source(
            self.numbers | other.numbers, self.amounts | other.amounts,
            self.percentages | other.percentages, self.dates | other.dates,
            self.currencies | other.currencies, self.periods | other.periods,
            self.words | other.words, self.terms | other.terms,
        )  # fmt: skip


def claim_of(text: str, *, opens_sentence: bool = True) -> Claim:
    """The facts ``text`` (one sentence, or a part of one, citations removed) asserts; its
    first word is checked as an opening word when it ``opens_sentence``."""
    return _parse(normalise(text), opens_sentence)[0]


def source_of(text: str, *, pieces: Sequence[str] = ()) -> Source:
    """What ``text`` (a chunk) offers a claim; ``pieces`` (its sentences) are read on their
    own too, so a quoted sentence finds all its facts whatever its cut."""
    text = normalise(text)
    out = _source(text)
    for piece in pieces:
        out = out | _source(normalise(piece))
    terms = frozenset(default_analyzer().analyze(text))
    return Source(out.numbers, out.amounts, out.percentages, out.dates, out.currencies,
                  out.periods, out.words, terms)  # fmt: skip


def _source(text: str) -> Source:
    claim, rest_words = _parse(text, opens_sentence=False)
    dates = set(claim.dates)
    numbers = set(claim.numbers) | {v for _, v in claim.amounts} | set(claim.percentages)
    numbers |= all_numbers(text)
    words = {w.casefold() for w in _WORD.findall(text)} | {w.casefold() for w in rest_words}
    # "Tier-2" offers "tier" too: a claim's "Tier-2" is the name "tier" and the number 2.
    words |= {part for w in list(words) for part in _JOINER.split(w) if part}
    for iso, parsed in _dates(text)[0]:
        if len(iso) == 10:  # a full date also offers its month, and its parts as numbers
            dates.add(iso[:7])
            numbers.add(str(parsed.day))
        numbers.add(str(parsed.year))
        words |= {m.casefold() for m, n in _MONTHS.items() if n == parsed.month}
    return Source(frozenset(numbers), claim.amounts, claim.percentages, frozenset(dates),
                  claim.currencies, claim.periods, frozenset(words))  # fmt: skip


def _parse(text: str, opens_sentence: bool) -> tuple[Claim, list[str]]:
    """The claim of normalised ``text`` and the words left once its dates and figures are
    taken out."""
    dates, rest = _dates(text)
    figures = quantities(rest)
    words = _WORD.findall(figures.rest)
    opening = ""
    if opens_sentence:
        first = next((w for w in _WORD.finditer(text) if _LETTER.search(w.group())), None)
        opening = first.group() if first else ""
    # The opening word, unless taken out as a figure or a date, is words[0]: it is judged as an
    # opening word below, not as a capitalised word inside the sentence.
    names = {w.casefold() for i, w in enumerate(words)
             if (kind := _kind(w)) == _NAME or (kind == _CAPITALISED
                                                and not (i == 0 and w == opening))}  # fmt: skip
    if not opening[:1].isupper() or _kind(opening) == _NAME:
        opening = ""
    opening = opening.casefold()
    if opening in _NOT_NAMES or opening in names:
        opening = ""
    currencies = {c for c in map(word_currency, words) if c}
    claim = Claim(
        figures.numbers, figures.amounts, figures.percentages, frozenset(d for d, _ in dates),
        figures.currencies | currencies, figures.periods, frozenset(names), opening,
        frozenset(default_analyzer().analyze(opening)) if opening else frozenset(),
        len(_NEGATION.findall(text)),
    )  # fmt: skip
    return claim, words


def missing(claim: Claim, source: Source) -> list[str]:
    """What ``claim`` asserts that ``source`` does not hold, as short labels."""
    out = [f"number {n}" for n in sorted(claim.numbers - source.numbers)]
    out += [f"amount {c} {v}" for c, v in sorted(claim.amounts - source.amounts)]
    out += [f"percentage {p}%" for p in sorted(claim.percentages - source.percentages)]
    out += [f"date {d}" for d in sorted(claim.dates - source.dates)]
    out += [f"currency {c}" for c in sorted(claim.currencies - source.currencies)]
    out += [f"period {p}" for p in sorted(claim.periods - source.periods)]
    out += [f"name {n}" for n in sorted(claim.names - source.words)]
    if (
        claim.opening
        and claim.opening not in source.words
        and not (claim.opening_terms and claim.opening_terms <= source.terms)
    ):
        out.append(f"name {claim.opening}")
    return out


def negated(text: str) -> tuple[str, ...]:
    """What each negation of ``text`` applies to, sorted: the first analysed term after it in
    its clause ("" when there is none: "No."). ``isn't`` is one negation."""
    text = normalise(text)
    out: list[str] = []
    for m in _NEGATION.finditer(text):
        window = text[m.end() : m.end() + _SCOPE_CHARS]
        end = CLAUSE_END.search(window)
        terms = default_analyzer().analyze(window[: end.start()] if end else window)
        out.append(terms[0] if terms else "")
    return tuple(sorted(out))


_NAME, _CAPITALISED = 1, 2


@functools.lru_cache(maxsize=65536)
def _kind(word: str) -> int:
    """``_NAME`` if ``word`` must occur in the chunk wherever it stands (an identifier such as
    Tier-2, v3, ISO27001; two capitals such as EU, MSA, McKinsey; a direction word; a word of
    mixed scripts; a lone letter or an over-long word, which no analysed term reads),
    ``_CAPITALISED`` if it must unless it opens the sentence (a capitalised word that is not a
    stopword), else 0."""
    folded = word.casefold()
    if folded in _DIRECTIONS or mixed_script(word):
        return _NAME
    if len(word) > MAX_TOKEN_CHARS or (len(word) == 1 and word.isalpha()
                                       and folded not in STOPWORDS):  # fmt: skip
        # Words the analyzer drops without being stopwords (a lone letter, an over-long run):
        # no term reads them, so they must be in the chunk as written, or a sentence spelled
        # "t w e n t y  w e e k s" would assert nothing.
        return _NAME
    if len(word) < 2 or word_currency(word) or word.upper() in CODES:
        return 0
    if any(ch.isdigit() for ch in word) and any(ch.isalpha() for ch in word):
        return _NAME
    if sum(ch.isupper() for ch in word) >= 2:
        return _NAME
    return _CAPITALISED if word[0].isupper() and folded not in STOPWORDS else 0


def _dates(text: str) -> tuple[list[tuple[str, date]], str]:
    """The dates in ``text`` (ISO form, parsed) and ``text`` with them blanked out."""
    found: list[tuple[str, date]] = []

    def one(m: re.Match[str]) -> str:
        g = m.groupdict()
        try:
            if g["iy"]:
                d = date(int(g["iy"]), int(g["im"]), int(g["id"]))
            elif g["dy"] or g["my"]:
                year, month, day = (g["dy"], g["dm"], g["dd"]) if g["dy"] else (
                    g["my"], g["mm"], g["md"])  # fmt: skip
                d = date(int(year), _MONTHS[month.rstrip(".")], int(re.sub(r"\D", "", day)))
            else:
                d = date(int(g["oy"]), _MONTHS[g["om"].rstrip(".")], 1)
                found.append((d.isoformat()[:7], d))
                return " "
        except ValueError:
            return m.group(0)  # not a calendar date (30 February): its numbers still count
        found.append((d.isoformat(), d))
        return " "

    return found, _DATE.sub(one, text)
