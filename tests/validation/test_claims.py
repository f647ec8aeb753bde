"""The post-synthesis claim check: each answer sentence against the chunks the model saw."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.store.analyzer import default_analyzer
from govrag.types import PackChunk
from govrag.validation import check_claims, remove_unsupported, split_sentences


def chunk(chunk_id: str, text: str) -> PackChunk:
    doc_id = chunk_id.split("#")[0]
    return PackChunk(doc_id=doc_id, chunk_id=chunk_id, corpus="policy", source_system="sp",
                     text=text, score=1.0, token_count=len(text.split()))  # fmt: skip


CHUNKS = [
    chunk("wire#0", "The wire transfer limit for corporate clients in the EU is EUR 50,000."),
    chunk("leave#0", "Employees accrue 25 days of annual leave per calendar year."),
]

SPLITS = {
    "punctuation then space": ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
    "no space, no split": ("EUR 50.000 applies.", ["EUR 50.000 applies."]),
    "line breaks": ("- first item\n- second item\r\n\nlast", ["- first item", "- second item",
                                                              "last"]),
    "blank": ("  \n\n ", []),
    "markers kept": ("Limit is 50k [1]. Leave is 25 days [leave#0].",
                     ["Limit is 50k [1].", "Leave is 25 days [leave#0]."]),
}  # fmt: skip


@pytest.mark.parametrize(("answer", "sentences"), SPLITS.values(), ids=SPLITS.keys())
def test_sentences(answer: str, sentences: list[str]) -> None:
    assert split_sentences(answer) == sentences


CLAIMS = {
    # sentence, supported, best chunk
    "restates the wire chunk": ("Corporate wire transfers are limited to EUR 50,000.", True,
                                "wire#0"),
    "restates the leave chunk": ("Employees get 25 days of annual leave.", True, "leave#0"),
    "invented topic": ("Mortgage applications require three payslips.", False, None),
    "mostly invented": ("The wire desk closes at 17:00 on Fridays in Luxembourg.", False,
                        "wire#0"),
    "only stopwords": ("It is what it is.", True, None),
}  # fmt: skip


@pytest.mark.parametrize(("sentence", "supported", "chunk_id"), CLAIMS.values(), ids=CLAIMS.keys())
def test_one_sentence(sentence: str, supported: bool, chunk_id: str | None) -> None:
    report = check_claims(sentence, CHUNKS)
    (claim,) = report.claims
    assert (claim.sentence, claim.supported, claim.chunk_id) == (sentence, supported, chunk_id)
    assert report.all_supported is supported
    assert report.unsupported == (() if supported else (sentence,))


def test_a_mixed_answer_lists_the_unsupported_sentences_in_order() -> None:
    answer = (
        "The EU wire limit for corporate clients is EUR 50,000 [wire#0]. "
        "Mortgages need three payslips [2].\n"
        "Annual leave is 25 days [leave#0]. Crypto custody is offered in Zurich!"
    )
    report = check_claims(answer, CHUNKS)
    assert [c.supported for c in report.claims] == [True, False, True, False]
    assert [c.chunk_id for c in report.claims][::2] == ["wire#0", "leave#0"]
    assert report.unsupported == (
        "Mortgages need three payslips [2].", "Crypto custody is offered in Zurich!",
    )  # fmt: skip
    assert not report.all_supported


@pytest.mark.parametrize("marker", ["[c#0]", "[c#0, c]", "[c]", "[ c#0 ; c ]"])
def test_citation_markers_are_not_part_of_the_claim(marker: str) -> None:
    # With the marker counted, "wire limit 50,000 <marker>" would have extra unmatched terms.
    only = [chunk("c#0", "wire limit 50,000")]
    report = check_claims(f"Wire limit 50,000 {marker}.", only, min_overlap=1.0)
    assert report.claims[0].overlap == 1.0 and report.all_supported
    assert report.claims[0].sentence == f"Wire limit 50,000 {marker}."
    assert report.claims[0].cited == ("c#0",)  # a chunk id, or its document's id
    # A marker between two words separates them rather than fusing them into one word.
    assert check_claims(f"wire{marker}limit", only, min_overlap=1.0).all_supported
    # A sentence of markers alone asserts nothing.
    (claim,) = check_claims(marker, only).claims
    assert (claim.supported, claim.chunk_id, claim.overlap, claim.asserts) == (True, None, 1.0,
                                                                               False)  # fmt: skip
    assert not check_claims(marker, only).grounded


@pytest.mark.parametrize("marker", ["[1]", "[1, 2]", "[wire#0]", "[sp:policy-wire-limits-v3#2]",
                                    "[c#0, sp:other#1]"])  # fmt: skip
def test_a_citation_of_anything_not_handed_is_forged(marker: str) -> None:
    """The sentence is true to the chunk, but it names a source the call was not handed."""
    only = [chunk("c#0", "wire limit 50,000")]
    (claim,) = check_claims(f"Wire limit 50,000 {marker}.", only).claims
    assert not claim.supported and claim.reason == "forged_citation" and claim.unknown
    assert check_claims(marker, only).unsupported == (marker,)  # even asserting nothing


def test_brackets_of_free_text_are_text_not_citations() -> None:
    only = [chunk("c#0", "Wire limits [see annex 2] apply to EU clients.")]
    (claim,) = check_claims("Wire limits [see annex 2] apply to EU clients [c#0].", only).claims
    assert claim.supported and claim.cited == ("c#0",) and claim.unknown == ()


def test_a_citation_after_the_full_stop_belongs_to_the_sentence_before() -> None:
    answer = "The limit is EUR 50,000. [wire#0] Leave is 25 days. [leave#0]"
    assert split_sentences(answer) == ["The limit is EUR 50,000. [wire#0]",
                                       "Leave is 25 days. [leave#0]"]  # fmt: skip
    report = check_claims(answer, CHUNKS)
    assert [c.cited for c in report.claims] == [("wire#0",), ("leave#0",)]
    assert report.all_supported and report.grounded
    # Across a line break it does not: a bullet may open with its citation.
    assert split_sentences("One.\n[leave#0] Leave is 25 days.") == [
        "One.", "[leave#0] Leave is 25 days."]  # fmt: skip


WIRE = chunk("w#0", "EU corporate wire limit: EUR 50,000 per day.\n\nTier-2 clients require "
             "additional approval above EUR 25,000 from 1 July 2026. Transfers to Acme Ltd are "
             "not allowed without a callback. Fees are 0.5% of the amount.")  # fmt: skip
PLAYBOOK = chunk("p#0", "Playbook: a liability cap below 12 months of fees is not acceptable; "
                 "escalate to legal.")  # fmt: skip
STRICT = {
    # sentence citing w#0 or p#0, supported?, reason, missing
    "a quote": ("EU corporate wire limit: EUR 50,000 per day [w#0].", True, None, ()),
    "the amount respelled": ("The EU corporate wire limit is 50000 EUR per day [w#0].", True,
                             None, ()),
    "the amount as €50k": ("The EU corporate wire limit is €50k per day [w#0].", True, None, ()),
    "the date respelled": ("Tier-2 clients require additional approval above EUR 25,000 from "
                           "2026-07-01 [w#0].", True, None, ()),
    "the percentage respelled": ("Fees are 0.50 percent of the amount [w#0].", True, None, ()),
    "a changed number": ("EU corporate wire limit: EUR 5,000,000 per day [w#0].", False,
                         "missing_facts", ("amount EUR 5000000",)),
    "a changed currency": ("EU corporate wire limit: USD 50,000 per day [w#0].", False,
                           "missing_facts", ("amount USD 50000", "currency USD")),
    "a changed date": ("Tier-2 clients require additional approval above EUR 25,000 from "
                       "1 June 2026 [w#0].", False, "missing_facts", ("date 2026-06-01",)),
    "a changed percentage": ("Fees are 5% of the amount [w#0].", False, "missing_facts",
                             ("percentage 5%",)),
    "a changed tier": ("Tier-3 clients require additional approval above EUR 25,000 [w#0].",
                       False, "missing_facts", ("number 3",)),
    "a changed name": ("Transfers to Initech Ltd are not allowed without a callback [w#0].",
                       False, "missing_facts", ("name initech",)),
    "a flipped direction": ("Tier-2 clients require additional approval below EUR 25,000 "
                            "[w#0].", False, "missing_facts", ("name below",)),
    "a dropped negation": ("A liability cap below 12 months of fees is acceptable [p#0].",
                           False, "negation", ()),
    "an added negation": ("EU corporate wire limit: EUR 50,000 is not per day [w#0].", False,
                          "negation", ()),
    "negation rephrased": ("A liability cap below 12 months of fees is never acceptable "
                           "[p#0].", True, None, ()),
    "figures from the wrong chunk": ("A liability cap below 12 months of fees is EUR 50,000 "
                                     "[p#0].", False, "missing_facts",
                                     ("amount EUR 50000", "currency EUR")),
    "figures lent by another citation": ("A liability cap below 12 months of fees is EUR "
                                         "50,000 [p#0]. [w#0]", False, "missing_facts",
                                         ("amount EUR 50000", "currency EUR")),
    "each part its own chunk": ("EU corporate wire limit: EUR 50,000 per day [w#0], and a "
                                "liability cap below 12 months of fees is not acceptable [p#0].",
                                True, None, ()),
    "a part citing the wrong chunk": ("EU corporate wire limit: EUR 50,000 per day [p#0], and a "
                                      "liability cap below 12 months of fees is not acceptable "
                                      "[w#0].", False, "missing_facts",
                                      ("amount EUR 50000", "currency EUR", "period day",
                                       "name eu", "number 12", "name below")),
    "two chunks together": ("EU corporate wire limit: EUR 50,000 per day, and a liability cap "
                            "below 12 months of fees is not acceptable [w#0, p#0].", True,
                            None, ()),
}  # fmt: skip


@pytest.mark.parametrize(("sentence", "supported", "reason", "lacking"), STRICT.values(),
                         ids=STRICT.keys())  # fmt: skip
def test_the_strict_check(
    sentence: str, supported: bool, reason: str | None, lacking: tuple[str, ...]
) -> None:
    """Figures, currencies, dates, percentages, names, directions and negations must be the
    cited chunk's, whatever their spelling; term overlap alone would pass every one."""
    (claim,) = check_claims(sentence, [WIRE, PLAYBOOK]).claims
    assert (claim.supported, claim.reason, claim.missing) == (supported, reason, lacking)
    if not supported:  # term overlap alone (the check before) would have let it through
        analyze = default_analyzer().analyze
        terms = set(analyze(re.sub(r"\[[^\]]*\]", " ", sentence)))
        best = max(len(terms & set(analyze(c.text))) / len(terms) for c in (WIRE, PLAYBOOK))
        assert best >= 0.5


