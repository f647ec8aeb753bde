"""Validation: the app-initiated gate before synthesis, and the claim check at delivery.

A pack is not evidence until validated: :class:`Validator` checks scope (expect zero
violations), sufficiency and attribution, and says whether to abstain; :func:`check_claims`
checks every sentence of a model's answer against the chunks handed to the call that wrote it
(forged citations, figures, dates, names and negations included), and
:func:`remove_unsupported` cuts the sentences it does not support.
"""

from __future__ import annotations

from govrag.validation.claims import check_claims, remove_unsupported, split_sentences
from govrag.validation.report import (
    Attribution,
    ClaimCheck,
    ClaimReport,
    ScopeViolation,
    Sufficiency,
    ValidationReport,
    ViolationReason,
)
from govrag.validation.service import AuditSink, Validator

__all__ = [
    "Attribution", "AuditSink", "ClaimCheck", "ClaimReport", "ScopeViolation", "Sufficiency",
    "ValidationReport", "Validator", "ViolationReason", "check_claims", "remove_unsupported",
    "split_sentences",
]  # fmt: skip
