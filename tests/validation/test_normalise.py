"""The one normalisation the claim check reads answers and chunks through."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.validation.normalise import mixed_script, normalise

READS = {
    "full-width digits": ("EUR ５,０００,０００", "EUR 5,000,000"),
    "mathematical digits": ("EUR 𝟓,𝟎𝟎𝟎", "EUR 5,000"),
    "other scripts' digits": ("٥٠ EUR", "50 EUR"),
    "word joiner": ("50,000\u2060,000", "50,000,000"),
    "soft hyphen": ("50,000\u00ad,000", "50,000,000"),
    "zero-width space": ("n\u200bot A\u200bcme", "not Acme"),
    "bidi override": ("EUR \u202e000,05", "EUR 000,05"),
    "variation selector": ("5\ufe0f0", "50"),
    "no-break space between digits": ("50\u00a0000 and 50\u202f000", "50'000 and 50'000"),
    "no-break space between words": ("EUR\u00a050", "EUR 50"),
    "ligature": ("ﬁne", "fine"),
    "Greek omicron in a Latin word": ("n\u03bft", "not"),
    "Cyrillic letters in a Latin word": ("\u0410cm\u0435 M\u00fcller", "Acme Müller"),
    "a Greek word stays Greek": ("νόμος", "νόμος"),
    "a Cyrillic word stays Cyrillic": ("нет", "нет"),
    "ASCII is left alone": ("EUR 50,000 per day", "EUR 50,000 per day"),
}


@pytest.mark.parametrize(("text", "read"), READS.values(), ids=READS.keys())
def test_what_a_reader_sees_is_what_the_check_reads(text: str, read: str) -> None:
    assert normalise(text) == read


@pytest.mark.parametrize(
    ("word", "mixed"),
    [("n\u057ct", True), ("νόμος", False), ("Müller", False), ("ATMで", True), ("漢字かな", False),
     ("donʼt", False)],
)  # fmt: skip
def test_a_word_mixing_latin_with_another_script_is_told(word: str, mixed: bool) -> None:
    assert mixed_script(normalise(word)) is mixed


@settings(max_examples=500)
@given(st.text())
def test_normalising_twice_changes_nothing(text: str) -> None:
    once = normalise(text)
    assert normalise(str(once)) == once
