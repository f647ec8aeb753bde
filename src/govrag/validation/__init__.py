"""Validation: the app-initiated gate before synthesis, and the post-synthesis claim check.

A pack is not evidence until validated: :class:`Validator` checks scope (expect zero
violations), sufficiency and attribution, and says whether to abstain; :func:`check_claims`
optionally checks a synthesised answer against the chunks it was given.
"""

from __future__ import annotations

from govrag.validation.claims import check_claims, split_sentences
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
    "ValidationReport", "Validator", "ViolationReason", "check_claims", "split_sentences",
]  # fmt: skip
