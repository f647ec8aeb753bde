"""No code path opens a SQLite file its process already holds through another handle.

SQLite's locks on a file are the process's (POSIX advisory locks): closing any descriptor of
the file drops all of them, and then another process's exit deletes the WAL this process still
writes to (its audit events go to a deleted file; ``tests/server/test_shared_sqlite.py`` shows
it across processes). Here every use case of an opened deployment runs under a Python audit
hook that records each ``open`` of the database's files: none may happen while the store is
open (SQLite's own opens are not Python opens and are not recorded).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving import seed_bank

import govrag
from govrag.store.sqlite_database import SQLiteDatabase, holds, is_sqlite_file

#: The paths of every Python ``open`` while :data:`_watching` is set (an audit hook cannot
#: be removed, so one hook serves the module and a flag turns it on).
_opened: list[str] = []
_watching = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _watching and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_hook)


@pytest.fixture
def watch() -> Iterator[list[str]]:
    global _watching
    _opened.clear()
    _watching = True
    try:
        yield _opened
    finally:
        _watching = False


def _database_files(opened: list[str], db: Path) -> list[str]:
    names = {db.name, db.name + "-wal", db.name + "-shm", db.name + "-journal"}
    return [p for p in opened if Path(p).name in names and Path(p).resolve().parent == db.parent]


def test_no_use_case_opens_the_database_file_the_store_holds(
    tmp_path: Path, watch: list[str]
) -> None:
    root = seed_bank(tmp_path / "bank")
    db = (root / "govrag.db").resolve()
    with govrag.open(root) as app:
        ana = govrag.local_principal(app.settings, "ana")
        examiner = govrag.local_principal(app.settings, "eve")
        assert app.operators.readiness().ready  # opens the store (reading the header first)
        assert _database_files(watch, db) == [str(db)]
        watch.clear()  # from here on the store holds the file
        assert app.operators.readiness().ready
        assert app.operators.config_check().ok  # reads the header of a store file: not this one's
        found = app.callers.search(ana, "wire limit")
        app.callers.ask(ana, "What is the EU corporate wire limit?")
        app.operators.replay(found.request_id)
        app.examiners.replay(examiner, found.request_id)
        assert app.operators.audit_verify().ok
        app.operators.index_verify()
        app.operators.curate()
        app.operators.sources()
        assert app.operators.ingest(root / "feed.jsonl").ok
        assert _database_files(watch, db) == []
    # Closed: now reading the file is harmless, and the check reads it.
    assert is_sqlite_file(db) and _database_files(watch, db) == [str(db)]


def test_a_held_file_is_known_by_its_inode_not_its_name(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = SQLiteDatabase(path)
    link = tmp_path / "b.db"
    link.symlink_to(path)
    assert holds(path) and holds(link) and holds(tmp_path / "." / "a.db")
    second = SQLiteDatabase(link)  # two connections of one process: SQLite shares its locks
    db.close()
    assert holds(path)
    second.close()
    assert not holds(path) and not holds(tmp_path / "missing.db")
    db.close()  # closing twice does not count the file below zero
    assert not holds(path)
