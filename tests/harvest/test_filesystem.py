"""The filesystem connector against a real SQLite store: after every run the store holds
exactly the tree (ids, texts, rights), unchanged files are neither read nor re-embedded, a
moved file keeps its identity, a failed file leaves nothing partial."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fs_helpers import SOURCE, CountingEmbedder, run, snapshot, tiny_pdf, write

import govrag.harvest.filesystem as fs_module
import govrag.harvest.tree as tree_module
from govrag.errors import InputError
from govrag.harvest.state import load_state
from govrag.store.sqlite import SQLiteStore
from govrag.types import SearchRequest, Strategy

from conftest import principal

PEOPLE = {"ana": "S-1", "ben": "S-2", "cat": "S-3", "dan": "S-4"}
IDENTITIES = "\n".join(
    [
        json.dumps({"type": "identity", "email": f"{who}@x.example", "account_id": acct})
        for who, acct in PEOPLE.items()
    ]
    + [
        json.dumps({"type": "group", "group_id": "G-staff", "members": ["S-3"]}),
        json.dumps({"type": "group", "group_id": "G-risk", "members": ["S-1"]}),
    ]
)
WIRE_MD = """---
title: Wire limits
acl: [S-2]   # front matter narrows the folder's rule (never widens it)
tags: [wire, limits]
doc_type: policy
---
# Ignored heading