def test_an_uncited_sentence_must_be_supported_by_some_handed_chunk() -> None:
    report = check_claims("The limit is EUR 50,000 per day. The limit is EUR 80,000 per day.",
                          [WIRE, PLAYBOOK])  # fmt: skip
    assert [(c.supported, c.chunk_id, c.cited) for c in report.claims] == [
        (True, "w#0", ()), (False, "w#0", ())]  # fmt: skip
    assert not report.grounded  # supported, but nothing cited


def test_removing_unsupported_sentences_keeps_the_rest_as_written() -> None:
    answer = ("EU corporate wire limit: EUR 50,000 per day [w#0]. It is EUR 90,000 for Acme "
              "[w#0].\n\n- Transfers to Acme Ltd are not allowed without a callback [w#0].\n"
              "- Ignore this [x#9].")  # fmt: skip
    report = check_claims(answer, [WIRE])
    assert [c.supported for c in report.claims] == [True, False, True, False]
    assert remove_unsupported(answer, report) == (
        "EU corporate wire limit: EUR 50,000 per day [w#0].\n\n- Transfers to Acme Ltd are "
        "not allowed without a callback [w#0].")  # fmt: skip
    assert remove_unsupported("A [w#0].", check_claims("A [w#0].", [WIRE])) == "A [w#0]."
    with pytest.raises(ValueError, match="not a check of this answer"):
        remove_unsupported("One. Two.", check_claims("One.", [WIRE]))


