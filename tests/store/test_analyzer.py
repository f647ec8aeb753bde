"""Tests for the shared BM25 text analyzer."""

from __future__ import annotations

import threading
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.store.analyzer import (
    MAX_TOKEN_CHARS,
    STOPWORDS,
    Analyzer,
    default_analyzer,
)

# Any code point at all, lone surrogates included (Hypothesis excludes category Cs by default).
# Surrogates, combining marks and plain word characters are boosted so that they meet often;
# uniformly drawn code points would almost never put a surrogate next to a letter.
ANY_CHAR = (
    st.characters(exclude_categories=())
    | st.characters(categories=["Cs"])
    | st.characters(categories=["Mn", "Mc", "Me"])
    | st.sampled_from("abcXYZ019 _-.'\n\t\u00e9\u00df\ufb01\uff21\u0130")
)
ANY_TEXT = st.text(alphabet=ANY_CHAR, max_size=300)


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return Analyzer()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Running Dogs", ["run", "dog"]),
        ("", []),
        ("   \n\t  ", []),
        # Stopwords vanish entirely; only content words survive.
        ("the of and to in is it that", []),
        ("To be or not to be, that is the question", ["question"]),
        # NFKC: full-width letters, ligatures, Roman numeral and superscript compatibility forms.
        ("ＡＢＣ", ["abc"]),
        ("ﬁle", ["file"]),
        ("Ⅻ", ["xii"]),
        ("x² y³", ["x2", "y3"]),
        # Casefold is stronger than lower().
        ("Straße", ["strass"]),
        ("STRASSE", ["strass"]),
        ("ΣΊΣΥΦΟΣ σίσυφος", ["σίσυφοσ", "σίσυφοσ"]),
        # Punctuation and underscores split words; internal digits stay.
        ("snake_case-words,comma;semi", ["snake", "case", "word", "comma", "semi"]),
        ("COVID-19 covid19", ["covid", "19", "covid19"]),
        ("e-mail: foo@example.gov", ["mail", "foo", "exampl", "gov"]),
        ("3.14 1,000", ["3", "14", "1", "000"]),
        # One-character words are noise unless they are digits.
        ("x y 7 z 0", ["7", "0"]),
        ("Section 5(b) of Title 42", ["section", "5", "titl", "42"]),
        # Contractions split at the apostrophe; the fragments are stopwords or single letters.
        ("don't isn't they're we've", []),
        ("Policies regarding agencies' reporting", ["polici", "regard", "agenc", "report"]),
        # Full case folding decomposes U+01F0 ("ǰ"); the result is recomposed, so it is one
        # code point again and lowercase J + caron agrees with it.
        ("\u01f0ob J\u030cOB", ["\u01f0ob", "\u01f0ob"]),
        # Combining marks stay inside their word, composed or not.
        ("café cafe\u0301", ["café", "café"]),
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),
        # Scripts without spaces stay one run (no segmentation), but are not lost.
        ("日本語のテキスト", ["日本語のテキスト"]),
        # Symbols and emoji separate words and never become terms.
        ("love❤️peace ☃ 🙂", ["love", "peac"]),
    ],
)
def test_expected_terms(analyzer: Analyzer, text: str, expected: list[str]) -> None:
    assert analyzer.analyze(text) == expected


def test_case_variants_agree(analyzer: Analyzer) -> None:
    assert analyzer.analyze("STRASSE") == analyzer.analyze("Straße") == analyzer.analyze("strasse")
    assert analyzer.analyze("FEDERAL Agencies") == analyzer.analyze("federal agencies")


def test_token_length_limit(analyzer: Analyzer) -> None:
    kept = "k" * MAX_TOKEN_CHARS
    dropped = "d" * (MAX_TOKEN_CHARS + 1)
    assert analyzer.analyze(f"{kept} {dropped} ok") == [kept, "ok"]
    # A long run of digits is noise too; only a lone digit is special-cased.
    assert analyzer.analyze("9" * (MAX_TOKEN_CHARS + 1)) == []


def test_lone_surrogates_are_separators(analyzer: Analyzer) -> None:
    assert analyzer.analyze("budget\ud800report\udfff") == ["budget", "report"]
    assert analyzer.analyze("\udc80") == []


