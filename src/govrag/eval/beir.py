"""Load a retrieval test collection stored in the BEIR directory layout.

A BEIR directory holds::

    corpus.jsonl        {"_id": ..., "title": ... (optional), "text": ...} per line
    queries.jsonl       {"_id": ..., "text": ...} per line (often all splits' queries)
    qrels/<split>.tsv   header "query-id<TAB>corpus-id<TAB>score", then one judgement per row

Files are read as bytes and decoded line by line, so an encoding error, like any other defect,
is reported with the file and line it sits on. Problems that BEIR's own loader lets through
silently (duplicate ids, a qrels row for an unknown query, a missing header) are errors here,
because each of them quietly changes the scores computed from the data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from govrag.errors import IngestError, InputError

__all__ = ["BeirDataset", "BeirDoc", "load_beir"]

_LAYOUT = "a BEIR directory needs corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
_QRELS_HEADER = ("query-id", "corpus-id", "score")
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Long lines (whole abstracts) are cut when quoted in an error message.
_QUOTE_LIMIT = 80


@dataclass(frozen=True, slots=True)
class BeirDoc:
    """One corpus document."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class BeirDataset:
    """A loaded BEIR collection, restricted to the queries judged in one qrels split."""

    #: Name of the dataset directory, e.g. ``"scifact"``.
    name: str
    #: Document id -> document.
    corpus: dict[str, BeirDoc]
    #: Query id -> query text, only for queries that appear in the split's qrels.
    queries: dict[str, str]
    #: Query id -> document id -> relevance grade.
    qrels: dict[str, dict[str, int]]


def _quote(text: str) -> str:
    if len(text) > _QUOTE_LIMIT:
        text = text[:_QUOTE_LIMIT] + "..."
    return repr(text)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without its line break), skipping blank lines."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(
            f"cannot read {path}: {exc.strerror}; check that the file is readable"
        ) from exc
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = raw[exc.start : exc.end]
                raise IngestError(
                    f"bytes {bad!r} at byte offset {exc.start} are not valid UTF-8; "
                    "re-encode the file as UTF-8",
                    path=str(path),
                    line=lineno,
                ) from exc
            if lineno == 1:
                # Editors on Windows like to prepend a byte-order mark; it is not data.
                line = line.removeprefix("\ufeff")
            # Strip CRLF as well as LF: copies that went through Windows tools keep working.
            line = line.rstrip("\r\n")
            if line.strip():
                yield lineno, line


def _json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in _lines(path):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(
                f"malformed JSON at column {exc.colno} ({exc.msg}) in {_quote(line)}; "
                "each line must be one complete JSON object",
                path=str(path),
                line=lineno,
            ) from exc
        if not isinstance(value, dict):
            raise IngestError(
                f"expected a JSON object, got {_quote(line)}; "
                'each line must look like {"_id": "...", "text": "..."}',
                path=str(path),
                line=lineno,
            )
        yield lineno, value


def _record_id(record: dict[str, Any], path: Path, lineno: int) -> str:
    if "_id" not in record:
        raise IngestError(
            f'missing "_id" in a record with keys {sorted(record)}; '
            'every line needs "_id" and "text", e.g. {"_id": "d1", "text": "..."}',
            path=str(path),
            line=lineno,
        )
    value = record["_id"]
    # Some BEIR corpora store numeric ids as JSON numbers while qrels (TSV) always hold
    # strings; converting here makes the two match. bool is excluded: True is no id.
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise IngestError(
            f'"_id" must be a non-empty string or integer, got {value!r}; fix the id',
            path=str(path),
            line=lineno,
        )
    return value


def _record_text(record: dict[str, Any], key: str, path: Path, lineno: int, doc_id: str) -> str:
    value = record.get(key)
    if value is None:
        if key == "title":
            return ""  # the title is optional in BEIR
        raise IngestError(
            f'record {doc_id!r} has no "{key}"; add a "{key}" string (it may be empty)',
            path=str(path),
            line=lineno,
        )
    if not isinstance(value, str):
        raise IngestError(
            f'"{key}" of record {doc_id!r} must be a string, got {value!r}; fix the value',
            path=str(path),
            line=lineno,
        )
    return value


