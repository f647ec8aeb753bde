"""docs/own-folder.md runs as written: its ``sh`` blocks are read from the page and each command
(a heredoc that writes a file counts as one) runs in order through ``bash`` in an empty
directory, with this interpreter's ``govrag`` first on PATH, as a reader pasting them would.
Then the page's promises are checked on what the commands printed: each user's search shows
only their own folder, Maria's question gets a cited answer, Tom's an abstention that names
whom to ask, and the replay answers from the audit log.

The ``req-...`` placeholder takes the request id the latest command printed, as a reader would
paste it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "own-folder.md"
HEREDOC = re.compile(r"<<'(\w+)'\s*$")
REQUEST_ID = re.compile(r"\brequest (req-[0-9a-f]+)")


@dataclass(frozen=True)
class Ran:
    command: str
    stdout: str
    stderr: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command.splitlines()[0], comments=True)

    @property
    def as_sub(self) -> str | None:
        argv = self.argv
        return argv[argv.index("--as") + 1] if "--as" in argv else None


def blocks(kind: str) -> list[str]:
    """The page's fenced blocks of ``kind`` (``sh``, ``json``), in order."""
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(rf"^```{kind}\n(.*?)^```", text, flags=re.S | re.M)


def commands(block: str) -> list[str]:
    """One shell command per line, a heredoc (its opening line through its terminator) as one."""
    out: list[str] = []
    lines = iter(block.splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        opened = HEREDOC.search(line)
        if opened is None:
            out.append(line)
            continue
        body = [line]
        for more in lines:
            body.append(more)
            if more == opened.group(1):
                break
        else:
            raise AssertionError(f"docs/own-folder.md: heredoc {line!r} is never closed")
        out.append("\n".join(body))
    return out


def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "govrag").exists(), f"no govrag script beside {sys.executable}"
    env = {k: v for k, v in os.environ.items() if k != "GOVRAG_DEPLOYMENT"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    ran: list[Ran] = []
    request_id: str | None = None
    for command in (c for block in blocks("sh") for c in commands(block)):
        if "req-..." in command:
            assert request_id is not None, f"{command!r}: no earlier command printed a request id"
            command = command.replace("req-...", request_id)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,  # a hang guard only, never reached by a working command
            env=env,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{command}\n{done.stderr}"
        found = REQUEST_ID.findall(done.stdout + done.stderr)
        request_id = found[-1] if found else request_id
        ran.append(Ran(command, done.stdout, done.stderr))

    def output(verb: str, sub: str) -> str:
        """What the page's one ``govrag VERB ... --as SUB`` printed."""
        (hit,) = [r for r in ran if r.argv[:2] == ["govrag", verb] and r.as_sub == sub]
        return hit.stdout

    ingest = next(r for r in ran if r.argv[:2] == ["govrag", "ingest"])
    assert "added 2" in ingest.stderr and "errors 0" in ingest.stderr
    assert "nobody may read" not in ingest.stderr  # every file has its folder's ACL
    # Each user sees only their own folder.
    maria, tom = output("search", "maria"), output("search", "tom")
    assert "finance/expenses.md" in maria and "engineering/" not in maria
    assert "engineering/deploys.md" in tom and "finance/" not in tom
    # Maria's question: an answer citing her folder's document.
    answer = output("ask", "maria")
    assert "mydocs:finance/expenses.md" in answer and "finance controller" in answer
    assert "abstained" not in answer
    # Tom's: neither the document nor its words, but whom to ask.
    refused = output("ask", "tom")
    assert "abstained" in refused and "finance/" not in refused and "EUR 500" not in refused
    assert "maria@example.com" in refused
    replay = next(r for r in ran if r.argv[:2] == ["govrag", "replay"])
    assert "Who? maria" in replay.stdout and "Verdict before search? yes" in replay.stdout
    assert "citing finance/expenses.md" in replay.stdout
    # The route the page shows is the one init wrote.
    (route,) = blocks("json")
    written = tmp_path / "teamdeploy" / "routes" / "search.json"
    assert json.loads(route) == json.loads(written.read_text(encoding="utf-8"))