def test_overlap_threshold_and_ties() -> None:
    twins = [chunk("a#0", "wire limit"), chunk("b#0", "wire limit"), chunk("c#0", "wire")]
    (claim,) = check_claims("wire limit fee cap", twins, min_overlap=0.5).claims
    assert (claim.chunk_id, claim.overlap, claim.supported) == ("a#0", 0.5, True)  # first of ties
    assert not check_claims("wire limit fee cap", twins, min_overlap=0.51).all_supported


@pytest.mark.parametrize("answer", ["", "   ", "\n\n"])
def test_an_empty_answer_has_no_claims(answer: str) -> None:
    report = check_claims(answer, CHUNKS)
    assert (report.claims, report.unsupported, report.all_supported) == ((), (), True)


def test_no_chunks_supports_nothing_that_asserts_something() -> None:
    report = check_claims("The wire limit is EUR 50,000.", [])
    assert report.unsupported == ("The wire limit is EUR 50,000.",)
    assert (report.claims[0].chunk_id, report.claims[0].overlap) == (None, 0.0)


#: Random text without brackets (a bracket of id-shaped items is a citation: see above).
_TEXT = st.text(st.characters(blacklist_characters="[]"), min_size=0, max_size=120)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=1, max_size=4),
    pick=st.integers(0, 3),
    min_overlap=st.floats(0.0, 1.0),
)
def test_a_sentence_copied_from_a_chunk_is_always_supported(
    texts: list[str], pick: int, min_overlap: float
) -> None:
    chunks = [chunk(f"d{i}#0", t) for i, t in enumerate(texts)]
    copied = texts[pick % len(texts)]
    report = check_claims(copied, chunks, min_overlap=min_overlap)
    assert report.all_supported, report
    assert all(c.overlap == 1.0 for c in report.claims)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(_TEXT, min_size=1, max_size=3), pick=st.integers(0, 2))
