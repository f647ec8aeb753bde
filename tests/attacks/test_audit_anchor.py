"""Attacks on the audit log by someone with write access to the database but not to the key.

The attacker runs raw SQL on the SQLite file or as the PostgreSQL superuser, so the
append-only triggers, grants and row-level security do not stop them, and they know how the
chain is hashed: every chain they leave behind is internally consistent (the store's own
check passes). Only the signed checkpoints outside the database can tell; each attack must
end in a one-line finding. Both backends.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from govrag.audit.anchor import AuditVerification, verify_anchored
from govrag.audit.auto import Checkpointer
from govrag.audit.checkpoint import Checkpoint, CheckpointDir, tenant_folder
from govrag.audit.keys import generate_key, load_signing_key, public_path, verifying_key
from govrag.errors import ConfigError
from govrag.store.audit import GENESIS, AuditEvent
from govrag.store.protocol import KnowledgeStore

from conftest import StoreFactory, drop_tenant_row, tamper

EVERY = 5  # a checkpoint at events 1, 6, 11, ...
NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


@dataclass
class Anchored:
    store: KnowledgeStore
    directory: CheckpointDir
    key_path: Path

    def verify(self) -> AuditVerification:
        public = load_signing_key(self.key_path).public_key()
        return verify_anchored(self.store, self.directory, public, every_events=EVERY,
                               every_seconds=3600, now=NOW)  # fmt: skip

    def kinds(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f in self.verify().findings:
            out.setdefault(f.tenant, []).append(f.kind)
        return out


@pytest.fixture
def anchored(open_store: StoreFactory, tmp_path: Path) -> Anchored:
    """A store whose events are checkpointed as a deployment's are: t1 has 12 events
    (checkpoints at 1, 6 and 11), t2 has 3 (a checkpoint at 1)."""
    store = open_store()
    key = tmp_path / "keys" / "audit.pem"
    generate_key(key)
    directory = CheckpointDir(tmp_path / "checkpoints")
    auto = Checkpointer(directory, key, every_events=EVERY, every_seconds=3600,
                        clock=lambda: NOW)  # fmt: skip
    store.observe_audit(auto.observe)
    for tenant, n in (("t1", 12), ("t2", 3)):
        for i in range(n):
            store.append_audit(tenant, "pep_decision", {"i": i, "verdict": "ALLOW"},
                               request_id=f"r{i}", session_id="s")  # fmt: skip
    assert auto.written == 4
    return Anchored(store, directory, key)


def forge(tenant: str, n: int, first: AuditEvent) -> list[AuditEvent]:
    """A consistent chain of ``n`` events, as an attacker who knows the hashing makes one."""
    out: list[AuditEvent] = []
    prev = GENESIS
    for seq in range(1, n + 1):
        draft = AuditEvent(tenant, seq, f"aud-forged{seq}", "r", "s", "pep_decision",
                           '{"verdict":"ALLOW"}', first.created_at, prev, "")  # fmt: skip
        event = AuditEvent(**{**draft.__dict__, "hash": draft.expected_hash()})
        out.append(event)
        prev = event.hash
    return out


def insert(events: list[AuditEvent]) -> list[str]:
    return [
        "INSERT INTO audit_events(tenant_id, seq, event_id, request_id, session_id, kind, "
        f"payload, created_at, prev_hash, hash) VALUES ('{e.tenant}', {e.seq}, '{e.event_id}', "
        f"'{e.request_id}', '{e.session_id}', '{e.kind}', '{e.payload_json}', "
        f"'{e.created_at}', '{e.prev_hash}', '{e.hash}')"
        for e in events
    ]


def rewind(tenant: str, seq: int) -> list[str]:
    """Cut the chain after ``seq`` and point the head at its new end."""
    head = (f"(SELECT hash FROM audit_events WHERE tenant_id = '{tenant}' AND seq = {seq})"
            if seq else "''")  # fmt: skip
    return [
        f"DELETE FROM audit_events WHERE tenant_id = '{tenant}' AND seq > {seq}",
        f"UPDATE tenants SET audit_seq = {seq}, audit_head = {head} WHERE tenant_id = '{tenant}'",
    ]


def test_an_untouched_log_verifies(anchored: Anchored) -> None:
    report = anchored.verify()
    assert report.ok, report.findings
    t1 = next(t for t in report.tenants if t.chain.tenant == "t1")
    assert t1.checkpoint is not None and t1.checkpoint.head_seq == 11 and t1.checkpoints == 3


def test_truncating_the_tail_and_rewinding_the_head(anchored: Anchored) -> None:
    tamper(anchored.store, *rewind("t1", 8))
    assert anchored.store.verify_audit("t1").ok  # the chain alone cannot tell
    report = anchored.verify()
    [finding] = report.findings
    assert finding.kind == "truncated" and finding.tenant == "t1"
    assert "the chain ends at event 8" in finding.message and "signed event 11" in finding.message
    assert "3 audit events were removed from the end and the head rewound" in finding.message


def test_appending_after_a_rewind_is_caught_as_a_rewrite(anchored: Anchored) -> None:
    """The attacker cuts back to 8 and lets the application append past the checkpoint at
    11 again: the event now at 11 is not the one that was signed."""
    tamper(anchored.store, *rewind("t1", 8))
    for i in range(5):
        anchored.store.append_audit("t1", "pep_decision", {"n": i}, request_id="x",
                                    session_id="s")  # fmt: skip
    assert anchored.store.verify_audit("t1").events == 13
    assert anchored.kinds() == {"t1": ["rewritten"]}


def test_wiping_the_log_and_resetting_the_head(anchored: Anchored) -> None:
    tamper(anchored.store, *rewind("t1", 0))
    assert anchored.store.verify_audit("t1").ok and anchored.store.verify_audit("t1").events == 0
    [finding] = anchored.verify().findings
    assert finding.kind == "wiped" and "the log was wiped and the head reset" in finding.message


def test_dropping_the_tenant_row(anchored: Anchored) -> None:
    tamper(anchored.store, *drop_tenant_row(anchored.store, "t2"))
    [finding] = anchored.verify().findings
    assert finding.kind == "tenant_row_missing" and finding.tenant == "t2"
    assert "no tenant row" in finding.message


def test_dropping_the_tenant_row_and_its_whole_log(anchored: Anchored) -> None:
    tamper(anchored.store, "DELETE FROM audit_events WHERE tenant_id = 't2'",
           *drop_tenant_row(anchored.store, "t2"))  # fmt: skip
    assert "t2" not in anchored.store.audit_tenants()  # only the checkpoint remembers it
    [finding] = anchored.verify().findings
    assert finding.kind == "tenant_dropped" and finding.tenant == "t2"


def test_events_under_an_unknown_tenant(anchored: Anchored) -> None:
    """A consistent chain with a matching tenant row, written into the database: the store
    cannot tell it from a real tenant; no checkpoint ever signed it."""
    events = forge("ghost", 3, anchored.store.audit_events("t1")[0])
    tamper(
        anchored.store,
        *insert(events),
        "INSERT INTO tenants(tenant_id, created_at, audit_seq, audit_head) "
        f"VALUES ('ghost', '2026-01-01', 3, '{events[-1].hash}')",
    )
    assert anchored.store.verify_audit("ghost").ok
    assert anchored.kinds() == {"ghost": ["unanchored"]}


def test_events_under_an_unknown_tenant_without_a_row(anchored: Anchored) -> None:
    tamper(anchored.store, *insert(forge("ghost", 2, anchored.store.audit_events("t1")[0])))
    assert anchored.kinds() == {"ghost": ["tenant_row_missing", "unanchored"]}


def _latest_file(anchored: Anchored, tenant: str) -> Path:
    return sorted((anchored.directory.root / tenant_folder(tenant)).glob("*.json"))[-1]


def test_editing_a_checkpoint_file_to_hide_a_truncation(anchored: Anchored) -> None:
    """Cut to 8, then rewrite the checkpoint of 11 to say 8: the signature no longer holds,
    so the edited file is a finding and anchors nothing."""
    tamper(anchored.store, *rewind("t1", 8))
    eighth = anchored.store.audit_events("t1")[7]
    path = _latest_file(anchored, "t1")
    body = json.loads(path.read_text())
    body.update(head_seq=8, events=8, head_event_id=eighth.event_id, head_hash=eighth.hash)
    path.write_text(json.dumps(body))
    [finding] = anchored.verify().findings
    assert finding.kind == "checkpoint_invalid" and finding.tenant == "t1"
    assert "signature does not match its contents" in finding.message
    assert str(path) in finding.message


def test_a_checkpoint_signed_with_the_attackers_own_key(anchored: Anchored) -> None:
    tamper(anchored.store, *rewind("t1", 8))
    eighth = anchored.store.audit_events("t1")[7]
    forged = Checkpoint.of(eighth, Ed25519PrivateKey.generate(), at=NOW)
    anchored.directory.write(forged)
    kinds = anchored.kinds()
    assert kinds == {"t1": ["truncated", "checkpoint_invalid"]}
    assert any("not by the configured key" in f.message for f in anchored.verify().findings)


def test_a_garbage_checkpoint_file(anchored: Anchored) -> None:
    (anchored.directory.root / tenant_folder("t2") / "00000000000000000099-x.json").write_text("{")
    assert anchored.kinds() == {"t2": ["checkpoint_invalid"]}


def test_replacing_the_public_key(anchored: Anchored, tmp_path: Path) -> None:
    """The examiner's copy of the public key is swapped for the attacker's, whose forged
    checkpoints it would accept: while the signing key is readable the swap is refused."""
    attacker = tmp_path / "attacker.pem"
    generate_key(attacker)
    public_path(anchored.key_path).write_bytes(public_path(attacker).read_bytes())
    with pytest.raises(ConfigError, match=r"verify_key .* does not match signing_key"):
        verifying_key(anchored.key_path, public_path(anchored.key_path))
    # And the attacker's key checks nothing the real one signed.
    report = verify_anchored(anchored.store, anchored.directory,
                             load_signing_key(attacker).public_key(), every_events=EVERY,
                             every_seconds=3600)  # fmt: skip
    assert {f.kind for f in report.findings} == {"checkpoint_invalid", "unanchored"}


def test_a_missing_or_invalid_key_fails_closed(anchored: Anchored) -> None:
    anchored.key_path.write_text("not a key")
    with pytest.raises(ConfigError, match="is not an unencrypted PEM Ed25519 private key"):
        verifying_key(anchored.key_path, None)
    anchored.key_path.unlink()
    with pytest.raises(ConfigError, match=r"signing_key .* does not exist"):
        verifying_key(anchored.key_path, None)


def test_what_is_not_detected_a_cut_after_the_last_checkpoint(anchored: Anchored) -> None:
    """The documented limit: events after the latest checkpoint (here event 12, at most
    EVERY - 1 of them) can be cut unseen by someone with write access to the database."""
    tamper(anchored.store, *rewind("t1", 11))
    assert anchored.verify().ok


def test_a_cut_log_with_its_checkpoints_removed_is_not_adopted(
    anchored: Anchored, caplog: pytest.LogCaptureFixture
) -> None:
    """Cut t1 back to 8 and remove the checkpoint folder (or restore it from an empty
    backup): the next process's first event must not become the tenant's first checkpoint,
    or the cut chain would verify clean after one more request."""
    tamper(anchored.store, *rewind("t1", 8))
    shutil.rmtree(anchored.directory.root)
    fresh = Checkpointer(anchored.directory, anchored.key_path, every_events=EVERY,
                         every_seconds=3600, clock=lambda: NOW)  # fmt: skip
    anchored.store.observe_audit(fresh.observe)
    with caplog.at_level(logging.WARNING, logger="govrag.audit"):
        for i in range(2 * EVERY):  # past a due point too
            anchored.store.append_audit("t1", "pep_decision", {"n": i}, request_id="x",
                                        session_id="s")  # fmt: skip
    assert fresh.written == 0 and not anchored.directory.has_history("t1")
    assert anchored.kinds() == {"t1": ["unanchored"], "t2": ["unanchored"]}
    # Each process says why, once: the new one saw a chain under way, the running one (the
    # fixture's) had seen checkpoints that are gone now.
    new, running = [r.getMessage() for r in caplog.records if r.name == "govrag.audit"]
    assert "tenant 't1' at event 9" in new and "8 earlier events" in new
    assert "tenant 't1' at event 16" in running and "history was removed" in running
    assert "govrag audit checkpoint --tenant t1" in new
