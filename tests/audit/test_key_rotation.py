"""Rotating the audit signing key: checkpoints name the key that signed them, verification
picks it from the keyring (the current key and the retired ones ``[audit] verify_keys``
names), so what an old key signed keeps verifying, and a key the keyring does not hold is a
finding naming its id."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import govrag
from govrag.audit.checkpoint import Checkpoint, CheckpointDir
from govrag.audit.keys import generate_key, key_id, load_keyring, load_signing_key
from govrag.errors import ConfigError

TENANT = "bank"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A deployment that checkpoints every 4 events (each search writes 4)."""
    govrag.init(tmp_path, tenant=TENANT, corpora=["policies"])
    toml = tmp_path / "govrag.toml"
    toml.write_text(toml.read_text().replace("checkpoint_every_events = 1000",
                                             "checkpoint_every_events = 4"))  # fmt: skip
    return tmp_path


def search(app: govrag.Govrag, n: int = 1) -> None:
    for _ in range(n):
        app.callers.search(govrag.local_principal(app.settings, "ana"), "wire limit")


def signers(root: Path) -> list[str]:
    """The key id of every checkpoint file, oldest head first."""
    files = sorted((root / "audit-checkpoints").rglob("*.json"))
    return [json.loads(p.read_text())["key_id"] for p in files]


def keyring(root: Path) -> Path:
    return root / "keys" / "audit-keyring"


def test_old_checkpoints_verify_after_a_rotation(root: Path) -> None:
    with govrag.open(root) as app:
        search(app, 2)  # checkpoints at 1 and 5
        old = app.operators.audit_verify().key_id
        rotation = app.operators.audit_rotate_key()
        # The running process picks the new key up at its next due point, no restart.
        search(app, 2)  # checkpoints at 9 and 13
        report = app.operators.audit_verify()
    assert rotation.retired_key_id == old and rotation.key_id != old
    assert rotation.retired_public == keyring(root) / f"{old.split(':')[1]}.pub"
    assert signers(root) == [old, old, rotation.key_id, rotation.key_id]
    assert report.ok, report.findings
    assert report.key_id == rotation.key_id and report.tenants[0].checkpoints == 4
    # The retired private key is gone: nothing can sign with it any more.
    key = root / "keys" / "audit-signing-key.pem"
    assert key_id(load_signing_key(key).public_key()) == rotation.key_id
    assert sorted(p.name for p in (root / "keys").iterdir()) == [
        "audit-keyring", "audit-signing-key.pem", "audit-signing-key.pub"]  # fmt: skip


def test_a_retired_key_missing_from_the_keyring_is_named(root: Path) -> None:
    with govrag.open(root) as app:
        search(app)
        rotation = app.operators.audit_rotate_key()
        search(app)
        rotation.retired_public.unlink()  # the keyring lost the retired key
        report = app.operators.audit_verify()
    [finding] = report.findings
    assert finding.kind == "checkpoint_invalid"
    assert f"signed by key {rotation.retired_key_id}, not by the configured key" in finding.message
    assert "[audit] verify_keys" in finding.message


def test_a_checkpoint_signed_by_a_key_outside_the_keyring_fails(root: Path) -> None:
    """A rotation widens what verifies only by the keys filed in the keyring: a checkpoint
    signed by any other key (an attacker's) is still a finding naming its id."""
    with govrag.open(root) as app:
        search(app)
        app.operators.audit_rotate_key()
        search(app)
        head = app.operators.audit_verify().tenants[0].head
        assert head is not None
        stranger = Ed25519PrivateKey.generate()
        forged = Checkpoint.of(head, stranger, at=datetime.now(UTC))
        CheckpointDir(root / "audit-checkpoints").write(forged)
        report = app.operators.audit_verify()
    [finding] = report.findings
    assert finding.kind == "checkpoint_invalid"
    assert f"signed by key {key_id(stranger.public_key())}" in finding.message


