"""Attack: cut the audit log, remove the checkpoint folder, make one request.

A careless operator restores the checkpoint folder from an empty backup (or deletes it to
"start fresh"), or an attacker who can reach it does; someone with the database cuts the
log's end and rewinds the head. Before the fix, the first request afterwards made the
automatic checkpointer sign the cut chain as the tenant's *first* checkpoint, so `govrag
audit verify` was clean again: the `--adopt` safeguard of `govrag audit checkpoint` bypassed
by one request. The automatic checkpointer must never adopt a tenant whose chain is already
under way; verify must keep reporting the tenant until an operator signs it. Through the
application API, as a deployment runs.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

import govrag

TENANT = "bank"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A deployment that checkpoints every 4 events and has answered 3 searches (12 events,
    checkpoints at events 1, 5 and 9)."""
    govrag.init(tmp_path, tenant=TENANT, corpora=["policies"])
    toml = tmp_path / "govrag.toml"
    toml.write_text(toml.read_text().replace("checkpoint_every_events = 1000",
                                             "checkpoint_every_events = 4"))  # fmt: skip
    with govrag.open(tmp_path) as app:
        for _ in range(3):
            search(app)
        report = app.operators.audit_verify()
        assert report.ok and report.tenants[0].chain.events == 12
    return tmp_path


def search(app: govrag.Govrag) -> None:
    app.callers.search(govrag.local_principal(app.settings, "ana"), "wire limit")


def cut(root: Path, seq: int) -> None:
    """Raw SQL on the database file: cut the chain after ``seq`` and rewind the head."""
    with sqlite3.connect(root / "govrag.db") as db:
        db.execute("DROP TRIGGER audit_events_no_delete")
        db.execute("DELETE FROM audit_events WHERE seq > ?", (seq,))
        db.execute("UPDATE tenants SET audit_seq = ?, audit_head = (SELECT hash FROM "
                   "audit_events WHERE seq = ?)", (seq, seq))  # fmt: skip


def kinds(app: govrag.Govrag) -> list[str]:
    return [f.kind for f in app.operators.audit_verify().findings]


def test_one_request_after_a_cut_and_a_wiped_folder_does_not_launder_the_cut(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cut(root, 6)
    shutil.rmtree(root / "audit-checkpoints")
    with caplog.at_level(logging.WARNING, logger="govrag.audit"), govrag.open(root) as app:
        search(app)  # events 7..10: a new process's first events of the tenant
        assert kinds(app) == ["unanchored"]
        search(app)  # and a due point later, still not adopted
        assert kinds(app) == ["unanchored"]
        assert not (root / "audit-checkpoints").exists()
        [finding] = app.operators.audit_verify().findings
        assert "14 audit events but no valid checkpoint" in finding.message
        assert "checkpoint history was removed" in finding.message
    # Said once, with the operator's way out.
    [warning] = [r.getMessage() for r in caplog.records if r.name == "govrag.audit"]
    assert f"tenant {TENANT!r} at event 7" in warning and "6 earlier events" in warning
    assert f"govrag audit checkpoint --tenant {TENANT}" in warning
    # The operator, having checked the log, signs it; from then on it is anchored again.
    with govrag.open(root) as app:
        assert not app.operators.audit_checkpoint().written  # not without naming it or --adopt
        assert app.operators.audit_checkpoint(adopt=True).written
        search(app)
        assert app.operators.audit_verify().ok


def test_a_folder_restored_empty_under_a_running_process_is_not_refilled(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The process that took the checkpoints keeps running; the folder is emptied under it
    (and the log cut): it knows checkpoints existed, so it signs no new first one."""
    with caplog.at_level(logging.WARNING, logger="govrag.audit"), govrag.open(root) as app:
        search(app)  # events 13..16: a checkpoint at 13
        cut(root, 10)
        for cp in (root / "audit-checkpoints").rglob("*.json"):
            cp.unlink()
        search(app)  # events 11..14
        search(app)  # events 15..18: due, but nothing to continue from
        assert kinds(app) == ["unanchored"]
        assert not list((root / "audit-checkpoints").rglob("*.json"))
    [warning] = [r.getMessage() for r in caplog.records if r.name == "govrag.audit"]
    assert "checkpoint history was removed" in warning


def test_a_new_tenant_is_still_anchored_at_its_first_event(root: Path) -> None:
    """What must keep working: a tenant whose chain starts now gets its first checkpoint
    automatically, even in a deployment whose other tenants are unanchored."""
    shutil.rmtree(root / "audit-checkpoints")
    with govrag.open(root) as app:
        other = govrag.Principal(sub="bo", email="bo@other.example", tenant="other",
                                 doc_entitlements=("policies:read",))  # fmt: skip
        app.callers.search(other, "wire limit")
        report = app.operators.audit_verify()
    by_tenant = {t.chain.tenant: t for t in report.tenants}
    assert by_tenant["other"].ok and by_tenant["other"].checkpoint is not None
    assert [f.kind for f in report.findings] == ["unanchored"]  # the bank, not anchored
