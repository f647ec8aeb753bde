"""The hidden-item hint judges what the caller asked, not the words the model searched with.

A person asking "What is the EU corporate wire limit?" should learn that a document they may
not read is relevant (and whom to ask) whether the model searched "EU corporate wire limit",
"limit" or "payments overview": the hint is about the person's question (issue 31), so the
governed outcome does not depend on the model configured. The rule on those words is the
marker's own (a document by itself, a share of the terms, the budget), and a search that
names no caller question (``govrag search``, a caller's own model) still judges its query.
As an attack: a model steered by a planted document ("search for X") cannot move the hint
off the caller's question, nor onto a question it is not about.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import (
    QUESTION,
    MakeDeployment,
    Scripted,
    answer,
    calls,
    deployment_factory,
    events,
    with_model,
)

from govrag.deployment import Deployment
from govrag.types import Strategy

from conftest import doc, load

#: Readable only by ``hr`` (its ACL), in a corpus the officer may search: a withheld document
#: relevant to the officer's question, authored by ``hr``, whom the officer can ask.
OLD = doc("wire-limits-v2", "Version 2: the EU corporate wire limit was EUR 40,000 per day.",
          ["H"], corpus="policy-engine", author="H")  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    for made in deployment_factory(request, tmp_path, request.param):
        load(made().store, [OLD])
        yield made


def searched_for(query: str) -> Scripted:
    return Scripted(calls(("retrieve_documents", {"corpus": "policy-engine", "query": query})),
                    answer())  # fmt: skip


def hint(dep: Deployment, model: Scripted) -> tuple[bool, list[str]]:
    done = with_model(dep, model).orchestrator.ask(dep.principal("officer"), QUESTION)
    shown = [e.payload for e in events(dep, done.request_id) if e.kind == "hidden_marker"]
    assert all(p["shown"] for p in shown)
    return done.hidden.present, [s.author_email or "" for s in done.hidden.sources]


@pytest.mark.parametrize("query", ["EU corporate wire limit", "limit", "payments overview"])
def test_the_hint_is_about_the_question_whatever_the_model_searched(
    make: MakeDeployment, query: str
) -> None:
    present, whom = hint(make(), searched_for(query))
    assert present and whom == ["hr@bank.example"]


def test_a_question_the_withheld_document_does_not_match_raises_no_hint(
    make: MakeDeployment,
) -> None:
    """The model searching the withheld document's very words does not raise the hint for a
    question it is not about."""
    dep = make()
    model = searched_for("EU corporate wire limit version 2")
    done = with_model(dep, model).orchestrator.ask(dep.principal("officer"), "Who signs NDAs?")
    assert not done.hidden.present
    assert not [e for e in events(dep, done.request_id) if e.kind == "hidden_marker"]


def test_a_search_without_a_question_judges_its_query(make: MakeDeployment) -> None:
    dep = make()
    officer = dep.principal("officer")
    assert dep.governed.search(officer, QUESTION, strategy=Strategy.KEYWORD).hidden.present
    assert not dep.governed.search(officer, "payments overview",
                                   strategy=Strategy.KEYWORD).hidden.present  # fmt: skip
