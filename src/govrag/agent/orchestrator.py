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

What the model wrote reaches the caller only through :mod:`govrag.agent.delivery`: the claim
check against the evidence handed to the call that wrote it, the output schema's shape, the
abstentions and escalations, the ``response`` record.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from govrag.agent import prompts
from govrag.agent.answer import Answer
from govrag.agent.delivery import Delivery, llm_failure
from govrag.agent.limits import RequestLimits
from govrag.agent.listings import Catalog
from govrag.agent.llm import LlmClient, Message, ModelChooser, Profiled
from govrag.agent.retrieve import GovernedSearch
from govrag.agent.run import PREFETCH, Run, ToolExecutor, denied_or
from govrag.agent.steps import Steps
from govrag.agent.workflow import run_workflow
from govrag.errors import LlmError
from govrag.policy.pep import Proposal
from govrag.routes.session import Session
from govrag.types import Principal, Strategy
from govrag.validation import AuditSink

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
        self.executors = dict(executors or {})
        self.strategy = strategy
        self.top_k = top_k
        self.limits = limits or RequestLimits()
        #: The last gate: claim check, shape, abstentions, the ``response`` record.
        self.delivery = Delivery(max_contacts=governed.pep.markers.max_contacts,
                                 record_access=record_access,
                                 claim_min_overlap=claim_min_overlap,
                                 unsupported_claims=unsupported_claims)  # fmt: skip
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
        strategy: Strategy | None = None,
    ) -> Answer:
        """Answer ``question`` as ``principal``; ``text`` is caller-supplied material (the
        e-mail to summarise, the contract to review), never searched. ``strategy``: the
        retrieves' (default: the orchestrator's, ``[search] default_strategy``)."""
        # Before anything is recorded: an unacceptable input opens no session, writes nothing.
        self.limits.check_input(question, text)
        request_id = f"req-{secrets.token_hex(8)}"
        session = self.governed.session(
            principal, request_id=request_id, route_id=route_id, session_id=session_id
        )
        with self.governed.trail(principal, session, request_id) as where:
            return self._answer(principal, question, text, session, request_id, where,
                                strategy or self.strategy)  # fmt: skip

    def _answer(
        self,
        principal: Principal,
        question: str,
        text: str | None,
        session: Session,
        request_id: str,
        where: dict[str, str],
        strategy: Strategy,
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
            strategy=strategy,
            top_k=self.top_k,
            max_steps=self.limits.max_steps,
            max_tokens=chosen.max_tokens,
            model_profile=chosen.profile,
            prompt=self.config.prompts.get(route.prompt_id) if route.prompt_id else None,
            output_schema=self.config.schemas.get(route.output_schema_id or ""),
            catalog=self.catalog,
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
            if not grounded and mode != "none" and self._refused_everywhere(run):
                # Nothing in scope this caller could read, and the policy gate refuses it
                # every corpus there: a refusal, not an answer (or a memo) made from nothing.
                reply, reason = "", denied_or(run, "denied")
            elif not grounded and run.output_schema is not None and mode != "none":
                # A shape promised from the organisation's documents is never filled from
                # general knowledge.
                reply, reason = "", "no_evidence"
            elif not grounded:
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
            reply, reason = llm_failure(exc.fault, request_id), "llm_error"
            detail = str(exc)
        where["stage"] = "delivery"
        answer = self.delivery.deliver(run, pattern, reply, reason, grounded)
        return replace(answer, llm_detail=detail) if detail else answer

    # -- patterns ----------------------------------------------------------------------------
    def _refused_everywhere(self, run: Run) -> bool:
        """Decide every corpus of the route's scope through the policy gate (each decision
        committed; no search follows, whatever the verdict: the store holds nothing the
        caller could read there); whether every one was refused."""
        action, tier = self.governed.retrieve_action(run.route)
        verdicts = []
        for corpus in run.session.retrieval.scope:
            proposal = Proposal(tool=PREFETCH, action=action, corpus=corpus,
                                query=run.question, risk_tier=tier)  # fmt: skip
            decision, _ = self.governed.run_tool(run.principal, run.session, proposal,
                                                 lambda: None, run.request_id)  # fmt: skip
            run.decisions.append(decision)
            verdicts.append(decision.verdict)
        return bool(verdicts) and all(v != "ALLOW" for v in verdicts)

    def _ungrounded(self, run: Run, text: str | None, no_retrieval: bool) -> str:
        system = run.system(prompts.NO_RETRIEVAL if no_retrieval else prompts.UNGROUNDED)
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompts.caller_message(run.question, text)},
        ]
        # No tools: a no-retrieval route offers none, and an empty store offers no search.
        return run.drafted(run.call_model(messages, [], stage="answer"), (), messages)

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
