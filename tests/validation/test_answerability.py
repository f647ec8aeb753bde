"""Answerability: the question's kind, and whether evidence sentences answer it.

A shared word is no answer: these tests state the cases the rule exists for (a clean-desk
sentence that "leaves" is no answer to a parental-leave question; an amount of money is no
count of breaches) with the term relevance every deployment has, and the validator's verdict
on them.
"""

from __future__ import annotations

import pytest

from govrag.types import ContextPack, PackChunk, Principal
from govrag.validation import Validator
from govrag.validation.answerability import (
    TermRelevance,
    has_kind,
    judge,
    question_kind,
    topic_score,
)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How many days of parental leave do I get?", "count"),
        ("How many times did clients breach the limit?", "count"),
        ("How much may retail customers send by wire per day?", "quantity"),
        ("What is the daily wire limit for corporate clients?", "quantity"),
        ("How long may a temporary increase last?", "quantity"),
        ("When is the cut-off for SEPA transfers?", "time"),
        ("What is the cut-off time for same-day transfers?", "time"),
        ("Who approves large wires?", "person"),
        ("What does the clean desk policy require?", "open"),
    ],
)
def test_the_kind_of_a_question(question: str, kind: str) -> None:
    assert question_kind(question) == kind


def test_a_sentence_holds_what_the_kind_needs() -> None:
    assert has_kind("count", "Full-time employees receive 28 working days.")
    assert not has_kind("count", "The limit is EUR 50,000 per day.")  # money is no count
    assert has_kind("quantity", "The limit is EUR 50,000 per day.")
    assert not has_kind("quantity", "This policy applies to business clients.")
    assert has_kind("time", "Transfers submitted before 15:30 CET are executed today.")
    assert has_kind("person", "Large wires are approved by the head of payments operations.")
    assert has_kind("person", "Contact marta.ruiz@bank.example for exceptions.")
    assert not has_kind("person", "Transfers are executed on the next business day.")


CLEAN_DESK = (
    "Clean desk and screen lock\n\nStaff lock their screens whenever they leave their desk "
    "and clear confidential papers into the locked cabinets at the end of each day."
)
LEAVE = (
    "Parental leave policy\n\nBirth parents receive 16 weeks of paid parental leave. "
    "Tell your manager at least eight weeks before your leave starts."
)


def test_a_shared_word_is_no_answer() -> None:
    """The demo's old failure: "leave" and "day" are shared, the question is not answered."""
    relevance = TermRelevance()
    question = "How many days of parental leave do I get?"
    off = judge(question, [CLEAN_DESK], relevance)
    on = judge(question, [LEAVE], relevance)
    assert on.answer_score is not None and on.best is not None and "16 weeks" in on.best
    assert off.answer_score is None or off.answer_score < on.answer_score
    assert off.answer_score is None or off.answer_score < 0.21 <= on.answer_score


def pack(text: str) -> ContextPack:
    chunk = PackChunk(doc_id="d1", chunk_id="src:d1#0", corpus="c", source_system="src",
                      text=text, score=1.0, token_count=len(text.split()))  # fmt: skip
    return ContextPack(context_pack_id="pack-1", corpus="c", chunks=(chunk,),
                       policy_version="p", ranker_version="r", token_counter="words",
                       token_budget=1000, pack_token_count=chunk.token_count)  # fmt: skip


ANA = Principal(sub="ana", email="ana@x.example", tenant="t", doc_entitlements=("c:read",))


def validate(question: str, text: str) -> tuple[bool, str | None, float | None]:
    report = Validator().validate(
        ANA, question, [pack(text)], scope=["c"], allowed_corpora=["c"], request_id="r",
        session_id="s",
    )  # fmt: skip
    return report.validation_passed, report.reason, report.sufficiency.answer_score


def test_validation_abstains_when_the_evidence_does_not_answer() -> None:
    passed, reason, _ = validate("How many days of parental leave do I get?", CLEAN_DESK)
    assert not passed and reason == "unanswered"
    passed, reason, score = validate("How many weeks of paid parental leave do birth "
                                     "parents receive?", LEAVE)  # fmt: skip
    assert passed and reason is None and score is not None


def test_an_amount_does_not_answer_how_many_times() -> None:
    text = "EU corporate wire limit\n\nThe limit for corporate clients is EUR 50,000 per day."
    passed, reason, score = validate(
        "How many times did corporate clients exceed the wire limit?", text
    )
    assert not passed and reason == "unanswered" and score is None


def test_a_refused_corpus_is_named_only_for_its_topic() -> None:
    relevance = TermRelevance()
    about = "HR handbook: parental leave; annual leave and public holidays; travel and expenses"
    leave = topic_score("How many days of parental leave do I get?", "hr-policies", about,
                        relevance)  # fmt: skip
    crypto = topic_score("What is our policy on cryptocurrency custody?", "hr-policies",
                         about, relevance)  # fmt: skip
    assert leave > crypto  # the id "hr-policies" shares "policy" with both
