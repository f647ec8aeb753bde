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

When the tenant's store is empty, no search tool is offered and no search is made: the model
answers from general knowledge and the answer is marked ungrounded. An answer on a knowledge
route is delivered only with citations of validated evidence; otherwise it abstains.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from govrag.agent import prompts
from govrag.agent.answer import Answer, cited
from govrag.agent.llm import LlmClient, Message
from govrag.agent.retrieve import GovernedSearch, merged_hidden
from govrag.agent.run import PREFETCH, Run, ToolExecutor, denied_or
from govrag.errors import InputError, LlmError
from govrag.policy.pep import Proposal
from govrag.routes.models import Tool
from govrag.routes.payload import check_proposal, offered_tools, tool_schemas
from govrag.types import ChunkOrigin, Principal, Strategy
from govrag.validation import AuditSink, check_claims

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
        is_empty: Callable[[str], bool],
        record_access: Callable[[str, list[tuple[str, str]]], None] | None = None,
        executors: Mapping[str, ToolExecutor] | None = None,
        strategy: Strategy = Strategy.HYBRID,
        top_k: int = 8,
        max_steps: int = 6,
        claim_min_overlap: float = 0.5,
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
        self.max_steps = max_steps
        self.claim_min_overlap = claim_min_overlap

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
        if not question.strip():
            raise InputError("question is blank; ask something")
        request_id = f"req-{secrets.token_hex(8)}"
        session = self.governed.session(
            principal, request_id=request_id, route_id=route_id, session_id=session_id
        )
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
            max_steps=self.max_steps,
        )
        mode = session.retrieval.mode
        workflow = self.config.workflows.get(route.workflow_id) if route.workflow_id else None
        grounded = mode != "none" and not self.is_empty(principal.tenant)
        if mode == "none":
            pattern = "none"
        elif workflow is not None:
            pattern = "3" if any(s.allowlist is not None for s in workflow.stages) else "2"
        else:
            pattern = "0" if mode == "deterministic_prefetch" else "1"
        run.trace.update({"pattern": pattern, "mode": mode, "llm": self.llm.name})
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
            log.error("request %s: the model failed: %s", request_id, exc)
            reply, reason = f"The model could not answer: {exc}", "llm_error"
        return self._deliver(run, pattern, reply, reason, grounded)

    # -- patterns ----------------------------------------------------------------------------
    def _ungrounded(self, run: Run, text: str | None, no_retrieval: bool) -> str:
        system = prompts.NO_RETRIEVAL if no_retrieval else prompts.UNGROUNDED
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": _user(run.question, text)},
        ]
        # No tools: a no-retrieval route offers none, and an empty store offers no search.
        return run.call_model(messages, [], stage="answer").text

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
        while run.steps_left:
            reply = run.call_model(messages, tool_schemas(tools), stage="loop")
            if not reply.tool_calls:
                reply_text = reply.text
                break
            messages.append(
                {
                    "role": "assistant",
                    "content": reply.text or None,
                    "tool_calls": [c.as_message() for c in reply.tool_calls],
                }
            )
            messages.extend(self.observe(run, tools, reply.tool_calls))
        else:
            run.trace["step_limit"] = True
        return reply_text, None if run.evidence else denied_or(run, "no_evidence")

    # -- pieces the workflow runner shares ---------------------------------------------------
    def _tools(self, run: Run, allowlist: tuple[str, ...] | None) -> list[Tool]:
        manifest = self.config.manifests.get(run.route.tool_manifest)
        return offered_tools(manifest, run.session.retrieval, allowlist=allowlist)

    def observe(self, run: Run, tools: list[Tool], calls: Any) -> list[Message]:
        """Check, decide and run the model's proposals; one tool message per call."""
        results: dict[str, str] = {}
        retrieves: list[tuple[str, Proposal]] = []
        for call in calls:
            try:
                if call.arguments is None:
                    raise InputError(f"arguments of {call.name!r} are not a JSON object")
                checked = check_proposal(tools, call.name, call.arguments)
            except InputError as exc:
                run.record(
                    "proposal",
                    {
                        "tool": call.name,
                        "accepted": False,
                        "error": str(exc),
                        "arguments": call.raw_arguments[:2000],
                    },
                )
                results[call.id] = prompts.refusal(error=str(exc))
                continue
            run.record(
                "proposal",
                {
                    "tool": call.name,
                    "accepted": True,
                    "arguments": checked.arguments,
                    "corpus": checked.corpus,
                },
            )
            if checked.tool.kind == "retrieve" and checked.corpus is not None:
                retrieves.append(
                    (
                        call.id,
                        Proposal(
                            tool=checked.tool.name,
                            action=checked.action,
                            corpus=checked.corpus,
                            query=checked.query,
                        ),
                    )
                )
            else:
                results[call.id] = self._run_tool(run, checked.tool, checked.arguments)
        for (call_id, _), outcome in zip(
            retrieves, run.retrieve([p for _, p in retrieves]), strict=True
        ):
            if outcome.pack is None:
                results[call_id] = prompts.refusal(
                    corpus=outcome.corpus, verdict=outcome.decision.verdict, reason=outcome.refused
                )
            else:
                p = outcome.pack
                results[call_id] = prompts.pack_observation(p.context_pack_id, p.corpus, p.chunks)
        return [{"role": "tool", "tool_call_id": c.id, "content": results[c.id]} for c in calls]

    def _run_tool(self, run: Run, tool: Tool, arguments: dict[str, Any]) -> str:
        if tool.kind == "list":
            known = dict(self.catalog(run.principal.tenant))
            corpora = [
                {"corpus": c, "description": known.get(c, "")} for c in run.session.retrieval.scope
            ]
            return json.dumps({"corpora": corpora})
        if tool.kind == "metadata":
            doc_id = arguments.get("doc_id")
            found = [(p, c) for p, c in run.evidence if c.doc_id == doc_id]
            if not found:  # only documents already in validated evidence are described
                return prompts.refusal(error=f"no document {doc_id!r} in this request's evidence")
            pack_id, c = found[0]
            return json.dumps(
                {
                    "doc_id": c.doc_id,
                    "corpus": c.corpus,
                    "source_system": c.source_system,
                    "context_pack_id": pack_id,
                    "chunks": len(found),
                }
            )
        executor = self.executors.get(tool.name)
        if executor is None:
            return prompts.refusal(error=f"tool {tool.name!r} has no executor in this runtime")
        return executor(arguments)

    def synthesize(self, run: Run, text: str | None) -> str:
        """One call with no tools, answering only from the validated evidence."""
        context = prompts.context_block([c for _, c in run.evidence])
        messages: list[Message] = [
            {"role": "system", "content": f"{prompts.SYNTHESIS}\n\n{context}"},
            {"role": "user", "content": _user(run.question, text)},
        ]
        return run.call_model(messages, [], stage="synthesis").text

    # -- delivery ----------------------------------------------------------------------------
    def _deliver(
        self, run: Run, pattern: str, reply: str, reason: str | None, grounded: bool
    ) -> Answer:
        citations, unknown = cited(reply, run.evidence)
        claims = None
        if grounded and reason is None:
            chunks = [c for _, c in run.evidence if c.chunk_id in {x.chunk_id for x in citations}]
            claims = check_claims(reply, chunks, min_overlap=self.claim_min_overlap)
            if not citations:
                reason = "uncited"  # a knowledge route never delivers an unsupported answer
        abstained = reason is not None
        if reason is not None and reason != "llm_error":
            # Never a confident answer without validated, cited evidence: whatever the model
            # wrote is replaced (its hash is not what is delivered).
            reply = _abstention(reason)
        hidden = merged_hidden(run.packs)
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
            trace=run.trace,
        )


def _user(question: str, text: str | None) -> str:
    return question if not text else f"{question}\n\nText:\n{text}"


_ABSTAIN = {
    "denied": "You may not search the corpora this question needs; nothing was retrieved.",
    "no_evidence": "I found no documents you may read that answer this question.",
    "thin_evidence": "The documents I found are too thin to answer this reliably.",
    "off_topic": "The documents I found do not address this question.",
    "scope_violation": "The evidence failed validation and was withheld; this was reported.",
    "uncited": "I could not ground an answer in the documents you may read.",
}


def _abstention(reason: str) -> str:
    return _ABSTAIN.get(reason, f"I cannot answer this reliably ({reason.replace('_', ' ')}).")
