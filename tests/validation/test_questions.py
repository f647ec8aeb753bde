"""What a question asks for beyond its topic: a cause, an earlier state, a named year.

Each rule is stated by the case it exists for, and by the ordinary question it must leave
alone (a rule that refuses ordinary questions is worse than none).
"""

from __future__ import annotations

import pytest

from govrag.validation.questions import ANYTHING, Asked, asked, fits

V3 = (
    "This policy sets the daily limits for corporate clients. It replaces version 2 with "
    "effect from 1 March 2026. EU corporate wire limit: EUR 50,000 per day."
)
AML = "Alerts are reviewed daily. Scenarios are tuned every year by the MLRO."


def test_a_why_question_needs_a_cause() -> None:
    need = asked("Why do instant payments need a payee name check?")
    assert need.kind == "reason"
    assert not fits(need, "Our app shows the result of a payee name check.", "")
    assert fits(need, "The check runs so that fraudsters cannot redirect payments.", "")
    assert fits(need, "The reason is the number of redirected payments in 2025.", "")
    # A reason asked for is none given.
    assert not fits(need, "Increases need a documented business reason.", "")
    assert asked("What is the reason for the hard block?").kind == "reason"
    assert asked("What does the policy say?").kind == "open"


@pytest.mark.parametrize(
    "question",
    [
        "What was the EU corporate wire limit before the March 2026 revision?",
        "Under the old version of the wire policy, what was the limit?",
        "What did the previous limits policy allow?",
        "What used to be the cap?",
    ],
)
def test_a_question_about_an_earlier_state_needs_a_sentence_about_one(question: str) -> None:
    need = asked(question)
    assert need.earlier
    # The current version states today's limit and that it replaced version 2: no earlier
    # limit, so no answer.
    assert not any(fits(need, s, V3) for s in V3.split(". "))
    history = "Revised in March 2026. Version 2 set the limit at EUR 40,000 per day."
    assert not fits(need, "Version 2 set the limit at EUR 40,000 per day.", history)
    history = "Revised in March 2026. The previous limit was EUR 40,000 per day."
    assert fits(need, "The previous limit was EUR 40,000 per day.", history)


@pytest.mark.parametrize(
    "question",
    [
        "What is the wire limit now?",
        "How many days before the payment must I call back?",
        "What happens before the transfer is released?",
        "Which form is used to request a limit increase?",
        "What are the limits used to protect against?",
        "How old must a client be under the youth account policy?",
        "How old is the wire limit policy?",
    ],
)
def test_an_ordinary_question_asks_no_earlier_state(question: str) -> None:
    assert not asked(question).earlier


def test_a_named_year_must_be_named_by_the_text() -> None:
    need = asked("Which typologies is the team tracking in 2026?")
    assert need.years == frozenset({"2026"})
    assert not fits(need, "Scenarios are tuned every year by the MLRO.", AML)
    assert fits(need, "Money mules are the first typology.", "Typologies 2026. " + AML)
    # A year inside a longer number is not a year.
    assert asked("What is the fee on EUR 120,000?").years == frozenset()


def test_anything_fits_every_sentence() -> None:
    assert Asked("open") == ANYTHING
    assert fits(ANYTHING, "Whatever.", "")
