"""The one normalisation the claim check reads text through: what a reader sees, not its bytes.

A fact extractor that reads raw text can be blinded by characters a reader never notices: a
full-width or mathematical digit (``５`` ``𝟓``) is no ASCII digit, an invisible character
(word joiner, zero-width space, soft hyphen, a bidi control) splits ``50,000,000`` into two
numbers or ``not`` into ``n`` and ``ot``, and a Greek or Cyrillic look-alike letter turns
``not`` into a word no list contains. :func:`normalise` maps every such spelling to the one
the extractors know, and it is applied alike to the answer and to the chunks, so a faithful
quote reads the same on both sides:

1. **invisible characters go**: every format character (Unicode category ``Cf``: zero-width
   space and joiners, word joiner, soft hyphen, bidi controls, BOM, tags) and every other
   default-ignorable code point (variation selectors, the combining grapheme joiner, Hangul
   fillers);
2. a no-break, narrow no-break, figure or thin space **between two digits** becomes ``'``
   (a thousands separator, as it was: NFKC would make it a plain space and so two numbers);
3. **NFKC** (full-width and mathematical forms, ligatures and superscripts fold to plain
   text);
4. **every decimal digit** of any script becomes its ASCII digit (``٥`` -> ``5``);
5. **look-alike letters**: a word whose letters are all Latin once Greek, Cyrillic and
   Armenian look-alikes (``ο`` ``о`` ``ո`` for ``o``, ...) are read as the Latin letters they
   look like, is spelled with those Latin letters (``nοt`` -> ``not``); a word of another
   script (``νόμος``) is left alone.

A word that still mixes Latin letters with letters of another script after this
(:func:`mixed_script`) hides its spelling from every list: the claim check treats it as a name,
which must occur in the cited chunk as written.
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["Normalised", "currency_symbols", "mixed_script", "normalise", "visible"]

#: Default-ignorable code points that are not of category Cf (Unicode's
#: DerivedCoreProperties: combining grapheme joiner, Hangul fillers, Khmer inherent vowels,
#: Mongolian variation selectors, variation selectors, ...).
_IGNORABLE_RANGES = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)  # fmt: skip
# Format characters beyond the first two planes are all tags (U+E0001, U+E0020..E007F),
# inside the last range above; scanning the first two planes keeps building cheap.
_SCAN_END = 0x20000
#: Spaces a number may be grouped with (they stay separators only between digits).
_DIGIT_SPACE = re.compile(r"(?<=[0-9])[\u00a0\u2007\u2009\u202f](?=[0-9])")
#: A word holding a letter or digit beyond ASCII (only those can hold a look-alike).
_NON_ASCII_WORD = re.compile(r"[^\W_]*[^\W\x00-\x7f][^\W_]*")

#: Letters of other scripts read as the Latin letter they look like (a practical subset of
#: Unicode's confusables: the Greek, Cyrillic and Armenian letters with a Latin twin).
_LOOKALIKES = str.maketrans({
    # Greek
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "α": "a", "ι": "i", "κ": "k", "ν": "v",
    "ο": "o", "ρ": "p", "υ": "u", "χ": "x", "ϲ": "c", "Ϲ": "C", "ϳ": "j", "Ϳ": "J",
    # Cyrillic
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C",
    "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ԛ": "Q", "Ԝ": "W", "Һ": "H",
    "Ӏ": "I", "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s",
    "і": "i", "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l", "ʏ": "y",
    # Armenian
    "ո": "n", "ս": "u", "օ": "o", "հ": "h", "ց": "g", "զ": "q", "Տ": "S", "Օ": "O",
    # Latin letters that read as plain ones
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɡ": "g", "ɩ": "i", "ꞇ": "t",
})  # fmt: skip
#: Scripts that are one writing system for this purpose (Japanese mixes these in one word).
_SCRIPT_FAMILY = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK", "IDEOGRAPHIC": "CJK"}


@functools.cache
def _tables() -> tuple[dict[int, int | None], str]:
    """The translation table of step 1 and 4 (built once per process, ~20 ms), and every
    currency symbol (category ``Sc``) of the first two planes."""
    table: dict[int, int | None] = {}
    symbols: list[str] = []
    for cp in range(0x80, _SCAN_END):
        ch = chr(cp)
        category = unicodedata.category(ch)
        if category == "Cf":
            table[cp] = None
        elif category == "Nd":
            table[cp] = ord(str(unicodedata.digit(ch)))
        elif category == "Sc":
            symbols.append(ch)
    for lo, hi in _IGNORABLE_RANGES:
        table.update(dict.fromkeys(range(lo, hi + 1)))
    return table, "".join(symbols)


@functools.cache
def _invisible() -> dict[int, None]:
    """Step 1's table alone: every invisible character, mapped to nothing."""
    return {cp: None for cp, to in _tables()[0].items() if to is None}


def visible(text: str) -> str:
    """``text`` without the invisible characters :func:`normalise` drops (step 1): what the
    claim check did not read is not delivered either, so a supported sentence cannot carry a
    payload in tag characters, zero-width spaces or bidi controls."""
    return text.translate(_invisible())


def currency_symbols() -> str:
    """Every currency symbol (Unicode category ``Sc``) that can survive :func:`normalise`."""
    return "$" + _tables()[1]


class Normalised(str):
    """Text :func:`normalise` returned: normalising it again returns it as it is."""

    __slots__ = ()


def normalise(text: str) -> Normalised:
    """``text`` as the claim check reads it (module docstring); idempotent."""
    if type(text) is Normalised:
        return text
    if text.isascii():
        # ASCII is NFKC already and holds no invisible or look-alike character.
        return Normalised(text)
    # Lone surrogates cannot be normalised or encoded: they become "?" (a separator).
    text = text.encode("utf-8", "replace").decode("utf-8")
    table = _tables()[0]
    text = _DIGIT_SPACE.sub("'", text.translate(table))
    text = unicodedata.normalize("NFKC", text).translate(table)
    if not text.isascii():
        folded = _NON_ASCII_WORD.sub(_unconfuse, text)
        # A Latin letter put for a look-alike may compose with a mark after it.
        text = folded if folded == text else unicodedata.normalize("NFKC", folded)
    return Normalised(text)


def _unconfuse(m: re.Match[str]) -> str:
    return _latin_twin(m.group())


@functools.lru_cache(maxsize=4096)
def _latin_twin(word: str) -> str:
    """``word`` spelled with Latin letters where each of its letters is Latin or looks like one
    (``nοt`` -> ``not``), else ``word`` itself (``νόμος``)."""
    if word.isascii():
        return word
    twin = word.translate(_LOOKALIKES)
    if twin == word or any(_script(ch) != "LATIN" for ch in twin if _is_letter(ch)):
        return word
    return twin


def mixed_script(word: str) -> bool:
    """Whether ``word`` (normalised) mixes Latin letters with letters of another script."""
    if word.isascii():
        return False
    scripts = {_script(ch) for ch in word if _is_letter(ch)}
    return "LATIN" in scripts and len(scripts) > 1


def _is_letter(ch: str) -> bool:
    # Modifier letters (ʼ, ˈ) are marks of pronunciation or apostrophes, not a script's letters.
    return ch.isalpha() and unicodedata.category(ch) != "Lm"


@functools.lru_cache(maxsize=4096)
def _script(ch: str) -> str:
    if ch.isascii():
        return "LATIN"
    first = unicodedata.name(ch, "UNKNOWN").split(" ", 1)[0]
    return _SCRIPT_FAMILY.get(first, first)