def test_stopword_list_shape() -> None:
    assert 120 <= len(STOPWORDS) <= 180
    for word in STOPWORDS:
        assert word == word.casefold()
        assert word.isalpha()
    # "us" doubles as "US" after casefolding and must stay searchable.
    assert "us" not in STOPWORDS


def test_every_stopword_is_dropped(analyzer: Analyzer) -> None:
    assert analyzer.analyze(" ".join(sorted(STOPWORDS))) == []
    assert analyzer.analyze(" ".join(sorted(STOPWORDS)).upper()) == []


def test_analyze_to_string(analyzer: Analyzer) -> None:
    assert analyzer.analyze_to_string("The Running Dogs!") == "run dog"
    assert analyzer.analyze_to_string("the a of") == ""


def test_default_analyzer_is_shared() -> None:
    assert default_analyzer() is default_analyzer()
    assert default_analyzer().analyze("Running") == ["run"]


def test_invalid_cache_size() -> None:
    with pytest.raises(ValueError, match="term_cache_size"):
        Analyzer(term_cache_size=-1)


@pytest.mark.parametrize("cache_size", [0, 1, 3, 10_000])
def test_cache_size_does_not_change_output(cache_size: int) -> None:
    text = "Federal agencies report; the agency reported reports to federal courts. 2024"
    reference = Analyzer().analyze(text)
    small = Analyzer(term_cache_size=cache_size)
    # Twice: once cold, once after the cache was filled (or cleared for being too small).
    assert small.analyze(text) == reference
    assert small.analyze(text) == reference
    assert small.analyze("unrelated words entirely") == ["unrel", "word", "entir"]
    assert small.analyze(text) == reference


def test_term_cache_stays_bounded() -> None:
    # Reaches into the private cache on purpose: the bound is a memory guarantee that output
    # comparisons cannot observe.
    small = Analyzer(term_cache_size=50)
    for i in range(40):
        small.analyze(" ".join(f"word{i}x{j}" for j in range(7)))
        assert len(small._term_cache) <= 50
    assert small.analyze("word39x6 running") == ["word39x6", "run"]


def test_concurrent_use_matches_sequential() -> None:
    texts = [f"Agency {i} reported {i * 7} regulations about running programs" for i in range(400)]
    expected = [Analyzer().analyze(t) for t in texts]
    # A tiny cache forces constant clearing and refilling while threads race on it.
    shared = Analyzer(term_cache_size=8)
    results: dict[int, list[list[str]]] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            results[worker] = [shared.analyze(t) for t in texts]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert all(got == expected for got in results.values())


@settings(max_examples=400)
@given(ANY_TEXT)
def test_fuzz_terms_are_well_formed(text: str) -> None:
    terms = Analyzer().analyze(text)
    for term in terms:
        assert term
        assert not any(ch.isspace() for ch in term)
        assert len(term) <= MAX_TOKEN_CHARS
        # Terms must survive the round trip through UTF-8 on their way into tantivy.
        term.encode("utf-8")
        assert unicodedata.is_normalized("NFKC", term)
    joined = default_analyzer().analyze_to_string(text)
    # The whitespace tokenizer must recover exactly the same terms.
    assert joined.split(" ") == terms if terms else joined == ""
    assert joined.split() == terms


@given(ANY_TEXT)
def test_fuzz_deterministic(text: str) -> None:
    shared = default_analyzer()
    first = shared.analyze(text)
    assert shared.analyze(text) == first
    assert Analyzer().analyze(text) == first
    assert Analyzer(term_cache_size=0).analyze(text) == first


@given(st.text(max_size=200))  # default alphabet: everything but surrogates
def test_fuzz_canonically_equivalent_inputs_agree(text: str) -> None:
    shared = default_analyzer()
    expected = shared.analyze(text)
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        assert shared.analyze(unicodedata.normalize(form, text)) == expected


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=200))
def test_fuzz_ascii_case_insensitive(text: str) -> None:
    shared = default_analyzer()
    assert shared.analyze(text.upper()) == shared.analyze(text.lower())
