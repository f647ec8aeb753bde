"""Attack: the audit signing key is readable by other users, so they can sign checkpoints.

A careless operator copies the key with default permissions (0644), restores it from a
backup that lost its mode, or points ``[audit] signing_key`` at a file another user owns or
at a FIFO. Anyone who can read the key can sign a checkpoint that hides a cut log, so a key
that is not private must never sign (before the fix it only logged a warning and signed).
The request path is not gated on the anchor: the audit event is still committed; the refusal
is loud instead (an error in the log per due point, a ``key_exposed`` finding from
``govrag audit verify``, an error from ``govrag config check``, exit 2 from ``govrag audit
checkpoint``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import govrag
from govrag.audit.keys import load_signing_key
from govrag.errors import ConfigError

TENANT = "bank"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    govrag.init(tmp_path, tenant=TENANT, corpora=["policies"])
    return tmp_path


def key_of(root: Path) -> Path:
    return root / "keys" / "audit-signing-key.pem"


def checkpoint_files(root: Path) -> list[Path]:
    return sorted((root / "audit-checkpoints").rglob("*.json"))


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660], ids=lambda m: f"{m:o}")
def test_a_key_others_can_read_signs_nothing(
    root: Path, mode: int, caplog: pytest.LogCaptureFixture
) -> None:
    key = key_of(root)
    key.chmod(mode)
    with caplog.at_level(logging.ERROR, logger="govrag.audit"), govrag.open(root) as app:
        app.callers.search(govrag.local_principal(app.settings, "ana"), "wire limit")
        report = app.operators.audit_verify()
        check = app.operators.config_check()
        with pytest.raises(ConfigError, match=rf"chmod 600 {key}"):
            app.operators.audit_checkpoint(adopt=True)
    # The events are committed; no checkpoint was signed with the exposed key.
    [tenant] = report.tenants
    assert tenant.chain.broken is None and tenant.chain.events == 4
    assert checkpoint_files(root) == []
    # Loud: the log, verify and config check each name the file and the fix.
    [error] = [r.getMessage() for r in caplog.records if r.name == "govrag.audit"]
    assert str(key) in error and f"chmod 600 {key}" in error and f"mode {mode:o}" in error
    assert not report.ok
    exposed = [f for f in report.findings if f.kind == "key_exposed"]
    assert len(exposed) == 1 and f"chmod 600 {key}" in exposed[0].message
    assert {f.kind for f in report.findings} == {"key_exposed", "unanchored"}
    assert not check.ok
    [problem] = [p for p in check.problems if p.field == "audit.signing_key"]
    assert not problem.warning and f"chmod 600 {key}" in problem.message


def test_config_check_on_the_command_line_flags_it(root: Path) -> None:
    key_of(root).chmod(0o644)
    done = subprocess.run([sys.executable, "-m", "govrag.cli", "config", "check", "-d",
                           str(root)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0, done.stderr
    assert "audit.signing_key" in done.stderr and f"chmod 600 {key_of(root)}" in done.stderr


def test_once_fixed_the_next_due_point_signs_again(root: Path) -> None:
    """The running process looks at the key file at each due point: after `chmod 600` it
    signs without a restart (and until then it never did)."""
    toml = root / "govrag.toml"
    toml.write_text(toml.read_text().replace("checkpoint_every_events = 1000",
                                             "checkpoint_every_events = 4"))  # fmt: skip
    key_of(root).chmod(0o644)
    with govrag.open(root) as app:
        ana = govrag.local_principal(app.settings, "ana")
        app.callers.search(ana, "wire limit")
        assert checkpoint_files(root) == []
        key_of(root).chmod(0o600)
        app.callers.search(ana, "wire limit")
        assert len(checkpoint_files(root)) == 1
        # Its first checkpoint signs a later head: this process saw the tenant's event 1.
        assert app.operators.audit_verify().ok


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX")
def test_a_key_that_is_no_regular_file_is_refused_not_waited_on(root: Path) -> None:
    key = key_of(root)
    key.unlink()
    os.mkfifo(key, 0o600)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_signing_key(key)
    with govrag.open(root) as app:
        app.callers.search(govrag.local_principal(app.settings, "ana"), "wire limit")
        assert any(p.field == "audit.signing_key" for p in app.operators.config_check().problems)
        with pytest.raises(ConfigError, match="is not a regular file"):
            app.operators.audit_verify()
    assert checkpoint_files(root) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="handing a file to another user needs root")  # fmt: skip
def test_a_key_owned_by_another_user_is_refused(root: Path) -> None:
    key = key_of(root)
    os.chown(key, 4242, -1)
    with pytest.raises(ConfigError, match=r"owned by user id 4242.*chown 0"):
        load_signing_key(key)
    with govrag.open(root) as app:
        app.callers.search(govrag.local_principal(app.settings, "ana"), "wire limit")
    assert checkpoint_files(root) == []
