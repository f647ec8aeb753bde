"""Keys and checkpoint files: created safely, signed, read back, and refused when edited."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from govrag.audit.checkpoint import BadCheckpoint, Checkpoint, CheckpointDir, tenant_folder
from govrag.audit.keys import (
    generate_key,
    key_id,
    load_signing_key,
    load_verify_key,
    public_path,
    verifying_key,
)
from govrag.errors import ConfigError
from govrag.store.audit import AuditEvent

AT = datetime(2026, 7, 1, 12, 0, 0, 123456, tzinfo=UTC)


def event(seq: int, tenant: str = "t1") -> AuditEvent:
    return AuditEvent(tenant, seq, f"aud-{seq}", "r", "s", "k", "{}", "2026-07-01T00:00:00Z",
                      "0" * 64, f"{seq:064x}")  # fmt: skip


def test_a_generated_key_is_private_and_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "audit.pem"
    kid = generate_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert key_id(load_signing_key(path).public_key()) == kid
    assert key_id(load_verify_key(public_path(path))) == kid
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="already exists; keep it"):
        generate_key(path)
    assert path.read_bytes() == before


def test_key_errors_name_the_setting_the_file_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match=r"\[audit\] signing_key .*nope.pem does not exist"):
        load_signing_key(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match="not an unencrypted PEM Ed25519 private key"):
        load_signing_key(garbage)
    with pytest.raises(ConfigError, match=r"verify_key .* is not a PEM Ed25519 public key"):
        load_verify_key(garbage)
    # An examiner with only the public key can verify.
    key = tmp_path / "k.pem"
    kid = generate_key(key)
    pub_only = tmp_path / "copy.pub"
    pub_only.write_bytes(public_path(key).read_bytes())
    assert key_id(verifying_key(tmp_path / "absent.pem", pub_only)) == kid


def test_a_checkpoint_round_trips_through_its_file(tmp_path: Path) -> None:
    key_path = tmp_path / "k.pem"
    generate_key(key_path)
    key = load_signing_key(key_path)
    directory = CheckpointDir(tmp_path / "cps")
    cp = Checkpoint.of(event(7), key, at=AT)
    path = directory.write(cp)
    assert path.parent.name == "t-t1" and path.name.startswith("00000000000000000007-")
    assert directory.read(path, key.public_key()) == cp
    body = json.loads(path.read_text())
    assert set(body) == {"format", "tenant", "head_seq", "head_event_id", "head_hash",
                         "events", "created_at", "key_id", "signature"}  # fmt: skip
    assert body["created_at"] == "2026-07-01T12:00:00.123456Z"
    assert not list(path.parent.glob(".*"))  # no temporary file left behind


@pytest.mark.parametrize(
    ("field", "value"),
    [("head_seq", 8), ("events", 8), ("head_hash", "f" * 64), ("head_event_id", "aud-x"),
     ("created_at", "2026-07-02T00:00:00Z"), ("tenant", "t2"), ("signature", "AAAA")],
)  # fmt: skip
def test_editing_any_field_breaks_the_signature(tmp_path: Path, field: str, value: object) -> None:
    key_path = tmp_path / "k.pem"
    generate_key(key_path)
    key = load_signing_key(key_path)
    directory = CheckpointDir(tmp_path / "cps")
    path = directory.write(Checkpoint.of(event(7), key, at=AT))
    body = json.loads(path.read_text())
    body[field] = value
    path.write_text(json.dumps(body))
    got = directory.read(path, key.public_key())
    assert isinstance(got, BadCheckpoint) and got.tenant in ("t1", "t2")
    assert directory.latest("t1", key.public_key()) is None
    assert len(directory.scan(key.public_key()).invalid) == 1


def test_moved_or_renamed_files_are_refused(tmp_path: Path) -> None:
    key_path = tmp_path / "k.pem"
    generate_key(key_path)
    key = load_signing_key(key_path)
    directory = CheckpointDir(tmp_path / "cps")
    path = directory.write(Checkpoint.of(event(7), key, at=AT))
    moved = directory.root / tenant_folder("t2") / path.name
    moved.parent.mkdir()
    moved.write_bytes(path.read_bytes())
    renamed = path.with_name("00000000000000000099-x.json")
    path.rename(renamed)
    problems = sorted(b.problem for b in directory.scan(key.public_key()).invalid)
    assert problems == ["records event 7 but its name says otherwise",
                        "records tenant 't1' but lies in another tenant's folder"]  # fmt: skip


def test_history_is_append_only_and_the_latest_valid_one_wins(tmp_path: Path) -> None:
    key_path = tmp_path / "k.pem"
    generate_key(key_path)
    key = load_signing_key(key_path)
    directory = CheckpointDir(tmp_path / "cps")
    first = directory.write(Checkpoint.of(event(3), key, at=AT))
    second = directory.write(Checkpoint.of(event(3), key, at=AT))  # the same head again
    directory.write(Checkpoint.of(event(9), key, at=AT))
    assert first != second and first.exists() and second.exists()
    # A newer-looking file that does not verify is skipped, and a crash's temporary file too.
    (first.parent / ("9" * 20 + "-forged.json")).write_text("{}")
    (first.parent / ".00000000000000000010-x.json.tmp").write_text("half")
    latest = directory.latest("t1", key.public_key())
    assert latest is not None and latest.head_seq == 9
    scan = directory.scan(key.public_key())
    assert [c.head_seq for c in scan.valid["t1"]] == [3, 3, 9] and len(scan.invalid) == 1


@pytest.mark.parametrize("tenant", ["..", ".", "a/b", "x" * 300, "ü n i"])
def test_any_tenant_id_gets_its_own_folder_inside_the_directory(
    tmp_path: Path, tenant: str
) -> None:
    key_path = tmp_path / "k.pem"
    generate_key(key_path)
    key = load_signing_key(key_path)
    directory = CheckpointDir(tmp_path / "cps")
    path = directory.write(Checkpoint.of(event(1, tenant), key, at=AT))
    assert path.parent.parent == directory.root and len(path.parent.name) < 200
    assert directory.scan(key.public_key()).valid[tenant][0].tenant == tenant
    assert directory.latest(tenant, key.public_key()) is not None
