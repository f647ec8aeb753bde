"""The facts a sentence asserts that term overlap cannot check: the strict half of the claim check.

Term overlap tells whether a sentence talks about what a chunk talks about; it cannot tell
"EUR 50,000" from "EUR 5,000,000", "above" from "below", "is acceptable" from "is not
acceptable", or Acme from Initech. :func:`claim_of` extracts, from a sentence, what must occur
in the chunk it cites; :func:`source_of` extracts what a chunk offers; :func:`missing` names
what a claim asserts that its sources do not hold. Normalisation, applied alike to both sides:

- **numbers**: ASCII digits; ``,`` ``.`` ``'`` and (narrow) no-break spaces are thousands
  separators when every later group has exactly three digits ("50,000" = "50.000" =
  "50'000" = "50000"); otherwise a single ``.`` or ``,`` is the decimal mark ("1,5" = "1.5",
  "2.50" = "2.5"), and the last of two different marks is ("50,000.00" = "50000"). Leading
  zeros go. ``k``/``m``/``mn``/``bn`` glued to a number and ``thousand``/``million``/
  ``billion`` after it multiply ("50k" = "50,000").
- **amounts**: a currency code (``EUR``, ``USD``, ...), symbol (``€ $ £ ¥``) or word
  (``euros``, ``dollars``) right before or after a number: "EUR 50,000" = "50000 EUR" =
  "€50k". An amount must occur as the same amount; the number alone is not enough.
- **percentages**: a number followed by ``%``, ``percent`` or ``per cent``.
- **dates**: ``2026-07-01``, ``1 July 2026``, ``July 1, 2026`` (month names and their
  three-letter abbreviations, capitalised) become ``2026-07-01``; ``July 2026`` becomes
  ``2026-07``. A chunk's date also offers its month, its year and its day as a number.
- **names**: words naming something (an identifier with a digit and a letter such as
  ``Tier-2``; a word with two capitals such as ``EU``; a capitalised word that does not open the
  sentence and is not a stopword) and **direction words** (``above``, ``below``, ``more``,
  ``less``, ``before``, ``after``, ...) must occur in the chunk as words, case-insensitively.
- **negations** (``not``, ``no``, ``never``, ``without``, ``none``, ``n't``, ...) are counted;
  the claim check compares the count with the chunk sentence the claim matches best, so a
  negation added or dropped is caught (see :mod:`govrag.validation.claims`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from govrag.store.analyzer import STOPWORDS

__all__ = ["Claim", "Source", "claim_of", "missing", "source_of"]

_SEP = "[.,'\u00a0\u202f]"
# Not inside a word: "v3" and "ISO27001" are identifiers (names), not numbers.
_NUMBER = rf"(?<![0-9])(?<![^\W\d_])[0-9]+(?:{_SEP}[0-9]+)*"
_CODES = ("EUR", "USD", "GBP", "CHF", "JPY", "CNY", "SEK", "NOK", "DKK", "PLN", "CZK", "HUF",
          "CAD", "AUD", "NZD", "INR", "SGD", "HKD", "RON", "BGN")  # fmt: skip
_SYMBOLS = {"€": "EUR", "$": "USD", "US$": "USD", "£": "GBP", "¥": "JPY"}
_CURRENCY_WORDS = {"euro": "EUR", "euros": "EUR", "dollar": "USD", "dollars": "USD"}
_CURRENCY = r"(?:US\$|[€$£¥]|\b(?:" + "|".join(_CODES) + r")\b|(?i:\b(?:euros?|dollars?)\b))"
#: Zeros each multiplier appends.
_MULTIPLIERS = {"k": 3, "thousand": 3, "m": 6, "mn": 6, "million": 6, "bn": 9, "billion": 9}
# One quantity: an optional currency before, the number, an optional multiplier (glued short
# forms, spaced words), then a percent sign or a currency after.
_QUANTITY = re.compile(
    rf"(?:(?P<pre>{_CURRENCY})[ \u00a0]?)?(?P<num>{_NUMBER})"
    r"(?:(?P<short>k|m|mn|bn)\b|[ \u00a0]?(?P<word>thousand|million|billion)\b)?"
    rf"(?:[ \u00a0]?(?P<pct>%|per ?cent\b)|[ \u00a0]?(?P<post>{_CURRENCY}))?"
)
_CURRENCY_ALONE = re.compile(_CURRENCY)

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
_NEGATIONS = frozenset({
    "not", "no", "never", "without", "none", "nor", "neither", "nobody", "nothing", "nowhere",
    "cannot",
})  # fmt: skip
#: Words that turn a figure or a time around: they must occur in the chunk as words.
_DIRECTIONS = frozenset({
    "above", "below", "over", "under", "more", "less", "fewer", "least", "most", "maximum",
    "minimum", "exceed", "exceeds", "exceeding", "exceeded", "higher", "lower", "before",
    "after", "earlier", "later",
})  # fmt: skip


@dataclass(frozen=True)
class Claim:
    """What one sentence asserts beyond its terms (each must occur in a cited chunk)."""

    numbers: frozenset[str] = frozenset()
    amounts: frozenset[tuple[str, str]] = frozenset()
    percentages: frozenset[str] = frozenset()
    dates: frozenset[str] = frozenset()
    currencies: frozenset[str] = frozenset()
    #: Names and direction words, casefolded.
    names: frozenset[str] = frozenset()
    negations: int = 0

    @property
    def empty(self) -> bool:
        return not (self.numbers or self.amounts or self.percentages or self.dates
                    or self.currencies or self.names or self.negations)  # fmt: skip


@dataclass(frozen=True)
class Source:
    """What a chunk offers a claim: its facts, and every word it contains (casefolded)."""

    numbers: frozenset[str] = frozenset()
    amounts: frozenset[tuple[str, str]] = frozenset()
    percentages: frozenset[str] = frozenset()
    dates: frozenset[str] = frozenset()
    currencies: frozenset[str] = frozenset()
    words: frozenset[str] = frozenset()

    def __or__(self, other: Source) -> Source:
        return Source(
            self.numbers | other.numbers, self.amounts | other.amounts,
            self.percentages | other.percentages, self.dates | other.dates,
            self.currencies | other.currencies, self.words | other.words,
        )  # fmt: skip


def claim_of(text: str, *, opens_sentence: bool = True) -> Claim:
    """The facts ``text`` (one sentence, or a part of one, citations removed) asserts; its
    first word is not taken for a name by its capital when it ``opens_sentence``."""
    return _parse(text, opens_sentence)[0]


def source_of(text: str) -> Source:
    """What ``text`` (a chunk, or one of its sentences) offers a claim."""
    claim, rest_words = _parse(text)
    dates = set(claim.dates)
    numbers = set(claim.numbers) | {v for _, v in claim.amounts} | set(claim.percentages)
    numbers |= {_canonical(n) for n in re.findall(_NUMBER, text)}
    words = {w.casefold() for w in _WORD.findall(text)} | {w.casefold() for w in rest_words}
    # "Tier-2" offers "tier" too: a claim's "Tier-2" is the name "tier" and the number 2.
    words |= {part for w in list(words) for part in re.split(r"['’-]", w) if part}
    for iso, parsed in _dates(text)[0]:
        if len(iso) == 10:  # a full date also offers its month, and its parts as numbers
            dates.add(iso[:7])
            numbers.add(str(parsed.day))
        numbers.add(str(parsed.year))
        words |= {m.casefold() for m, n in _MONTHS.items() if n == parsed.month}
    return Source(frozenset(numbers), claim.amounts, claim.percentages, frozenset(dates),
                  claim.currencies, frozenset(words))  # fmt: skip


def _parse(text: str, opens_sentence: bool = True) -> tuple[Claim, list[str]]:
    """The claim of ``text`` and the words left once dates and quantities are taken out."""
    dates, rest = _dates(text)
    numbers: set[str] = set()
    amounts: set[tuple[str, str]] = set()
    percentages: set[str] = set()
    currencies: set[str] = set()

    def quantity(m: re.Match[str]) -> str:
        value = _value(m)
        currency = _currency(m.group("pre") or m.group("post") or "")
        if m.group("pct"):
            percentages.add(value)
        elif currency:
            amounts.add((currency, value))
            currencies.add(currency)
        else:
            numbers.add(value)
        return " "

    rest = _QUANTITY.sub(quantity, rest)
    currencies.update(_currency(c) for c in _CURRENCY_ALONE.findall(rest))
    words = _WORD.findall(_CURRENCY_ALONE.sub(" ", rest))
    names = {w.casefold() for i, w in enumerate(words)
             if _names_something(w, first=opens_sentence and i == 0)}  # fmt: skip
    names |= {w.casefold() for w in words if w.casefold() in _DIRECTIONS}
    claim = Claim(
        frozenset(numbers), frozenset(amounts), frozenset(percentages),
        frozenset(d for d, _ in dates), frozenset(currencies), frozenset(names), negations(text),
    )  # fmt: skip
    return claim, words


def missing(claim: Claim, source: Source) -> list[str]:
    """What ``claim`` asserts that ``source`` does not hold, as short labels."""
    out = [f"number {n}" for n in sorted(claim.numbers - source.numbers)]
    out += [f"amount {c} {v}" for c, v in sorted(claim.amounts - source.amounts)]
    out += [f"percentage {p}%" for p in sorted(claim.percentages - source.percentages)]
    out += [f"date {d}" for d in sorted(claim.dates - source.dates)]
    out += [f"currency {c}" for c in sorted(claim.currencies - source.currencies)]
    out += [f"name {n}" for n in sorted(claim.names - source.words)]
    return out


def negations(text: str) -> int:
    """How many negation words ``text`` holds (``isn't`` counts as one)."""
    count = 0
    for w in _WORD.findall(text):
        w = w.casefold()
        count += w in _NEGATIONS or w.endswith(("n't", "n’t"))
    return count


def _names_something(word: str, *, first: bool) -> bool:
    if len(word) < 2 or word.upper() in _CODES or word.casefold() in _CURRENCY_WORDS:
        return False
    has_digit = any(ch.isdigit() for ch in word)
    if has_digit and any(ch.isalpha() for ch in word):
        return True  # an identifier: Tier-2, v3, ISO27001
    if sum(ch.isupper() for ch in word) >= 2:
        return True  # EU, MSA, McKinsey
    return word[0].isupper() and not first and word.casefold() not in STOPWORDS


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


def _value(m: re.Match[str]) -> str:
    value = _canonical(m.group("num"))
    scale = m.group("short") or m.group("word")
    if scale and value.count(".") <= 1:  # a number, not a sequence such as 1.2.3
        whole, _, frac = value.partition(".")
        zeros = _MULTIPLIERS[scale.lower()]
        frac += "0" * zeros
        value = _decimal(whole + frac[:zeros], frac[zeros:])
    return value


def _canonical(token: str) -> str:
    """One spelling per number (the module docstring says which spellings are equal).

    Digits stay strings throughout: no size limit, no rounding."""
    groups = re.split(_SEP, token)
    marks = re.findall(_SEP, token)
    head, later = groups[0], groups[1:]
    if not marks:
        return _decimal(head, "")
    thousands = len(head) <= 3 and head.lstrip("0") != "" and all(len(g) == 3 for g in later)
    if len(set(marks)) == 1 and thousands:
        return _decimal("".join(groups), "")
    if len(marks) == 1 and marks[0] in ".,":
        return _decimal(head, later[0])
    if (
        marks[-1] in ".,"
        and len(set(marks[:-1])) == 1
        and marks[-1] not in marks[:-1]
        and len(head) <= 3
        and all(len(g) == 3 for g in later[:-1])
    ):
        return _decimal("".join(groups[:-1]), later[-1])
    return ".".join(_decimal(g, "") for g in groups)  # a version, a reference: a sequence


def _decimal(whole: str, fraction: str) -> str:
    """``whole.fraction`` without leading or trailing zeros (``007.50`` -> ``7.5``)."""
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def _currency(token: str) -> str:
    if not token:
        return ""
    return _SYMBOLS.get(token) or _CURRENCY_WORDS.get(token.lower()) or token.upper()
