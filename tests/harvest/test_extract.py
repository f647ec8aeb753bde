"""Text extraction: the strict front-matter subset, HTML to text, PDF, decoding errors."""

from __future__ import annotations

from typing import Any

import pytest
from fs_helpers import tiny_pdf

from govrag.errors import InputError
from govrag.harvest.access import front_rule
from govrag.harvest.extract import extract, split_front_matter
from govrag.types import Classification


@pytest.mark.parametrize(
    ("text", "front", "body"),
    [
        ("no front matter\n---\n", {}, "no front matter\n---\n"),
        ("---\n---\nbody", {}, "body"),
        ("---\ntitle: Wire: limits\n...\n\nbody", {"title": "Wire: limits"}, "body"),
        ("---\nacl: [S-1, 'G, x', \"G-risk\"]\n---\n", {"acl": ["S-1", "G, x", "G-risk"]}, ""),
        ("---\nacl: []\n---\n", {"acl": []}, ""),
        ("---\n# comment\n\nn: 3\nf: -1.5\nq: '3'\n---\n", {"n": 3, "f": -1.5, "q": "3"}, ""),
        ("---\ntitle: A # note\nb: x#y\n---\n", {"title": "A", "b": "x#y"}, ""),
        ("---\nempty:\n---\n", {"empty": ""}, ""),
        ("---\r\ntitle: CRLF\r\n---\r\nbody", {"title": "CRLF"}, "body"),
    ],
)
def test_front_matter(text: str, front: dict[str, Any], body: str) -> None:
    found = extract(text.encode(), "markdown")
    assert (found.front, found.text) == (front, body)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\ntitle: x\n", "never closed"),
        ("---\n  nested: x\n---\n", "line 2: nested values are not supported"),
        ("---\njust words\n---\n", "line 2: expected 'key: value'"),
        ("---\na: 1\na: 2\n---\n", "line 3: key 'a' appears twice"),
        ("---\nacl: [S-1\n---\n", "line 2: list '[S-1' is not closed"),
        ("---\nacl: [S-1,,S-2]\n---\n", "has an empty item"),
        ("---\nacl: ['S-1]\n---\n", "unclosed quote"),
        ("---\nacl: [[S-1]]\n---\n", "nested lists are not supported"),
        ("---\nmeta: {a: 1}\n---\n", "is not supported"),
        ("---\ntitle: 'half\n---\n", "unbalanced quote"),
        ("---\ntext: |\n---\n", "is not supported"),
    ],
)
def test_front_matter_errors(text: str, message: str) -> None:
    with pytest.raises(InputError, match="front matter") as info:
        split_front_matter(text)
    assert message in str(info.value)


def test_front_rule_maps_fields_and_metadata() -> None:
    rule, updated = front_rule(
        {
            "title": "T",
            "acl": "S-1",
            "classification": "Confidential",
            "corpus": "kb",
            "author": "S-9",
            "updated_at": "2026-07-01",
            "tags": ["a", "b"],
            "doc_type": "policy",
            "version": 3,
        }
    )
    assert rule.acl == ["S-1"] and rule.classification is Classification.CONFIDENTIAL
    assert (rule.title, rule.corpus, rule.author, updated) == ("T", "kb", "S-9", "2026-07-01")
    assert rule.metadata == {"tags": ["a", "b"], "doc_type": "policy", "version": 3}
    with pytest.raises(InputError, match="unknown classification 'secret'"):
        front_rule({"classification": "secret"})
    with pytest.raises(InputError, match="'title' must be a single value"):
        front_rule({"title": ["a", "b"]})
    assert front_rule({"acl": ""})[0].acl == []  # stated empty: nobody, and no warning


def test_markdown_title_is_the_first_heading() -> None:
    found = extract(b"intro\n\n## Second level title ##\n\n# Later\n", "markdown")
    assert found.title == "Second level title"


def test_html_drops_script_and_style_and_keeps_paragraphs() -> None:
    html = (
        "<!doctype html><html><head><title> The   title </title><script>var x = '<p>';"
        "</script><style>p{}</style></head><body><p>First &lt;para&gt;</p>\n<div>Second"
        "<br>line</div><ul><li>one</li><li>two</li></ul><noscript>no</noscript></body></html>"
    )
    found = extract(html.encode(), "html")
    assert found.title == "The title"
    assert found.text == "First <para>\n\nSecond\n\nline\n\none\n\ntwo"


def test_html_with_unclosed_head_keeps_its_body() -> None:
    found = extract(b"<html><head><title>t</title><body><p>kept text", "html")
    assert found.text == "kept text"


def test_pdf_text() -> None:
    found = extract(tiny_pdf("Hello from a PDF"), "pdf")
    assert (found.text, found.title) == ("Hello from a PDF", None)


@pytest.mark.parametrize("data", [b"", b"%PDF-1.4\n1 0 obj", b"not a pdf"])
def test_corrupt_pdf_is_an_input_error(data: bytes) -> None:
    with pytest.raises(InputError, match="cannot read the PDF"):
        extract(data, "pdf")


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_text_must_be_utf8(fmt: str) -> None:
    with pytest.raises(InputError, match=r"not valid UTF-8 \(byte 2\)"):
        extract(b"ok\xff", fmt)
    assert extract("\ufeffcafé\r\nbar".encode(), fmt).text.startswith("café")
