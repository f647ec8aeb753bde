"""Attacks on backup and restore: a damaged, edited or mixed-up backup, a careless operator.

A backup travels over other storage and through other hands, so restore trusts nothing in it
(``app/backup_files.py``). Each case below is what a hostile hand or a hurried operator would
try, and each must end in a clear refusal that leaves nothing behind (no target folder, no
staging folder, nothing written outside) or, where the files are genuine but do not belong
together, in a restore that says its audit log does not verify:

- a flipped byte, a missing file, a file swapped for a link, a manifest with a field this
  govrag does not know: refused before anything is written;
- a manifest that names ``../`` paths, or absolute places outside the target: refused, and
  ``--outside`` places items only where nothing is;
- a restore over an existing deployment, a backup into the deployment itself: refused;
- the database of an older backup with the checkpoints of a newer one (the manifest "fixed"
  to match), or an older database copied over a live deployment's: the rewind is reported
  (``truncated``), never silently accepted;
- a restore that fails late (its settings do not load) removes what it had placed;
- restored settings that point a path restore writes or reads (the index, the checkpoints,
  the keys, the database) outside the target, by an edited ``govrag.toml`` or an operator's
  environment, are refused before anything is written there (a live deployment's index on
  the same machine stays as it was);
- a folder of the backup swapped for a link, a recorded mode of 0777, a backup into the
  checkpoint folder: refused, masked, refused;
- a checkpoint folder that is a link to other storage comes back as that link.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import govrag

from conftest import wire_bank


@pytest.fixture(scope="module")
def backups(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two backups of one deployment (``old``, then ``new`` after more audited searches and
    a checkpoint), and the deployment itself (``live``)."""
    base = tmp_path_factory.mktemp("backups")
    root = wire_bank(base / "dep", routes={})
    with govrag.open(root) as app:
        ana = govrag.local_principal(app.settings, "ana")
        app.callers.search(ana, "wire limit")
        app.operators.audit_checkpoint()
        old = Path(app.operators.back_up(base / "old").path)
        for i in range(4):
            app.callers.search(ana, f"wire limit {i}")
        app.operators.audit_checkpoint()
        new = Path(app.operators.back_up(base / "new").path)
    return {"old": old, "new": new, "live": root}


def _copy(backup: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(backup, tmp_path / name))


def _manifest(backup: Path) -> dict[str, Any]:
    return dict(json.loads((backup / "manifest.json").read_text()))


def _save(backup: Path, manifest: dict[str, Any]) -> None:
    (backup / "manifest.json").write_text(json.dumps(manifest))


def _relist(backup: Path, manifest: dict[str, Any]) -> None:
    """What an editor who knows the format does: list every file as it now is."""
    files = []
    for path in sorted(p for p in backup.rglob("*") if p.is_file() and p.name != "manifest.json"):
        data = path.read_bytes()
        files.append({"path": path.relative_to(backup).as_posix(), "size": len(data),
                      "sha256": hashlib.sha256(data).hexdigest(), "mode": 0o600})  # fmt: skip
    _save(backup, manifest | {"files": files})


def _nothing_left(tmp_path: Path, target: Path) -> None:
    assert not target.exists()
    assert not list(tmp_path.glob(f".{target.name}.restore-*")), "a staging folder was left"


def _refused(backup: Path, target: Path, match: str, **kw: Any) -> None:
    with pytest.raises(govrag.InputError, match=match):
        govrag.restore(backup, target, **kw)
    _nothing_left(target.parent, target)


