"""Figures as the claim check compares them: numbers, amounts, percentages, rate periods.

:func:`quantities` reads them from normalised text (:mod:`govrag.validation.normalise`), each
in one canonical spelling, so a figure is the same figure however it is written and a changed
figure is never the same:

- **numbers**: ASCII digits; ``,`` ``.`` ``'`` (and no-break or thin spaces between digits)
  are thousands separators when every later group has exactly three digits ("50,000" =
  "50.000" = "50'000" = "50000"); otherwise a single ``.`` or ``,`` is the decimal mark
  ("1,5" = "1.5", "2.50" = "2.5"), and the last of two different marks is ("50,000.00" =
  "50000"). Leading zeros go. **Number words** are numbers ("nine" = 9, "twenty-five" = 25,
  "two hundred and five" = 205, "nine million" = 9000000; "no one" and "one another" are not).
  ``k`` ``m`` ``mn`` ``bn`` ``tn`` glued to a number and ``hundred`` ``thousand`` ``million``
  ``billion`` ``trillion`` after it multiply, in a chain too ("50k" = "50,000", "50 thousand
  million" = 50000000000).
- **amounts**: a currency right before or after a number: an ISO code of :data:`CODES` (any
  case next to a number: "usd 50" = "USD 50"; upper case alone), a currency symbol (every
  Unicode currency sign: ``€ $ £ ¥ ₹ ₽ ₩ ...``, and ``US$ C$ A$ NZ$ HK$ S$ R$``) or word
  ("euros", "dollars", "pounds", "sterling", "yen", "rupees", "francs", ...): "EUR 50,000" =
  "50000 EUR" = "€50k" = "50 thousand euros". An amount must occur as the same currency and
  value; the number alone is not enough. A currency named without a number must occur too.
- **percentages**: a number followed by ``%``, ``percent`` or ``per cent``.
- **rate periods**: "per"/"each"/"every" (or "a"/"an" right after a figure) followed by a
  time unit (second, minute, hour, day, week, fortnight, month, quarter, year, annum; a
  "business"/"working"/"calendar" day or year is that unit), ``/day``-style abbreviations, and
  the adverbs "hourly", "daily", "weekly", "monthly", "quarterly", "yearly", "annually",
  "annual", "per annum", "p.a.": "EUR 50,000 per day" states the period *day*, which the
  chunk must state too ("daily" = "per day"; "per week" is another period).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from govrag.validation.normalise import currency_symbols

__all__ = [
    "CODES", "CURRENCY_WORDS", "FIGURE_WORDS", "NUMBER", "Quantities", "all_numbers",
    "canonical", "quantities", "word_currency",
]  # fmt: skip

_SEP = "[.,'\u00a0\u202f]"
# Not inside a word: "v3" and "ISO27001" are identifiers (names), not numbers.
NUMBER = rf"(?<![0-9])(?<![^\W\d_])[0-9]+(?:{_SEP}[0-9]+)*"
CODES = ("EUR", "USD", "GBP", "CHF", "JPY", "CNY", "SEK", "NOK", "DKK", "PLN", "CZK", "HUF",
         "CAD", "AUD", "NZD", "INR", "SGD", "HKD", "RON", "BGN", "RUB", "KRW", "ILS", "BRL",
         "MXN", "ZAR", "THB", "AED", "SAR", "ISK")  # fmt: skip
_CODE_SET = frozenset(CODES)
#: Symbols with a code (any other currency sign is its own currency).
_SYMBOLS = {"€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY", "₹": "INR", "₽": "RUB", "₩": "KRW",
            "₺": "TRY", "₪": "ILS", "฿": "THB", "₱": "PHP", "₴": "UAH", "₦": "NGN", "₫": "VND",
            "US$": "USD", "C$": "CAD", "CA$": "CAD", "A$": "AUD", "AU$": "AUD", "NZ$": "NZD",
            "HK$": "HKD", "S$": "SGD", "R$": "BRL"}  # fmt: skip
CURRENCY_WORDS = {
    "euro": "EUR", "euros": "EUR", "dollar": "USD", "dollars": "USD", "pound": "GBP",
    "pounds": "GBP", "sterling": "GBP", "yen": "JPY", "yuan": "CNY", "renminbi": "CNY",
    "rupee": "INR", "rupees": "INR", "franc": "CHF", "francs": "CHF", "krona": "SEK",
    "kronor": "SEK", "zloty": "PLN", "zlotys": "PLN", "złoty": "PLN", "forint": "HUF",
    "forints": "HUF", "rouble": "RUB", "roubles": "RUB", "ruble": "RUB", "rubles": "RUB",
    "shekel": "ILS", "shekels": "ILS", "baht": "THB", "dirham": "AED", "dirhams": "AED",
    "riyal": "SAR", "riyals": "SAR", "zł": "PLN",
}  # fmt: skip
_MULTIPLIERS = {"k": 3, "m": 6, "mn": 6, "bn": 9, "tn": 12, "hundred": 2, "thousand": 3,
                "million": 6, "billion": 9, "trillion": 12}  # fmt: skip


_PREFIXED = "|".join(re.escape(s) for s in sorted(_SYMBOLS, key=len, reverse=True) if len(s) > 1)
_SPACE = "[ \u00a0]?"
_SCALE = r"(?:hundred|thousand|million|billion|trillion)\b"
# One quantity is found from its number (a fast scan): then a currency right before it, and
# after it an optional multiplier (a glued short form, or a chain of spaced words), then a
# percent sign or a currency.
_NUMBER = re.compile(NUMBER)
#: How far before a number its currency can start (the longest currency, and a space).
_BEFORE_CHARS = 2 + max(len(w) for w in [*CURRENCY_WORDS, *_SYMBOLS])


@dataclass(frozen=True)
class _CurrencyPatterns:
    """The patterns that list every currency symbol: built on first use (the symbols come
    from a scan of Unicode that costs ~0.1 s, which a process that checks no claim, such
    as a keyword search, should not pay)."""

    before: re.Pattern[str]  # a currency right before a number
    after: re.Pattern[str]  # multiplier, then percent or currency, after a number
    symbol: re.Pattern[str]  # a currency without a number: a symbol


@functools.cache
def _currency_patterns() -> _CurrencyPatterns:
    symbols = f"{_PREFIXED}|[{re.escape(currency_symbols())}]"
    # A currency next to a number: a symbol, a code in any case, a currency word.
    currency = (
        f"(?:{symbols}|(?i:\\b(?:{'|'.join(CODES)})\\b)"
        f"|(?i:\\b(?:{'|'.join(sorted(CURRENCY_WORDS, key=len, reverse=True))})\\b))"
    )
    return _CurrencyPatterns(
        before=re.compile(rf"(?P<pre>{currency}){_SPACE}\Z"),
        after=re.compile(
            rf"(?:(?P<short>k|m|mn|bn|tn)\b|(?P<words>(?:{_SPACE}{_SCALE})+))?"
            rf"(?:{_SPACE}(?P<pct>%|per ?cent\b)|{_SPACE}(?P<post>{currency}))?"
        ),
        symbol=re.compile(symbols),
    )


_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen"]  # fmt: skip
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_NUMBER_WORDS = {w: (n, "unit") for n, w in enumerate(_UNITS)}
_NUMBER_WORDS |= {w: (10 * (n + 2), "tens") for n, w in enumerate(_TENS)}
_NUMBER_WORDS |= {"hundred": (100, "hundred")}
_NUMBER_WORDS |= {w: (10**z, "scale") for w, z in _MULTIPLIERS.items() if z >= 3 and len(w) > 2}
_NUMBER_WORD = "(?:" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + ")"
# A run of number words ("two hundred and five", "twenty-five", "a million"), not "no one"
# or "one another" (idioms, not figures).
_SPELLED = re.compile(
    rf"(?i)(?<!\w)(?<!\bno )(?:a(?= {_SCALE})|(?:{'|'.join(_UNITS + _TENS)})\b)"
    rf"(?:(?:[ -]| and ){_NUMBER_WORD}\b)*(?!\w)(?! another\b)"
)
#: The kinds of number word that may follow each kind within one number ("twenty" "five",
#: "two" "hundred", "thousand" "million"; not "two" "three").
_NEXT: dict[str | None, set[str]] = {
    None: {"unit", "tens"},
    "unit": {"hundred", "scale"},
    "tens": {"unit", "hundred", "scale"},
    "hundred": {"unit", "tens", "scale"},
    "scale": {"unit", "tens", "scale"},
}

_TIME_UNITS = {"second": "second", "minute": "minute", "hour": "hour", "day": "day",
               "week": "week", "fortnight": "fortnight", "month": "month",
               "quarter": "quarter", "year": "year", "annum": "year"}  # fmt: skip
# ("/a", "/d", "/s" are left out: "n/a", "and/or"-like pairs are no periods.)
_ABBREVIATIONS = {"sec": "second", "min": "minute", "h": "hour", "hr": "hour", "wk": "week",
                  "mo": "month", "qtr": "quarter", "yr": "year"} | _TIME_UNITS  # fmt: skip
_ADVERBS = {"hourly": "hour", "daily": "day", "weekly": "week", "fortnightly": "fortnight",
            "monthly": "month", "quarterly": "quarter", "yearly": "year", "annually": "year",
            "annual": "year"}  # fmt: skip
#: Where a figure was, once taken out: "a"/"an" state a period only right after one
#: ("EUR 50,000 a day", not "within a day").
_FIGURE = "\ue000"
_PERIOD = re.compile(
    rf"(?i)(?:\b(?:per|each|every) |(?<={_FIGURE} )an? )"
    rf"(?:(?:business|working|calendar|financial|fiscal)[ -])?"
    rf"(?P<unit>{'|'.join(_TIME_UNITS)})s?\b"
    rf"|/ ?(?P<abbr>{'|'.join(sorted(_ABBREVIATIONS, key=len, reverse=True))})\b"
    rf"|\b(?P<adverb>{'|'.join(_ADVERBS)})\b|\bp\.a\."
)
#: Words that state a figure or a period (never a name; they are checked as figures).
FIGURE_WORDS = frozenset(
    {*_NUMBER_WORDS, *CURRENCY_WORDS, *_ADVERBS, *_TIME_UNITS, "per", "percent", "cent"}
)


@dataclass(frozen=True)
class Quantities:
    """The figures of a text (currencies: those with a number, and symbols alone), and the
    text with them blanked out."""

    numbers: frozenset[str]
    amounts: frozenset[tuple[str, str]]
    percentages: frozenset[str]
    currencies: frozenset[str]
    periods: frozenset[str]
    rest: str


def quantities(text: str) -> Quantities:
    """The figures of normalised ``text`` (dates already taken out; module docstring)."""
    text = _SPELLED.sub(_spelled, text.replace(_FIGURE, " "))
    numbers: set[str] = set()
    amounts: set[tuple[str, str]] = set()
    percentages: set[str] = set()
    currencies: set[str] = set()
    pieces: list[str] = []
    done = 0  # where the last quantity ended
    patterns = _currency_patterns()
    for m in _NUMBER.finditer(text):
        if m.start() < done:
            continue
        before = patterns.before.search(text, max(done, m.start() - _BEFORE_CHARS), m.start())
        after = patterns.after.match(text, m.end())
        assert after is not None  # everything in it is optional
        value = _value(m.group(), after.group("short") or after.group("words"))
        currency = _currency((before.group("pre") if before else "") or after.group("post") or "")
        if after.group("pct"):
            percentages.add(value)
        elif currency:
            amounts.add((currency, value))
            currencies.add(currency)
        else:
            numbers.add(value)
        pieces += [text[done : before.start() if before else m.start()], _FIGURE]
        done = after.end()
    rest = "".join([*pieces, text[done:]])
    periods = {_period(p) for p in _PERIOD.finditer(rest)}
    currencies.update(_currency(c) for c in patterns.symbol.findall(rest))
    rest = patterns.symbol.sub(" ", rest.replace(_FIGURE, " "))
    return Quantities(frozenset(numbers), frozenset(amounts), frozenset(percentages),
                      frozenset(currencies), frozenset(periods), rest)  # fmt: skip


def word_currency(word: str) -> str:
    """The currency a word names on its own (an upper-case code, a currency word), or ""."""
    return word if word in _CODE_SET else CURRENCY_WORDS.get(word.lower(), "")


def all_numbers(text: str) -> set[str]:
    """Every number of ``text`` on its own, figures in words included (what a chunk offers
    beside its amounts: "Tier-2" offers 2)."""
    return {canonical(n) for n in _NUMBER.findall(_SPELLED.sub(_spelled, text))}


def _spelled(m: re.Match[str]) -> str:
    """A run of number words as the number(s) it spells, in digits ("two three" is two)."""
    out: list[int] = []
    total = current = 0
    last: str | None = None
    for word in re.split(r"[ -]+", m.group().lower()):
        if word == "and":
            continue
        value, kind = (1, "unit") if word == "a" else _NUMBER_WORDS[word]
        if kind not in _NEXT[last]:  # a new number starts
            out.append(total + current)
            total = current = 0
        if kind in ("unit", "tens"):
            current += value
        elif kind == "hundred":
            current = (current or 1) * 100
        elif last == "scale":  # "thousand million": the scales multiply
            total = (total + current) * value
            current = 0
        else:
            total += (current or 1) * value
            current = 0
        last = kind
    out.append(total + current)
    return " ".join(str(n) for n in out)


def _period(m: re.Match[str]) -> str:
    if m.group("unit"):
        return _TIME_UNITS[m.group("unit").lower()]
    if m.group("abbr"):
        return _ABBREVIATIONS[m.group("abbr").lower()]
    if m.group("adverb"):
        return _ADVERBS[m.group("adverb").lower()]
    return "year"  # p.a.


def _value(number: str, scale: str | None) -> str:
    """The canonical value of ``number`` times its multiplier(s) ``scale`` ("k", "thousand
    million")."""
    value = canonical(number)
    scales = (scale or "").split()
    if scales and value.count(".") <= 1:  # a number, not a sequence such as 1.2.3
        whole, _, frac = value.partition(".")
        zeros = sum(_MULTIPLIERS[s.lower()] for s in scales)
        frac += "0" * zeros
        value = _decimal(whole + frac[:zeros], frac[zeros:])
    return value


def canonical(token: str) -> str:
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
    return _SYMBOLS.get(token) or CURRENCY_WORDS.get(token.lower()) or token.upper()