Wire transfers above the limit need a second approval.
"""
NOTE_HTML = (
    "<html><head><title>Restart runbook</title><style>p {color: red}</style></head>"
    "<body><h1>Restart</h1><p>Restart the payment &amp; clearing service."
    "<script>alert('x')</script></p></body></html>"
)


def build(root: Path) -> None:
    write(root, "_identities.jsonl", IDENTITIES)
    write(root, "_access.json", {"acl": ["G-staff"], "classification": "internal", "author": "S-9"})
    write(root, "handbook.txt", "Welcome to the bank handbook for every employee.")
    write(
        root,
        "policies/_access.json",
        {
            "acl": ["G-risk", "S-2"],
            "classification": "confidential",
            "files": {"public.txt": {"acl": ["*"], "classification": "public"}},
        },
    )
    write(root, "policies/wire.md", WIRE_MD)
    write(root, "policies/public.txt", "Branch opening hours are nine to five.")
    write(root, "policies/limits.pdf", tiny_pdf("Counterparty limits are reviewed yearly"))
    write(root, "policies/deep/note.html", NOTE_HTML)
    write(root, "notes/open.txt", "Team lunch on Friday.")
    write(root, "notes/photo.png", b"\x89PNG not a document")


def readers(store: SQLiteStore, ext: str) -> set[str]:
    return {
        who
        for who in PEOPLE
        if store.readable_documents(principal(f"{who}@x.example"), SOURCE, [ext])
    }


def found(store: SQLiteStore, who: str, query: str) -> list[str]:
    """What a keyword search as ``who`` returns (the ACL pre-filter applied)."""
    request = SearchRequest(query=query, strategy=Strategy.KEYWORD)
    return [h.doc_id for h in store.search(principal(f"{who}@x.example"), request).results]


def expect_readers(store: SQLiteStore, expected: dict[str, set[str]]) -> None:
    assert {ext: readers(store, ext) for ext in expected} == expected


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    build(root)
    return root


def test_the_store_follows_the_tree(
    sqlite_store: SQLiteStore, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state.json"
    emb = CountingEmbedder(sqlite_store.embedder)  # type: ignore[arg-type]
    first = run(sqlite_store, tree, state, emb)
    assert first.errors == 0, first.messages
    assert (first.added, first.identities, first.groups, first.skipped) == (6, 4, 2, 1)
    docs = snapshot(sqlite_store)
    assert sorted(docs) == [
        "handbook.txt",
        "notes/open.txt",
        "policies/deep/note.html",
        "policies/limits.pdf",
        "policies/public.txt",
        "policies/wire.md",
    ]
    assert docs["handbook.txt"] == {
        "corpus": "docs",
        "title": "handbook",
        "classification": "internal",
        "author": "S-9",
        "acl": ["G-staff"],
        "text": "Welcome to the bank handbook for every employee.",
        "path": "handbook.txt",
    }
    wire = docs["policies/wire.md"]
    assert (wire["title"], wire["acl"], wire["classification"], wire["corpus"]) == (
        "Wire limits",
        ["S-2"],
        "confidential",
        "policies",
    )
    assert wire["text"].startswith("# Ignored heading") and "---" not in wire["text"]
    note = docs["policies/deep/note.html"]
    assert note["title"] == "Restart runbook"
    assert note["text"] == "Restart\n\nRestart the payment & clearing service."
    limits = docs["policies/limits.pdf"]
    assert limits["text"] == "Counterparty limits are reviewed yearly"
    assert (limits["author"], limits["classification"]) == ("S-9", "confidential")  # inherited
    assert docs["policies/public.txt"]["classification"] == "public"
    expect_readers(
        sqlite_store,
        {
            "handbook.txt": {"cat"},
            "policies/wire.md": {"ben"},
            "policies/public.txt": set(PEOPLE),
            "policies/limits.pdf": {"ana", "ben"},
            "policies/deep/note.html": {"ana", "ben"},
            "notes/open.txt": {"cat"},
        },
    )
    assert found(sqlite_store, "ana", "counterparty reviewed yearly") == ["policies/limits.pdf"]
    assert found(sqlite_store, "cat", "counterparty reviewed yearly") == []
    embedded_first = len(emb.texts)
    assert embedded_first == 6

    # Nothing changed: nothing is read, nothing embedded.
    extracted: list[str] = []
    real_extract = fs_module.extract
    monkeypatch.setattr(
        fs_module, "extract", lambda data, fmt: extracted.append(fmt) or real_extract(data, fmt)
    )
    opened: list[str] = []  # documents of the tree read (or hashed) at all

    def note(path: Path) -> None:
        if path.is_relative_to(tree) and not path.name.startswith("_"):
            opened.append(path.name)

    real_read, real_open = Path.read_bytes, Path.open
    monkeypatch.setattr(Path, "read_bytes", lambda p: note(p) or real_read(p))
    monkeypatch.setattr(Path, "open", lambda p, *a, **k: note(p) or real_open(p, *a, **k))
    again = run(sqlite_store, tree, state, emb)
    assert (again.added, again.updated, again.unchanged, again.deleted) == (0, 0, 6, 0)
    assert extracted == [] and len(emb.texts) == embedded_first
    assert opened == []  # size, mtime and rights sufficed

    # Modify one file, move one (new folder, new rights), delete one, touch one.
    write(tree, "notes/open.txt", "Team lunch moved to Thursday.")
    (tree / "notes/note.html").write_bytes((tree / "policies/deep/note.html").read_bytes())
    (tree / "policies/deep/note.html").unlink()
    (tree / "handbook.txt").unlink()
    os.utime(tree / "policies/public.txt", ns=(1, 1))
    third = run(sqlite_store, tree, state, emb)
    assert third.errors == 0, third.messages
    assert (third.added, third.updated, third.unchanged, third.deleted) == (0, 2, 3, 1)
    assert emb.texts[embedded_first:] == ["open\n\nTeam lunch moved to Thursday."]
    assert sorted(extracted) == ["html", "text"]  # the touched file was hashed, not extracted
    assert "public.txt" in opened and "limits.pdf" not in opened
    docs = snapshot(sqlite_store)
    assert sorted(docs) == [
        "notes/open.txt",
        "policies/deep/note.html",
        "policies/limits.pdf",
        "policies/public.txt",
        "policies/wire.md",
    ]
    moved = docs["policies/deep/note.html"]  # the id stays, the path and rights follow the file
    assert (moved["path"], moved["acl"], moved["corpus"]) == (
        "notes/note.html",
        ["G-staff"],
        "notes",
    )
    assert docs["notes/open.txt"]["text"] == "Team lunch moved to Thursday."
    expect_readers(sqlite_store, {"policies/deep/note.html": {"cat"}, "handbook.txt": set()})
    files = load_state(state)[0].tenants["t1"].files  # type: ignore[union-attr]
    assert files["notes/note.html"].external_id == "policies/deep/note.html"
    assert "handbook.txt" not in files and files["policies/public.txt"].mtime_ns == 1

    # A sidecar's change re-emits the files under it, without re-embedding them; the front
    # matter of wire.md still only narrows the new ACL (S-2 is no longer in it).
    write(tree, "policies/_access.json", {"acl": ["S-4"], "classification": "confidential"})
    fourth = run(sqlite_store, tree, state, emb)
    assert fourth.errors == 0 and len(emb.texts) == embedded_first + 1
    assert (fourth.updated, fourth.unchanged) == (3, 2)  # limits.pdf, public.txt, wire.md
    expect_readers(
        sqlite_store,
        {
            "policies/limits.pdf": {"dan"},
            "policies/public.txt": {"dan"},
            "policies/wire.md": set(),
        },
    )
    assert fourth.warnings == [
        f"{tree / 'policies/wire.md'}: front matter 'acl' ['S-2'] can only narrow the ACL its "
        "_access.json grants (['S-4']), and ['S-2'] is not in that ACL (an account in a group "
        "it names does not count: memberships change after ingest), so the file was stored "
        "readable by nobody; to let ['S-2'] read it, grant it in _access.json (for this file "
        'alone: "files": {"wire.md": {"acl": [...]}}), or name in front matter only entries of '
        "that ACL"
    ]


class FailingStore:
    """A store whose writes of one document fail (as a store-side validation error would)."""

    def __init__(self, store: SQLiteStore, external_id: str) -> None:
        self.store, self.external_id = store, external_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def put_document(self, tenant: str, doc: Any) -> str:
        if doc.external_id == self.external_id:
            raise InputError("refused by the store")
        return self.store.put_document(tenant, doc)


def test_a_file_the_store_refuses_is_retried_next_run(
    sqlite_store: SQLiteStore, tree: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    report = run(FailingStore(sqlite_store, "notes/open.txt"), tree, state)  # type: ignore[arg-type]
    assert report.messages == [f"{tree / 'notes/open.txt'}: refused by the store"]
    assert "notes/open.txt" not in snapshot(sqlite_store)
    assert "notes/open.txt" not in load_state(state)[0].tenants["t1"].files  # type: ignore[union-attr]
    again = run(sqlite_store, tree, state)
    assert (again.added, again.unchanged, again.errors) == (1, 5, 0)
    assert snapshot(sqlite_store)["notes/open.txt"]["text"] == "Team lunch on Friday."


def test_a_document_gone_from_the_store_is_ingested_again(
    sqlite_store: SQLiteStore, tree: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    run(sqlite_store, tree, state)
    assert sqlite_store.delete_document("t1", SOURCE, "policies/limits.pdf")  # e.g. a restore
    report = run(sqlite_store, tree, state)  # the state alone would call it unchanged
    assert (report.added, report.unchanged) == (1, 5)
    assert "policies/limits.pdf" in snapshot(sqlite_store)


def test_a_new_file_at_a_moved_files_old_path_gets_its_own_id(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    root, state = tmp_path / "docs", tmp_path / "state.json"
    write(root, "_access.json", {"acl": ["*"]})
    write(root, "a.txt", "alpha content")
    run(sqlite_store, root, state)
    (root / "a.txt").rename(root / "b.txt")
    run(sqlite_store, root, state)  # b.txt now holds the id "a.txt"
    write(root, "a.txt", "a different text")
    report = run(sqlite_store, root, state)
    assert report.errors == 0, report.messages
    docs = snapshot(sqlite_store)
    ids = {d["path"]: ext for ext, d in docs.items()}
    assert ids["b.txt"] == "a.txt" and ids["a.txt"].startswith("a.txt#") and len(docs) == 2
    assert docs[ids["a.txt"]]["text"] == "a different text"
    (root / "b.txt").unlink()  # deleting the moved file deletes its document, not the new one
    run(sqlite_store, root, state)
    assert [d["path"] for d in snapshot(sqlite_store).values()] == ["a.txt"]


def test_dry_run_writes_nothing(sqlite_store: SQLiteStore, tree: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    emb = CountingEmbedder(sqlite_store.embedder)  # type: ignore[arg-type]
    dry = run(sqlite_store, tree, state, emb, dry_run=True)
    assert (dry.added, dry.identities, dry.errors, dry.chunks) == (6, 4, 0, 6)
    assert snapshot(sqlite_store) == {} and not state.exists() and emb.texts == []
    assert sqlite_store.source_accounts("t1", "ana@x.example", SOURCE) == []
    run(sqlite_store, tree, state, emb)
    before, state_bytes, epoch = (
        snapshot(sqlite_store),
        state.read_bytes(),
        sqlite_store.acl_epoch("t1"),
    )
    write(tree, "notes/open.txt", "changed")
    (tree / "handbook.txt").unlink()
    write(tree, "notes/new.md", "# New\n\nfresh")
    dry = run(sqlite_store, tree, state, emb, dry_run=True)
    assert (dry.added, dry.updated, dry.deleted, dry.unchanged) == (1, 1, 1, 4)
    assert snapshot(sqlite_store) == before and state.read_bytes() == state_bytes
    assert sqlite_store.acl_epoch("t1") == epoch and len(emb.texts) == 6
    real = run(sqlite_store, tree, state, emb)
    assert (real.added, real.updated, real.deleted, real.unchanged) == (1, 1, 1, 4)


def test_bad_files_are_reported_by_path_and_the_rest_lands(
    sqlite_store: SQLiteStore, tree: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    bad_pdf = write(tree, "policies/broken.pdf", b"%PDF-1.4\nthis is not a pdf at all")
    bad_txt = write(tree, "notes/latin1.txt", "caf\xe9".encode("latin-1"))
    bad_md = write(tree, "notes/bad.md", "---\nacl: [S-1\n---\nbody")
    report = run(sqlite_store, tree, state)
    assert report.errors == 3 and report.added == 6
    messages = "\n".join(report.messages)
    assert f"{bad_pdf}: cannot read the PDF" in messages
    assert f"{bad_txt}: not valid UTF-8 (byte 3)" in messages
    assert f"{bad_md}: front matter line 2: list '[S-1' is not closed" in messages
    assert "notes/latin1.txt" not in snapshot(sqlite_store)
    files = load_state(state)[0].tenants["t1"].files  # type: ignore[union-attr]
    assert "notes/latin1.txt" not in files and len(files) == 6
    write(tree, "notes/latin1.txt", "café")  # fixed: the next run picks it up
    bad_pdf.unlink()
    bad_md.unlink()
    fixed = run(sqlite_store, tree, state)
    assert (fixed.errors, fixed.added, fixed.unchanged) == (0, 1, 6)
    assert snapshot(sqlite_store)["notes/latin1.txt"]["text"] == "café"


def test_an_invalid_sidecar_holds_its_files(
    sqlite_store: SQLiteStore, tree: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    run(sqlite_store, tree, state)
    before = snapshot(sqlite_store)
    write(tree, "policies/_access.json", {"acls": ["*"]})  # a typo must not publish anything
    write(tree, "policies/limits.pdf", tiny_pdf("changed text"))
    report = run(sqlite_store, tree, state)
    assert any("_access.json: unknown field 'acls'" in m for m in report.messages)
    assert any(
        m.startswith(str(tree / "policies/limits.pdf")) and "rights file" in m
        for m in report.messages
    )
    assert report.deleted == 0 and snapshot(sqlite_store) == before  # kept as they were
    write(tree, "policies/_access.json", {"acl": ["G-risk"]})
    report = run(sqlite_store, tree, state)
    assert report.errors == 0
    assert snapshot(sqlite_store)["policies/limits.pdf"]["text"] == "changed text"


def test_a_folder_that_cannot_be_listed_deletes_nothing(
    sqlite_store: SQLiteStore, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state.json"
    run(sqlite_store, tree, state)
    before = snapshot(sqlite_store)
    real_walk = os.walk

    def walk(top: Path, onerror: Any = None, **kw: Any) -> Any:
        for dirpath, dirnames, filenames in real_walk(top, **kw):
            if "policies" in dirnames:  # as if listing it failed
                dirnames.remove("policies")
                onerror(PermissionError(13, "Permission denied", str(tree / "policies")))
            yield dirpath, dirnames, filenames

    monkeypatch.setattr(tree_module.os, "walk", walk)
    report = run(sqlite_store, tree, state)
    assert report.messages == [f"{tree / 'policies'}: cannot list: Permission denied"]
    assert report.deleted == 0 and snapshot(sqlite_store) == before
    monkeypatch.setattr(tree_module.os, "walk", real_walk)
    again = run(sqlite_store, tree, state)  # their state was kept: nothing to redo
    assert (again.unchanged, again.errors, again.deleted) == (6, 0, 0)


def test_a_file_without_rights_has_no_readers(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write(root, "_identities.jsonl", IDENTITIES)
    orphan = write(root, "orphan.md", "# Orphan\n\nquarterly orphan report")
    # Front matter alone grants nothing: it can only narrow what an _access.json grants.
    opened = write(root, "open.md", "---\nacl: ['*']\n---\nquarterly open report")
    report = run(sqlite_store, root, None)
    assert report.errors == 0 and report.added == 2
    assert report.warnings == [
        f"{opened}: front matter 'acl' ['*'] was ignored: front matter can only narrow the ACL "
        "of an _access.json, and none grants this file to anyone, so nobody may read it; state "
        "the acl in an _access.json",
        f"{orphan}: no 'acl' in any _access.json: stored with an empty ACL (nobody may read it)",
    ]
    assert snapshot(sqlite_store)["orphan.md"]["acl"] == []
    expect_readers(sqlite_store, {"orphan.md": set(), "open.md": set()})
    for who in PEOPLE:
        assert found(sqlite_store, who, "quarterly report") == []


def test_a_missing_pdf_extra_is_a_per_file_error(
    sqlite_store: SQLiteStore, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pypdf", None)  # import pypdf -> ImportError
    report = run(sqlite_store, tree, None)
    assert report.errors == 1 and report.added == 5
    assert report.messages == [
        f"{tree / 'policies/limits.pdf'}: Reading PDF files needs the optional dependency "
        "'pypdf', which is not installed. Install it with: pip install 'govrag[pdf]'"
    ]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, {"handbook.txt": "docs", "notes/open.txt": "notes"}),
        ({"corpus": "kb"}, {"handbook.txt": "kb", "notes/open.txt": "kb"}),
    ],
)
def test_corpus_from_the_source_or_the_top_folder(
    sqlite_store: SQLiteStore, tree: Path, settings: dict[str, Any], expected: dict[str, str]
) -> None:
    run(sqlite_store, tree, None, **settings)
    docs = snapshot(sqlite_store)
    assert {ext: docs[ext]["corpus"] for ext in expected} == expected
    assert docs["policies/wire.md"]["corpus"] == settings.get("corpus", "policies")


def test_identities_file_must_hold_accounts_of_this_source(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    ids = write(
        root,
        "_identities.jsonl",
        "\n".join(
            [
                json.dumps({"type": "identity", "email": "a@x.example", "account_id": "S-1"}),
                json.dumps(
                    {
                        "type": "identity",
                        "email": "b@x.example",
                        "account_id": "S-2",
                        "source_system": "other",
                    }
                ),
                json.dumps({"type": "document", "external_id": "d", "text": "x"}),
                "{broken",
            ]
        ),
    )
    report = run(sqlite_store, root, None)
    assert report.identities == 1 and report.errors == 3
    assert report.messages[0].startswith(f"{ids}:2: source_system 'other' is not this source's")
    assert report.messages[1].startswith(f"{ids}:3: record type 'document' does not belong")
    assert report.messages[2].startswith(f"{ids}:4: invalid JSON")
