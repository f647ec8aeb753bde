"""What a question asks for, and whether a sentence of evidence has it.

A sentence relevant to a question may still not answer it: "EUR 50,000 per day" answers
*how much*, not *how many times*; a policy's current limit does not answer what the limit
was *before the revision*; a sentence that gives no cause does not answer *why*; a policy
that never names 2026 does not answer what is tracked *in 2026*. :func:`asked` reads what a
question needs (its kind, whether it asks about an earlier state, the years it names) and
:func:`fits` says whether a sentence of a text has it. Fixed rules, no model: the same
question always needs the same thing, and validation and the extractive responder apply one
rule (:mod:`govrag.validation.answerability`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: What a question asks for: a quantity, a date or time, a person (or role), a reason, or
#: anything.
QuestionKind = Literal["count", "quantity", "time", "person", "reason", "open"]

_REASON = re.compile(
    r"^\W*why\b|\bfor\s+what\s+reason\b|\bwhat\s+(?:is|was|were|are)\s+the\s+"
    r"(?:reason|reasons|purpose|rationale)\b",
    re.IGNORECASE,
)
_COUNT = re.compile(r"\bhow\s+many\b|\bnumber\s+of\b", re.IGNORECASE)
_QUANTITY = re.compile(
    r"\bhow\s+(much|long|often|far|large|big|high|low|fast|quickly|soon|old)\b"
    r"|\b(what|which)(?:'s|\s+is|\s+are|\s+was)?\s+(?:the\s+|our\s+|my\s+|a\s+)?"
    r"(?:[\w-]+\s+){0,4}?(limit|limits|amount|cap|threshold|fee|fees|rate|percentage|"
    r"number|maximum|minimum|ceiling|price|cost|value|level|period)\b",
    re.IGNORECASE,
)
_TIME = re.compile(
    r"^\W*when\b|\bby\s+when\b|\bwhat\s+(time|date|day)\b|\bcut-?off\s+time\b|\bdeadline\b",
    re.IGNORECASE,
)
_PERSON = re.compile(r"^\W*(who|whom|whose)\b|\bwho\s+(must|should|can|may|do|does|to)\b",
                     re.IGNORECASE)  # fmt: skip


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_NUMBER_WORDS = _words(
    "one two three four five six seven eight nine ten eleven twelve fifteen twenty "
    "thirty forty fifty hundred thousand million billion half quarter double twice once "
    "single dozen"
)
_TIME_WORDS = _words(
    "january february march april may june july august september october november "
    "december monday tuesday wednesday thursday friday saturday sunday noon midday "
    "midnight immediately promptly annually yearly monthly weekly daily quarterly before "
    "after within until during end beginning start today tomorrow"
)
_ROLE_WORDS = _words(
    "head heads officer officers manager managers director directors team teams "
    "committee board desk department compliance supervisor approver approvers owner "
    "owners counsel staff employee employees analyst analysts investigator investigators "
    "lead chief ceo cfo cro mlro coo cto ciso function unit office operations risk legal "
    "hr treasury auditor auditors controller reviewer reviewers signatory signatories "
    "client clients customer customers colleague colleagues line person contact"
)
_NUMBER = re.compile(r"(?<![\w.,])\d[\d,.]*")
#: A currency just before a number, read backwards from it ("EUR 5" is "5 RUE" reversed).
_AMOUNT = re.compile(r"\s*(RUE|PBG|FHC|DSU|[€$£])", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
#: What gives a reason: a cause, a purpose.
_CAUSE = re.compile(
    r"\b(because|due\s+to|owing\s+to|as\s+a\s+result|in\s+order\s+to|so\s+that|so\s+as\s+to|"
    # A reason given, not one asked for ("need a documented business reason").
    r"the\s+(?:reasons?|rationale|purpose)\s+(?:is|are|was|were|for|why)|for\s+(?:this|that|"
    r"these|those)\s+reasons?|caused|causes|led\s+to|to\s+(?:prevent|avoid|ensure|reduce|"
    r"stop|close|address|meet|comply|protect|limit|tackle|mitigate))\b",
    re.IGNORECASE,
)
#: A question about an earlier state: a superseded version, the rule before a change.
_EARLIER_ASKED = re.compile(
    r"\bbefore\s+the\s+(?:[\w-]+\s+){0,3}?(?:revision|change|update|amendment|version)\b"
    # "how old" asks an age, not about an old version.
    r"|(?<!how )\b(?:old|previous|earlier|prior|former|superseded)\s+(?:[\w-]+\s+){0,3}?"
    r"(?:version|policy|limit|limits|rule|rules|edition|revision)\b"
    # "used to be", not "is used to request" (a passive: what a thing serves for).
    r"|(?<!is )(?<!are )(?<!be )(?<!was )(?<!were )(?<!been )\bused\s+to\s+(?:be|have|cost|"
    r"allow|require|need|apply)\b",
    re.IGNORECASE,
)
#: What speaks of an earlier state.
_EARLIER = re.compile(
    r"\b(previous|previously|former|formerly|earlier|old|prior|was|were|used\s+to|had\s+been|"
    r"superseded)\b",
    re.IGNORECASE,
)
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")


def question_kind(question: str) -> QuestionKind:
    """What ``question`` asks for (the first that applies: reason, time, person, count,
    quantity)."""
    if _REASON.search(question):
        return "reason"
    if _TIME.search(question):
        return "time"
    if _PERSON.search(question):
        return "person"
    if _COUNT.search(question):
        return "count"
    if _QUANTITY.search(question):
        return "quantity"
    return "open"


def has_kind(kind: QuestionKind, sentence: str) -> bool:
    """Whether ``sentence`` holds what a question of ``kind`` needs."""
    if kind == "open":
        return True
    words = [w.lower() for w in _WORD.findall(sentence)]
    if kind == "count":
        # A count is a number of things, not a sum of money: "EUR 50,000" answers "how
        # much", never "how many times".
        return any(not _AMOUNT.match(sentence[: m.start()][::-1]) for m in _NUMBER.finditer(
            sentence)) or any(w in _NUMBER_WORDS for w in words)  # fmt: skip
    # A number standing alone: the digit of an identifier ("policy-wire-limits-v3", "T2")
    # is no quantity or time.
    if kind == "quantity":
        return bool(_NUMBER.search(sentence)) or any(w in _NUMBER_WORDS for w in words)
    if kind == "time":
        return bool(_NUMBER.search(sentence)) or any(w in _TIME_WORDS for w in words)
    if kind == "reason":
        return bool(_CAUSE.search(sentence))
    # person: an address, a role, or a proper name (a capitalised word not opening it).
    if _EMAIL.search(sentence) or any(w in _ROLE_WORDS for w in words):
        return True
    names = _WORD.findall(sentence)[1:]
    return any(w[0].isupper() and not w.isupper() for w in names)


@dataclass(frozen=True)
class Asked:
    """What a question needs from the sentence that answers it."""

    kind: QuestionKind
    #: It asks about an earlier state ("before the March revision", "the old version").
    earlier: bool = False
    #: The years it names: the text answering it names them too.
    years: frozenset[str] = frozenset()


#: A question that needs nothing in particular (a field of a structured answer).
ANYTHING = Asked("open")


def asked(question: str) -> Asked:
    """What ``question`` needs (see the module docstring)."""
    return Asked(question_kind(question), bool(_EARLIER_ASKED.search(question)),
                 frozenset(_YEAR.findall(question)))  # fmt: skip


def fits(need: Asked, sentence: str, text: str) -> bool:
    """Whether ``sentence`` of ``text`` has what ``need`` asks for."""
    if need.earlier and not _EARLIER.search(sentence):
        return False
    if need.years and not need.years <= frozenset(_YEAR.findall(text)):
        return False
    return has_kind(need.kind, sentence)