def test_a_flipped_byte_in_the_database_restores_nothing(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    copy = _copy(backups["new"], tmp_path)
    db = copy / "database" / "govrag.db"
    data = bytearray(db.read_bytes())
    data[len(data) // 2] ^= 0x01
    db.write_bytes(bytes(data))
    _refused(copy, tmp_path / "target", "govrag.db' does not match the manifest")


def test_a_missing_or_linked_file_restores_nothing(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    copy = _copy(backups["new"], tmp_path)
    principals = copy / "deployment" / "principals.json"
    principals.unlink()
    principals.symlink_to("/etc/passwd")
    _refused(copy, tmp_path / "target", "principals.json' is missing from the backup")
    principals.unlink()
    _refused(copy, tmp_path / "target", "principals.json' is missing from the backup")


def test_an_unknown_field_or_format_is_refused_by_name(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    copy = _copy(backups["new"], tmp_path)
    manifest = _manifest(copy)
    _save(copy, manifest | {"trust_me": True})
    _refused(copy, tmp_path / "target", "trust_me")
    _save(copy, manifest | {"format": 2})
    _refused(copy, tmp_path / "target", "format")


@pytest.mark.parametrize(
    "path", ["deployment/../../escape.txt", "/tmp/escape.txt", "elsewhere/escape.txt",
             "deployment//x", "deployment/./x", "deployment\\..\\x"],
)  # fmt: skip
def test_paths_that_leave_the_backup_are_refused(
    backups: dict[str, Path], tmp_path: Path, path: str
) -> None:
    copy = _copy(backups["new"], tmp_path)
    manifest = _manifest(copy)
    manifest["files"].append({"path": path, "size": 1, "sha256": "0" * 64, "mode": 0o644})
    _save(copy, manifest)
    _refused(copy, tmp_path / "target", "a path outside the backup's folders")
    assert not (tmp_path / "escape.txt").exists()


def test_items_outside_the_target_need_consent_and_a_free_place(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    copy = _copy(backups["new"], tmp_path)
    manifest = _manifest(copy)
    (copy / "outside" / "0").mkdir(parents=True)
    (copy / "outside" / "0" / "planted.pem").write_text("not a key")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "precious.txt").write_text("keep me")
    manifest["outside"] = [{"setting": "audit.verify_keys[3]", "original": str(taken),
                            "folder": "outside/0"}]  # fmt: skip
    _relist(copy, manifest)
    _refused(copy, tmp_path / "target", "pass --outside")
    _refused(copy, tmp_path / "target", "something is there already", outside=True)
    assert [p.name for p in taken.iterdir()] == ["precious.txt"]


def test_a_restore_never_writes_over_a_deployment_and_a_backup_never_into_one(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    live = backups["live"]
    before = sorted(p.relative_to(live) for p in live.rglob("*"))
    with pytest.raises(govrag.InputError, match="exists and is not an empty folder"):
        govrag.restore(backups["new"], live)
    assert sorted(p.relative_to(live) for p in live.rglob("*")) == before
    with govrag.open(live) as app, pytest.raises(govrag.InputError, match="inside the deploym"):
        app.operators.back_up(live / "backups" / "today")
    assert not (live / "backups").exists()
    with govrag.open(live) as app, pytest.raises(govrag.InputError, match="not an empty fold"):
        app.operators.back_up(backups["old"])


def test_an_older_database_with_newer_checkpoints_is_reported_as_rewound(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    """The operator takes the database of last week's backup and the checkpoint folder of
    today's, and fixes up the manifest so the checksums pass."""
    copy = _copy(backups["old"], tmp_path)
    shutil.rmtree(copy / "deployment" / "audit-checkpoints")
    shutil.copytree(backups["new"] / "deployment" / "audit-checkpoints",
                    copy / "deployment" / "audit-checkpoints")  # fmt: skip
    _relist(copy, _manifest(copy))
    done = subprocess.run([sys.executable, "-m", "govrag.cli", "restore", str(copy),
                           str(tmp_path / "target")], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "events were removed from the end and the head rewound" in done.stderr
    assert "does not verify against its checkpoints" in done.stderr


def test_an_older_database_copied_over_a_live_one_is_reported_as_rewound(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    live = Path(shutil.copytree(backups["live"], tmp_path / "live"))
    for name in ("govrag.db-wal", "govrag.db-shm"):
        (live / name).unlink(missing_ok=True)
    shutil.copy(backups["old"] / "database" / "govrag.db", live / "govrag.db")
    with govrag.open(live) as app:
        kinds = [f.kind for f in app.operators.audit_verify().findings]
    assert kinds == ["truncated"]


def test_a_restore_that_fails_late_leaves_nothing(backups: dict[str, Path], tmp_path: Path) -> None:
    copy = _copy(backups["new"], tmp_path)
    (copy / "deployment" / "govrag.toml").write_text("[store]\nurl = 'sqlite:/typo.db'\n")
    _relist(copy, _manifest(copy))
    with pytest.raises(govrag.ConfigError):
        govrag.restore(copy, tmp_path / "target")
    _nothing_left(tmp_path, tmp_path / "target")


def test_restored_settings_may_not_point_restore_outside_the_target(
    backups: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edited govrag.toml, or the operator's environment, naming another deployment's
    index: the restore refuses before it rebuilds anything there."""
    victim = tmp_path / "live-index"
    victim.mkdir()
    (victim / "keep.txt").write_text("a live deployment's index")
    copy = _copy(backups["new"], tmp_path)
    toml = copy / "deployment" / "govrag.toml"
    toml.write_text(toml.read_text().replace('index_dir = "index"', f'index_dir = "{victim}"'))
    _relist(copy, _manifest(copy))
    with pytest.raises(govrag.ConfigError, match=r"store\.index_dir"):
        govrag.restore(copy, tmp_path / "target")
    _nothing_left(tmp_path, tmp_path / "target")
    monkeypatch.setenv("GOVRAG_STORE__INDEX_DIR", str(victim))
    with pytest.raises(govrag.ConfigError, match=r"store\.index_dir"):
        govrag.restore(backups["new"], tmp_path / "target")
    monkeypatch.delenv("GOVRAG_STORE__INDEX_DIR")
    monkeypatch.setenv("GOVRAG_STORE__URL", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    with pytest.raises(govrag.ConfigError, match="not the SQLite file the backup holds"):
        govrag.restore(backups["new"], tmp_path / "target")
    assert [p.name for p in victim.iterdir()] == ["keep.txt"]
    assert not (tmp_path / "elsewhere.db").exists()
    _nothing_left(tmp_path, tmp_path / "target")


def test_a_folder_swapped_for_a_link_is_not_followed(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    """The manifest lists deployment/keys/...; the folder is now a link to a secret's folder
    with files of the same names: nothing is read through it."""
    copy = _copy(backups["new"], tmp_path)
    elsewhere = Path(shutil.copytree(copy / "deployment" / "keys", tmp_path / "secret-keys"))
    shutil.rmtree(copy / "deployment" / "keys")
    (copy / "deployment" / "keys").symlink_to(elsewhere)
    _refused(copy, tmp_path / "target", "keys/audit-signing-key.pem' is missing from the backup")


def test_recorded_modes_never_open_a_file_to_others(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    copy = _copy(backups["new"], tmp_path)
    manifest = _manifest(copy)
    for f in manifest["files"]:
        f["mode"] = 0o777
    _save(copy, manifest)
    govrag.restore(copy, tmp_path / "target")
    target = tmp_path / "target"
    assert (target / "keys" / "audit-signing-key.pem").stat().st_mode & 0o777 == 0o600
    assert (target / "keys").stat().st_mode & 0o777 == 0o700
    assert (target / "principals.json").stat().st_mode & 0o777 == 0o755
    backup = backups["new"]
    assert (backup / "database" / "govrag.db").stat().st_mode & 0o077 == 0
    assert all(d.stat().st_mode & 0o077 == 0 for d in backup.rglob("*") if d.is_dir())


def test_an_outside_item_inside_the_target_or_a_failed_placement_leaves_nothing(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    copy = _copy(backups["new"], tmp_path)
    manifest = _manifest(copy)
    (copy / "outside" / "0").mkdir(parents=True)
    (copy / "outside" / "0" / "a.pub").write_text("a")
    inside = {"setting": "audit.verify_keys[3]", "original": str(tmp_path / "target" / "k"),
              "folder": "outside/0"}  # fmt: skip
    _relist(copy, manifest | {"outside": [inside]})
    _refused(copy, tmp_path / "target", "overlaps the target", outside=True)
    # A placement that succeeds, then a restore that fails later (its settings do not load):
    # what it made outside goes, a folder that was there (empty) stays.
    kept = tmp_path / "kept"
    kept.mkdir()
    manifest["outside"] = [inside | {"original": str(kept / "new" / "deep")},
                           inside | {"original": str(kept), "folder": "outside/1"}]  # fmt: skip
    (copy / "outside" / "1").mkdir()
    (copy / "outside" / "1" / "b.pub").write_text("b")
    (copy / "deployment" / "govrag.toml").write_text("[store]\nurl = 'sqlite:/typo.db'\n")
    _relist(copy, manifest)
    with pytest.raises(govrag.ConfigError):
        govrag.restore(copy, tmp_path / "target", outside=True)
    _nothing_left(tmp_path, tmp_path / "target")
    assert kept.is_dir() and list(kept.iterdir()) == []


def test_a_backup_is_never_written_into_the_audit_anchor(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    worm = tmp_path / "worm"  # checkpoints on storage of their own
    refused = pytest.raises(govrag.InputError, match=r"inside audit\.checkpoint_dir")
    with govrag.open(backups["live"], audit={"checkpoint_dir": str(worm)}) as app, refused:
        app.operators.back_up(worm / "backups" / "today")
    assert not (worm / "backups").exists()


def test_a_checkpoint_folder_linked_to_other_storage_comes_back_as_that_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = wire_bank(tmp_path / "dep", routes={})
    worm = tmp_path / "worm"
    if (root / "audit-checkpoints").exists():
        shutil.move(root / "audit-checkpoints", worm)
    worm.mkdir(exist_ok=True)
    (root / "audit-checkpoints").symlink_to(worm)
    monkeypatch.chdir(tmp_path)  # named as `govrag backup -d dep` names it
    with govrag.open("dep") as app:
        app.callers.search(govrag.local_principal(app.settings, "ana"), "wire limit")
        app.operators.audit_checkpoint()
        (worm / "t-bank" / ".zz-being-written.tmp").write_text("half a checkpoint")
        report = app.operators.back_up(tmp_path / "backup")
    assert report.skipped == []
    assert not any(".tmp" in f["path"] for f in _manifest(Path(report.path))["files"])
    shutil.move(worm, tmp_path / "worm-moved")  # the old storage is gone; the path is free
    restored = govrag.restore(Path(report.path), tmp_path / "restored", outside=True)
    assert restored.audit.ok, [f.message for f in restored.audit.findings]
    assert (tmp_path / "restored" / "audit-checkpoints").resolve() == worm


def _linked(copy: Path, *items: tuple[str, str, Path]) -> None:
    """List ``(setting, link, original)`` outside items, each re-creating its link."""
    manifest = _manifest(copy)
    manifest["outside"] = []
    for n, (setting, link, original) in enumerate(items):
        (copy / "outside" / str(n)).mkdir(parents=True)
        (copy / "outside" / str(n) / "x.pub").write_text("planted")
        manifest["outside"].append({"setting": setting, "original": str(original),
                                    "folder": f"outside/{n}", "link": link,
                                    "link_target": str(original)})  # fmt: skip
    _relist(copy, manifest)


def test_links_in_a_backup_never_lead_restore_outside_the_target(
    backups: dict[str, Path], tmp_path: Path
) -> None:
    """A link inside another (so that making the second writes through the first), a link
    where the restored settings put no such path (inside the index folder, to rebuild
    another deployment's index), and a setting's item placed at another setting's place."""
    victim = tmp_path / "victim"
    victim.mkdir()
    copy = _copy(backups["new"], tmp_path)
    _linked(
        copy,
        ("audit.checkpoint_dir", "audit-checkpoints", victim / "ckpt"),
        ("audit.verify_keys[0]", "audit-checkpoints/profile.d", tmp_path / "ring"),
    )
    _refused(copy, tmp_path / "target", "lies in another link", outside=True)
    copy = _copy(backups["new"], tmp_path, "copy2")
    _linked(copy, ("audit.checkpoint_dir", "index/default-0000", victim / "index"))
    with pytest.raises(govrag.ConfigError, match="do not put there"):
        govrag.restore(copy, tmp_path / "target", outside=True)
    _nothing_left(tmp_path, tmp_path / "target")
    copy = _copy(backups["new"], tmp_path, "copy3")
    # The keyring's place, claimed for a setting the restored deployment does not set.
    _linked(copy, ("audit.verify_key", "keys/audit-keyring", victim / "ring"))
    with pytest.raises(govrag.ConfigError, match="do not put there"):
        govrag.restore(copy, tmp_path / "target", outside=True)
    _nothing_left(tmp_path, tmp_path / "target")
    assert list(victim.iterdir()) == []
    assert not (tmp_path / "ring").exists()


def test_what_the_restore_prints_from_a_backup_cannot_drive_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from govrag.cli.backup import say

    say("tenant x\x1b[2J\x1b]0;owned\x07: restored \u009b")
    shown = capsys.readouterr().err
    assert "\x1b" not in shown and "\x07" not in shown and "\u009b" not in shown
    assert "\\x1b[2J" in shown
