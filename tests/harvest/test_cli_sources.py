"""``govrag ingest`` on folders and configured sources, and ``govrag sources``: real
subprocesses, real files, stdout/stderr/exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fs_helpers import tiny_pdf, write

PRINCIPALS = {
    "principals": [
        {
            "sub": "ana",
            "email": "ana@bank.example",
            "tenant": "bank",
            "clearance": "restricted",
            "doc_entitlements": ["policies:read", "notes:read"],
        },
        {
            "sub": "ben",
            "email": "ben@bank.example",
            "tenant": "bank",
            "clearance": "restricted",
            "doc_entitlements": ["policies:read", "notes:read"],
        },
    ]
}


def govrag(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "govrag.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


@pytest.fixture
def dep(tmp_path: Path) -> Path:
    corpora = ["--corpus", "policies", "--corpus", "notes"]
    done = govrag("init", "dep", "--embedder", "hash", "--tenant", "bank", *corpora, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (tmp_path / "dep" / "principals.json").write_text(json.dumps(PRINCIPALS))
    root = tmp_path / "docs"
    write(
        root,
        "_identities.jsonl",
        "\n".join(
            json.dumps({"type": "identity", "email": f"{who}@bank.example", "account_id": acct})
            for who, acct in [("ana", "S-1"), ("ben", "S-2")]
        ),
    )
    write(root, "_access.json", {"acl": ["S-1"]})
    write(
        root,
        "policies/wire.md",
        "---\ntitle: Wire limits\nacl: [S-1, S-2]\n---\n"
        "Wire transfers above the limit need a second approval.",
    )
    write(root, "policies/limits.pdf", tiny_pdf("Counterparty limits are reviewed yearly"))
    write(root, "notes/runbook.html", "<title>Runbook</title><p>Restart the clearing service.")
    return tmp_path / "dep"


def ingest(dep: Path, *args: str) -> tuple[int, dict[str, object], str]:
    done = govrag("ingest", *args, "--json", "-d", str(dep), cwd=dep.parent)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def test_ingest_a_folder_then_search_it(dep: Path) -> None:
    code, out, stderr = ingest(dep, "docs", "--dry-run")  # not a source name: the folder
    assert code == 0, stderr
    assert (out["added"], out["dry_run"], out["connector"]) == (3, True, "filesystem")
    assert not (dep / "govrag.db").exists() and not (dep / ".govrag").exists()
    code, out, stderr = ingest(dep, "docs")
    assert code == 0, stderr
    assert {k: out[k] for k in ("added", "identities", "errors", "tenant")} == {
        "added": 3,
        "identities": 2,
        "errors": 0,
        "tenant": "bank",
    }
    code, out, _ = ingest(dep, "docs")
    assert (code, out["unchanged"], out["added"]) == (0, 3, 0)

    def found(who: str) -> list[str]:
        done = govrag("search", "counterparty limits reviewed", "--as", who, "--json",
                      "--strategy", "keyword", "-d", str(dep), cwd=dep)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return [r["doc_id"] for r in json.loads(done.stdout)["results"]]

    assert "policies/limits.pdf" not in found("ben")
    assert found("ana")[0] == "policies/limits.pdf"


def test_a_bad_file_fails_the_run_but_not_the_rest(dep: Path) -> None:
    bad = write(dep.parent, "docs/notes/broken.pdf", b"%PDF-1.4 truncated")
    code, out, stderr = ingest(dep, "docs")
    assert code == 1 and out["errors"] == 1 and out["added"] == 3
    assert f"{Path('docs/notes/broken.pdf')}: cannot read the PDF" in stderr
    assert out["messages"][0].startswith(str(bad.relative_to(dep.parent)))
    assert "Traceback" not in stderr


def test_configured_sources(dep: Path) -> None:
    (dep / "govrag.toml").write_text(
        (dep / "govrag.toml").read_text()
        + '\n[sources.docs]\nconnector = "filesystem"\npath = "../docs"\nsource_system = "kb"\n'
    )
    done = govrag("sources", "--json", "-d", str(dep), cwd=dep)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["sources"]
    assert (row["name"], row["connector"], row["exists"], row["last_sync"]) == (
        "docs",
        "filesystem",
        True,
        None,
    )
    code, out, stderr = ingest(dep, "docs")  # the source name wins over ./docs
    assert code == 0, stderr
    assert (out["source"], out["added"]) == ("docs", 3)
    done = govrag("sources", "--json", "-d", str(dep), cwd=dep)
    (row,) = json.loads(done.stdout)["sources"]
    assert row["documents"] == 3 and row["last_run"]["added"] == 3 and row["last_sync"]
    assert row["source_system"] == "kb" and row["tenant"] == "bank"
    done = govrag("sources", "-d", str(dep), cwd=dep)
    assert (
        done.returncode == 0 and "docs: filesystem" in done.stdout and "3 documents" in done.stdout
    )
    done = govrag("ingest", "nope", "-d", str(dep), cwd=dep)
    assert done.returncode == 2
    assert "configured sources (sources.<name> tables of govrag.toml): docs" in done.stderr
    done = govrag("ingest", "docs", "--connector", "jsonl", "-d", str(dep), cwd=dep)
    assert done.returncode == 2 and "drop --connector jsonl" in done.stderr


def test_identity_conflicts_are_counted_in_the_json_report(dep: Path) -> None:
    records = [
        {"type": "identity", "email": "ana@bank.example", "source_system": "sp",
         "account_id": "A-1"},
        {"type": "identity", "email": "mallory@bank.example", "source_system": "sp",
         "account_id": "A-1"},
        {"type": "identity", "email": "noreply@bank.example", "source_system": "sp",
         "account_id": "A-2"},
        {"type": "identity", "email": "ben@bank.example", "source_system": "sp",
         "account_id": "A-3"},
    ]  # fmt: skip
    feed = write(dep.parent, "ids.jsonl", "\n".join(json.dumps(r) for r in records))
    code, out, stderr = ingest(dep, str(feed))
    assert code == 1, stderr
    assert (out["conflicts"], out["errors"], out["identities"]) == (1, 2, 2)
    assert "already bound to 'ana@bank.example'" in out["messages"][0]
    assert "placeholder_emails" in out["messages"][1]
    assert "already bound" in stderr and "Traceback" not in stderr


_HOLD_LOCK = """
import sys
from govrag.harvest.sources import resolve_source
from govrag.harvest.state import source_lock
from govrag.settings import load_settings

spec = resolve_source(load_settings(sys.argv[1]), sys.argv[2])
with source_lock(spec.state_path, spec.name) as lock:
    print(lock, flush=True)
    sys.stdin.read()
"""


def test_two_runs_of_one_source_never_interleave(dep: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(dep), "docs"],
        cwd=dep.parent, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        lock = holder.stdout.readline().strip()
        assert lock.endswith(".json.lock")
        code, out, stderr = ingest(dep, "docs")
        assert code == 2 and out == {}
        assert "source 'docs' is being ingested by another run" in stderr
        assert lock in stderr.replace("\n", "")
        assert not (dep / "govrag.db").exists()  # it failed before touching anything
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    code, out, stderr = ingest(dep, "docs")
    assert code == 0 and out["added"] == 3, stderr
