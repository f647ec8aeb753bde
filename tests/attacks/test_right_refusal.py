"""A refusal is a refusal: the policy gate's DENY is never papered over with a quote from
elsewhere, and an under-cleared caller never gets a memo made from nothing.

Written as a caller who keeps asking for what the gate refused: the officer without HR rights
asks an HR question on the route whose scope holds the HR handbook, the way anyone would; the
paralegal (internal clearance) asks for the confidential MSA review. Before answerability and
deny-aware outcomes, the first got a cited clean-desk sentence ("whenever they leave their
desk") and the second a memo with ``risk: "high"`` out of nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import govrag
from govrag.app import local_principal


@pytest.fixture(scope="module")
def demo(semantic_demo: Path) -> Path:
    return semantic_demo


@pytest.mark.parametrize("question", [
    "How many days of parental leave do I get?",
    "How many days of annual leave do full-time employees get?",
])  # fmt: skip
def test_a_refused_corpus_is_named_not_replaced_by_a_quote(demo: Path, question: str) -> None:
    with govrag.open(demo) as app:
        officer = local_principal(app.settings, "officer-123")
        answer = app.callers.ask(officer, question, route="investigation")
    assert answer.abstained and answer.reason == "denied"
    assert answer.citations == ()
    assert "hr-policies" in answer.answer
    assert "desk" not in answer.answer and "screen" not in answer.answer
    refused = {d.corpus for d in answer.decisions if d.verdict != "ALLOW"}
    assert "hr-policies" in refused


def test_an_unanswerable_question_is_an_abstention_not_a_deny(demo: Path) -> None:
    """The refused corpus is named only when the question is about it: crypto custody is in
    no corpus, and the HR handbook is not where it would be."""
    with govrag.open(demo) as app:
        officer = local_principal(app.settings, "officer-123")
        answer = app.callers.ask(
            officer, "What is our policy on cryptocurrency custody for clients?",
            route="investigation")  # fmt: skip
    assert answer.abstained and answer.reason != "denied" and answer.citations == ()


@pytest.mark.parametrize("sub", ["paralegal-512", "officer-123"])
def test_an_under_cleared_caller_gets_no_memo(demo: Path, sub: str) -> None:
    with govrag.open(demo) as app:
        caller = local_principal(app.settings, sub)
        answer = app.callers.ask(
            caller, "Review the limitation of liability clause of the Acme MSA",
            route="msa_risk_review")  # fmt: skip
    assert answer.abstained and answer.reason == "denied"
    assert answer.structured is None and answer.citations == () and answer.packs == ()
    assert "risk" not in answer.answer and "findings" not in answer.answer
    assert {d.verdict for d in answer.decisions} == {"DENY"}
