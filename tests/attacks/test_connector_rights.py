"""Attack: a file editor, or a second source, tries to widen rights in a folder source.

The people who may edit a Markdown file are not the people who may edit its folder's
``_access.json``. So front matter can only narrow: its ACL is intersected with the folder's,
its classification can only go up, and it cannot move the file to another corpus unless the
source opts in. And several sources may share a source system: a source's
``_identities.jsonl`` changes only the bindings that source made; it can neither move nor
unbind (nor, by listing and then dropping it, remove) a binding another source made.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import govrag.harvest.filesystem as fs_module
from govrag.errors import ConfigError
from govrag.harvest.access import FileRule, Rights
from govrag.harvest.connector import ConnectorKind, HarvestReport, SourceSpec
from govrag.harvest.filesystem import FilesystemConnector
from govrag.harvest.harvester import harvest
from govrag.harvest.sources import configured_source
from govrag.settings import SourceSettings, load_settings
from govrag.store.protocol import KnowledgeStore
from govrag.types import Classification

from conftest import principal

SS = "sp"
PEOPLE = {"ana": "S-1", "ben": "S-2", "cat": "S-3"}


def put(root: Path, rel: str, data: str | dict[str, Any]) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if isinstance(data, dict) else data)
    return path


def people(root: Path, records: list[dict[str, Any]]) -> None:
    put(root, "_identities.jsonl", "\n".join(json.dumps(r) for r in records))


def person(who: str, account: str, **extra: Any) -> dict[str, Any]:
    return {"type": "identity", "email": f"{who}@bank.example", "account_id": account, **extra}


def run(
    store: KnowledgeStore, root: Path, *, name: str = "kb", dry_run: bool = False, **kw: Any
) -> HarvestReport:
    spec = SourceSpec(
        name=name,
        connector=ConnectorKind.FILESYSTEM,
        path=root,
        source_system=SS,
        state_path=root.parent / f"{name}.state.json",
        **kw,
    )
    connector = FilesystemConnector(spec, "t1", max_text_bytes=100_000)
    return harvest(connector, store, "t1", dry_run=dry_run)


def readers(store: KnowledgeStore, ext: str, clearance: str = "restricted") -> set[str]:
    return {
        who
        for who in PEOPLE
        if store.readable_documents(
            principal(f"{who}@bank.example", clearance=clearance), SS, [ext]
        )
    }


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder the operator governs: risk memos for G-risk (ana, ben), confidential."""
    root = tmp_path / "kb"
    people(
        root,
        [person(w, a) for w, a in PEOPLE.items()]
        + [{"type": "group", "group_id": "G-risk", "members": ["S-1", "S-2"]}],
    )
    put(root, "risk/_access.json", {"acl": ["G-risk", "S-1"], "classification": "confidential"})
    put(root, "risk/memo.md", "---\ntitle: Limits\n---\nquarterly counterparty limits")
    return root


def test_front_matter_cannot_widen_the_acl(store: KnowledgeStore, tree: Path) -> None:
    first = run(store, tree)
    assert first.errors == 0, first.messages
    assert readers(store, "risk/memo.md") == {"ana", "ben"}
    # The editor of memo.md (not of _access.json) publishes it, then adds cat.
    put(tree, "risk/memo.md", "---\nacl: ['*']\n---\nquarterly counterparty limits")
    put(tree, "risk/everyone.md", "---\nacl: [G-risk, S-3, '*']\n---\nlimits for all")
    report = run(store, tree)
    assert report.errors == 0, report.messages
    assert readers(store, "risk/memo.md") == {"ana", "ben"}  # the folder's ACL, not "*"
    assert readers(store, "risk/everyone.md") == {"ana", "ben"}
    memo, everyone = tree / "risk/memo.md", tree / "risk/everyone.md"
    assert report.warnings == [
        f"{everyone}: front matter 'acl' ['G-risk', 'S-3', '*'] can only narrow the ACL its "
        "_access.json grants (['G-risk', 'S-1']), and ['S-3'] is not in that ACL (an account in "
        "a group it names does not count: memberships change after ingest); '*' stands for "
        "that ACL, never for more, so the file was stored readable by ['G-risk', 'S-1'] only; "
        "to let ['S-3'] read it, grant it in _access.json (for this file alone: \"files\": "
        '{"everyone.md": {"acl": [...]}}), or name in front matter only entries of that ACL',
        f"{memo}: front matter 'acl' ['*'] can only narrow the ACL its _access.json grants "
        "(['G-risk', 'S-1']), and '*' stands for that ACL, never for more, so the file was "
        "stored readable by ['G-risk', 'S-1'] only; to publish the file, grant '*' in "
        "_access.json",
    ]
    # Narrowing works: only ana. An id granted only through a group is dropped too (S-2 is
    # in G-risk, but the folder does not name S-2 itself): never more than the folder gave.
    put(tree, "risk/memo.md", "---\nacl: [S-1, S-2]\n---\nquarterly counterparty limits")
    narrowed = run(store, tree)
    assert readers(store, "risk/memo.md") == {"ana"}
    assert "['S-2'] is not in that ACL" in narrowed.warnings[0]
    assert "stored readable by ['S-1'] only" in narrowed.warnings[0]


