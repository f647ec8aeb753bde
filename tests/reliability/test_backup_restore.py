"""Backup and restore, end to end, while the deployment serves (issue 34, item 6).

A deployment with two callers of different rights, a rotated signing key and checkpoints due
every few events is backed up while another process keeps searching through it (so audit
events and checkpoints are written during every backup). Each backup is restored into a new
folder and must be a working copy of the deployment at some instant:

- its audit chain verifies against its restored checkpoints (each signed by the key it
  names, the rotated one included): a checkpoint copied after the database snapshot would
  sign events the snapshot lacks, and this would fail as ``truncated``;
- its rebuilt indexes match its database (``index verify``: 0 differences);
- each caller finds exactly what it found before (nothing more: the ACLs came back whole);
- it carries on: a new search is ALLOW, a new checkpoint signs, and the chain still verifies.

A backup whose database is a store written by an older release (the 8fd14a5 fixture of
``tests/store/test_migration_compat.py``) restores into today's schema with its ACLs.
PostgreSQL: ``pg_dump`` and ``pg_restore`` of the embedded server, into a new empty
database. ``GOVRAG_BACKUP_RUNS`` sets the backups taken under load (``make soak``: 20).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import govrag
from govrag.app.backup import back_up
from govrag.deployment import Deployment
from govrag.store.migrations import migrations
from govrag.testing import PgServer
from govrag.types import Principal

from conftest import pg_store_settings
from reliability_figures import record

RUNS = int(os.environ.get("GOVRAG_BACKUP_RUNS", "3"))
FIXTURES = Path(__file__).parents[1] / "store" / "fixtures"
QUERIES = ("wire limit", "merger plans", "loan risk model", "holiday calendar")
PRINCIPALS = [
    {"sub": "ana", "email": "ana@bank.example", "tenant": "bank", "clearance": "confidential",
     "doc_entitlements": ["policy:read", "risk:read"]},
    {"sub": "ben", "email": "ben@bank.example", "tenant": "bank", "clearance": "internal",
     "doc_entitlements": ["policy:read"]},
]  # fmt: skip
#: A process that searches through the deployment until ``<root>/stop`` exists, counting
#: its searches into ``<root>/searched``.
WRITER = """
import sys, pathlib, govrag
root = pathlib.Path(sys.argv[1]); n = 0
with govrag.open(root) as app:
    people = [govrag.local_principal(app.settings, s) for s in ("ana", "ben")]
    while not (root / "stop").exists():
        app.callers.search(people[n % 2], f"wire limit {n}")
        n += 1
        (root / "searched").write_text(str(n))
