"""Attack: an eval suite (``evals/*.jsonl``) that is no file of the deployment.

A careless operator (or whoever may write the deployment directory) puts in ``evals/`` a
FIFO (``govrag eval`` waits on it for ever), a link to ``/dev/zero`` (read without end: memory
grows until the machine kills something), a file far larger than any suite, or a link to a
file elsewhere on the machine (its lines then quoted back in error text). Every other
deployment file is read through the bounded regular-file reader (``govrag.deployfile``); the
promise holds suites to it too: each is refused promptly with one line naming the file, by
``govrag eval`` and by ``govrag config check`` (exit 2), and nothing blocks. The thread and
the subprocess timeout below only guard against a hang; nothing here measures time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import govrag
from govrag.errors import GovragError, InputError
from govrag.eval.suite import MAX_SUITE_BYTES

#: Long enough for any honest refusal on a loaded machine: a guard, not a measurement.
GUARD_SECONDS = 120
HEADER = {"suite": "{}", "k": 5}
CASE = {"id": "c1", "sub": "ana", "route": "search", "question": "What is the wire limit?"}


def suite_text(suite_id: str) -> str:
    return json.dumps({**HEADER, "suite": suite_id}) + "\n" + json.dumps(CASE) + "\n"


def make(root: Path, kind: str) -> Path:
    """``evals/<kind>.jsonl`` of the deployment at ``root``, made hostile as ``kind`` says."""
    path = root / "evals" / f"{kind}.jsonl"
    path.parent.mkdir(exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        with path.open("wb") as f:  # sparse: no disk is spent on it
            f.truncate(MAX_SUITE_BYTES + 1)
    elif kind == "outside":
        # A well-formed suite, but a file of somewhere else: it must not be read at all.
        elsewhere = root.parent / "elsewhere"
        elsewhere.mkdir(exist_ok=True)
        (elsewhere / "outside.jsonl").write_text(suite_text("outside"))
        path.symlink_to(elsewhere / "outside.jsonl")
    return path


HOSTILE = {
    "fifo": "is not a regular file",
    "zero": "outside the deployment directory",
    "huge": f"is larger than {MAX_SUITE_BYTES} bytes",
    "outside": "outside the deployment directory",
}


def guarded(call: Callable[[], Any]) -> BaseException | Any:
    """``call()``'s result or exception, run in a thread joined with a guard against a hang."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # handed back to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_SECONDS)
    assert not thread.is_alive(), "the suite was waited on or read without end"
    return out[0]


def release(path: Path) -> None:
    """Let a reader blocked on the FIFO ``path`` go (only the code before the fix blocks)."""
    if path.is_fifo():
        with contextlib.suppress(OSError):  # nobody is waiting on it
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    (root / "evals").mkdir()
    (root / "evals" / "good.jsonl").write_text(suite_text("good"))
    return root


@pytest.mark.parametrize("kind", HOSTILE)
def test_govrag_eval_refuses_a_hostile_suite_promptly(root: Path, kind: str) -> None:
    path = make(root, kind)
    try:
        with govrag.open(root) as app:
            outcome = guarded(lambda: app.operators.evaluate_suite(kind))
    finally:
        release(path)
    assert isinstance(outcome, InputError), outcome
    message = str(outcome)
    assert str(path) in message and HOSTILE[kind] in message, message
    assert "\n" not in message
    assert "What is the wire limit" not in message  # nothing of the linked file is quoted


def test_config_check_names_every_hostile_suite(root: Path) -> None:
    paths = [make(root, kind) for kind in HOSTILE]
    try:
        with govrag.open(root) as app:
            check = guarded(app.operators.config_check)
    finally:
        for path in paths:
            release(path)
    assert not isinstance(check, BaseException), check
    assert not check.ok
    suites = {p.path: p.message for p in check.problems if p.path.startswith("evals/")}
    assert sorted(suites) == sorted(f"evals/{kind}.jsonl" for kind in HOSTILE), check.problems
    for kind, fragment in HOSTILE.items():
        assert fragment in suites[f"evals/{kind}.jsonl"]
        assert "\n" not in suites[f"evals/{kind}.jsonl"]


def test_the_cli_names_the_file_and_fails(root: Path) -> None:
    path = make(root, "fifo")
    env = {**os.environ, "COLUMNS": "400"}
    run = [sys.executable, "-m", "govrag.cli"]
    try:
        check = subprocess.run([*run, "config", "check", "-d", str(root)], cwd=root, env=env,
                               capture_output=True, text=True, timeout=GUARD_SECONDS)  # fmt: skip
        evaluated = subprocess.run([*run, "eval", "--suite", "fifo", "-d", str(root)], cwd=root,
                                   env=env, capture_output=True, text=True,
                                   timeout=GUARD_SECONDS)  # fmt: skip
    finally:
        release(path)
    assert check.returncode == 2, check.stderr
    lines = [line for line in check.stderr.splitlines() if "evals/fifo.jsonl" in line]
    assert len(lines) == 1 and "is not a regular file" in lines[0], check.stderr
    assert evaluated.returncode == 2, evaluated.stderr
    assert str(path) in evaluated.stderr and "Traceback" not in evaluated.stderr


def test_a_suite_linked_within_the_deployment_still_loads(root: Path) -> None:
    shared = root / "shared"
    shared.mkdir()
    (shared / "linked.jsonl").write_text(suite_text("linked"))
    (root / "evals" / "linked.jsonl").symlink_to(Path("..") / "shared" / "linked.jsonl")
    with govrag.open(root) as app:
        assert not [p for p in app.operators.config_check().problems if p.path.startswith("evals/")]
        try:
            app.operators.evaluate_suite("linked")
        except GovragError as exc:  # the run itself may fail; reading the suite may not
            assert "cannot read eval suite" not in str(exc)