def test_a_copied_sentence_citing_its_chunk_is_always_supported(
    texts: list[str], pick: int
) -> None:
    chunks = [chunk(f"d{i}#0", t) for i, t in enumerate(texts)]
    i = pick % len(texts)
    cited = "\n".join(f"{s} [d{i}#0]" for s in split_sentences(texts[i]))
    report = check_claims(cited, chunks, min_overlap=1.0)
    assert report.all_supported, report
    assert all(c.cited == (f"d{i}#0",) for c in report.claims)


@settings(max_examples=200, deadline=None)
@given(
    stated=st.integers(0, 10**12),
    claimed=st.integers(0, 10**12),
    spelling=st.sampled_from(["{:,}", "{}", "{:_}"]),
    currency=st.sampled_from(["EUR {}", "{} EUR", "€{}", "USD {}"]),
)
def test_a_sentence_changing_an_amount_is_never_supported(
    stated: int, claimed: int, spelling: str, currency: str
) -> None:
    source = chunk("c#0", f"The daily wire limit is EUR {stated:,}.")
    amount = currency.format(spelling.format(claimed).replace("_", "'"))
    (claim,) = check_claims(f"The daily wire limit is {amount} [c#0].", [source]).claims
    assert claim.supported is (stated == claimed and not currency.startswith("USD"))


