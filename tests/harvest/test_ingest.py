"""JSONL ingest: bad input is reported by line and field, nothing partial is ever written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from govrag.errors import InputError, StoreError
from govrag.harvest.ingest import ingest_jsonl, parse_record
from govrag.settings import IngestSettings
from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import doc, group, ident, load, principal

GOOD_DOC = {
    "type": "document",
    "source_system": "sp",
    "external_id": "d1",
    "corpus": "main",
    "title": "Wire limits",
    "text": "Wire transfers above the limit need approval.",
    "author": "S-9",
    "acl": ["S-1"],
    "classification": "internal",
    "updated_at": "2026-07-01T00:00:00Z",
    "authority_tier": 2,
    "metadata": {"doc_type": "policy"},
}


def write_lines(path: Path, lines: list[object]) -> Path:
    with path.open("wb") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else json.dumps(line).encode())
            fh.write(b"\n")
    return path


def counts(store: KnowledgeStore) -> tuple[int, int, int, int]:
    s = store.stats("t1")
    return (s["documents"], s["chunks"] + s["sections"], s["acl_rows"], s["vectors"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        ({"type": "folder"}, "unknown record type 'folder'; use one of: identity, group"),
        ({"text": "x"}, "unknown record type None"),
        ({**GOOD_DOC, "acls": ["S-1"]}, "unknown field 'acls'"),
        ({**GOOD_DOC, "classification": "secret"}, "'classification': unknown classification"),
        ({k: v for k, v in GOOD_DOC.items() if k != "acl"}, "field 'acl' is required"),
        ({**GOOD_DOC, "corpus": "bad corpus!"}, "field 'corpus'"),
        ({**GOOD_DOC, "external_id": "a\x1fb"}, "control character"),
        ({**GOOD_DOC, "authority_tier": 9}, "field 'authority_tier'"),
        ({**GOOD_DOC, "metadata": {"bad key": 1}}, "metadata key 'bad key'"),
        ({**GOOD_DOC, "updated_at": "yesterday"}, "field 'updated_at'"),
        ({**GOOD_DOC, "text": "x" * 5000}, "field 'text' is 5000 bytes, over the limit of 4096"),
        (b'{"type": "identity", "email": "\xff\xfe"}', "is not valid UTF-8"),
        ({"type": "identity", "email": "nobody", "source_system": "s", "account_id": "a"},
         "field 'email'"),
        ({"type": "group", "source_system": "s", "group_id": "g", "members": "S-1"},
         "field 'members'"),
    ],
)  # fmt: skip
def test_bad_lines_name_line_and_field(
    store: KnowledgeStore, tmp_path: Path, line: object, message: str
) -> None:
    path = write_lines(tmp_path / "in.jsonl", [{**GOOD_DOC, "external_id": "ok"}, line])
    report = ingest_jsonl(store, path, "t1", settings=IngestSettings(max_text_bytes=4096))
    assert report.errors == 1 and report.added == 1
    assert report.messages[0].startswith(f"{path}:2: ")
    assert message in report.messages[0]
    assert counts(store)[0] == 1  # the good line landed, the bad one left nothing


def test_parse_record_rejects_lone_surrogates() -> None:
    raw = json.dumps({**GOOD_DOC, "text": "bad \udc80 text"}).encode()
    with pytest.raises(InputError, match="surrogate"):
        parse_record(raw, max_text_bytes=10_000)


def test_missing_file_is_a_clear_error(store: KnowledgeStore, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        ingest_jsonl(store, tmp_path / "nope.jsonl", "t1")


def test_reingest_is_idempotent(store: KnowledgeStore, tmp_path: Path) -> None:
    lines = [
        {"type": "identity", "email": "Ana@X.example", "source_system": "sp", "account_id": "S-1"},
        GOOD_DOC,
        {**GOOD_DOC, "external_id": "d2", "text": "para one\n\npara two"},
    ]
    path = write_lines(tmp_path / "in.jsonl", lines)
    first = ingest_jsonl(store, path, "t1", embedder=store.embedder)
    assert (first.added, first.identities, first.errors) == (2, 1, 0)
    before, epoch = counts(store), store.acl_epoch("t1")
    second = ingest_jsonl(store, path, "t1", embedder=store.embedder)
    assert (second.added, second.updated, second.unchanged, second.chunks) == (0, 0, 2, 0)
    assert counts(store) == before and store.acl_epoch("t1") == epoch


def test_rights_change_keeps_chunks_and_bumps_epoch(store: Any) -> None:
    load(store, [ident("ana@x.example", "A"), doc("d", "alpha beta", ["A"])])
    chunk_ids = store._db.q("t1", "SELECT chunk_id FROM chunks")
    epoch = store.acl_epoch("t1")
    load(store, [doc("d", "alpha beta", ["B"])])
    # not re-chunked, not re-embedded
    assert store._db.q("t1", "SELECT chunk_id FROM chunks") == chunk_ids
    assert store.acl_epoch("t1") > epoch
    assert store.search(principal("ana@x.example"), SearchRequest(query="alpha")).results == ()


@pytest.mark.parametrize(
    "change",
    [
        [group("g", ["A"])],
        [ident("new@x.example", "N")],
        [doc("d", "alpha beta", ["A"], classification="restricted")],
        [doc("d2", "fresh", ["A"])],
    ],
)
def test_every_rights_change_bumps_the_epoch(store: KnowledgeStore, change: list[object]) -> None:
    load(store, [ident("ana@x.example", "A"), doc("d", "alpha beta", ["A"])])
    epoch = store.acl_epoch("t1")
    load(store, change)  # type: ignore[arg-type]
    assert store.acl_epoch("t1") == epoch + 1


def test_unchanged_group_does_not_bump(store: KnowledgeStore) -> None:
    load(store, [group("g", ["A", "B"])])
    epoch = store.acl_epoch("t1")
    load(store, [group("g", ["B", "A"])])
    assert store.acl_epoch("t1") == epoch


def test_long_text_gets_sections_and_leaves(store: KnowledgeStore) -> None:
    paragraphs = "\n\n".join(" ".join(f"w{p}x{i}" for i in range(120)) for p in range(12))
    load(store, [ident("ana@x.example", "A"), doc("long", paragraphs, ["A"])])
    stats = store.stats("t1")
    assert stats["chunks"] > 1 and stats["sections"] >= 1  # leaves indexed, parents not
    assert stats["vectors"] == stats["chunks"]
    hits = store.search(
        principal("ana@x.example"), SearchRequest(query="w7x3", strategy=Strategy.KEYWORD)
    ).results
    assert [h.doc_id for h in hits] == ["long"]


def test_a_failing_write_leaves_no_partial_document(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(store, [ident("ana@x.example", "A")])
    documents = store._parts.documents
    original = documents._write_chunks

    def explode(conn, tenant, doc_id, document):  # type: ignore[no-untyped-def]
        original(conn, tenant, doc_id, document)  # chunks are written ...
        raise StoreError("disk full")  # ... then the transaction fails

    monkeypatch.setattr(documents, "_write_chunks", explode)
    with pytest.raises(StoreError):
        load(store, [doc("d", "alpha\n\nbeta", ["A"])])
    assert counts(store) == (0, 0, 0, 0)
    assert store.stats("t1")["outbox_rows"] == 0


def test_delete_of_unknown_document_is_not_counted(store: KnowledgeStore, tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "d.jsonl", [{"type": "delete", "source_system": "sp", "external_id": "zz"}]
    )
    report = ingest_jsonl(store, path, "t1")
    assert (report.deleted, report.errors) == (0, 0)