def test_an_upgrade_narrows_what_front_matter_widened_before(
    store: KnowledgeStore, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file stored while front matter could still widen is narrowed on the next run, though
    the file itself did not change (the extraction version is part of every rights key)."""

    def overriding(base: Rights, front: FileRule, **kw: Any) -> tuple[Rights, list[str]]:
        merged = base.merged(front)  # the old rule: front matter overrides the sidecars
        return replace(merged, classification=merged.classification or kw["classification"],
                       corpus=merged.corpus or kw["corpus"]), []  # fmt: skip

    put(tree, "risk/memo.md", "---\nacl: ['*']\n---\nquarterly counterparty limits")
    with monkeypatch.context() as old:
        old.setattr(fs_module, "EXTRACT_VERSION", 1)
        old.setattr(fs_module, "narrow", overriding)
        run(store, tree)
    assert readers(store, "risk/memo.md") == set(PEOPLE)
    report = run(store, tree)
    assert (report.updated, report.errors) == (1, 0)
    assert readers(store, "risk/memo.md") == {"ana", "ben"}


def test_front_matter_alone_grants_nothing(store: KnowledgeStore, tmp_path: Path) -> None:
    root = tmp_path / "open"
    people(root, [person(w, a) for w, a in PEOPLE.items()])
    put(root, "notes/open.md", "---\nacl: ['*']\nclassification: public\n---\nlunch menu")
    report = run(store, root)
    assert report.errors == 0 and readers(store, "notes/open.md") == set()
    assert "front matter can only narrow the ACL of an _access.json" in report.warnings[0]


def test_front_matter_can_raise_but_never_lower_classification(
    store: KnowledgeStore, tree: Path
) -> None:
    put(tree, "risk/lower.md", "---\nclassification: public\n---\nlowered limits memo")
    put(tree, "risk/raise.md", "---\nclassification: restricted\n---\nraised limits memo")
    report = run(store, tree)
    assert report.errors == 0, report.messages
    assert (
        f"{tree / 'risk/lower.md'}: front matter 'classification' 'public' was ignored"
        in (report.warnings[0])
    )
    # A caller cleared for confidential reads the folder's level, not the lowered one...
    assert readers(store, "risk/lower.md", clearance="confidential") == {"ana", "ben"}
    assert readers(store, "risk/lower.md", clearance="internal") == set()  # never "public"
    # ...and raising works: restricted is above a confidential clearance.
    assert readers(store, "risk/raise.md", clearance="confidential") == set()
    assert readers(store, "risk/raise.md", clearance="restricted") == {"ana", "ben"}


def test_front_matter_cannot_move_a_file_to_another_corpus(
    store: KnowledgeStore, tree: Path
) -> None:
    run(store, tree)
    put(tree, "risk/memo.md", "---\ncorpus: public-faq\n---\nquarterly counterparty limits")
    put(tree, "risk/other.md", "another risk memo")
    report = run(store, tree)
    memo = tree / "risk/memo.md"
    assert report.errors == 1 and report.added == 1  # other.md landed
    assert report.messages == [
        f"{memo}: front matter 'corpus' 'public-faq' would move the file out of corpus 'risk', "
        "and source 'kb' does not let front matter choose a corpus (not ingested); remove "
        "'corpus' from the front matter, set it in _access.json, or set "
        "allow_front_matter_corpus = true in [sources.kb] of govrag.toml"
    ]
    ana = principal("ana@bank.example")
    # The stored memo is untouched: still in 'risk', where the search of 'risk' finds it.
    assert store.readable_documents(ana, SS, ["risk/memo.md"]) == {"risk/memo.md"}
    assert store._search_backend().known_corpora("t1") == ["risk"]
    # The source's opt-in lets it move (the rights still only narrow).
    moved = run(store, tree, allow_front_matter_corpus=True)
    assert moved.errors == 0 and moved.updated == 1, moved.messages
    assert sorted(store._search_backend().known_corpora("t1")) == ["public-faq", "risk"]
    assert readers(store, "risk/memo.md") == {"ana", "ben"}


def test_the_corpus_opt_in_is_a_source_setting_off_by_default(tmp_path: Path) -> None:
    assert SourceSettings(connector="filesystem", path="x").allow_front_matter_corpus is False
    (tmp_path / "govrag.toml").write_text(
        '[sources.kb]\nconnector = "filesystem"\npath = "kb"\nallow_front_matter_corpus = true\n'
        '[sources.wiki]\nconnector = "filesystem"\npath = "wiki"\n'
    )
    settings = load_settings(tmp_path)
    kb = configured_source(settings, "kb", settings.sources["kb"])
    wiki = configured_source(settings, "wiki", settings.sources["wiki"])
    assert (kb.allow_front_matter_corpus, wiki.allow_front_matter_corpus) == (True, False)
    (tmp_path / "govrag.toml").write_text(
        '[sources.kb]\nconnector = "filesystem"\npath = "kb"\n'
        'allow_front_matter_corpus = "sometimes"\n'
    )
    with pytest.raises(ConfigError, match="allow_front_matter_corpus"):
        load_settings(tmp_path)


def test_a_spec_default_classification_is_a_floor_too(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    root = tmp_path / "plain"
    people(root, [person(w, a) for w, a in PEOPLE.items()])
    put(root, "_access.json", {"acl": ["S-1"]})
    put(root, "a.md", "---\nclassification: public\n---\nplain memo")
    run(store, root, classification=Classification.CONFIDENTIAL)
    assert readers(store, "a.md", clearance="internal") == set()
    assert readers(store, "a.md", clearance="confidential") == {"ana"}


# -- a second source's identities file -----------------------------------------------------------
def accounts(store: KnowledgeStore, who: str) -> list[str]:
    return store.source_accounts("t1", f"{who}@bank.example", SS)


def test_a_second_source_cannot_move_or_unbind_anothers_bindings(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    people(a, [person("ana", "S-1"), person("dora", "S-4")])
    assert run(store, a, name="a").errors == 0
    # A JSONL feed (authoritative) binds fred too; source b then tries everything.
    store.put_identity("t1", "fred@bank.example", SS, "S-6")

    hostile = [
        person("mallory", "S-1", previous_email="ana@bank.example"),  # steal by "rebind"
        person("dora", "S-4", active=False),  # unbind another source's binding
        person("fred", "S-6", active=False),  # unbind the feed's binding
        person("mallory", "S-4"),  # plain claim (the store refuses it already)
        person("ana", "S-1"),  # re-list a binding a made (a no-op, never b's)
        person("eve", "S-7"),  # b's own binding: free, so b makes it
    ]
    people(b, hostile)
    predicted = run(store, b, name="b", dry_run=True)
    report = run(store, b, name="b")
    assert (predicted.messages, predicted.conflicts) == (report.messages, report.conflicts)
    where = b / "_identities.jsonl"
    assert report.conflicts == report.errors == 4
    assert report.messages[0].startswith(
        f"{where}:1: account 'S-1' of source system 'sp' is bound to 'ana@bank.example' by "
        "another source or feed, not by this identities file; a source's identities file "
        "moves only bindings it made, so it was not rebound to 'mallory@bank.example'"
    )
    assert report.messages[1].startswith(
        f"{where}:2: account 'S-4' of source system 'sp' is "
        "bound to 'dora@bank.example' by another source"
    )
    assert "unbinds only bindings it made" in report.messages[1]
    assert report.messages[2].startswith(f"{where}:3: account 'S-6'")
    assert report.messages[3].startswith(
        f"{where}:4: account 'S-4' of source system 'sp' is already bound to 'dora@bank.example'"
    )
    assert (accounts(store, "ana"), accounts(store, "dora"), accounts(store, "fred")) == (
        ["S-1"],
        ["S-4"],
        ["S-6"],
    )
    assert accounts(store, "mallory") == [] and accounts(store, "eve") == ["S-7"]

    # b drops every line: only its own binding (eve) goes; ana's (listed by b) stays.
    people(b, [])
    run(store, b, name="b")
    assert accounts(store, "ana") == ["S-1"] and accounts(store, "eve") == []
    # The identities file of b vanishes: nothing of a's moves either.
    (b / "_identities.jsonl").unlink()
    run(store, b, name="b")
    assert (accounts(store, "ana"), accounts(store, "dora")) == (["S-1"], ["S-4"])


def test_a_source_still_manages_its_own_bindings(store: KnowledgeStore, tmp_path: Path) -> None:
    a = tmp_path / "a"
    people(a, [person("ana", "S-1"), person("ben", "S-2")])
    assert run(store, a, name="a").errors == 0
    # Its own rebind and its own explicit unbind apply; a leftover unbind line is a no-op.
    people(
        a,
        [
            person("ana.new", "S-1", previous_email="ana@bank.example"),
            person("ben", "S-2", active=False),
        ],
    )
    report = run(store, a, name="a")
    assert report.errors == 0, report.messages
    assert accounts(store, "ana.new") == ["S-1"] and accounts(store, "ben") == []
    again = run(store, a, name="a")
    assert again.errors == 0, again.messages
    assert accounts(store, "ana.new") == ["S-1"]
    # The file's own binding survives re-runs and is unbound when dropped.
    people(a, [])
    run(store, a, name="a")
    assert accounts(store, "ana.new") == []
