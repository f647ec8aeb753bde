"""Each panel of ``govrag demo`` shows what its title says, on the demo as ``make demo`` builds
it (MiniLM): the titles are the demo's claims to a first-time user, so each is checked against
the answer its question gets through the application API, the way the demo asks it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import govrag
from govrag.agent.answer import Answer
from govrag.app import local_principal
from govrag.demo import DemoQuestion, questions


def cited(answer: Answer) -> set[str]:
    return {c.doc_id for c in answer.citations}


def worked_example(a: Answer) -> None:
    assert a.pattern == "1" and not a.abstained and "EUR 50,000 per day" in a.answer
    assert "policy-wire-limits-v3" in cited(a)
    assert ("policy-engine", "ALLOW") in {(d.corpus, d.verdict) for d in a.decisions}


def hr_deny(a: Answer) -> None:
    assert a.abstained and a.reason == "denied" and a.citations == ()
    assert ("hr-policies", "DENY") in {(d.corpus, d.verdict) for d in a.decisions}
    assert "hr-policies" in a.answer and "desk" not in a.answer


def prefetch(a: Answer) -> None:
    assert a.pattern == "0" and not a.abstained and "15:30" in a.answer
    assert cited(a) & {"faq-payment-cutoffs", "policy-payment-cutoffs"}
    assert {d.corpus for d in a.decisions} == {"policy-engine", "product-faq"}


def msa_review(a: Answer) -> None:
    assert a.pattern == "2" and not a.abstained and a.structured is not None
    assert {d.corpus for d in a.decisions if d.verdict == "ALLOW"} == {
        "clause-index", "legal-playbook"}  # fmt: skip
    assert cited(a) and all(d.startswith(("clause-acme-msa", "playbook-")) for d in cited(a))
    # A review over both: the playbook stage's evidence reaches the memo beside the clauses
    # (judged with them, issue 31), and the memo draws on each.
    assert {p.corpus for p in a.packs if p.chunks} == {"clause-index", "legal-playbook"}
    assert any(d.startswith("clause-acme-msa") for d in cited(a))
    assert any(d.startswith("playbook-") for d in cited(a))


def hinted(a: Answer) -> None:
    # Nothing the analyst may read answers; she learns where to ask, never the bulletin.
    assert a.abstained and a.citations == ()
    assert a.hint == "relevant material exists in sharepoint; contact henrik.lund@bank-eu.example"
    assert "mule" not in a.answer.lower() and "crypto" not in a.answer.lower()


def readable(a: Answer) -> None:
    assert not a.abstained and "fincrime-typologies-2026" in cited(a)
    assert "crypto exchanges" in a.answer


def above_clearance(a: Answer) -> None:
    # The bulletin is confidential; the officer's clearance is internal: not even a hint.
    assert a.abstained and a.citations == () and a.hint is None


def no_retrieval(a: Answer) -> None:
    assert a.pattern == "none" and a.decisions == () and a.packs == ()
    assert "Kestrel Freight" in a.answer


#: One check per panel, in the demo's order (``govrag/data/bank-eu/questions.json``).
CHECKS: list[tuple[str, Callable[[Answer], None]]] = [
    ("Worked example", worked_example),
    ("the policy gate says DENY", hr_deny),
    ("Pattern 0 prefetch", prefetch),
    ("MSA risk review", msa_review),
    ("Hidden-item hint", hinted),
    ("the bulletin is readable", readable),
    ("no hint (the bulletin is confidential)", above_clearance),
    ("No knowledge path", no_retrieval),
]


def test_every_panel_has_a_check() -> None:
    titles = [q.title for q in questions()]
    assert len(titles) == len(CHECKS)
    for title, (fragment, _) in zip(titles, CHECKS, strict=True):
        assert fragment in title, (title, fragment)


@pytest.mark.parametrize(("index", "check"), [(i, c) for i, (_, c) in enumerate(CHECKS)],
                         ids=[f for f, _ in CHECKS])  # fmt: skip
def test_the_panel_shows_what_its_title_says(
    semantic_demo: Path, index: int, check: Callable[[Answer], None]
) -> None:
    q: DemoQuestion = questions()[index]
    with govrag.open(semantic_demo) as app:
        caller = local_principal(app.settings, q.sub)
        check(app.callers.ask(caller, q.question, route=q.route_id, text=q.text))
