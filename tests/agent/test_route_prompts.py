"""A route's ``prompt_id`` selects its instructions from the deployment's ``prompts/``: they
open every system message of its requests, govrag's own rules always follow them, and every
``llm_call`` record (and the replay) names the prompt and its content's SHA-256, so editing
the file is a new version on the record. A prompt file that cannot serve is refused naming
it; a route naming a prompt with no file is served with govrag's instructions (a warning).
"""

from __future__ import annotations

from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from govrag.agent import prompts
from govrag.agent.extractive import ExtractiveResponder
from govrag.audit import replay
from govrag.deployment import Deployment
from govrag.routes import check_config

from conftest import Spy, wire_bank

PROMPT = "You are the wire desk. Answer in one sentence, figures exactly as written."
QUESTION = "What is the wire limit?"


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    root = wire_bank(tmp_path / "bank", routes={"search": {"prompt_id": "wire_v1"}, "plain": {}})
    (root / "prompts").mkdir()
    (root / "prompts" / "wire_v1.txt").write_text(PROMPT + "\n")
    return root


def asked(root: Path, route: str) -> tuple[Any, Spy, list[dict[str, Any]], dict[str, Any]]:
    with Deployment.load(root) as dep:
        spy = Spy(ExtractiveResponder())
        dep.__dict__["llm"] = spy
        answer = dep.orchestrator.ask(dep.principal("ana"), QUESTION, route_id=route)
        calls = [e.payload for e in dep.store.audit_events("bank", request_id=answer.request_id)
                 if e.kind == "llm_call"]  # fmt: skip
        shown = replay(dep.store, "bank", answer.request_id).as_dict()
    return answer, spy, calls, shown


def test_the_routes_prompt_opens_every_system_message_and_is_on_the_record(
    deployment: Path,
) -> None:
    answer, spy, calls, shown = asked(deployment, "search")
    digest = sha256(PROMPT.encode()).hexdigest()
    systems = [m["content"] for messages, _ in spy.calls for m in messages
               if m["role"] == "system"]  # fmt: skip
    assert systems and all(s.startswith(PROMPT + "\n\n") for s in systems)
    # govrag's rules follow, whole: the prompt adds instructions, it replaces none.
    assert all(prompts.TOOLS in s or prompts.SYNTHESIS in s for s in systems)
    assert "EUR 50,000" in answer.answer
    assert answer.trace["prompt"] == {"id": "wire_v1", "sha256": digest}
    assert {(c["prompt_id"], c["prompt_sha256"]) for c in calls} == {("wire_v1", digest)}
    assert {(c["prompt_id"], c["prompt_sha256"]) for c in shown["llm_calls"]} == {
        ("wire_v1", digest)
    }


def test_a_route_without_a_prompt_gets_govrags_and_an_edit_is_a_new_version(
    deployment: Path,
) -> None:
    answer, spy, calls, _ = asked(deployment, "plain")
    assert "prompt" not in answer.trace and all(c.get("prompt_id") is None for c in calls)
    assert spy.calls[0][0][0]["content"] == prompts.TOOLS
    (deployment / "prompts" / "wire_v1.txt").write_text("Answer tersely.")
    _, _, calls, _ = asked(deployment, "search")
    assert {c["prompt_sha256"] for c in calls} == {sha256(b"Answer tersely.").hexdigest()}


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("empty.txt", "  \n", "the prompt is empty"),
        ("long.txt", "x" * 20_000, "more than 16384"),
        ("bad name!.txt", "Hello.", "does not name a prompt id"),
        ("latin1.txt", b"caf\xe9", "UTF-8"),
    ],
)
def test_a_prompt_that_cannot_serve_is_refused_naming_its_file(
    deployment: Path, name: str, text: str | bytes, problem: str
) -> None:
    path = deployment / "prompts" / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    config, problems = check_config(deployment)
    errors = [p for p in problems if not p.warning]
    assert config is None and len(errors) == 1
    assert errors[0].path == f"prompts/{name}" and problem in errors[0].message


def test_a_route_naming_a_prompt_with_no_file_is_warned_and_served(deployment: Path) -> None:
    (deployment / "prompts" / "wire_v1.txt").unlink()
    config, problems = check_config(deployment)
    assert config is not None
    (warning,) = [p for p in problems if p.field == "prompt_id"]
    assert warning.warning and "no prompts/wire_v1.txt" in warning.message
    answer, spy, _, _ = asked(deployment, "search")
    assert "prompt" not in answer.trace and spy.calls[0][0][0]["content"] == prompts.TOOLS
