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

Every proposal, whatever its tool, gets its own PEP decision with the tool's ``pdp_action``,
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
import json
import logging
import secrets
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Literal

from govrag.agent import prompts
from govrag.agent.answer import Answer, cited
from govrag.agent.limits import RequestLimits
from govrag.agent.llm import LlmClient, Message, ToolCall
from govrag.agent.retrieve import GovernedSearch, merged_hidden
from govrag.agent.run import PREFETCH, Run, ToolExecutor, denied_or
from govrag.audit.trail import recorded, safe_text
from govrag.errors import TRANSIENT_LLM_FAULTS, InputError, LlmError
from govrag.policy.pep import Proposal
from govrag.routes.models import Tool
from govrag.routes.payload import check_proposal, offered_tools, tool_schemas
from govrag.routes.session import Session
from govrag.types import ChunkOrigin, PackChunk, Principal, Strategy
from govrag.validation import AuditSink, ClaimReport, check_claims, remove_unsupported

log = logging.getLogger("govrag.agent")

#: ``tenant -> [(corpus id, description)]``: what ``list_corpora`` may describe.
Catalog = Callable[[str], list[tuple[str, str]]]


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
    ) -> None:
        self.governed = governed
        self.llm = llm
        self.audit = audit
        self.catalog = catalog
        self.is_empty = is_empty
        self.record_access = record_access
        self.executors = dict(executors or {})
        self.strategy = strategy
        self.top_k = top_k
        self.limits = limits or RequestLimits()
        self.claim_min_overlap = claim_min_overlap
        self.unsupported_claims = unsupported_claims

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
        run = Run(
            self.governed,
            self.llm,
            self.audit,
            principal,
            question,
            session,
            route,
            request_id,
            strategy=self.strategy,
            top_k=self.top_k,
            max_steps=self.limits.max_steps,
            max_tokens=self.limits.max_tokens,
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
        run.trace.update({"pattern": pattern, "mode": mode, "llm": self.llm.name})
        where["stage"] = f"pattern {pattern}"
        detail: str | None = None
        try:
            if not grounded:
                reply, reason = self._ungrounded(run, text, mode == "none"), None
            elif workflow is not None:
                from govrag.agent.workflow import run_workflow

                reply, reason = run_workflow(self, run, workflow, text)
            elif pattern == "0":
                reply, reason = self._prefetch(run, text)
            else:
                reply, reason = self._loop(run, text, self._tools(run, None))
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
        system = prompts.NO_RETRIEVAL if no_retrieval else prompts.UNGROUNDED
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": _user(run.question, text)},
        ]
        # No tools: a no-retrieval route offers none, and an empty store offers no search.
        return run.drafted(run.call_model(messages, [], stage="answer"), ())

    def _prefetch(self, run: Run, text: str | None) -> tuple[str, str | None]:
        action = self.governed.retrieve_action(run.route)
        run.retrieve(
            [
                Proposal(tool=PREFETCH, action=action, corpus=c, query=run.question)
                for c in run.session.retrieval.scope
            ]
        )
        last = run.validations[-1] if run.validations else None
        if not run.evidence:
            return "", (last.reason if last else None) or denied_or(run, "no_evidence")
        return self.synthesize(run, text), None

    def _loop(self, run: Run, text: str | None, tools: list[Tool]) -> tuple[str, str | None]:
        messages: list[Message] = [
            {"role": "system", "content": prompts.TOOLS},
            {"role": "user", "content": _user(run.question, text)},
        ]
        reply_text = ""
        first = len(run.evidence)  # this loop's messages hold exactly the evidence after it
        while run.steps_left:
            # Once the request's tool calls are spent, nothing is offered: the model answers.
            offered = tools if run.tool_calls < self.limits.max_tool_calls else []
            schemas = tool_schemas(offered, scope=run.session.retrieval.scope)
            reply = run.call_model(messages, schemas, stage="loop")
            if not reply.tool_calls:
                reply_text = run.drafted(reply, run.evidence[first:])
                break
            messages.append(
                {
                    # A string, never null: strict servers (llama.cpp) refuse a null content.
                    "role": "assistant",
                    "content": reply.text,
                    "tool_calls": [c.as_message() for c in reply.tool_calls],
                }
            )
            messages.extend(self.observe(run, tools, reply.tool_calls))
        else:
            run.trace["step_limit"] = True
        if run.evidence:
            return reply_text, None
        return reply_text, denied_or(run, "no_evidence", by_model=True)

    # -- pieces the workflow runner shares ---------------------------------------------------
    def _tools(self, run: Run, allowlist: tuple[str, ...] | None) -> list[Tool]:
        manifest = self.config.manifests.get(run.route.tool_manifest)
        return offered_tools(manifest, run.session.retrieval, allowlist=allowlist)

    def observe(self, run: Run, tools: list[Tool], calls: Sequence[ToolCall]) -> list[Message]:
        """Check, decide and run the model's proposals; one tool message per call."""
        results: list[str] = ["" for _ in calls]
        runnable, excess = self.limits.admit(calls, run.tool_calls)
        run.tool_calls += len(runnable)
        retrieves: list[tuple[int, Proposal]] = []
        for i, call in enumerate(runnable):
            try:
                if call.arguments is None:
                    why = f": {call.problem}" if call.problem else ""
                    raise InputError(f"arguments of {call.name!r} are not a JSON object{why}")
                checked = check_proposal(tools, call.name, call.arguments)
                corpus = checked.corpus
                if checked.tool.kind == "metadata":
                    corpus = self._document(run, checked.arguments).corpus
            except InputError as exc:
                run.record("proposal", {"tool": recorded(call.name), "accepted": False,
                                        "error": recorded(str(exc)),
                                        "arguments": recorded(call.raw_arguments)})  # fmt: skip
                results[i] = prompts.refusal(error=str(exc))
                continue
            run.record("proposal", {"tool": call.name, "accepted": True,
                                    "arguments": recorded(checked.arguments),
                                    "corpus": corpus})  # fmt: skip
            if checked.tool.kind == "retrieve" and corpus is not None:
                retrieves.append((i, Proposal(tool=checked.tool.name, action=checked.action,
                                              corpus=corpus, query=checked.query)))  # fmt: skip
            else:
                results[i] = self._run_tool(run, checked.tool, checked.arguments)
        if excess:  # never run; one audit event, however many there were
            error = self.limits.cap_message(run.tool_calls)
            run.record(
                "proposal",
                {
                    "tool": "*",
                    "accepted": False,
                    "error": error,
                    "calls": len(excess),
                    "arguments": recorded(sorted({c.name for c in excess})),
                },
            )
            results[len(runnable) :] = [prompts.refusal(error=error)] * len(excess)
        outcomes = run.retrieve([p for _, p in retrieves])
        for (i, _), outcome in zip(retrieves, outcomes, strict=True):
            if outcome.pack is None:
                results[i] = prompts.refusal(
                    corpus=outcome.corpus, verdict=outcome.decision.verdict, reason=outcome.refused
                )
            else:
                p = outcome.pack
                results[i] = prompts.pack_observation(p.context_pack_id, p.corpus, p.chunks)
        return [{"role": "tool", "tool_call_id": c.id, "content": r}
                for c, r in zip(calls, results, strict=True)]  # fmt: skip

    def _run_tool(self, run: Run, tool: Tool, arguments: dict[str, Any]) -> str:
        """A tool that does not search, PEP-gated like a retrieve: each decision is committed
        before the tool runs, and a DENY is a refusal observation."""
        if tool.kind == "list":
            return self._list_corpora(run, tool)
        if tool.kind == "metadata":
            try:
                chunk = self._document(run, arguments)
            except InputError as exc:
                return prompts.refusal(error=str(exc))
            proposal = Proposal(tool=tool.name, action=tool.pdp_action, corpus=chunk.corpus,
                                kind="metadata")  # fmt: skip
            return self._gated(run, proposal, lambda: self._describe(run, chunk))
        executor = self.executors.get(tool.name)

        def execute() -> str:
            if executor is None:
                return prompts.refusal(error=f"tool {tool.name!r} has no executor in this runtime")
            return executor(arguments)

        other = Proposal(tool=tool.name, action=tool.pdp_action, corpus=None, kind="other")
        return self._gated(run, other, execute)

    def _gated(self, run: Run, proposal: Proposal, downstream: Callable[[], str]) -> str:
        decision, result = self.governed.run_tool(
            run.principal, run.session, proposal, downstream, run.request_id
        )
        run.decisions.append(decision)
        if result is None:
            return prompts.refusal(corpus=proposal.corpus, verdict=decision.verdict,
                                   reason=decision.reason)  # fmt: skip
        return result

    def _list_corpora(self, run: Run, tool: Tool) -> str:
        """The route's corpora the caller may list, each its own decision; a corpus the PDP
        denies is not named at all."""
        catalog: list[dict[str, str]] = []

        def describe(corpus: str) -> str:
            if not catalog:  # read once, and only after an ALLOW
                catalog.append(dict(self.catalog(run.principal.tenant)))
            return catalog[0].get(corpus, "")

        listed = []
        for corpus in run.session.retrieval.scope:
            proposal = Proposal(tool=tool.name, action=tool.pdp_action, corpus=corpus,
                                kind="list")  # fmt: skip
            decision, about = self.governed.run_tool(
                run.principal, run.session, proposal, partial(describe, corpus), run.request_id
            )
            run.decisions.append(decision)
            if about is not None:
                listed.append({"corpus": corpus, "description": about})
        return json.dumps({"corpora": listed})

    @staticmethod
    def _document(run: Run, arguments: dict[str, Any]) -> PackChunk:
        """The document ``get_document_metadata`` names: only documents already in this
        request's validated evidence are described (the binding of its corpus)."""
        doc_id = arguments.get("doc_id")
        found = next((c for _, c in run.evidence if c.doc_id == doc_id), None)
        if found is None:
            shown = safe_text(str(doc_id))[:128]
            raise InputError(
                f"no document {shown!r} in this request's evidence; only documents a search "
                "of this request returned are described"
            )
        return found

    @staticmethod
    def _describe(run: Run, chunk: PackChunk) -> str:
        found = [(p, c) for p, c in run.evidence if c.doc_id == chunk.doc_id]
        return json.dumps(
            {
                "doc_id": chunk.doc_id,
                "corpus": chunk.corpus,
                "source_system": chunk.source_system,
                "context_pack_id": found[0][0],
                "chunks": len(found),
            }
        )

    def synthesize(self, run: Run, text: str | None) -> str:
        """One call with no tools, answering only from the validated evidence."""
        handed = list(run.evidence)
        context = prompts.context_block([c for _, c in handed])
        messages: list[Message] = [
            {"role": "system", "content": f"{prompts.SYNTHESIS}\n\n{context}"},
            {"role": "user", "content": _user(run.question, text)},
        ]
        return run.drafted(run.call_model(messages, [], stage="synthesis"), handed)

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
                "retrievals": run.retrievals,
                "unknown_citations": unknown,
                "steps": run.steps,
                "validation_passed": [v.validation_passed for v in run.validations],
                "scope_violations": sum(v.scope_violation_count for v in run.validations),
            }
        )
        run.record(
            "response",
            {
                "sub": run.principal.sub,
                "route_id": run.session.route_id,
                "answer_hash": hashlib.sha256(reply.encode()).hexdigest(),
                "cited_doc_ids": sorted({c.doc_id for c in citations}),
                "cited_chunk_ids": [c.chunk_id for c in citations],
                "abstained": abstained,
                "reason": reason,
                "grounded": grounded,
                "pattern": pattern,
                "unsupported_claims": len(claims.unsupported) if claims else 0,
                "flagged": flagged,
                "truncated": truncated,
                "llm_fault": run.trace.get("llm_fault"),
                "removed_claims": _removed(claims),
                "reply_hash": hashlib.sha256(model_reply.encode()).hexdigest(),
            },
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


def _user(question: str, text: str | None) -> str:
    """The user message of every call: the caller's parts, fenced as untrusted data."""
    return prompts.caller_message(question, text)


#: Most removed sentences described in one ``response`` event, and characters per string.
_MAX_REMOVED, _MAX_CHARS = 20, 200


def _removed(claims: ClaimReport | None) -> list[dict[str, Any]]:
    """What the ``response`` event says of each removed sentence (bounded; the sentence
    itself only as its hash)."""
    out = []
    for c in (c for c in claims.claims if not c.supported) if claims else ():
        out.append({
            "sentence_sha256": hashlib.sha256(c.sentence.encode()).hexdigest(),
            "reason": c.reason,
            "unknown": [u[:_MAX_CHARS] for u in c.unknown[:_MAX_REMOVED]],
            "missing": [m[:_MAX_CHARS] for m in c.missing[:_MAX_REMOVED]],
        })  # fmt: skip
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
}

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
