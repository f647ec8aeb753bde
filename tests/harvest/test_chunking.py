"""Tests for paragraph-aware chunking."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from govrag.harvest.chunking import ChunkSpec, chunk_text


def words(n: int, prefix: str = "w") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def leaves(chunks: list[ChunkSpec]) -> list[ChunkSpec]:
    return [c for c in chunks if c.indexed]


def leaf_words(chunks: list[ChunkSpec]) -> list[str]:
    return [w for c in leaves(chunks) for w in c.text.split()]


def assert_well_formed(chunks: list[ChunkSpec], text: str, max_tokens: int, section: int) -> None:
    """The structural invariants every chunk_text result must satisfy."""
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert leaf_words(chunks) == text.split()
    by_ordinal = {c.ordinal: c for c in chunks}
    for chunk in chunks:
        assert chunk.text == chunk.text.strip()
        assert chunk.text
        assert chunk.token_count == len(chunk.text.split())
        if chunk.indexed:
            assert chunk.token_count <= max_tokens
        else:
            assert chunk.parent is None
            assert chunk.token_count <= section
        if chunk.parent is not None:
            assert chunk.indexed
            assert chunk.parent < chunk.ordinal
            assert not by_ordinal[chunk.parent].indexed
    if len(leaves(chunks)) > 1:
        # Every leaf hangs under a section, and each section is exactly its leaves.
        assert all(leaf.parent is not None for leaf in leaves(chunks))
        for parent in (c for c in chunks if not c.indexed):
            children = [c for c in chunks if c.parent == parent.ordinal]
            assert children
            assert parent.text == "\n\n".join(c.text for c in children)
            assert parent.token_count == sum(c.token_count for c in children)
            # Children follow their parent directly, in order.
            assert [c.ordinal for c in children] == list(
                range(parent.ordinal + 1, parent.ordinal + 1 + len(children))
            )


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n", "\u00a0\u2003"])
def test_blank_text_yields_nothing(text: str) -> None:
    assert chunk_text(text) == []


def test_short_document_is_one_chunk_with_original_text() -> None:
    text = "\n  Title line\n\n\n\nFirst paragraph here.\nSecond line.  \n"
    assert chunk_text(text) == [
        ChunkSpec(ordinal=0, text=text.strip(), parent=None, indexed=True, token_count=7)
    ]


def test_exactly_max_tokens_is_one_chunk() -> None:
    text = " ".join(words(20))
    assert chunk_text(text, max_tokens=20) == [ChunkSpec(0, text, None, True, 20)]


def test_chunkspec_is_frozen() -> None:
    chunk = ChunkSpec(0, "x", None, True, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "y"  # type: ignore[misc]


def test_multi_paragraph_packs_whole_paragraphs() -> None:
    paras = [" ".join(words(10, f"p{i}_")) for i in range(5)]
    text = "\n\n".join(paras)
    chunks = chunk_text(text, max_tokens=25, section_tokens=1000)
    assert_well_formed(chunks, text, 25, 1000)
    # 10-word paragraphs pack two to a leaf; none is split because each fits on its own.
    assert [c.text for c in leaves(chunks)] == [
        f"{paras[0]}\n\n{paras[1]}",
        f"{paras[2]}\n\n{paras[3]}",
        paras[4],
    ]
    # Everything fits in one section, which comes first and is the parent of all leaves.
    assert chunks[0] == ChunkSpec(0, "\n\n".join(paras), None, False, 50)
    assert [c.parent for c in chunks[1:]] == [0, 0, 0]


def test_paragraph_that_does_not_fit_moves_whole_to_next_leaf() -> None:
    paras = [" ".join(words(15, "a")), " ".join(words(15, "b"))]
    text = "\n\n".join(paras)
    chunks = chunk_text(text, max_tokens=20)
    assert [c.text for c in leaves(chunks)] == paras


def test_leaf_can_be_filled_exactly_to_max_tokens() -> None:
    paras = [" ".join(words(8, f"p{i}_")) for i in range(3)]
    chunks = chunk_text("\n\n".join(paras), max_tokens=16)
    assert [(c.text, c.token_count) for c in leaves(chunks)] == [
        (f"{paras[0]}\n\n{paras[1]}", 16),
        (paras[2], 8),
    ]


def test_section_can_be_filled_exactly_to_section_tokens() -> None:
    text = "\n\n".join(" ".join(words(16, f"p{i}_")) for i in range(3))
    chunks = chunk_text(text, max_tokens=16, section_tokens=32)
    assert [(c.indexed, c.parent, c.token_count) for c in chunks] == [
        (False, None, 32), (True, 0, 16), (True, 0, 16),
        (False, None, 16), (True, 3, 16),
    ]  # fmt: skip


def test_sections_group_leaves() -> None:
    text = "\n\n".join(" ".join(words(16, f"p{i}_")) for i in range(7))
    chunks = chunk_text(text, max_tokens=16, section_tokens=40)
    assert_well_formed(chunks, text, 16, 40)
    # Two 16-word leaves per 40-word section: 7 leaves -> 4 sections.
    shape = [(c.indexed, c.parent) for c in chunks]
    assert shape == [
        (False, None), (True, 0), (True, 0),
        (False, None), (True, 3), (True, 3),
        (False, None), (True, 6), (True, 6),
        (False, None), (True, 9),
    ]  # fmt: skip


def test_giant_paragraph_splits_at_sentences() -> None:
    sentences = [" ".join(words(9, f"s{i}_")) + "." for i in range(6)]
    text = " ".join(sentences)
    chunks = chunk_text(text, max_tokens=20)
    assert_well_formed(chunks, text, 20, 1200)
    # Two 9-word sentences fit in 20; the third would not.
    assert [c.text for c in leaves(chunks)] == [
        f"{sentences[0]} {sentences[1]}",
        f"{sentences[2]} {sentences[3]}",
        f"{sentences[4]} {sentences[5]}",
    ]


@pytest.mark.parametrize("end", ["?", "!", "."])
def test_sentence_ends_are_recognised(end: str) -> None:
    first = " ".join(words(12, "a")) + end
    second = " ".join(words(12, "b")) + end
    chunks = chunk_text(f"{first}\n{second}", max_tokens=16)
    assert [c.text for c in leaves(chunks)] == [first, second]


def test_sentence_split_keeps_original_line_breaks() -> None:
    first = " ".join(words(12, "a")) + "."
    second = " ".join(words(12, "b"))
    third = " ".join(words(3, "c"))
    text = f"{first}\n{second}\n{third}"
    chunks = chunk_text(text, max_tokens=16)
    # The second sentence spans a single newline, which is not a paragraph break.
    assert [c.text for c in leaves(chunks)] == [first, f"{second}\n{third}"]


def test_giant_sentence_is_hard_split_by_words() -> None:
    all_words = words(50)
    text = " ".join(all_words)
    chunks = chunk_text(text, max_tokens=16)
    assert_well_formed(chunks, text, 16, 1200)
    assert [c.token_count for c in leaves(chunks)] == [16, 16, 16, 2]
    assert leaves(chunks)[0].text == " ".join(all_words[:16])


def test_giant_paragraph_tail_packs_with_next_paragraph() -> None:
    big = " ".join(words(20, "big"))
    small = " ".join(words(5, "small"))
    chunks = chunk_text(f"{big}\n\n{small}", max_tokens=16)
    assert [c.text for c in leaves(chunks)] == [
        " ".join(words(16, "big")),
        " ".join(words(20, "big")[16:]) + "\n\n" + small,
    ]


@pytest.mark.parametrize(
    ("max_tokens", "section_tokens", "message"),
    [
        (15, 1200, "max_tokens must be at least 16"),
        (0, 1200, "max_tokens must be at least 16"),
        (300, 299, r"section_tokens \(299\) must be at least max_tokens \(300\)"),
    ],
)
def test_invalid_budgets(max_tokens: int, section_tokens: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chunk_text("anything", max_tokens=max_tokens, section_tokens=section_tokens)


def test_boundary_budgets_are_accepted() -> None:
    text = " ".join(words(40))
    chunks = chunk_text(text, max_tokens=16, section_tokens=16)
    assert_well_formed(chunks, text, 16, 16)
    # With section == leaf budget, each section holds exactly one leaf.
    assert [c.indexed for c in chunks] == [False, True] * 3


# Words with punctuation so sentence ends occur; separators mix spaces, newlines and blank lines.
WORD = st.text(alphabet="abcxyz.?!,;'-\u00e9\u4e2d", min_size=1, max_size=8)
SEPARATOR = st.sampled_from([" ", " ", " ", "\n", "\n\n", "\n \n\n", "\t", "\u00a0", "\r\n\r\n"])


@st.composite
def documents(draw: st.DrawFn) -> str:
    # Drawing the length first spreads sizes out; plain st.lists favours short lists, and most
    # interesting behaviour needs several leaves and sections.
    size = draw(st.integers(min_value=0, max_value=300))
    parts = draw(st.lists(st.tuples(WORD, SEPARATOR), min_size=size, max_size=size))
    lead = draw(st.sampled_from(["", " ", "\n\n"]))
    return lead + "".join(w + s for w, s in parts)


@settings(max_examples=300)
@given(
    documents(),
    st.integers(min_value=16, max_value=60),
    st.integers(min_value=0, max_value=120),
)
def test_fuzz_structure(text: str, max_tokens: int, extra_section: int) -> None:
    section_tokens = max_tokens + extra_section
    chunks = chunk_text(text, max_tokens=max_tokens, section_tokens=section_tokens)
    assert_well_formed(chunks, text, max_tokens, section_tokens)
    sections = sum(1 for c in chunks if not c.indexed)
    event("multiple sections" if sections > 1 else "one section" if sections else "one leaf")
    if not text.split():
        assert chunks == []
    elif len(text.split()) <= max_tokens:
        assert chunks == [ChunkSpec(0, text.strip(), None, True, len(text.split()))]
    assert chunk_text(text, max_tokens=max_tokens, section_tokens=section_tokens) == chunks


# Plenty of exotic whitespace (information separators, NEL, ideographic space, line separator)
# so that paragraph and sentence cuts are checked against str.split() about word edges.
UNICODE_CHAR = st.characters() | st.sampled_from(" \n\n.!?\x1c\x1f\x85\u2028\u3000\u00a0")


@st.composite
def unicode_documents(draw: st.DrawFn) -> str:
    size = draw(st.integers(min_value=0, max_value=600))
    return draw(st.text(alphabet=UNICODE_CHAR, min_size=size, max_size=size))


@settings(max_examples=200)
@given(unicode_documents(), st.integers(min_value=16, max_value=40))
def test_fuzz_arbitrary_unicode_keeps_words(text: str, max_tokens: int) -> None:
    chunks = chunk_text(text, max_tokens=max_tokens, section_tokens=max_tokens * 2)
    assert_well_formed(chunks, text, max_tokens, max_tokens * 2)
    event("multiple leaves" if len(leaves(chunks)) > 1 else "at most one leaf")
