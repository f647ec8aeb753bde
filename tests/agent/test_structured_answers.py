"""A route's ``output_schema_id``: its answer is a JSON object of that shape, or nothing.

The model is the real OpenAI adapter over a fake server (the transport is the only fake), so
every call, the repair included, is recorded as it would be against a hosted model. Checked:
the first reply delivered when it fits; one repair, with the model's own reply and the
problems, then ``schema_invalid``; the claim check over the free-text fields (a sentence it
does not support is cut from its field; a shape the cut breaks is not delivered; closed
choices are not read); the outcome on the ``response`` record, in the trace and in replay;
escalation; and the offline extractive responder filling the demo's MSA memo.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import govrag
from govrag import demo
from govrag.agent.answer import Answer
from govrag.app.evaluate import observe
from govrag.audit import replay
from govrag.cli.render import print_replay
from govrag.deployment import Deployment
from govrag.eval.governance import has_fact
from govrag.eval.suite import EvalCase

from conftest import WIRE_TEXT, completion, scripted, wire_bank

QUESTION = "What is the wire limit?"
CHUNK = "sp:wire#0"
MEMO = {
    "type": "object",
    "required": ["limit", "confidence"],
    "properties": {
        "limit": {"type": "string", "minLength": 1},
        "confidence": {"type": "string", "enum": ["high", "low"]},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}
GOOD = {"limit": f"{WIRE_TEXT} [{CHUNK}]", "confidence": "high"}


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    root = tmp_path / "bank"
    (root / "schemas").mkdir(parents=True)
    (root / "schemas" / "wire_memo.json").write_text(json.dumps(MEMO))
    (root / "prompts").mkdir()
    (root / "prompts" / "wire_v1.txt").write_text("You write wire-limit memos.")
    prefetch = {"mode": "deterministic_prefetch", "scope": ["policy"]}
    return wire_bank(root, routes={
        "memo": {"retrieval": prefetch, "output_schema_id": "wire_memo"},
        "memo_escalating": {"retrieval": prefetch, "output_schema_id": "wire_memo",
                            "on_validation_failure": "escalate", "prompt_id": "wire_v1"},
    })  # fmt: skip


def ask(root: Path, replies: list[dict[str, Any]], route: str = "memo"
        ) -> tuple[Answer, list[dict[str, Any]], Deployment]:  # fmt: skip
    client, sent = scripted(replies)
    dep = Deployment.load(root)
    dep.__dict__["llm"] = client
    return dep.orchestrator.ask(dep.principal("ana"), QUESTION, route_id=route), sent, dep


def response(dep: Deployment, answer: Answer) -> dict[str, Any]:
    (event,) = [e.payload for e in dep.store.audit_events("bank", request_id=answer.request_id)
                if e.kind == "response"]  # fmt: skip
    return event


def test_a_reply_that_fits_is_delivered_as_its_object(deployment: Path) -> None:
    answer, sent, dep = ask(deployment, [completion(text=json.dumps(GOOD))])
    with dep:
        record = response(dep, answer)
        replayed = replay(dep.store, "bank", answer.request_id).as_dict()
    assert not answer.abstained and answer.structured == GOOD
    assert json.loads(answer.answer) == GOOD
    assert [c.chunk_id for c in answer.citations] == [CHUNK]
    # The model was shown the schema, after govrag's rules.
    system = sent[0]["messages"][0]["content"]
    assert "Output schema: " + json.dumps(MEMO, separators=(",", ":")) in system
    outcome = record["output_schema"]
    assert outcome["schema_id"] == "wire_memo" and outcome["outcome"] == "valid"
    assert len(outcome["sha256"]) == 64 and outcome["problems"] == []
    assert replayed["delivered"]["output_schema"] == outcome
    assert answer.trace["output_schema"] == outcome
    assert answer.as_dict()["structured"] == GOOD


def test_a_fenced_reply_is_read(deployment: Path) -> None:
    answer, _, dep = ask(deployment, [completion(text=f"```json\n{json.dumps(GOOD)}\n```")])
    dep.close()
    assert answer.structured == GOOD and answer.trace["output_schema"]["outcome"] == "valid"


def test_a_reply_that_misses_is_repaired_once(deployment: Path) -> None:
    first = {"limit": f"{WIRE_TEXT} [{CHUNK}]", "confidence": "certain"}
    answer, sent, dep = ask(deployment, [completion(text=json.dumps(first)),
                                         completion(text=json.dumps(GOOD))])  # fmt: skip
    with dep:
        stages = [e.payload["stage"] for e in dep.store.audit_events(
            "bank", request_id=answer.request_id) if e.kind == "llm_call"]  # fmt: skip
        replayed = replay(dep.store, "bank", answer.request_id).as_dict()
    assert len(sent) == 2 and stages == ["synthesis", "repair"]
    repair = sent[1]["messages"]
    # The same conversation, the model's own reply, then the app's note naming the problem.
    assert repair[: len(sent[0]["messages"])] == sent[0]["messages"]
    assert repair[-2] == {"role": "assistant", "content": json.dumps(first)}
    assert repair[-1]["role"] == "user" and "at confidence" in repair[-1]["content"]
    assert not answer.abstained and answer.structured == GOOD
    assert replayed["delivered"]["output_schema"]["outcome"] == "repaired"
    assert [c["stage"] for c in replayed["llm_calls"]] == ["synthesis", "repair"]


def test_a_reply_that_misses_twice_abstains_and_no_record_holds_its_words(
    deployment: Path,
) -> None:
    # An invented value in a closed choice, an extra key with an invented figure: neither
    # the caller nor the audit log gets the model's words, only where and which rule.
    bad = {"limit": f"{WIRE_TEXT} [{CHUNK}]", "confidence": "CANARY-7f3e",
           "secret": "EUR 9,999,999 CANARY-7f3e"}  # fmt: skip
    answer, sent, dep = ask(deployment, [completion(text=json.dumps(bad))])
    with dep:
        record = response(dep, answer)
        log = json.dumps([e.payload for e in dep.store.audit_events("bank")])
    assert len(sent) == 2  # one repair, no more
    assert answer.abstained and answer.reason == "schema_invalid" and answer.structured is None
    assert "shape this service promises" in answer.answer
    outcome = record["output_schema"]
    assert outcome["outcome"] == "invalid" and outcome["problems"]
    assert any("confidence" in p and "enum" in p for p in outcome["problems"])
    shown = json.dumps(answer.as_dict())
    for where in (shown, log):
        assert "CANARY-7f3e" not in where and "9,999,999" not in where


def test_a_reply_that_is_not_an_object_abstains(deployment: Path) -> None:
    answer, _, dep = ask(deployment, [completion(text=f"The limit is EUR 50,000 [{CHUNK}].")])
    dep.close()
    assert answer.reason == "schema_invalid"
    assert answer.trace["output_schema"]["problems"] == ["the reply is not strict JSON"]


def test_an_unsupported_sentence_is_cut_from_its_field(deployment: Path) -> None:
    reply = dict(GOOD, notes=[f"{WIRE_TEXT} [{CHUNK}]",
                              f"The wire limit is EUR 90,000 per day. [{CHUNK}]"])  # fmt: skip
    answer, _, dep = ask(deployment, [completion(text=json.dumps(reply))])
    dep.close()
    assert not answer.abstained and answer.flagged
    assert answer.structured == dict(GOOD, notes=[f"{WIRE_TEXT} [{CHUNK}]", ""])
    assert "90,000" not in json.dumps(answer.as_dict())


def test_a_cut_that_breaks_the_shape_is_not_delivered(deployment: Path) -> None:
    # The required free-text field holds only a forged citation's figure: cut, it is empty,
    # which the schema's minLength refuses.
    reply = {"limit": "The wire limit is EUR 90,000 per day. [sp:elsewhere#3]",
             "confidence": "high", "notes": [f"{WIRE_TEXT} [{CHUNK}]"]}  # fmt: skip
    answer, _, dep = ask(deployment, [completion(text=json.dumps(reply))])
    dep.close()
    assert answer.abstained and answer.reason == "unsupported" and answer.structured is None
    assert "90,000" not in json.dumps(answer.as_dict())


def test_a_structured_answer_needs_a_supported_citation(deployment: Path) -> None:
    answer, _, dep = ask(deployment, [completion(text=json.dumps(
        {"limit": "The wire limit is EUR 50,000 per day.", "confidence": "low"}))])  # fmt: skip
    dep.close()
    assert answer.abstained and answer.reason == "uncited"


def test_a_route_may_escalate_a_shape_it_could_not_get(deployment: Path) -> None:
    answer, _, dep = ask(deployment, [completion(text="[]")], route="memo_escalating")
    with dep:
        escalations = [e.payload for e in dep.store.audit_events("bank") if e.kind == "escalation"]
    assert answer.reason == "escalated"
    assert [e["reason"] for e in escalations] == ["schema_invalid"]


def shown_replay(dep: Deployment, tenant: str, request_id: str) -> str:
    """``govrag replay`` as an examiner reads it (the text, not the JSON)."""
    out = Console(file=io.StringIO(), width=200)
    print_replay(replay(dep.store, tenant, request_id), out)
    return out.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def test_the_examiners_replay_shows_prompt_schema_outcome_and_escalation(
    deployment: Path,
) -> None:
    answer, _, dep = ask(deployment, [completion(text="[]")], route="memo_escalating")
    with dep:
        shown = shown_replay(dep, "bank", answer.request_id)
    assert answer.reason == "escalated"
    assert "synthesis openai:gpt-4o-mini prompt wire_v1 (" in shown
    assert "repair openai:gpt-4o-mini prompt wire_v1 (" in shown
    assert "Output schema: wire_memo (" in shown and "): invalid (" in shown
    assert "Escalated: to queue review (schema_invalid)" in shown
    assert f"response {answer.response_id}" in shown


def test_the_eval_plane_reads_a_structured_answers_facts_in_its_values(deployment: Path) -> None:
    # In the JSON text a quote is escaped ("\\""), so a fact holding one would be missed.
    quoted = {"limit": f'The "wire limit" is EUR 50,000 per day. [{CHUNK}]', "confidence": "high"}
    case = EvalCase(id="q", sub="ana", route="memo", question=QUESTION,
                    facts=('"wire limit" is EUR 50,000',))  # fmt: skip
    client, _ = scripted([completion(text=json.dumps(quoted))])
    with Deployment.load(deployment) as dep:
        dep.__dict__["llm"] = client
        seen = observe(dep, case, dep.principal("ana"))
    assert not seen.abstained and has_fact(seen.answer, case.facts[0])


def test_no_step_left_means_no_repair(deployment: Path) -> None:
    config = deployment / "govrag.toml"
    config.write_text(config.read_text() + "\n[llm]\nmax_steps = 1\n")
    answer, sent, dep = ask(deployment, [completion(text="{}")])
    dep.close()
    assert len(sent) == 1 and answer.reason == "schema_invalid"
    assert "no model step was left for a repair" in answer.trace["output_schema"]["problems"]


def test_the_extractive_responder_fills_the_demo_memo(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    demo.create(root, embedder="hash")
    with govrag.open(root) as app, demo.bundled_corpus() as corpus:
        assert app.operators.ingest(corpus, tenant=demo.TENANT).ok
    with Deployment.load(root) as dep:
        answer = dep.orchestrator.ask(
            dep.principal("counsel-044"),
            "Review the limitation of liability and indemnity clauses of the Acme MSA",
            route_id="msa_risk_review",
        )
        calls = [e.payload for e in dep.store.audit_events(demo.TENANT,
                 request_id=answer.request_id) if e.kind == "llm_call"]  # fmt: skip
        shown = shown_replay(dep, demo.TENANT, answer.request_id)
    assert not answer.abstained, answer.reason
    memo = answer.structured
    assert memo is not None and set(memo) == {"summary", "findings", "recommendation"}
    # A closed choice is filled only from the quoted evidence, else left out (optional).
    for finding in memo["findings"]:
        risk = finding.get("risk")
        assert risk is None or risk in " ".join(finding.values()).lower()
    assert answer.trace["output_schema"]["outcome"] == "valid"
    assert {c.corpus for c in answer.citations} <= {"clause-index", "legal-playbook"}
    assert any(c.doc_id.startswith("clause-acme-msa") for c in answer.citations)
    # The route's prompt is on record for the call it opened, not for the query stages
    # (govrag's own instructions only).
    assert {c["stage"]: c.get("prompt_id") for c in calls} == {
        "clause_search": None,
        "policy_search": None,
        "synthesis": "msa_risk_review_v1",
    }
    assert "synthesis extractive profile reasoning-standard prompt msa_risk_review_v1 (" in shown
    assert "Output schema: msa_memo_v1 (" in shown and "): valid" in shown
