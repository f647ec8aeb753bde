"""The orchestrator: runs a question through the pattern its pinned route declares.

The route's retrieval object (pinned at session start) is the only control; the app never
infers the mode from the prompt or from what the model asks for (seed 003):

- ``none``: no knowledge path. No retrieve tool reaches the model, no search is made.
- ``deterministic_prefetch`` (Pattern 0): for each corpus in scope, PEP -> pack; the packs are
  validated together and, only if they pass, quoted as context for one synthesis call with no
  retrieve tools. A failed validation abstains without asking the model.
- ``tool`` without a workflow (Pattern 1): the model proposes tools, any number of times within
  ``max_steps``; each proposal is checked against the manifest and its schema, its corpus
  decided by the PEP (outside the scope: DENY ``out_of_scope``), its pack validated, and only
  then returned as the observation. Refusals are observations too: the loop goes on.
- a workflow (Patterns 2 and 3): see :mod:`govrag.agent.workflow`.

The steps the patterns share (the tool loop, the PEP-gated tools, synthesis) are
:mod:`govrag.agent.steps`, used here and by the workflow runner alike. Every proposal,
whatever its tool, gets its own PEP decision with the tool's ``pdp_action``,
committed before the tool runs (DESIGN.md invariant 7): ``list_corpora`` one per corpus of
the route's scope (it lists only the ALLOWed ones), ``get_document_metadata`` one on the
document's corpus (only documents of this request's validated evidence are described), any
other tool one on the tool itself (its executor runs only after an ALLOW). The request is
bounded (:mod:`govrag.agent.limits`): the caller's input is checked before anything is
recorded, tool calls are capped per reply and per request, and once its session is open a
request that fails still closes its audit trail with an ``error`` event.

When the tenant's store is empty, no search tool is offered and no search is made: the model
answers from general knowledge and the answer is marked ungrounded. What the caller sent (the
question, ``text``) reaches a model only fenced as untrusted data (:func:`prompts.caller_message`).

An answer on a knowledge route is delivered only with citations of the validated evidence
handed to the call that wrote it, each sentence checked against what it cites
(:func:`~govrag.validation.check_claims`: forged citations, figures, dates, names, negations).
Unsupported sentences are removed and the answer flagged, or the answer abstains
(``[validation] unsupported_claims``); with no supported cited sentence left it abstains.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from govrag.agent import prompts
from govrag.agent.answer import Answer, cited, sentence_hash
from govrag.agent.limits import RequestLimits
from govrag.agent.listings import Catalog
from govrag.agent.llm import LlmClient, Message, ModelChooser, Profiled
from govrag.agent.retrieve import GovernedSearch, merged_hidden
from govrag.agent.run import PREFETCH, Run, ToolExecutor, denied_or
from govrag.agent.steps import Steps
from govrag.agent.workflow import run_workflow
from govrag.audit.events import EscalationEvent, RemovedClaim, ResponseEvent
from govrag.errors import TRANSIENT_LLM_FAULTS, LlmError
from govrag.policy.pep import Proposal
from govrag.routes.session import Session
from govrag.types import ChunkOrigin, Principal, Strategy
from govrag.validation import AuditSink, ClaimReport, check_claims, remove_unsupported

log = logging.getLogger("govrag.agent")


class Orchestrator:
    """Answers questions on a deployment's routes; see the module docstring."""

    def __init__(
        self,
        governed: GovernedSearch,
        llm: LlmClient,
        *,
        audit: AuditSink,
        catalog: Catalog,
        is_empty: Callable[[Principal, Sequence[str]], bool],
        record_access: Callable[[str, list[tuple[str, str]]], None] | None = None,
        executors: Mapping[str, ToolExecutor] | None = None,
        strategy: Strategy = Strategy.HYBRID,
        top_k: int = 8,
        limits: RequestLimits | None = None,
        claim_min_overlap: float = 0.5,
        unsupported_claims: Literal["remove", "abstain"] = "remove",
        models: ModelChooser | None = None,
    ) -> None:
        self.governed = governed
        self.llm = llm
        #: The model of a route's ``model_profile`` (``None``: ``llm`` serves every route).
        self.models = models
        self.audit = audit
        self.is_empty = is_empty
        self.record_access = record_access
        self.executors = dict(executors or {})
        self.strategy = strategy
        self.top_k = top_k
        self.limits = limits or RequestLimits()
        self.claim_min_overlap = claim_min_overlap
        self.unsupported_claims = unsupported_claims
        #: The steps every pattern is made of (shared with the workflow runner).
        self.steps = Steps(governed, catalog=catalog, executors=self.executors,
                           limits=self.limits)  # fmt: skip

    @property
    def catalog(self) -> Catalog:
        """What ``list_corpora`` may describe (the steps' own: replacing it here replaces it
        there)."""
        return self.steps.catalog

    @catalog.setter
    def catalog(self, catalog: Catalog) -> None:
        self.steps.catalog = catalog

    @property
    def config(self) -> Any:
        return self.governed.sessions.config

    def ask(
        self,
        principal: Principal,
        question: str,
        *,
        route_id: str | None = None,
        session_id: str | None = None,
        text: str | None = None,
    ) -> Answer:
        """Answer ``question`` as ``principal``; ``text`` is caller-supplied material (the
        e-mail to summarise, the contract to review), never searched."""
        # Before anything is recorded: an unacceptable input opens no session, writes nothing.
        self.limits.check_input(question, text)
        request_id = f"req-{secrets.token_hex(8)}"
        session = self.governed.session(
            principal, request_id=request_id, route_id=route_id, session_id=session_id
        )
        with self.governed.trail(principal, session, request_id) as where:
            return self._answer(principal, question, text, session, request_id, where)

    def _answer(
        self,
        principal: Principal,
        question: str,
        text: str | None,
        session: Session,
        request_id: str,
        where: dict[str, str],
    ) -> Answer:
        route = self.governed.route_of(session)
        chosen = (self.models(route.model_profile) if self.models is not None
                  else Profiled(self.llm, None, self.limits.max_tokens))  # fmt: skip
        run = Run(
            self.governed,
            chosen.llm,
            self.audit,
            principal,
            question,
            session,
            route,
            request_id,
            strategy=self.strategy,
            top_k=self.top_k,
            max_steps=self.limits.max_steps,
            max_tokens=chosen.max_tokens,
            model_profile=chosen.profile,
            prompt=self.config.prompts.get(route.prompt_id) if route.prompt_id else None,
        )
        mode = session.retrieval.mode
        workflow = self.config.workflows.get(route.workflow_id) if route.workflow_id else None
        # Empty as far as this caller could know: nothing in the route's scope at or below
        # its clearance (a tenant-wide check would tell it that something above exists). A
        # route with an empty scope is not "empty": its every retrieve is a DENY (seed 003).
        scope = session.retrieval.scope
        grounded = mode != "none" and (not scope or not self.is_empty(principal, scope))
        if mode == "none":
            pattern = "none"
        elif workflow is not None:
            pattern = "3" if any(s.allowlist is not None for s in workflow.stages) else "2"
        else:
            pattern = "0" if mode == "deterministic_prefetch" else "1"
        run.trace.update({"pattern": pattern, "mode": mode, "llm": chosen.llm.name})
        if chosen.profile is not None:
            run.trace["model_profile"] = chosen.profile
        if run.prompt is not None:
            run.trace["prompt"] = {"id": run.prompt.prompt_id, "sha256": run.prompt.sha256}
        if session.expires_at is not None:
            # Seed 003's trace names who asked and until when their token was valid.
            run.trace["token_exp"] = session.expires_at
        where["stage"] = f"pattern {pattern}"
        detail: str | None = None
        try:
            if not grounded:
                reply, reason = self._ungrounded(run, text, mode == "none"), None
            elif workflow is not None:
                reply, reason = run_workflow(self.steps, run, workflow, text)
            elif pattern == "0":
                reply, reason = self._prefetch(run, text)
            else:
                reply, reason = self.steps.loop(run, text, self.steps.tools(run, None))
        except LlmError as exc:
            # The operator's message (URLs, settings, the server's words) goes to the log and
            # the audit trail (``llm_result``); the caller learns only the class of fault.
            log.error("request %s: the model failed (%s): %s", request_id, exc.fault, exc)
            run.trace["llm_fault"] = exc.fault
            reply, reason = _llm_failure(exc.fault, request_id), "llm_error"
            detail = str(exc)
        where["stage"] = "delivery"
        answer = self._deliver(run, pattern, reply, reason, grounded)
        return replace(answer, llm_detail=detail) if detail else answer

    # -- patterns ----------------------------------------------------------------------------
    def _ungrounded(self, run: Run, text: str | None, no_retrieval: bool) -> str:
        system = run.system(prompts.NO_RETRIEVAL if no_retrieval else prompts.UNGROUNDED)
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompts.caller_message(run.question, text)},
        ]
        # No tools: a no-retrieval route offers none, and an empty store offers no search.
        return run.drafted(run.call_model(messages, [], stage="answer"), ())

    def _prefetch(self, run: Run, text: str | None) -> tuple[str, str | None]:
        action, tier = self.governed.retrieve_action(run.route)
        run.retrieve(
            [
                Proposal(tool=PREFETCH, action=action, corpus=c, query=run.question,
                         risk_tier=tier)
                for c in run.session.retrieval.scope
            ]
        )  # fmt: skip
        last = run.validations[-1] if run.validations else None
        if not run.evidence:
            return "", (last.reason if last else None) or denied_or(run, "no_evidence")
        return self.steps.synthesize(run, text), None

    # -- delivery ----------------------------------------------------------------------------
    def _deliver(
        self, run: Run, pattern: str, reply: str, reason: str | None, grounded: bool
    ) -> Answer:
        # Only the evidence handed to the call that wrote the reply may be cited: not the
        # caller's text, not a pack another call saw.
        handed = run.handed(reply)
        claims: ClaimReport | None = None
        flagged = False
        model_reply = reply
        truncated = run.draft is not None and run.draft.text == reply and run.draft.truncated
        if reason is None and _blank(reply):
            # Nothing to deliver is an abstention, never an answer.
            reason = "step_limit" if run.trace.get("step_limit") else "empty_reply"
        elif reason is None and truncated:
            run.trace["truncated"] = True
            if grounded:  # a cut-off answer may have lost the sentence that qualifies it
                reason = "truncated"
            else:
                flagged = True
        if grounded and reason is None:
            claims = check_claims(reply, [c for _, c in handed], min_overlap=self.claim_min_overlap)
            if not claims.all_supported:
                if self.unsupported_claims == "abstain":
                    reason = "unsupported"
                else:
                    reply, flagged = remove_unsupported(reply, claims), True
            if reason is None and not claims.grounded:
                # A knowledge route never delivers an answer without a supported citation.
                forged = any(c.cited or c.unknown for c in claims.claims)
                reason = "unsupported" if forged else "uncited"
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
            reply = _abstention(reason)
            flagged = False
        citations = [] if abstained else cited(reply, handed)[0]
        unknown = [u for c in claims.claims for u in c.unknown] if claims else []
        hidden = merged_hidden(run.packs, self.governed.pep.markers.max_contacts)
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
        )


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
    "scope_violation": "The evidence failed validation and was withheld; this was reported.",
    "uncited": "I could not ground an answer in the documents you may read.",
    "unsupported": "The answer I drafted was not supported by the documents it cited, so it "
    "was withheld.",
    "model_out_of_scope": "The model asked to search sources outside this route, which were "
    "refused; nothing you may search was asked for. Try rephrasing the question.",
    "truncated": "The model's answer was cut off by its output limit, so it was withheld.",
    "empty_reply": "The model returned an empty reply; there is no answer to deliver.",
    "step_limit": "The model used up its steps without answering.",
    "escalated": "This question needs a person's review; it has been passed on, and nothing "
    "was answered automatically.",
}
#: The abstentions that are a failed validation (of the evidence or of the answer's claims):
#: a route may escalate them instead (``on_validation_failure``).
VALIDATION_FAILURES = frozenset({"thin_evidence", "off_topic", "scope_violation", "not_recorded",
                                 "uncited", "unsupported"})  # fmt: skip

#: What a caller is told when the model failed, per fault class: never the operator's message
#: (it names internal URLs, settings and environment variables).
_LLM_FAULT = {
    "timeout": "the model did not answer in time",
    "overloaded": "the model service is failing or overloaded",
    "rate_limited": "the model service is rate limited",
}


def _llm_failure(fault: str, request_id: str) -> str:
    """The fixed message an end user gets for ``llm_error``: the class of fault, and where
    the operator finds the rest."""
    what = _LLM_FAULT.get(fault, "the model service is misconfigured")
    later = " Try again later." if fault in TRANSIENT_LLM_FAULTS else ""
    return (f"No answer: {what} ({fault.replace('_', ' ')}).{later} The operator can see the "
            f"details in the audit log of request {request_id}.")  # fmt: skip


def _abstention(reason: str) -> str:
    return _ABSTAIN.get(reason, f"I cannot answer this reliably ({reason.replace('_', ' ')}).")
