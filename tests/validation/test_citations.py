"""Citation markers: one parser for the claim check and the answer's citation list.

Ids are matched literally against the chunks handed to the call, so an id holding separators,
brackets or a full stop is cited as shown, and nothing that is not a handed id in full can
name a handed chunk.
"""

from __future__ import annotations

import pytest

from govrag.agent.answer import cited
from govrag.types import PackChunk
from govrag.validation import check_claims, split_sentences
from govrag.validation.citations import Citations

TEXT = "Initech corporate wire limit: EUR 50,000 per day."


def chunk(doc_id: str, n: int = 0, text: str = TEXT) -> PackChunk:
    return PackChunk(doc_id=doc_id, chunk_id=f"sp:{doc_id}#{n}", corpus="c", source_system="sp",
                     text=text, score=1.0, token_count=8)  # fmt: skip


@pytest.mark.parametrize(
    "doc_id",
    ["minutes/Board, 5 January.md", "Q1; Q2 limits.md", "Report [final].md", "Q1. Q2 [a, b]; c.md",
     "plain"],
)  # fmt: skip
def test_an_id_is_cited_as_it_is_shown(doc_id: str) -> None:
    c = chunk(doc_id)
    answer = f"{TEXT} [{c.chunk_id}] {TEXT[:-1]} [{doc_id}]."
    (m1, m2) = Citations([c]).markers(answer)
    assert (m1.chunk_ids, m1.unknown, m2.chunk_ids, m2.unknown) == ((c.chunk_id,), (),
                                                                    (c.chunk_id,), ())  # fmt: skip
    assert answer[m1.start : m1.end] == f"[{c.chunk_id}]"
    # A sentence never ends inside a citation, and the check and the record agree.
    assert split_sentences(answer, [c]) == [f"{TEXT} [{c.chunk_id}]", f"{TEXT[:-1]} [{doc_id}]."]
    report = check_claims(answer, [c])
    assert report.all_supported and [x.cited for x in report.claims] == [(c.chunk_id,)] * 2
    assert [x.chunk_id for x in cited(answer, [("pack", c)])[0]] == [c.chunk_id]


def test_items_are_separated_by_commas_or_semicolons_and_matched_longest_first() -> None:
    a, b, ab = chunk("a"), chunk("b"), chunk("a#0, sp:b")  # "sp:a#0, sp:b#0" is an id too
    marks = Citations([a, b, ab]).markers("x [sp:a#0; sp:b#0] y [sp:a#0, sp:b#0] z [ sp:a#0 ]")
    assert [m.chunk_ids for m in marks] == [("sp:a#0", "sp:b#0"), ("sp:a#0, sp:b#0",),
                                            ("sp:a#0",)]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "unknown"),
    [
        ("[sp:a#00]", ("sp:a#00",)),  # a handed id followed by more is not that id
        ("[sp:a#0x, sp:a#0]", ("sp:a#0x",)),
        ("[SP:A#0]", ("SP:A#0",)),  # ids are matched as written
        ("[1]", ("1",)),
        ("[1; 2]", ("1", "2")),
    ],
)
def test_nothing_but_a_handed_id_in_full_names_a_handed_chunk(
    text: str, unknown: tuple[str, ...]
) -> None:
    (m,) = Citations([chunk("a")]).markers(text)
    assert m.unknown == unknown
    assert m.chunk_ids == (("sp:a#0",) if "sp:a#0]" in text else ())


@pytest.mark.parametrize("text", ["[see annex 2]", "[]", "[ , ]", "[sp:a#0", "[sp:a#0\n]"])
def test_brackets_that_cite_nothing_are_text(text: str) -> None:
    assert Citations([chunk("a")]).markers(text) == []


def test_a_document_id_cites_each_handed_chunk_of_it_in_the_record_too() -> None:
    c0, c1 = chunk("doc", 0), chunk("doc", 1, "Same-day wires are not available after 16:00.")
    answer = f"{TEXT} [doc]"
    assert check_claims(answer, [c0, c1]).claims[0].cited == ("sp:doc#0", "sp:doc#1")
    recorded = cited(answer, [("p", c0), ("p", c1)])[0]
    assert [c.chunk_id for c in recorded] == ["sp:doc#0", "sp:doc#1"]