def test_verify_keys_may_name_key_files_too(root: Path, tmp_path_factory: pytest.TempPathFactory
                                            ) -> None:  # fmt: skip
    """An examiner's keyring: the retired public key as a file named in verify_keys."""
    with govrag.open(root) as app:
        search(app)
        rotation = app.operators.audit_rotate_key()
        search(app)
    elsewhere = tmp_path_factory.mktemp("examiner") / "old.pub"
    rotation.retired_public.rename(elsewhere)
    with govrag.open(root, audit={"verify_keys": [str(elsewhere)]}) as app:
        assert app.operators.audit_verify().ok


def test_a_keyring_others_can_write_is_refused(root: Path) -> None:
    """Whoever can add a file to the keyring can make their own checkpoints verify."""
    with govrag.open(root) as app:
        search(app)
        app.operators.audit_rotate_key()
        keyring(root).chmod(0o777)
        with pytest.raises(ConfigError, match=rf"verify_keys {keyring(root)} can be written by "
                           rf"other users .*chmod go-w {keyring(root)}"):  # fmt: skip
            app.operators.audit_verify()
        assert any(p.field == "audit.verify_keys" for p in app.operators.config_check().problems)
        keyring(root).chmod(0o700)
        [pub] = keyring(root).iterdir()
        pub.chmod(0o666)
        with pytest.raises(ConfigError, match="can be written by other users"):
            app.operators.audit_verify()


def test_a_keyring_entry_that_is_no_key_is_refused(root: Path) -> None:
    keyring(root).mkdir(mode=0o700)
    (keyring(root) / "junk.pub").write_text("not a key")
    (keyring(root) / "README").write_text("only *.pub files are keys")
    with (
        govrag.open(root) as app,
        pytest.raises(ConfigError, match=r"verify_keys .*junk.pub is not a PEM Ed25519 public key"),
    ):
        app.operators.audit_verify()


def test_rotation_needs_a_keyring_folder(root: Path) -> None:
    key = root / "keys" / "audit-signing-key.pem"
    before = key.read_bytes()
    with (
        govrag.open(root, audit={"verify_keys": []}) as app,
        pytest.raises(ConfigError, match="verify_keys is empty"),
    ):
        app.operators.audit_rotate_key()
    a_file = root / "keys" / "one.pub"
    a_file.write_bytes((root / "keys" / "audit-signing-key.pub").read_bytes())
    with (
        govrag.open(root, audit={"verify_keys": [str(a_file)]}) as app,
        pytest.raises(ConfigError, match="must be a folder"),
    ):
        app.operators.audit_rotate_key()
    assert key.read_bytes() == before  # nothing was replaced


def test_keygen_rotate_on_the_command_line(root: Path) -> None:
    with govrag.open(root) as app:
        search(app, 2)
        old = app.operators.audit_verify().key_id

    def govrag_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "govrag.cli", *args, "-d", str(root)],
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    done = govrag_cli("audit", "keygen")
    assert done.returncode == 2 and "--rotate" in done.stderr
    done = govrag_cli("audit", "keygen", "--rotate")
    assert done.returncode == 0, done.stderr
    assert f"retired key {old} is gone" in done.stderr and "audit-keyring" in done.stderr
    with govrag.open(root) as app:
        search(app)
        report = app.operators.audit_verify()
    assert report.ok and report.key_id != old
    assert signers(root) == [old, old, report.key_id]
    done = govrag_cli("audit", "verify")
    assert done.returncode == 0, done.stderr


def test_a_keyring_holds_the_current_key_and_the_retired_ones(tmp_path: Path) -> None:
    current, retired = tmp_path / "a.pem", tmp_path / "ring" / "b.pem"
    generate_key(current)
    generate_key(retired)
    ring = load_keyring(load_signing_key(current).public_key(), [tmp_path / "ring",
                                                                 tmp_path / "absent"])  # fmt: skip
    b = key_id(load_signing_key(retired).public_key())
    assert ring.ids() == [ring.current_id, b] and ring.get(b) is not None
    assert ring.get("ed25519:" + "0" * 32) is None
