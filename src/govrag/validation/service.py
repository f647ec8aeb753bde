"""Pack validation: the app-initiated gate between retrieval and synthesis (seed 003, step ⑥).

Retrieval is not permission, and a pack is not evidence until validated. :class:`Validator`
checks a request's context packs against the question and the request's governance facts:

* **scope**: every chunk must belong to its pack's corpus, to the pinned route's scope, and to
  a corpus the PDP allowed this caller in this request. Any miss is a scope violation
  (expected: zero); it blocks synthesis and is audited as an ``incident``. The request's
  session-memory pack (the caller's own write-back entries) is in no corpus: its chunks must
  be session memory and nothing else, and session memory anywhere else is a violation.
* **sufficiency**: enough chunks, a good enough best score, enough of the question's terms
  present in the evidence, and a sentence of it that answers the question
  (:mod:`~govrag.validation.answerability`: relevant enough, and holding the quantity, date
  or name the question asks for); otherwise abstain rather than answer from thin air.
* **attribution**: every chunk mapped to its document, corpus, source and pack.

The result is always a :class:`~govrag.validation.report.ValidationReport`, never an
exception: any fault (including a failed audit write) is a failed validation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence

from govrag.audit.events import (
    AuditSink,
    IncidentEvent,
    ValidationEvent,
    ViolationRecord,
    write,
)
from govrag.audit.trail import recorded
from govrag.settings import ValidationSettings
from govrag.store.analyzer import default_analyzer
from govrag.types import ChunkOrigin, ContextPack, PackChunk, Principal
from govrag.validation.answerability import Relevance, TermRelevance, judge, without_names
from govrag.validation.report import (
    NO_EVIDENCE,
    NOT_RECORDED,
    OFF_TOPIC,
    SCOPE_VIOLATION,
    THIN_EVIDENCE,
    UNANSWERED,
    VALIDATION_ERROR,
    Attribution,
    ScopeViolation,
    Sufficiency,
    ValidationReport,
    ViolationReason,
)

__all__ = ["AuditSink", "Validator"]

log = logging.getLogger("govrag.validation")
_TERMS = TermRelevance()


class Validator:
    """Validates a request's context packs before the model may see them.

    Args:
        settings: the thresholds; defaults to :class:`~govrag.settings.ValidationSettings`.
        audit: where to record ``validation`` (and ``incident``) events; ``None`` records
            nothing (tests, offline evaluation).
        relevance: how evidence sentences are scored against the question
            (:func:`~govrag.validation.answerability.relevance_for` the deployment's
            embedder); default: term coverage.
        answering: how answerability is judged before synthesis, when not by ``relevance``
            (a configured cross-encoder, :mod:`govrag.validation.cross`).
    """

    def __init__(
        self,
        settings: ValidationSettings | None = None,
        *,
        audit: AuditSink | None = None,
        relevance: Relevance | None = None,
        answering: Relevance | None = None,
    ) -> None:
        self.settings = settings if settings is not None else ValidationSettings()
        self.audit = audit
        self.relevance: Relevance = relevance if relevance is not None else TermRelevance()
        self.answering: Relevance = answering if answering is not None else self.relevance

    def validate(
        self,
        principal: Principal,
        question: str,
        packs: Sequence[ContextPack],
        *,
        scope: Collection[str],
        allowed_corpora: Collection[str],
        request_id: str,
        session_id: str,
        before_synthesis: bool = True,
        prior: Sequence[str] = (),
    ) -> ValidationReport:
        """Check every context pack of a request against the user's original question.

        ``scope`` is the pinned route's retrieval scope (corpus ids); ``allowed_corpora`` the
        corpora the PDP ALLOWed this caller in this request. Audit events go to the
        principal's tenant under ``request_id`` and ``session_id``. Never raises.

        ``before_synthesis``: govrag is about to answer from these packs, so answerability is
        judged by the deployment's relevance (an embedder pass over every sentence). A search
        or a retrieve that hands chunks to the caller judges it by terms (no model runs on a
        search: a keyword lookup stays milliseconds).

        ``prior``: the texts of chunks validated earlier in the request (a workflow's earlier
        stages). Answerability reads them beside the packs: a stage the workflow names
        contributes to an answer the request's evidence gives together (the bank's playbook
        position does not name the supplier a review asks about), and so does the share of
        the question's words (``min_query_coverage``), as long as the packs themselves hold
        one of them: an off-topic stage is still refused. Every other check is of the packs
        alone, and at least one chunk of theirs is needed.
        """
        relevance = self.answering if before_synthesis else _TERMS
        try:
            report = self._check(question, packs, _corpora(scope), _corpora(allowed_corpora),
                                 relevance, prior)  # fmt: skip
        except Exception:
            # Fail closed: an unvalidated pack must never reach synthesis, and the caller must
            # not mistake an exception for "no verdict".
            log.exception("validation failed unexpectedly (request %s); abstaining", request_id)
            return self._failed(VALIDATION_ERROR)
        if self.audit is None:
            return report
        try:
            self._record(self.audit, principal, question, packs, report, request_id, session_id)
        except Exception:
            # An unrecorded pass is no pass: the examiner could not replay it.
            log.exception("validation audit write failed (request %s); abstaining", request_id)
            return report.model_copy(
                update={"validation_passed": False, "abstain": True, "reason": NOT_RECORDED}
            )
        return report

    def _check(
        self,
        question: str,
        packs: Sequence[ContextPack],
        scope: frozenset[str],
        allowed: frozenset[str],
        relevance: Relevance,
        prior: Sequence[str],
    ) -> ValidationReport:
        violations: list[ScopeViolation] = []
        attribution: list[Attribution] = []
        for pack in packs:
            for chunk in pack.chunks:
                # Every chunk is attributed, violating or not: the examiner must see exactly
                # what was in the pack, and citations resolve against this map.
                attribution.append(
                    Attribution(
                        chunk_id=chunk.chunk_id,
                        doc_id=chunk.doc_id,
                        corpus=chunk.corpus,
                        source_system=chunk.source_system,
                        context_pack_id=pack.context_pack_id,
                    )
                )
                why = _violation(chunk, pack, scope, allowed)
                if why is not None:
                    violations.append(
                        ScopeViolation(
                            context_pack_id=pack.context_pack_id,
                            chunk_id=chunk.chunk_id,
                            corpus=chunk.corpus,
                            reason=why,
                        )
                    )
        sufficiency = self._sufficiency(question, packs, scope, relevance, prior)
        reason = _reason(violations, sufficiency, self.settings)
        passed = reason is None
        return ValidationReport(
            validation_passed=passed,
            sufficiency=sufficiency,
            scope_violations=tuple(violations),
            abstain=not passed,
            reason=reason,
            attribution=tuple(attribution),
        )

    def _sufficiency(
        self,
        question: str,
        packs: Sequence[ContextPack],
        scope: frozenset[str],
        relevance: Relevance,
        prior: Sequence[str] = (),
    ) -> Sufficiency:
        s = self.settings
        chunks = [c for p in packs for c in p.chunks]
        # Non-finite scores cannot be ranked meaningfully (and are not valid JSON in the audit
        # payload), so they never count as the best score.
        finite = [c.score for c in chunks if math.isfinite(c.score)]
        top = max(finite) if finite else None
        analyzer = default_analyzer()
        wanted = set(analyzer.analyze(question))
        texts = [c.text for c in chunks] + ([*prior] if chunks else [])
        if wanted:
            own: set[str] = set()  # the packs' words, then the earlier evidence's
            for c in chunks:
                own.update(analyzer.analyze(c.text))
            present = set(own)
            for text in texts[len(chunks) :]:
                present.update(analyzer.analyze(text))
            # A stage judged beside earlier evidence must still share a word with the
            # question by itself: a playbook on the office dress code says nothing of a
            # liability review, however well the clauses found before answer it.
            coverage = len(wanted & present) / len(wanted) if wanted & own else 0.0
        else:
            coverage = 1.0  # nothing to cover (a question of stopwords only)
        judged = judge(without_names(question, sorted(scope)), texts, relevance)
        # A term score, a cosine and a probability are on different scales: each has its own
        # threshold.
        by_terms = judged.method == "terms"
        least = (
            s.min_answer_coverage if by_terms
            else s.min_cross_score if judged.method.startswith("cross-encoder:")
            else s.min_answer_score
        )  # fmt: skip
        sufficient = (
            # Zero chunks is never sufficient, whatever min_chunks says: nothing to ground on.
            len(chunks) > 0
            and len(chunks) >= s.min_chunks
            and top is not None
            and top >= s.min_top_score
            # Whatever judges answerability, the evidence must hold a share of the question's
            # words: an embedder scores "a cap for household customers" close to the
            # corporate limit, and a wrong answer is worse than an abstention.
            and coverage >= s.min_query_coverage
            # A threshold of 0 turns the answerability gate off (the operator's choice).
            and (least == 0.0 or (judged.answer_score is not None and judged.answer_score >= least))
        )
        return Sufficiency(
            chunks=len(chunks),
            top_score=top,
            query_coverage=coverage,
            min_chunks=s.min_chunks,
            min_top_score=s.min_top_score,
            min_query_coverage=s.min_query_coverage,
            sufficient=sufficient,
            question_kind=judged.kind,
            answer_score=judged.answer_score,
            min_answer_score=least,
            relevance=judged.method,
            prior_chunks=len(texts) - len(chunks),
        )

    def _record(
        self,
        audit: AuditSink,
        principal: Principal,
        question: str,
        packs: Sequence[ContextPack],
        report: ValidationReport,
        request_id: str,
        session_id: str,
    ) -> None:
        tenant = principal.tenant
        if report.scope_violations:
            # The incident goes first, so a crash between the two writes still leaves the
            # violation on record.
            incident = IncidentEvent(
                incident_kind=SCOPE_VIOLATION,
                violations=[ViolationRecord(**v.model_dump(mode="json"))
                            for v in report.scope_violations],
                sub=principal.sub,
            )  # fmt: skip
            write(audit, tenant, incident, request_id=request_id, session_id=session_id)
        event = ValidationEvent(
            validation_passed=report.validation_passed,
            scope_violations=report.scope_violation_count,
            abstain=report.abstain,
            reason=report.reason,
            context_pack_ids=[p.context_pack_id for p in packs],
            sufficiency=report.sufficiency,
            question=recorded(question),  # bounded, like every recorded query
        )
        write(audit, tenant, event, request_id=request_id, session_id=session_id)

    def _failed(self, reason: str) -> ValidationReport:
        s = self.settings
        empty = Sufficiency(
            chunks=0, top_score=None, query_coverage=0.0, min_chunks=s.min_chunks,
            min_top_score=s.min_top_score, min_query_coverage=s.min_query_coverage,
            sufficient=False,
        )  # fmt: skip
        return ValidationReport(
            validation_passed=False, sufficiency=empty, abstain=True, reason=reason
        )


def _corpora(value: Collection[str]) -> frozenset[str]:
    """A set of corpus ids; a bare string is refused (it would become a set of letters)."""
    if isinstance(value, str):
        raise TypeError(f"expected a collection of corpus ids, got the string {value!r}")
    return frozenset(value)


def _violation(
    chunk: PackChunk, pack: ContextPack, scope: frozenset[str], allowed: frozenset[str]
) -> ViolationReason | None:
    """The scope-violation reason of ``chunk`` in ``pack``."""
    # Checked in this order so each chunk gets the most basic fault: a pack must be of one
    # corpus (or be memory, of none), the route bounds what may be searched at all, and the
    # PDP narrows that further.
    corpus = chunk.corpus
    if corpus != pack.corpus or chunk.origin is not pack.origin:
        return "corpus_mismatch"
    if pack.origin is ChunkOrigin.SESSION_MEMORY:
        return None  # the caller's own session's memory: scoped by tenant and session
    if corpus not in scope:
        return "outside_route_scope"
    if corpus not in allowed:
        return "not_entitled"
    return None


def _reason(
    violations: Sequence[ScopeViolation], sufficiency: Sufficiency, s: ValidationSettings
) -> str | None:
    """The reason code to report, by priority; ``None`` when validation passes."""
    if violations:
        return SCOPE_VIOLATION
    if sufficiency.chunks == 0:
        return NO_EVIDENCE
    if (
        sufficiency.chunks < s.min_chunks
        or sufficiency.top_score is None
        or sufficiency.top_score < s.min_top_score
    ):
        return THIN_EVIDENCE
    if sufficiency.query_coverage < s.min_query_coverage:
        return OFF_TOPIC
    if not sufficiency.sufficient:
        return UNANSWERED
    return None
