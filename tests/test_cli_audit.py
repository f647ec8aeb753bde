"""``govrag audit verify | checkpoint | keygen`` as an operator runs them (real processes)."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import pytest

from test_cli import govrag


@pytest.fixture
def dep(tmp_path: Path) -> Path:
    """A scaffolded deployment whose application wrote 12 events to tenant 'bank'."""
    from govrag.deployment import Deployment

    assert govrag("init", "dep", "--embedder", "hash", "--tenant", "bank",
                  cwd=tmp_path).returncode == 0  # fmt: skip
    root = tmp_path / "dep"
    with Deployment.load(root) as d:
        for i in range(12):
            d.store.append_audit("bank", "pep_decision", {"i": i}, request_id="r",
                                 session_id="s")  # fmt: skip
    return root


def run(dep: Path, *args: str) -> tuple[int, str, str]:
    done = govrag(*args, "-d", str(dep), cwd=dep)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


def cut(dep: Path, seq: int) -> None:
    """An attacker with the database file: cut the chain after ``seq`` and rewind the head."""
    with sqlite3.connect(dep / "govrag.db") as db:
        db.execute("DROP TRIGGER audit_events_no_delete")
        db.execute("DELETE FROM audit_events WHERE seq > ?", (seq,))
        db.execute("UPDATE tenants SET audit_seq = ?, audit_head = (SELECT hash FROM "
                   "audit_events WHERE seq = ?)", (seq, seq))  # fmt: skip


def test_init_writes_a_private_signing_key_and_names_the_settings(dep: Path) -> None:
    key = dep / "keys" / "audit-signing-key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    toml = (dep / "govrag.toml").read_text()
    for setting in ("[audit]", "checkpoint_dir", "signing_key", "verify_key",
                    "checkpoint_every_events", "checkpoint_every_seconds"):  # fmt: skip
        assert setting in toml
    # Re-running init with --force never replaces the key (it would orphan its checkpoints).
    before = key.read_bytes()
    assert govrag("init", str(dep), "--embedder", "hash", "--force", cwd=dep).returncode == 0
    assert key.read_bytes() == before
    code, _, err = run(dep, "audit", "keygen")
    assert code == 2 and "already exists; keep it" in err and key.read_bytes() == before


def test_verify_reads_the_automatic_checkpoints(dep: Path) -> None:
    code, out, _ = run(dep, "audit", "verify", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["findings"] == []
    [tenant] = report["tenants"]
    assert tenant["events"] == 12 and tenant["checkpoint"]["head_seq"] == 1
    assert tenant["checkpoint"]["behind"] == 11
    assert tenant["checkpoint"]["key_id"] == report["key_id"]


def test_checkpoint_on_demand_then_a_truncation_is_found(dep: Path) -> None:
    code, out, _ = run(dep, "audit", "checkpoint", "--json")
    written = json.loads(out)
    assert code == 0 and written["ok"]
    assert [(w["tenant"], w["head_seq"]) for w in written["written"]] == [("bank", 12)]
    assert Path(written["written"][0]["path"]).exists()

    cut(dep, 9)
    code, out, err = run(dep, "audit", "verify")
    assert code == 1
    assert ("tenant bank: the chain ends at event 9, but the checkpoint of " in err
            and "signed event 12" in err
            and "3 audit events were removed from the end and the head rewound" in err)  # fmt: skip
    code, out, _ = run(dep, "audit", "verify", "--json")
    assert code == 1 and [f["kind"] for f in json.loads(out)["findings"]] == ["truncated"]

    # A chain that does not verify is never signed: that would launder the cut.
    files = sorted((dep / "audit-checkpoints").rglob("*.json"))
    code, out, err = run(dep, "audit", "checkpoint")
    assert code == 1 and "refused: tenant bank: the chain ends at event 9" in err
    assert sorted((dep / "audit-checkpoints").rglob("*.json")) == files


def test_a_missing_key_fails_closed_with_one_line(dep: Path) -> None:
    (dep / "keys" / "audit-signing-key.pem").unlink()
    code, out, err = run(dep, "audit", "verify", "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "[audit] signing_key" in err and "does not exist" in err


def test_an_unknown_tenant_needs_to_be_named_to_be_signed(dep: Path) -> None:
    with sqlite3.connect(dep / "govrag.db") as db:  # events of a tenant nobody anchored
        db.execute("INSERT INTO audit_events SELECT 'ghost', seq, event_id, request_id, "
                   "session_id, kind, payload, created_at, prev_hash, hash FROM audit_events "
                   "WHERE seq = 1")  # fmt: skip
    code, _, err = run(dep, "audit", "verify")
    assert code == 1 and "tenant ghost: 1 audit event but no tenant row" in err
    assert "tenant ghost: 1 audit event but no valid checkpoint" in err
    code, _, err = run(dep, "audit", "checkpoint", "--adopt")
    assert code == 1 and "refused: tenant ghost: the chain is broken at event 1" in err
    code, _, err = run(dep, "audit", "checkpoint", "--tenant", "nobody")
    assert code == 2 and "tenant 'nobody' has no audit events" in err
