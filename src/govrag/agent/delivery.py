"""Delivery: the last gate of a request, between what the model wrote and what the caller gets.

Whatever pattern ran, its reply reaches the caller only through :meth:`Delivery.deliver`:

- a blank reply is no answer (``empty_reply``), a cut-off one on a knowledge route is withheld
  (``truncated``);
- on a route with an output schema, the draft's shape check decides (``schema_invalid`` after
  the one repair, :mod:`govrag.agent.structured`), and the delivered text is the object as
  JSON;
- on a knowledge route, the claim check reads every sentence (of a structured answer, every
  free-text field) against the evidence handed to the call that wrote it: an unsupported one
  is cut and the answer flagged, or the answer abstains (``[validation]
  unsupported_claims``); with no supported citation left it abstains (``uncited``,
  ``unsupported``); a structured answer the cut breaks is not delivered;
- a failed validation abstains or, per route, escalates (an ``escalation`` record in its
  queue; the caller gets a fixed message);
- an abstention replaces whatever the model wrote with a fixed message: the caller gets none
  of the words the app withheld (the ``response`` record keeps only hashes).

Then the ``response`` record is written, and the cited documents' access is counted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, Literal

from govrag.agent.answer import Answer, cited, sentence_hash
from govrag.agent.retrieve import merged_hidden
from govrag.agent.run import Run
from govrag.agent.structured import Shaped
from govrag.audit.events import EscalationEvent, RemovedClaim, ResponseEvent, SchemaOutcome
from govrag.errors import TRANSIENT_LLM_FAULTS
from govrag.types import ChunkOrigin, PackChunk
from govrag.validation import ClaimReport, check_claims, remove_unsupported
from govrag.validation.normalise import visible
from govrag.validation.structured import (
    OutputSchema,
    check_structured,
    free_text,
    visible_strings,
)

log = logging.getLogger("govrag.agent")


class Delivery:
    """See the module docstring."""

    def __init__(
        self,
        *,
        max_contacts: int,
        record_access: Callable[[str, list[tuple[str, str]]], None] | None = None,
        claim_min_overlap: float = 0.5,
        unsupported_claims: Literal["remove", "abstain"] = "remove",
    ) -> None:
        #: Most author contacts a hidden-item marker names.
        self.max_contacts = max_contacts
        self.record_access = record_access
        self.claim_min_overlap = claim_min_overlap
        self.unsupported_claims = unsupported_claims

    def deliver(
        self, run: Run, pattern: str, reply: str, reason: str | None, grounded: bool
    ) -> Answer:
        """What the caller gets for ``reply`` (``reason``: why it must abstain, if known):
        the ``response`` audit record written, access counted for cited documents."""
        # Only the evidence handed to the call that wrote the reply may be cited: not the
        # caller's text, not a pack another call saw.
        draft = run.draft if run.draft is not None and run.draft.text == reply else None
        handed = draft.evidence if draft is not None else ()
        schema = run.output_schema
        claims: ClaimReport | None = None
        flagged = False
        model_reply = reply
        truncated = draft is not None and draft.truncated
        shaped = draft.shaped if draft is not None else None
        structured: dict[str, Any] | None = None
        # What the claim check does not read is not delivered: invisible characters go.
        reply = visible(reply)
        if reason is None and schema is not None and shaped is not None and shaped.value is None:
            # Missed after the repair (even a blank repair): the shape's failure, which a
            # route may escalate.
            reason = "schema_invalid"
        if reason is None and _blank(reply):
            # Nothing to deliver is an abstention, never an answer.
            reason = "step_limit" if run.trace.get("step_limit") else "empty_reply"
        elif reason is None and truncated:
            run.trace["truncated"] = True
            if grounded:  # a cut-off answer may have lost the sentence that qualifies it
                reason = "truncated"
            else:
                flagged = True
        if schema is not None and reason is None:
            # A route that promises a shape delivers it or nothing.
            structured = visible_strings(shaped.value) if shaped and shaped.value else None
            if structured is None:
                reason = "schema_invalid"
        if grounded and reason is None:
            claims, reason, flagged, reply, structured = self._claim_check(
                reply, structured, schema, [c for _, c in handed]
            )
        outcome = _schema_outcome(schema, shaped) if schema and shaped else None
        if outcome is not None:
            run.trace["output_schema"] = outcome.model_dump(mode="json")
        # What the citations are read from: the answer, or a structured answer's free text.
        prose = reply
        if structured is not None and schema is not None and reason is None:
            reply = json.dumps(structured, indent=2, ensure_ascii=False)
            prose = "\n".join(free_text(structured, schema))
        abstained = reason is not None
        response_id = f"resp-{secrets.token_hex(8)}"
        if reason in VALIDATION_FAILURES and run.route.on_validation_failure == "escalate":
            # The failure goes to people: on the record with its queue; the caller learns only
            # that it did.
            queue = run.route.escalation_queue
            run.record(EscalationEvent(sub=run.principal.sub, route_id=run.session.route_id,
                                       reason=str(reason), queue=queue,
                                       response_id=response_id))  # fmt: skip
            run.trace["escalation"] = {"queue": queue, "reason": reason}
            reason = "escalated"
        if reason is not None and reason != "llm_error":
            # Never a confident answer without validated, cited evidence: whatever the model
            # wrote is replaced (its hash is not what is delivered).
            reply = _abstention(reason, run.trace.get("refused_corpora") or ())
            flagged = False
        citations = [] if abstained else cited(prose, handed)[0]
        unknown = [u for c in claims.claims for u in c.unknown] if claims else []
        hidden = merged_hidden(run.packs, self.max_contacts)
        run.trace.update(
            {
                "response_id": response_id,
                "retrievals": run.retrievals,
                # How many citations named no handed chunk (their text is the model's).
                "unknown_citations": len(unknown),
                "steps": run.steps,
                "validation_passed": [v.validation_passed for v in run.validations],
                "scope_violations": sum(v.scope_violation_count for v in run.validations),
            }
        )
        run.record(
            ResponseEvent(
                sub=run.principal.sub,
                route_id=run.session.route_id,
                answer_hash=hashlib.sha256(reply.encode()).hexdigest(),
                cited_doc_ids=sorted({c.doc_id for c in citations}),
                cited_chunk_ids=[c.chunk_id for c in citations],
                abstained=abstained,
                reason=reason,
                grounded=grounded,
                pattern=pattern,
                unsupported_claims=len(claims.unsupported) if claims else 0,
                flagged=flagged,
                truncated=truncated,
                llm_fault=run.trace.get("llm_fault"),
                removed_claims=_removed(claims),
                reply_hash=hashlib.sha256(model_reply.encode()).hexdigest(),
                response_id=response_id,
                output_schema=outcome,
            )
        )
        # Only documents are counted: a session-memory entry is no entity of the store.
        documents = sorted({(c.source_system, c.doc_id) for c in citations
                            if c.origin is ChunkOrigin.SOURCE})  # fmt: skip
        if documents and self.record_access is not None and not abstained:
            try:  # counting is best effort: it never fails a delivered answer
                self.record_access(run.principal.tenant, documents)
            except Exception as exc:
                log.warning("access counting failed for %s: %s", run.request_id, exc)
        validation = run.validations[-1] if run.validations else None
        return Answer(
            request_id=run.request_id,
            response_id=response_id,
            session_id=run.session.session_id,
            route_id=run.session.route_id,
            pattern=pattern,
            answer=reply,
            abstained=abstained,
            reason=reason,
            citations=tuple(citations),
            hidden=hidden,
            decisions=tuple(run.decisions),
            packs=tuple(run.packs),
            validation=validation,
            claims=claims,
            grounded=grounded,
            flagged=flagged,
            trace=run.trace,
            structured=None if abstained else structured,
        )

    def _claim_check(
        self,
        reply: str,
        structured: dict[str, Any] | None,
        schema: OutputSchema | None,
        chunks: list[PackChunk],
    ) -> tuple[ClaimReport, str | None, bool, str, dict[str, Any] | None]:
        """The claim check of a grounded answer (a structured one field by field): the report,
        the abstention reason (``None``: deliver), whether sentences were cut, and the reply
        and structured answer as they may be delivered."""
        flagged = False
        reason: str | None = None
        if structured is not None and schema is not None:
            claims, pruned, misses = check_structured(
                structured, schema, chunks, min_overlap=self.claim_min_overlap
            )
            if not claims.all_supported:
                # Cut field by field; a shape the cut breaks is not delivered.
                if self.unsupported_claims == "abstain" or misses:
                    reason = "unsupported"
                else:
                    structured, flagged = pruned, True
        else:
            claims = check_claims(reply, chunks, min_overlap=self.claim_min_overlap)
            if not claims.all_supported:
                try:
                    cut = remove_unsupported(reply, claims)
                except ValueError:  # the report does not cut this text: deliver none of it
                    log.error("the claim check could not cut an answer; withheld")
                    cut = None
                if self.unsupported_claims == "abstain" or cut is None:
                    reason = "unsupported"
                else:
                    reply, flagged = cut, True
        if reason is None and not claims.grounded:
            # A knowledge route never delivers an answer without a supported citation.
            forged = any(c.cited or c.unknown for c in claims.claims)
            reason = "unsupported" if forged else "uncited"
        return claims, reason, flagged, reply, structured


def _schema_outcome(schema: OutputSchema, shaped: Shaped) -> SchemaOutcome:
    """The output schema's check of the draft, as the ``response`` record and the trace show
    it."""
    return SchemaOutcome(schema_id=schema.schema_id, sha256=schema.sha256,
                         outcome=shaped.outcome, problems=shaped.problems)  # fmt: skip


def _blank(text: str) -> bool:
    """Nothing a reader could see: whitespace, control and format characters only (a
    zero-width space, a byte-order mark, a NUL)."""
    return all(c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zs", "Zl", "Zp")
               for c in text)  # fmt: skip


#: Most removed sentences described in one ``response`` event, and characters per string.
_MAX_REMOVED, _MAX_CHARS = 20, 200


def _removed(claims: ClaimReport | None) -> list[RemovedClaim]:
    """What the ``response`` event says of each removed sentence (bounded; the sentence
    itself only as its hash)."""
    out = []
    for c in (c for c in claims.claims if not c.supported) if claims else ():
        out.append(RemovedClaim(
            sentence_sha256=sentence_hash(c.sentence),
            reason=c.reason,
            unknown=[u[:_MAX_CHARS] for u in c.unknown[:_MAX_REMOVED]],
            missing=[m[:_MAX_CHARS] for m in c.missing[:_MAX_REMOVED]],
        ))  # fmt: skip
    return out[:_MAX_REMOVED]


_ABSTAIN = {
    "denied": "You may not search the corpora this question needs; nothing was retrieved.",
    "no_evidence": "I found no documents you may read that answer this question.",
    "thin_evidence": "The documents I found are too thin to answer this reliably.",
    "off_topic": "The documents I found do not address this question.",
    "unanswered": "The documents you may read do not answer this question.",
    "scope_violation": "The evidence failed validation and was withheld; this was reported.",
    "uncited": "I could not ground an answer in the documents you may read.",
    "unsupported": "The answer I drafted was not supported by the documents it cited, so it "
    "was withheld.",
    "model_out_of_scope": "The model asked to search sources outside this route, which were "
    "refused; nothing you may search was asked for. Try rephrasing the question.",
    "truncated": "The model's answer was cut off by its output limit, so it was withheld.",
    "empty_reply": "The model returned an empty reply; there is no answer to deliver.",
    "step_limit": "The model used up its steps without answering.",
    "schema_invalid": "The model's answer did not have the shape this service promises, even "
    "after one repair, so it was withheld.",
    "escalated": "This question needs a person's review; it has been passed on, and nothing "
    "was answered automatically.",
}
#: The abstentions that are a failed validation (of the evidence or of the answer's claims):
#: a route may escalate them instead (``on_validation_failure``).
VALIDATION_FAILURES = frozenset({"thin_evidence", "off_topic", "unanswered", "scope_violation",
                                 "not_recorded", "uncited", "unsupported",
                                 "schema_invalid"})  # fmt: skip

#: What a caller is told when the model failed, per fault class: never the operator's message
#: (it names internal URLs, settings and environment variables).
_LLM_FAULT = {
    "timeout": "the model did not answer in time",
    "overloaded": "the model service is failing or overloaded",
    "rate_limited": "the model service is rate limited",
}


def llm_failure(fault: str, request_id: str) -> str:
    """The fixed message an end user gets for ``llm_error``: the class of fault, and where
    the operator finds the rest."""
    what = _LLM_FAULT.get(fault, "the model service is misconfigured")
    later = " Try again later." if fault in TRANSIENT_LLM_FAULTS else ""
    return (f"No answer: {what} ({fault.replace('_', ' ')}).{later} The operator can see the "
            f"details in the audit log of request {request_id}.")  # fmt: skip


def _abstention(reason: str, refused: Sequence[str] = ()) -> str:
    """The fixed message of an abstention; a ``denied`` one names the corpora the policy gate
    refused that the question needs (their ids are the caller's to know: it was refused
    them)."""
    if reason == "denied" and refused:
        return (f"You may not search {', '.join(refused)}, where the answer to this question "
                "would be, and nothing you may read answers it. Ask for access, or ask someone "
                "who has it.")  # fmt: skip
    return _ABSTAIN.get(reason, f"I cannot answer this reliably ({reason.replace('_', ' ')}).")
