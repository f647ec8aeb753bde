"""Text out of files: Markdown (with front matter), plain text, HTML and PDF.

Text files must be UTF-8 (a BOM is dropped); anything else is an error naming the byte, never
a guess. HTML is reduced to its text with the stdlib parser (script and style dropped, block
elements separated by blank lines so the chunker sees paragraphs). PDF needs the optional
``pypdf`` (extra ``pdf``), imported only when a PDF is read.

Front matter is a ``---`` block at the very top of a Markdown file holding a strict subset
of YAML, one ``key: value`` per line::

    ---
    title: Wire limits
    acl: [S-1, "G-risk"]
    classification: internal
    ---

A value is a scalar (optionally quoted) or a flow list ``[a, b]``; blank lines and ``#``
comments are allowed. Anything else (nesting, multi-line values, a repeated key) is an error
with its line number, so a typo never silently widens or drops a rule.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from govrag.errors import InputError, MissingExtraError

#: File suffix -> format name. Other files are skipped.
FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}

FrontValue = str | int | float | list[str]


@dataclass(frozen=True)
class Extracted:
    """A file's text, the title found in it, and its front matter (Markdown only)."""

    text: str
    title: str | None = None
    front: dict[str, FrontValue] = field(default_factory=dict)


def extract(data: bytes, fmt: str) -> Extracted:
    """The text of a file's bytes in format ``fmt`` (a value of :data:`FORMATS`).

    Raises:
        InputError: undecodable or malformed content (the message says what to fix).
        MissingExtraError: a PDF, without the ``pdf`` extra.
    """
    if fmt == "pdf":
        return _pdf(data)
    text = decode(data)
    if fmt == "html":
        parser = _HtmlText()
        parser.feed(text)
        parser.close()
        return Extracted(parser.text(), parser.title or None)
    if fmt == "markdown":
        front, body = split_front_matter(text)
        heading = re.search(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", body, re.MULTILINE)
        return Extracted(body, heading.group(1).strip() if heading else None, front)
    return Extracted(text)


def decode(data: bytes) -> str:
    """UTF-8 text (BOM dropped, newlines normalised); an error names the first bad byte."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*:(?:[ \t]+(.*))?$")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?")
#: Longest unquoted number read as a number (a 64-bit integer has 19 digits).
MAX_NUMBER_DIGITS = 20


def split_front_matter(text: str) -> tuple[dict[str, FrontValue], str]:
    """``(front matter, body)``; ``({}, text)`` when the text has no front matter."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return {}, text
    front: dict[str, FrontValue] = {}
    for number, line in enumerate(lines[1:], start=2):
        if line.rstrip() in ("---", "..."):
            return front, "\n".join(lines[number:]).lstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t":
            raise InputError(f"front matter line {number}: nested values are not supported")
        match = _KEY.match(line.rstrip())
        if match is None:
            raise InputError(f"front matter line {number}: expected 'key: value', got {line!r}")
        key = match.group(1)
        if key in front:
            raise InputError(f"front matter line {number}: key {key!r} appears twice")
        try:
            front[key] = _value(_strip_comment(match.group(2) or ""))
        except ValueError as exc:
            raise InputError(f"front matter line {number}: {exc}") from None
    raise InputError("front matter opened with '---' on line 1 is never closed by '---'")


def _strip_comment(raw: str) -> str:
    quote = ""
    for i, ch in enumerate(raw):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or raw[i - 1] in " \t"):
            return raw[:i].rstrip()
    return raw.strip()


def _value(raw: str) -> FrontValue:
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise ValueError(f"list {raw!r} is not closed by ']'")
        inner = raw[1:-1].strip()
        items = [_text(part.strip()) for part in _split(inner)] if inner else []
        if "" in items:
            raise ValueError(f"list {raw!r} has an empty item; remove the extra ','")
        return items
    if raw.startswith(("{", "|", ">", "&", "*", "!")):
        raise ValueError(f"value {raw!r} is not supported; use a plain or quoted string")
    number = _NUMBER.fullmatch(raw)
    if number:  # unquoted numbers are numbers (metadata filters compare them as such)
        digits = len(raw.lstrip("-"))
        if digits > MAX_NUMBER_DIGITS:  # int() of thousands of digits is slow, then refused
            raise ValueError(
                f"the number {raw[:12]}... has {digits} digits, beyond 64 bits; quote it to "
                "keep it as text"
            )
        return float(raw) if number.group(1) else int(raw)
    return _text(raw)


def _split(inner: str) -> list[str]:
    parts, quote, start = [], "", 0
    for i, ch in enumerate(inner):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == ",":
            parts.append(inner[start:i])
            start = i + 1
    if quote:
        raise ValueError(f"unclosed quote in [{inner}]")
    return [*parts, inner[start:]]


def _text(raw: str) -> str:
    """A plain or quoted scalar (no escapes: a quote may not appear inside its quotes)."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        body = raw[1:-1]
        if raw[0] in body:
            raise ValueError(f"{raw!r}: quotes inside a quoted value are not supported")
        return body
    if raw[:1] in ('"', "'") or raw[-1:] in ('"', "'"):
        raise ValueError(f"{raw!r} has an unbalanced quote")
    if "[" in raw or "]" in raw:
        raise ValueError(f"{raw!r}: nested lists are not supported")
    return raw


_SKIP = {"script", "style", "noscript", "template", "svg"}
_BLOCK = {
    "p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "li", "ul",
    "ol", "dl", "dt", "dd", "table", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
    "blockquote", "hr", "br", "figure", "figcaption", "form", "body",
}  # fmt: skip


class _HtmlText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIP:
            self._skip += 1
        elif tag in _BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = " ".join((self.title + " " + data).split())
        elif not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        paragraphs = ("".join(self.parts)).split("\n\n")
        return "\n\n".join(p for p in (" ".join(x.split()) for x in paragraphs) if p)


def _pdf(data: bytes) -> Extracted:
    try:
        from pypdf import PdfReader
    except ImportError as exc:
        raise MissingExtraError("pypdf", "pdf", "Reading PDF files") from exc
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise InputError("the PDF is encrypted; store a decrypted copy")
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        meta = reader.metadata
        title = meta.title if meta is not None else None
    except InputError:
        raise
    except Exception as exc:  # pypdf raises many kinds on malformed input
        raise InputError(f"cannot read the PDF: {exc or type(exc).__name__}") from exc
    text = "\n\n".join(p for p in pages if p)
    return Extracted(text.replace("\x00", ""), title.strip() if title and title.strip() else None)