"""


def _feed(root: Path) -> Path:
    rows: list[dict[str, Any]] = [
        {"type": "identity", "email": "ana@bank.example", "source_system": "sp",
         "account_id": "A"},
        {"type": "identity", "email": "ben@bank.example", "source_system": "sp",
         "account_id": "B"},
        {"type": "group", "source_system": "sp", "group_id": "G", "members": ["A", "B"]},
    ]  # fmt: skip
    words = ["wire", "limit", "merger", "plans", "loan", "risk", "model", "holiday", "calendar"]
    for i in range(40):
        text = " ".join(words[(i + k) % len(words)] for k in range(12))
        acl = [["A"], ["G"], ["*"], ["B"]][i % 4]
        rows.append({"type": "document", "source_system": "sp", "external_id": f"d{i}",
                     "corpus": "policy" if i % 3 else "risk", "title": f"Doc {i}",
                     "classification": ["internal", "confidential"][i % 2], "acl": acl,
                     "text": f"{text} number {i}"})  # fmt: skip
    feed = root / "feed.jsonl"
    feed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return feed


def _deployment(root: Path, store: dict[str, str] | None = None) -> Path:
    govrag.init(root, tenant="bank", corpora=["policy", "risk"])
    (root / "principals.json").write_text(json.dumps({"principals": PRINCIPALS}))
    extra = "\n[audit]\n" if "[audit]" not in (root / "govrag.toml").read_text() else ""
    config = (root / "govrag.toml").read_text() + extra
    config = config.replace("checkpoint_every_events = 1000", "checkpoint_every_events = 5")
    if store is not None:
        config = config.replace('url = "sqlite:///govrag.db"', f'url = "{store["url"]}"\n'
                                f'admin_url = "{store["admin_url"]}"')  # fmt: skip
    (root / "govrag.toml").write_text(config)
    with govrag.open(root) as app:
        assert app.operators.ingest(_feed(root)).ok
        _searches(app)
        app.operators.audit_rotate_key()  # what the old key signed must still verify
        _searches(app)
    return root


def _who(app: govrag.Govrag) -> list[Principal]:
    return [govrag.local_principal(app.settings, s) for s in ("ana", "ben")]


def _searches(app: govrag.Govrag) -> dict[str, list[list[str]]]:
    """What each caller finds, per query (document ids, in rank order)."""
    return {
        p.sub: [[h.doc_id for h in app.callers.search(p, q).results] for q in QUERIES]
        for p in _who(app)
    }


def _check_restored(target: Path, expected: dict[str, list[list[str]]]) -> int:
    """The restored deployment works as the original did, and carries on; its events."""
    with govrag.open(target) as app:
        assert [r.differences for r in app.operators.index_verify()] == [0]
        assert _searches(app) == expected
        app.operators.audit_checkpoint()
        verified = app.operators.audit_verify()
        assert verified.ok, [f.message for f in verified.findings]
        return sum(t.chain.events for t in verified.tenants)


def test_backups_taken_while_another_process_searches_restore_verified(tmp_path: Path) -> None:
    root = _deployment(tmp_path / "dep")
    with govrag.open(root) as app:
        expected = _searches(app)
    assert expected["ana"] != expected["ben"] and all(expected["ben"])  # rights differ
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root)],
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    backups: list[Path] = []
    took: list[float] = []
    try:
        _wait_for(lambda: (root / "searched").exists(), writer)
        with govrag.open(root) as app:
            for i in range(RUNS):
                done = int((root / "searched").read_text() or 0)
                _wait_for(lambda d=done: int((root / "searched").read_text() or 0) > d, writer)
                report = app.operators.back_up(tmp_path / f"backup-{i}")
                backups.append(Path(report.path))
                took.append(report.seconds)
        # And once through the command line, as an operator's cron job would.
        cli = tmp_path / "backup-cli"
        done = subprocess.run([sys.executable, "-m", "govrag.cli", "backup", str(cli), "-d",
                               str(root), "--json"], capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["path"] == str(cli)
        backups.append(cli)
    finally:
        (root / "stop").touch()
        writer.wait(timeout=60)
    assert writer.returncode == 0, writer.stderr.read() if writer.stderr else ""
    searched = int((root / "searched").read_text())
    events: list[int] = []
    restore_s: list[float] = []
    for i, backup in enumerate(backups):
        target = tmp_path / f"restored-{i}"
        started = time.monotonic()
        report = govrag.restore(backup, target)
        restore_s.append(time.monotonic() - started)
        assert report.audit.ok, [f.message for f in report.audit.findings]
        assert set(report.indexed) == {"bank"}
        mode = (target / "keys" / "audit-signing-key.pem").stat().st_mode & 0o777
        assert mode == 0o600
        events.append(_check_restored(target, expected))
    assert events == sorted(events)  # later backups hold no fewer events
    record("backup-restore-sqlite", {
        "backups": len(backups), "searches_during": searched,
        "events_first": events[0], "events_last": events[-1],
        "backup_s_max": f"{max(took):.2f}", "restore_s_max": f"{max(restore_s):.2f}",
    })  # fmt: skip


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120  # a safety bound, not a timing assertion
    while not condition():
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the writer made no progress in 120 s"
        time.sleep(0.02)


def test_a_store_written_by_an_older_release_restores_into_todays_schema(
    tmp_path: Path,
) -> None:
    root = tmp_path / "old"
    govrag.init(root, tenant="t1", corpora=["main"])
    shutil.copy(FIXTURES / "sqlite_8fd14a5.db", root / "govrag.db")
    config = (root / "govrag.toml").read_text().replace("dim = 384", "dim = 64")
    (root / "govrag.toml").write_text(config)  # the fixture's embedder
    (root / "principals.json").write_text(json.dumps({"principals": [
        {"sub": "ana", "email": "ana@x.example", "tenant": "t1",
         "doc_entitlements": ["main:read"], "clearance": "restricted"},
        {"sub": "ben", "email": "ben@x.example", "tenant": "t1",
         "doc_entitlements": ["main:read"], "clearance": "restricted"}]}))  # fmt: skip
    with govrag.open(root) as app:
        backup = app.operators.back_up(tmp_path / "backup")
    manifest = json.loads((Path(backup.path) / "manifest.json").read_text())
    assert manifest["schema_version"] == len(migrations("sqlite"))
    report = govrag.restore(Path(backup.path), tmp_path / "restored")
    # That release kept no checkpoints: its log is restored, and reported as never anchored.
    assert [f.kind for f in report.audit.findings] == ["unanchored"]
    with govrag.open(tmp_path / "restored") as app:
        ana, ben = (govrag.local_principal(app.settings, s) for s in ("ana", "ben"))
        assert "d1" in [h.doc_id for h in app.callers.search(ana, "budget").results]
        assert "d1" not in [h.doc_id for h in app.callers.search(ben, "budget").results]
        assert [r.differences for r in app.operators.index_verify()] == [0]


def test_postgres_backup_restores_into_a_new_empty_database(
    pg_cluster: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from govrag.testing.pg_process import find_bindir

    bindir = find_bindir()
    assert bindir is not None
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    store = pg_store_settings(pg_cluster)
    root = _deployment(tmp_path / "dep", store)
    with govrag.open(root) as app:
        expected = _searches(app)
        backup = app.operators.back_up(tmp_path / "backup")
    assert backup.store == "postgresql"
    empty = _empty_database(pg_cluster, store, "restored_bank")
    # Never into the database the backed-up settings name, unasked ...
    with pytest.raises(govrag.ConfigError, match="a new, empty database you name"):
        govrag.restore(Path(backup.path), tmp_path / "refused")
    # ... nor with only its owner named (the application would open the backed-up url) ...
    monkeypatch.setenv("GOVRAG_STORE__ADMIN_URL", empty["admin_url"])
    with pytest.raises(govrag.ConfigError, match="set GOVRAG_STORE__URL"):
        govrag.restore(Path(backup.path), tmp_path / "refused")
    # ... and, named, never over a store: a restore never merges.
    monkeypatch.setenv("GOVRAG_STORE__URL", store["url"])
    monkeypatch.setenv("GOVRAG_STORE__ADMIN_URL", store["admin_url"])
    with pytest.raises(govrag.ConfigError, match="holds a govrag store already"):
        govrag.restore(Path(backup.path), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    monkeypatch.setenv("GOVRAG_STORE__URL", empty["url"])
    monkeypatch.setenv("GOVRAG_STORE__ADMIN_URL", empty["admin_url"])
    report = govrag.restore(Path(backup.path), tmp_path / "restored")
    assert report.audit.ok, [f.message for f in report.audit.findings]
    events = _check_restored(tmp_path / "restored", expected)
    record("backup-restore-postgres", {"events": events, "bytes": backup.bytes})


def _empty_database(pg: PgServer, store: dict[str, str], name: str) -> dict[str, str]:
    """A new database with nothing in it, on the same server, as ``store``'s roles."""
    import psycopg

    with psycopg.connect(store["admin_url"], autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return {key: url.rsplit("/", 1)[0] + f"/{name}" for key, url in store.items()}


def test_a_checkpoint_written_during_the_snapshot_stays_out_of_the_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint that lands between the copy of the anchor and the database snapshot
    signs events the snapshot may lack: it must not be copied later with the rest of the
    deployment folder, also when the deployment is named by a relative path (as ``-d dep``
    names it)."""
    _deployment(tmp_path / "dep")
    monkeypatch.chdir(tmp_path)
    with Deployment.load("dep") as dep:
        snapshot = dep.store.back_up

        def back_up_meanwhile(dest: Path) -> None:
            (tmp_path / "dep" / "audit-checkpoints" / "t-bank" / "late.json").write_text("{}")
            snapshot(dest)

        monkeypatch.setattr(dep.store, "back_up", back_up_meanwhile)
        report = back_up(dep, tmp_path / "backup")
    listed = [f["path"] for f in json.loads((Path(report.path) / "manifest.json").read_text())
              ["files"]]  # fmt: skip
    assert any("audit-checkpoints" in f for f in listed)
    assert not any(f.endswith("late.json") for f in listed)
