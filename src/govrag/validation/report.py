"""What validation and the claim check return: immutable, JSON-ready value objects.

Reason codes of a :class:`ValidationReport` (``reason`` is ``None`` only when validation
passed):

``scope_violation``
    A chunk lies outside the pinned route's scope, outside the corpora the PDP allowed this
    caller, or in a pack of another corpus. Blocks synthesis; an ``incident`` is audited.
``no_evidence``
    No chunk at all: there is nothing to ground an answer on.
``thin_evidence``
    Fewer chunks than ``min_chunks``, or the best score below ``min_top_score``.
``off_topic``
    The evidence covers too small a share of the question's terms (``min_query_coverage``).
``unanswered``
    No sentence of the evidence answers the question: none relevant enough that has what
    the question asks for (a quantity, a date, a name; :mod:`~govrag.validation.answerability`).
``not_recorded``
    Writing the validation (or incident) audit event failed; an unrecorded pass is no pass.
``validation_error``
    Validation itself failed unexpectedly (logged); fail-closed.

When several apply, the first in :data:`REASON_PRIORITY` is reported. ``not_recorded`` and
``validation_error`` replace whatever the checks found, because the checks' outcome could
not be trusted or kept.
"""

from __future__ import annotations

from typing import Any, Literal

from govrag.audit.events import SufficiencyRecord
from govrag.types import Frozen

__all__ = [
    "NOT_RECORDED",
    "NO_EVIDENCE",
    "OFF_TOPIC",
    "REASON_PRIORITY",
    "SCOPE_VIOLATION",
    "THIN_EVIDENCE",
    "UNANSWERED",
    "VALIDATION_ERROR",
    "Attribution",
    "ClaimCheck",
    "ClaimReport",
    "ScopeViolation",
    "Sufficiency",
    "ValidationReport",
    "ViolationReason",
]

SCOPE_VIOLATION = "scope_violation"
NO_EVIDENCE = "no_evidence"
THIN_EVIDENCE = "thin_evidence"
OFF_TOPIC = "off_topic"
UNANSWERED = "unanswered"
NOT_RECORDED = "not_recorded"
VALIDATION_ERROR = "validation_error"

#: Order in which the check-derived reasons win when several apply (most serious first).
REASON_PRIORITY: tuple[str, ...] = (SCOPE_VIOLATION, NO_EVIDENCE, THIN_EVIDENCE, OFF_TOPIC,
                                    UNANSWERED)  # fmt: skip


#: Why a chunk violates scope: in a pack of another corpus, outside the pinned route's scope,
#: or in a corpus the PDP did not allow this caller in this request.
ViolationReason = Literal["outside_route_scope", "not_entitled", "corpus_mismatch"]


#: The evidence figures over every chunk of every pack, and the thresholds applied: exactly
#: what the ``validation`` audit event records, so the report holds the event's own model.
Sufficiency = SufficiencyRecord


class ScopeViolation(Frozen):
    """One chunk that must not be in front of the model for this request."""

    context_pack_id: str
    chunk_id: str
    corpus: str
    reason: ViolationReason


class Attribution(Frozen):
    """Where one chunk came from: the map citations are resolved against."""

    chunk_id: str
    doc_id: str
    corpus: str
    source_system: str
    context_pack_id: str


class ValidationReport(Frozen):
    """The outcome of validating a request's packs. Synthesis may run only if it passed."""

    validation_passed: bool
    sufficiency: Sufficiency
    #: Expected empty; anything here blocks synthesis.
    scope_violations: tuple[ScopeViolation, ...] = ()
    #: Always ``not validation_passed``: a failed validation means abstain or escalate.
    abstain: bool
    #: A reason code (module docstring); ``None`` when validation passed.
    reason: str | None = None
    #: One entry per chunk of every pack, in pack order then chunk order.
    attribution: tuple[Attribution, ...] = ()

    @property
    def scope_violation_count(self) -> int:
        """How many chunks violated scope (the ``scope_violations`` trace field)."""
        return len(self.scope_violations)

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict, with ``scope_violation_count`` added."""
        out = self.model_dump(mode="json")
        out["scope_violation_count"] = self.scope_violation_count
        return out


class ClaimCheck(Frozen):
    """One answer sentence, the chunk(s) it was checked against and the verdict."""

    #: The sentence as written (citation markers included).
    sentence: str
    supported: bool
    #: The chunk that supports it (or, unsupported, the one sharing the most terms; the first
    #: cited one for a cited sentence); ``None`` if no chunk shares a term or it asserts nothing.
    chunk_id: str | None
    #: Share (0..1) of the sentence's distinct analysed terms found in that chunk (in its cited
    #: chunks together for a cited sentence).
    overlap: float
    #: The handed chunks it cites.
    cited: tuple[str, ...] = ()
    #: Cited items naming no chunk handed to the call (forged citations).
    unknown: tuple[str, ...] = ()
    #: Facts it asserts that the chunk(s) do not hold (``amount EUR 5000000``, ``name acme``).
    missing: tuple[str, ...] = ()
    #: Why it is unsupported: ``forged_citation``, ``missing_facts``, ``negation``,
    #: ``low_overlap``, ``no_evidence``; ``None`` when supported.
    reason: str | None = None
    #: ``False`` for a sentence with no analysed term and no fact (markers alone).
    asserts: bool = True


class ClaimReport(Frozen):
    """The claim check of one answer (:func:`~govrag.validation.check_claims`)."""

    claims: tuple[ClaimCheck, ...] = ()
    #: The unsupported sentences' texts, in answer order.
    unsupported: tuple[str, ...] = ()
    all_supported: bool = True

    @property
    def grounded(self) -> bool:
        """Whether some sentence that asserts something is supported by a chunk it cites."""
        return any(c.supported and c.cited and c.asserts for c in self.claims)
