"""Front matter that narrows a folder's ACL to nobody is explained by ``govrag ingest``.

The author of ``leave.md`` writes ``acl: [S-1]`` under a folder whose ``_access.json``
grants ``G-staff`` (S-1 is in it): they mean "only S-1". Front matter may only narrow the
folder's ACL to entries that ACL names, and S-1 is granted only through the group, so the
file is stored readable by nobody. That is the safe outcome, but it must not be silent:
ingest prints one warning per file naming the file, both ACLs, what was stored and the fix,
and following the fix (a ``files`` entry in ``_access.json``) lets S-1 read it. Real
folder, real ``govrag ingest`` and ``govrag search --as`` subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fs_helpers import write

PRINCIPALS = {
    "principals": [
        {"sub": who, "email": f"{who}@bank.example", "tenant": "bank",
         "clearance": "internal", "doc_entitlements": ["handbook:read"]}
        for who in ("ana", "ben")
    ]
}  # fmt: skip
IDENTITIES = [
    {"type": "identity", "email": "ana@bank.example", "account_id": "S-1"},
    {"type": "identity", "email": "ben@bank.example", "account_id": "S-2"},
    {"type": "group", "group_id": "G-staff", "members": ["S-1", "S-2"]},
]


def govrag(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "govrag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))  # fmt: skip


@pytest.fixture
def dep(tmp_path: Path) -> Path:
    done = govrag("init", "dep", "--embedder", "hash", "--tenant", "bank", "--corpus",
                  "handbook", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (tmp_path / "dep" / "principals.json").write_text(json.dumps(PRINCIPALS))
    docs = tmp_path / "docs"
    write(docs, "_identities.jsonl", "\n".join(json.dumps(r) for r in IDENTITIES))
    write(docs, "handbook/_access.json", {"acl": ["G-staff"], "classification": "internal"})
    write(docs, "handbook/leave.md",
          "---\ntitle: Leave\nacl: [S-1]\n---\nAnnual leave is twenty five days.")  # fmt: skip
    write(docs, "handbook/lunch.md",
          "---\ntitle: Lunch\nacl: [G-staff, S-2]\n---\nLunch is served at noon.")  # fmt: skip
    write(docs, "handbook/pay.md",
          "---\ntitle: Pay\nacl: [G-staff]\n---\nSalaries are paid monthly.")  # fmt: skip
    return tmp_path / "dep"


def readers(dep: Path, query: str, doc: str) -> set[str]:
    """Who of ana and ben finds ``doc`` by searching ``query``."""
    out = set()
    for who in ("ana", "ben"):
        done = govrag("search", query, "--as", who, "--strategy", "keyword", "--json", "-d",
                      str(dep), cwd=dep.parent)  # fmt: skip
        assert done.returncode == 0, done.stderr
        if doc in {hit["doc_id"] for hit in json.loads(done.stdout)["results"]}:
            out.add(who)
    return out


def test_front_matter_that_leaves_nobody_is_explained(dep: Path) -> None:
    docs = dep.parent / "docs"
    done = govrag("ingest", str(docs), "-d", str(dep), cwd=dep.parent)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    leave, lunch = docs / "handbook/leave.md", docs / "handbook/lunch.md"
    # One line per file that did not simply narrow; pay.md (a plain narrowing) says nothing.
    assert [w.split(": front matter")[0] for w in warnings] == [
        f"warning: {leave}",
        f"warning: {lunch}",
    ], done.stderr
    nobody, partly = warnings
    # The file, the front matter's acl, the folder's acl, what was stored, and the fix.
    assert "front matter 'acl' ['S-1']" in nobody
    assert "its _access.json grants (['G-staff'])" in nobody
    assert "an account in a group it names does not count" in nobody
    assert "stored readable by nobody" in nobody
    assert '"files": {"leave.md": {"acl": [...]}}' in nobody
    assert "front matter 'acl' ['G-staff', 'S-2']" in partly
    assert "stored readable by ['G-staff'] only" in partly

    assert readers(dep, "annual leave", "handbook/leave.md") == set()  # what the warning said
    assert readers(dep, "lunch noon", "handbook/lunch.md") == {"ana", "ben"}
    assert readers(dep, "salaries monthly", "handbook/pay.md") == {"ana", "ben"}

    # The fix the warning names: grant S-1 in _access.json for this file alone.
    write(docs, "handbook/_access.json", {"acl": ["G-staff"], "classification": "internal",
                                          "files": {"leave.md": {"acl": ["S-1"]}}})  # fmt: skip
    done = govrag("ingest", str(docs), "-d", str(dep), cwd=dep.parent)
    assert done.returncode == 0, done.stderr
    assert str(leave) not in done.stderr
    assert readers(dep, "annual leave", "handbook/leave.md") == {"ana"}


def test_an_empty_front_matter_acl_is_explained(dep: Path) -> None:
    docs = dep.parent / "docs"
    write(docs, "handbook/leave.md", "---\ntitle: Leave\nacl:\n---\nAnnual leave is long.")
    done = govrag("ingest", str(docs), "--json", "-d", str(dep), cwd=dep.parent)
    assert done.returncode == 0, done.stderr
    warning = next(w for w in json.loads(done.stdout)["warnings"] if "leave.md" in w)
    assert "front matter 'acl' is empty, so the file was stored readable by nobody" in warning
    assert "its _access.json grants ['G-staff']" in warning
    assert "remove 'acl' from the front matter" in warning
    assert readers(dep, "annual leave", "handbook/leave.md") == set()