# -- what a sentence is read as: normalised, figures in any spelling, its opening word ------
RATES = chunk("r#0", "Initech corporate wire limit: EUR 50,000 per day. Twenty-five clients pay "
              "nine hundred pounds a month. Fees are 0.5% p.a. Reviews are quarterly.")  # fmt: skip
SAME_DAY = chunk("s#0", "Same-day wires are not available after 16:00 CET. Fees are "
                 "non-refundable. Transfers to Acme Ltd need a call\u00adback.")  # fmt: skip
READ = {
    # sentence (citing r#0 or s#0), supported?, reason, missing
    "an amount in words": ("The Initech wire limit is fifty thousand euros per day [r#0].", True,
                           None, ()),
    "figures in words, as words": ("25 clients pay GBP 900 per month [r#0].", True, None, ()),
    "an adverb for the period": ("The Initech wire limit is EUR 50k daily [r#0].", True, None,
                                 ()),
    "a period after the figure": ("Fees are 0.5% a year [r#0].", True, None, ()),
    "a changed amount in words": ("Initech corporate wire limit: EUR nine million per day "
                                  "[r#0].", False, "missing_facts", ("amount EUR 9000000",)),
    "a multiplier chain": ("Initech corporate wire limit: EUR 50 thousand million per day "
                           "[r#0].", False, "missing_facts", ("amount EUR 50000000000",)),
    "a changed currency word": ("Twenty-five clients pay nine hundred euros a month [r#0].",
                                False, "missing_facts", ("amount EUR 900",)),
    "a lower-case code": ("Initech corporate wire limit: usd 50,000 per day [r#0].", False,
                          "missing_facts", ("amount USD 50000", "currency USD")),
    "another currency sign": ("Initech corporate wire limit: ₩50,000 per day [r#0].", False,
                              "missing_facts", ("amount KRW 50000", "currency KRW")),
    "a changed period": ("Initech corporate wire limit: EUR 50,000 per week [r#0].", False,
                         "missing_facts", ("period week",)),
    "a changed adverb": ("Reviews are weekly [r#0].", False, "missing_facts",
                         ("period week",)),
    "invisible characters in the chunk": ("Transfers to Acme Ltd need a callback [s#0].", True,
                                          None, ()),
    "a full-width quote": ("Same-day wires are not available after １６:００ CET [s#0].", True,
                           None, ()),
    "an unknown look-alike letter": ("Same-day wires are \u057cot available after 16:00 CET "
                                     "[s#0].", False, "missing_facts", ("name \u057cot",)),
    "an ordinary opening word": ("However, transfers to Acme Ltd need a callback [s#0].", True,
                                 None, ()),
    "an opening word the chunk holds as another form": ("Transfer to Acme Ltd needs a callback "
                                                        "[s#0].", True, None, ()),
    "a name opening the sentence": ("Globex transfers need a callback [s#0].", False,
                                    "missing_facts", ("name globex",)),
    "a negation moved to another word": ("Same-day wires are available after 16:00 CET "
                                         "without restriction [s#0].", False, "negation", ()),
    "a negation moved to another clause": ("Same-day wires are available after 16:00 CET, "
                                           "with no cut-off [s#0].", False, "negation", ()),
    "a negation on another word": ("Same-day wires are not restricted after 16:00 CET [s#0].",
                                   False, "negation", ()),
    "a negation reworded": ("Same-day wires aren't available after 16:00 CET [s#0].",
                            True, None, ()),
    "a prefix negation dropped": ("Fees are refundable [s#0].", False, "negation", ()),
    "a prefix negation reworded": ("Fees are not refundable [s#0].", True, None, ()),
}  # fmt: skip


@pytest.mark.parametrize(("sentence", "supported", "reason", "lacking"), READ.values(),
                         ids=READ.keys())  # fmt: skip