def _unique_records(path: Path, kind: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line, id, record) of a JSONL file whose ids must be unique."""
    first_line: dict[str, int] = {}
    for lineno, record in _json_objects(path):
        record_id = _record_id(record, path, lineno)
        if record_id in first_line:
            raise IngestError(
                f"{kind} id {record_id!r} already appeared on line {first_line[record_id]}; "
                "ids must be unique, remove or rename one of the two",
                path=str(path),
                line=lineno,
            )
        first_line[record_id] = lineno
        yield lineno, record_id, record


def _load_corpus(path: Path) -> dict[str, BeirDoc]:
    return {
        doc_id: BeirDoc(
            doc_id=doc_id,
            title=_record_text(record, "title", path, lineno, doc_id),
            text=_record_text(record, "text", path, lineno, doc_id),
        )
        for lineno, doc_id, record in _unique_records(path, "document")
    }


def _load_queries(path: Path) -> dict[str, str]:
    return {
        query_id: _record_text(record, "text", path, lineno, query_id)
        for lineno, query_id, record in _unique_records(path, "query")
    }


def _load_qrels(path: Path) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Return the judgements and, per query, the line of its first judgement."""
    qrels: dict[str, dict[str, int]] = {}
    query_line: dict[str, int] = {}
    pair_line: dict[tuple[str, str], int] = {}
    header_seen = False
    for lineno, line in _lines(path):
        fields = line.split("\t")
        if not header_seen:
            # BEIR's loader skips the first line unconditionally; checking it instead keeps a
            # header-less file from silently losing its first judgement.
            if tuple(f.strip().lower() for f in fields) != _QRELS_HEADER:
                raise IngestError(
                    f"expected the header 'query-id<TAB>corpus-id<TAB>score', got {_quote(line)}; "
                    "add that header as the first line",
                    path=str(path),
                    line=lineno,
                )
            header_seen = True
            continue
        if len(fields) != 3:
            raise IngestError(
                f"expected 3 tab-separated fields (query-id, corpus-id, score), got "
                f"{len(fields)} in {_quote(line)}; TREC-style 'qid 0 docid rel' rows must be "
                "converted to BEIR's three columns",
                path=str(path),
                line=lineno,
            )
        query_id, doc_id, score_text = fields
        if not query_id or not doc_id:
            raise IngestError(
                f"empty query-id or corpus-id in {_quote(line)}; fill in both ids",
                path=str(path),
                line=lineno,
            )
        if not _INTEGER.fullmatch(score_text.strip()):
            raise IngestError(
                f"score {score_text!r} is not an integer; relevance grades are whole numbers "
                "such as 0, 1 or 2",
                path=str(path),
                line=lineno,
            )
        if (query_id, doc_id) in pair_line:
            raise IngestError(
                f"query {query_id!r} and document {doc_id!r} were already judged on line "
                f"{pair_line[query_id, doc_id]}; keep one judgement per pair",
                path=str(path),
                line=lineno,
            )
        pair_line[query_id, doc_id] = lineno
        query_line.setdefault(query_id, lineno)
        qrels.setdefault(query_id, {})[doc_id] = int(score_text)
    if not header_seen:
        raise IngestError(
            "the file is empty; it needs the header 'query-id<TAB>corpus-id<TAB>score' "
            "followed by one judgement per line",
            path=str(path),
        )
    if not qrels:
        raise IngestError(
            "the file has a header but no judgements; add rows 'query-id<TAB>corpus-id<TAB>score'",
            path=str(path),
        )
    return qrels, query_line


def load_beir(path: str | Path, split: str = "test") -> BeirDataset:
    """Load a BEIR-layout directory, keeping only the queries judged in ``qrels/<split>.tsv``.

    Args:
        path: the dataset directory (its name becomes :attr:`BeirDataset.name`).
        split: which qrels file to use, e.g. ``"test"``, ``"dev"`` or ``"train"``.

    Raises:
        InputError: the directory or one of its files is missing or unreadable.
        IngestError: a line is malformed (not UTF-8, bad JSON, missing ``_id``/``text``,
            non-integer score, duplicate id, ...); the message names the file and line.
    """
    root = Path(path)
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise InputError(f"BEIR directory {str(root)!r} {what}; {_LAYOUT}")
    if not split or "/" in split or "\\" in split or split in {".", ".."}:
        raise InputError(f"split {split!r} is not a plain name; pass e.g. split='test'")

    corpus_path = root / "corpus.jsonl"
    queries_path = root / "queries.jsonl"
    qrels_path = root / "qrels" / f"{split}.tsv"
    # Check every file before reading any, so a typo in the split does not cost a corpus parse.
    for required in (corpus_path, queries_path):
        if not required.is_file():
            raise InputError(f"{str(required)!r} is missing; {_LAYOUT}")
    if not qrels_path.is_file():
        qrels_dir = root / "qrels"
        splits = sorted(p.stem for p in qrels_dir.glob("*.tsv")) if qrels_dir.is_dir() else []
        available = ", ".join(repr(s) for s in splits) if splits else "none"
        raise InputError(
            f"{str(qrels_path)!r} is missing, so split {split!r} cannot be loaded "
            f"(available splits: {available}); {_LAYOUT}"
        )

    qrels, query_line = _load_qrels(qrels_path)
    all_queries = _load_queries(queries_path)
    for query_id, lineno in query_line.items():
        if query_id not in all_queries:
            raise IngestError(
                f"query id {query_id!r} is not in {queries_path.name}; "
                "fix the id or add the query to queries.jsonl",
                path=str(qrels_path),
                line=lineno,
            )
    queries = {query_id: all_queries[query_id] for query_id in qrels}
    corpus = _load_corpus(corpus_path)
    return BeirDataset(name=root.resolve().name, corpus=corpus, queries=queries, qrels=qrels)
