"""The README's Quickstart runs as written: its shell block is read from README.md and each
``govrag`` line runs in order, as a real subprocess, in an empty directory (a fresh checkout's
first hour). The block is the test's input, so a Quickstart edit that breaks a command breaks
this test rather than a newcomer's first try.

Placeholders (``ses-...``, ``req-...``) take the ids the earlier commands printed in their
JSON, as a reader would paste them. A few lines need what a temporary directory cannot hold;
each is named in :data:`SKIPPED` with the reason, and any other line must run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: Lines of the block this test does not run (matched by prefix), and why.
SKIPPED = {
    "make venv": "builds the virtualenv this test already runs in",
    "govrag demo": "builds the bank-eu demo deployment; tests/test_cli.py runs the demo",
    "govrag eval ../shared/data/scifact": "needs the BEIR SciFact data set, which is not shipped",
    "govrag eval --suite bank-eu -d demo-deployment": "needs the demo deployment `govrag demo` "
    "builds; tests/eval/ runs the bank-eu suite",
}

#: A placeholder in the block and the JSON field of an earlier output that fills it.
PLACEHOLDERS = {"ses-...": "session_id", "req-...": "request_id"}


def quickstart_lines(readme: Path) -> list[str]:
    """The command lines of the fenced block right after ``## Quickstart``."""
    section = readme.read_text(encoding="utf-8").split("\n## Quickstart\n", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert match is not None, "README.md: no ```sh block after ## Quickstart"
    return [line for line in match.group(1).splitlines() if line.strip()]


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``govrag ARGS`` as the activated virtualenv runs it (this interpreter's install)."""
    assert argv[0] == "govrag", argv
    return subprocess.run(
        [sys.executable, "-m", "govrag.cli", *argv[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard only, never reached by a working command
        env={k: v for k, v in os.environ.items() if k != "GOVRAG_DEPLOYMENT"},
    )


def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    lines = quickstart_lines(ROOT / "README.md")
    seen: dict[str, str] = {}  # placeholder field -> the latest id printed
    ran: list[str] = []
    answer: dict[str, Any] | None = None
    for line in lines:
        if any(line.startswith(prefix) for prefix in SKIPPED):
            continue
        argv = shlex.split(line, comments=True)
        assert argv[0] == "govrag", f"{line!r}: add it to SKIPPED with a reason, or run it"
        for placeholder, field in PLACEHOLDERS.items():
            if placeholder in argv:
                assert field in seen, f"{line!r}: no earlier command printed a {field}"
                argv = [seen[field] if arg == placeholder else arg for arg in argv]
        done = run(argv, tmp_path)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{line}\n{done.stderr}"
        assert "no route's scope" not in done.stderr, f"{line}: sample data no route searches"
        if "--json" in argv:
            payload = json.loads(done.stdout)
            seen.update({f: payload[f] for f in PLACEHOLDERS.values() if f in payload})
            if argv[1] == "ask":
                answer = payload
        ran.append(argv[1])
    # The block still holds the first hour (a rewrite that drops a step fails here).
    assert {"init", "ingest", "search", "ask", "replay", "click", "audit"} <= set(ran)
    assert answer is not None, "the Quickstart's `govrag ask` has no --json"
    assert not answer["abstained"], answer["reason"]
    assert [c["doc_id"] for c in answer["citations"]] == ["policy-wire-limits-v3"]
    # The answer answers the question (who approves), in the sample's own words.
    assert "head of payments operations" in answer["answer"]


def test_init_says_what_the_sample_is(tmp_path: Path) -> None:
    done = run(["govrag", "init", "d", "--embedder", "hash", "--corpus", "policy-engine"],
               tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "d/sample.jsonl is sample data" in done.stderr
    assert "Next: govrag ingest d/sample.jsonl --deployment d" in done.stderr
    docs = [json.loads(line) for line in (tmp_path / "d" / "sample.jsonl").read_text().splitlines()]
    # Only the documents a route of this deployment can search (no unrouted-corpus warning).
    assert {r["corpus"] for r in docs if r["type"] == "document"} == {"policy-engine"}
    again = run(["govrag", "init", "e", "--embedder", "hash", "--corpus", "nothing-sampled"],
                tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "e" / "sample.jsonl").exists()
    assert "sample" not in again.stderr and "Next: govrag ingest FILE.jsonl" in again.stderr