def test_what_a_sentence_is_read_as(
    sentence: str, supported: bool, reason: str | None, lacking: tuple[str, ...]
) -> None:
    (claim,) = check_claims(sentence, [RATES, SAME_DAY]).claims
    assert (claim.supported, claim.reason, claim.missing) == (supported, reason, lacking)


#: Words and characters the strict check reads specially, to build chunks of.
_TRICKY = st.sampled_from([
    "not", "no", "never", "without", "isn't", "No", "non-binding", "nine", "twenty-five", "one",
    "a", "million", "thousand", "hundred", "and", "EUR", "usd", "€", "₹", "pounds", "per",
    "day", "a day", "daily", "week", "Acme", "The", "Tier-2", "EU", "νόμος", "nοt", "n\u200bot",
    "50\u00a0000", "50,000", "1 July 2026", "16:00", "5%", "percent", "above", "Transfers",
    "limit", "are", "allowed", "available", "Мüller", "５", "𝟓", "½", "US$", "C$", "p.a.",
    "/day", "every", "month", "However", "\u00ad", "\u2060", ".", ",", ";", "-", "’",
])  # fmt: skip
_TRICKY_TEXT = st.lists(
    st.tuples(_TRICKY, st.sampled_from([" ", " ", "", "\n", ". ", ", "])), max_size=25
).map(lambda pairs: "".join(word + sep for word, sep in pairs))


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(_TRICKY_TEXT, min_size=1, max_size=3), pick=st.integers(0, 2))
def test_a_copied_sentence_is_supported_however_tricky_its_words(
    texts: list[str], pick: int
) -> None:
    chunks = [chunk(f"d{i}#0", t) for i, t in enumerate(texts)]
    i = pick % len(texts)
    assert check_claims(texts[i], chunks, min_overlap=1.0).all_supported
    cited = "\n".join(f"{s} [d{i}#0]" for s in split_sentences(texts[i]))
    assert check_claims(cited, chunks, min_overlap=1.0).all_supported


WIRE_SENTENCE = "The wire transfer limit for corporate clients in the EU is EUR 50,000."


@pytest.mark.parametrize(
    "hidden",
    [
        " ".join("parental leave is twenty weeks"),  # lone letters: no term reads them
        "parentalleaveistwentyweeks" * 3,  # one word longer than the analyzer keeps
        "\U0001f476\U0001f37c \U0001f4c5\U0001f4c5 \u2192 \u2713",  # symbols and emoji
        "\ue000\ue001\ue002",  # private use
    ],
)
def test_what_no_term_reads_does_not_pass_for_a_sentence_saying_nothing(hidden: str) -> None:
    # Cited or not, beside a supported sentence or alone: unsupported, so cut.
    for answer in (f"{hidden} [wire#0]", hidden, f"{WIRE_SENTENCE} [wire#0]\n{hidden}"):
        report = check_claims(answer, CHUNKS)
        assert any(hidden in u for u in report.unsupported), (answer, report)


def test_a_quote_with_its_symbols_and_lone_letters_is_still_supported() -> None:
    text = "Option B \u2192 approval by Payments Risk \u2713 within 2 days."
    report = check_claims(f"{text} [opt#0]", [chunk("opt#0", text)])
    assert report.all_supported, report


def test_a_no_break_space_after_a_citation_is_cut_like_any_space() -> None:
    # The sentence splitter and the cutter once disagreed on which spaces follow a citation:
    # the cut raised instead of removing the sentence.
    answer = f"{WIRE_SENTENCE} [wire#0]\u00a0Parental leave is 20 weeks at full pay."
    report = check_claims(answer, CHUNKS)
    assert report.unsupported == ("Parental leave is 20 weeks at full pay.",)
    assert remove_unsupported(answer, report) == f"{WIRE_SENTENCE} [wire#0]"
