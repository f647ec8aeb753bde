"""The post-synthesis claim check: each answer sentence against the chunks the model saw."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from govrag.types import PackChunk
from govrag.validation import check_claims, split_sentences


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


@pytest.mark.parametrize("marker", ["[1]", "[1, 2]", "[wire#0]", "[sp:policy-wire-limits-v3#2]"])
def test_citation_markers_are_not_part_of_the_claim(marker: str) -> None:
    # With the marker counted, "wire limit 50,000 <marker>" would have extra unmatched terms.
    only = [chunk("c#0", "wire limit 50,000")]
    report = check_claims(f"Wire limit 50,000 {marker}.", only, min_overlap=1.0)
    assert report.claims[0].overlap == 1.0 and report.all_supported
    assert report.claims[0].sentence == f"Wire limit 50,000 {marker}."
    # A marker between two words separates them rather than fusing them into one word.
    assert check_claims(f"wire{marker}limit", only, min_overlap=1.0).all_supported
    # A sentence of markers alone asserts nothing.
    (claim,) = check_claims(marker, only).claims
    assert (claim.supported, claim.chunk_id, claim.overlap) == (True, None, 1.0)


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


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.text(min_size=0, max_size=120), min_size=1, max_size=4),
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
