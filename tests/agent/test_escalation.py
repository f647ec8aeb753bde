"""A route may escalate a failed validation instead of abstaining (``on_validation_failure:
escalate``): the caller gets a fixed message (reason ``escalated``), an ``escalation`` audit
event names the failure and the route's queue, the replay shows it, and ``govrag
escalations`` lists it for the reviewers. A route that keeps the default abstains with the
reason, and nothing is escalated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import govrag
from govrag.app import local_principal

from conftest import wire_bank

SRC = str(Path(__file__).resolve().parents[2] / "src")
QUESTION = "What is the wire limit?"


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    # Pattern 0 (prefetch): a failed validation of the packs ends the request with its reason;
    # evidence must be three chunks at least, so the one wire document is "thin" on any route.
    prefetch = {
        "tool_manifest": "none",
        "retrieval": {"mode": "deterministic_prefetch", "scope": ["policy"]},
    }
    escalate = {"on_validation_failure": "escalate", "escalation_queue": "policy-review"}
    return wire_bank(tmp_path / "bank", routes={"search": prefetch | escalate, "plain": prefetch},
                     toml="[validation]\nmin_chunks = 3\n")  # fmt: skip


def test_a_failed_validation_is_escalated_on_a_route_that_says_so(deployment: Path) -> None:
    with govrag.open(deployment) as app:
        ana = local_principal(app.settings, "ana")
        escalated = app.callers.ask(ana, QUESTION, route="search")
        kept = app.callers.ask(ana, QUESTION, route="plain")
        replayed = app.operators.replay(escalated.request_id).as_dict()
        listed = app.operators.escalations()
    assert (escalated.abstained, escalated.reason) == (True, "escalated")
    assert "passed on" in escalated.answer and "50,000" not in escalated.answer
    assert escalated.trace["escalation"] == {"queue": "policy-review", "reason": "thin_evidence"}
    assert (kept.reason, "escalation" in kept.trace) == ("thin_evidence", False)
    assert replayed["delivered"]["escalation"] == {"queue": "policy-review",
                                                   "reason": "thin_evidence"}  # fmt: skip
    assert [(e.request_id, e.route_id, e.sub, e.reason, e.queue, e.response_id)
            for e in listed] == [(escalated.request_id, "search", "ana", "thin_evidence",
                                  "policy-review", escalated.response_id)]  # fmt: skip


def test_govrag_escalations_lists_them_by_queue(deployment: Path) -> None:
    with govrag.open(deployment) as app:
        asked = app.callers.ask(local_principal(app.settings, "ana"), QUESTION, route="search")
    env = {**os.environ, "PYTHONPATH": SRC}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "govrag", "escalations", *args, "-d",
                               str(deployment)], capture_output=True, text=True, env=env,
                              timeout=120)  # fmt: skip

    shown = cli("--json")
    assert shown.returncode == 0, shown.stderr
    (one,) = json.loads(shown.stdout)
    expected = (asked.request_id, "policy-review", "thin_evidence")
    assert (one["request_id"], one["queue"], one["reason"]) == expected
    assert json.loads(cli("--json", "--queue", "other").stdout) == []
    table = cli()
    assert asked.request_id in table.stdout and "1 escalation(s)" in table.stderr
