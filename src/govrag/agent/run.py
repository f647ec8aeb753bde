"""One request's state while the orchestrator runs it, and the governed steps it takes.

A :class:`Run` owns everything a request accumulates (PEP decisions, packs, validated
evidence, the trace) and the two governed moves every pattern is made of:

- :meth:`Run.call_model`: one LLM call, its payload hashed into the audit log first
  (``llm_call``); nothing about the caller or the policy is in the payload, and the reply is
  screened (:meth:`~govrag.agent.llm.LlmReply.screened`) before anything reads it;
- :meth:`Run.retrieve`: PEP -> gateway -> validation for a batch of one-corpus retrieves; only
  validated packs become evidence the model may see.

A reply that may be delivered is kept as a :class:`Draft` with the validated evidence handed
to the call that wrote it: those chunks, and no others, are what its citations may name.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from govrag.agent import prompts
from govrag.agent.llm import LlmClient, LlmReply, Message
from govrag.agent.retrieve import CorpusDecision, GovernedSearch
from govrag.agent.structured import Shaped, conform
from govrag.audit.events import AuditEventModel, LlmCallEvent, LlmResultEvent, write
from govrag.audit.trail import recorded
from govrag.errors import LlmError
from govrag.policy.pep import Proposal
from govrag.routes.models import Route
from govrag.routes.prompts import RoutePrompt
from govrag.routes.session import Session
from govrag.types import ContextPack, PackChunk, Principal, SearchRequest, Strategy
from govrag.validation import AuditSink, ValidationReport
from govrag.validation.answerability import topic_score
from govrag.validation.structured import OutputSchema

#: The tool name of Pattern 0's app-made retrieves.
PREFETCH = "prefetch"


def payload_hash(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> str:
    """SHA-256 of the canonical JSON of an LLM request (what ``llm_call`` records)."""
    body = json.dumps(
        {"messages": list(messages), "tools": list(tools)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    # surrogatepass: the same bytes as UTF-8 for any valid text, and no crash for the rest.
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _since(started: float) -> int:
    """Milliseconds since ``started`` (a ``perf_counter`` reading)."""
    return round((time.perf_counter() - started) * 1000)


@dataclass
class Retrieved:
    """The outcome of one proposed retrieve, as the model may learn it."""

    corpus: str
    decision: CorpusDecision
    #: The pack, when ALLOWed and validated (else ``None``).
    pack: ContextPack | None
    #: Why no pack is shown (a DENY reason or a failed validation's reason).
    refused: str | None = None


@dataclass(frozen=True)
class Draft:
    """A model reply that may be delivered, and the validated evidence (``(pack id, chunk)``)
    its call was handed: the only chunks it may cite."""

    text: str
    evidence: tuple[tuple[str, PackChunk], ...]
    #: The model stopped at the output limit: the text may be cut off mid-answer.
    truncated: bool = False
    #: The output-schema check of ``text`` (``None``: the route has no output schema).
    shaped: Shaped | None = None


@dataclass
class Run:
    governed: GovernedSearch
    llm: LlmClient
    audit: AuditSink
    principal: Principal
    question: str
    session: Session
    route: Route
    request_id: str
    strategy: Strategy = Strategy.HYBRID
    top_k: int = 8
    max_steps: int = 6
    #: The output limit of every model call (``[llm] max_tokens``); a call may ask for less.
    max_tokens: int = 1024
    #: Every PEP decision of the request, in order (retrieves and other tools alike).
    decisions: list[CorpusDecision] = field(default_factory=list)
    #: Per retrieve, in order: the trace fields of seed 003 (proposal, corpus, verdict, pack).
    retrievals: list[dict[str, Any]] = field(default_factory=list)
    packs: list[ContextPack] = field(default_factory=list)
    #: ``(pack id, chunk)`` of every chunk that passed validation: all the model may cite.
    evidence: list[tuple[str, PackChunk]] = field(default_factory=list)
    validations: list[ValidationReport] = field(default_factory=list)
    steps: int = 0
    #: Tool calls of the model that were run (checked, decided) so far.
    tool_calls: int = 0
    trace: dict[str, Any] = field(default_factory=dict)
    #: The latest reply that may be delivered (see :meth:`drafted`).
    draft: Draft | None = None
    #: The ``[llm.profiles.<name>]`` serving this request (``None``: ``[llm]``).
    model_profile: str | None = None
    #: The route's own instructions (``prompts/<prompt_id>.txt``; ``None``: govrag's own).
    prompt: RoutePrompt | None = None
    #: The shape the answer must have (``schemas/<output_schema_id>.json``; ``None``: text).
    output_schema: OutputSchema | None = None
    #: Each corpus's description (what ``list_corpora`` shows): a refused corpus the question
    #: is about is named in a ``denied`` outcome (:func:`denied_or`).
    catalog: Callable[[str], list[tuple[str, str]]] | None = None

    def system(self, rules: str) -> str:
        """An answering call's system message: the route's prompt, if any, then govrag's
        ``rules``, then the output schema, if any."""
        if self.output_schema is not None:
            rules = f"{rules}\n\n{prompts.structured(self.output_schema.compact)}"
        return self.prompt.system(rules) if self.prompt is not None else rules

    def record(self, event: AuditEventModel) -> None:
        write(self.audit, self.principal.tenant, event, request_id=self.request_id,
              session_id=self.session.session_id)  # fmt: skip

    # -- the model ---------------------------------------------------------------------------
    @property
    def steps_left(self) -> bool:
        return self.steps < self.max_steps

    def call_model(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        stage: str,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> LlmReply:
        """One LLM call; its payload hash is committed before the call is made, and its
        outcome (``llm_result``: finish reason, token usage, latency, reply hash, or the
        fault class and the operator's message) after it, success or not."""
        self.steps += 1
        step = self.steps
        limit = self.max_tokens if max_tokens is None else min(max_tokens, self.max_tokens)
        # The route's prompt is on record for the calls it opened (a query-formulation call
        # has govrag's own instructions only).
        prompt = self.prompt if self.prompt and any(
            m["role"] == "system" and str(m.get("content") or "").startswith(self.prompt.text)
            for m in messages) else None  # fmt: skip
        self.record(
            LlmCallEvent(
                payload_hash=payload_hash(messages, tools),
                model=self.llm.name,
                model_profile=self.model_profile,
                prompt_id=prompt.prompt_id if prompt else None,
                prompt_sha256=prompt.sha256 if prompt else None,
                stage=stage,
                step=step,
                tools=[t["name"] for t in tools],
                # What else bounds the reply (the hash covers messages and tools).
                max_tokens=limit,
                stop=list(stop),
            )
        )
        started = time.perf_counter()
        try:
            reply = self.llm.complete(messages, tools, max_tokens=limit, stop=stop).screened()
        except Exception as exc:
            # Every call gets its outcome, whatever failed; an unexpected fault's own text
            # may hold anything, so only its type is recorded (as for the ``error`` event).
            fault, error = (
                (exc.fault, recorded(str(exc)))
                if isinstance(exc, LlmError)
                else ("unexpected", type(exc).__name__)
            )
            self.record(LlmResultEvent(stage=stage, step=step, status="error", fault=fault,
                                       error=error, latency_ms=_since(started)))  # fmt: skip
            raise
        self.record(
            LlmResultEvent(
                stage=stage,
                step=step,
                status="ok",
                finish_reason=reply.finish_reason,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                latency_ms=_since(started),
                reply_hash=reply.digest(),
                tool_calls=len(reply.tool_calls),
            )
        )
        return reply

    def drafted(
        self,
        reply: LlmReply,
        evidence: Sequence[tuple[str, PackChunk]],
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] = (),
    ) -> str:
        """Keep ``reply`` (a model reply with no tool calls to ``messages`` and ``tools``) as
        the draft answer, with the validated ``evidence`` handed to the call that wrote it;
        returns its text. On a route with an output schema, a reply that misses it is sent
        back once for repair (:mod:`govrag.agent.structured`), with the same evidence."""
        shaped = None
        if self.output_schema is not None:

            def repair(conversation: list[Message]) -> LlmReply:
                return self.call_model(conversation, tools, stage="repair")

            reply, shaped = conform(self.output_schema, reply, messages,
                                    repair if self.steps_left else None)  # fmt: skip
        self.draft = Draft(reply.text, tuple(evidence), truncated=reply.truncated, shaped=shaped)
        return reply.text

    # -- retrieval ---------------------------------------------------------------------------
    def retrieve(
        self,
        proposals: Sequence[Proposal],
        *,
        query_of: Callable[[], str] | None = None,
        with_evidence: bool = False,
    ) -> list[Retrieved]:
        """PEP-gate each proposal, then validate the ALLOWed packs together; only a passing
        validation turns them into evidence. ``query_of`` makes the search query only after
        the ALLOW (a workflow's query formulation: a denied stage costs no model call).
        ``with_evidence``: answerability reads the packs beside the evidence validated so far
        (a workflow's stage, which the route, not the model, names)."""
        # The marker judges the caller's question, whatever words the model searches with.
        request = SearchRequest(query=self.question, strategy=self.strategy, top_k=self.top_k,
                                marker_query=self.question)  # fmt: skip
        done: list[tuple[Proposal, CorpusDecision, ContextPack | None]] = []
        searched: dict[int, str] = {}  # proposal index -> the query made for it
        for index, proposal in enumerate(proposals):
            # A corpus the model or a workflow stage names is a named source; prefetch takes
            # the route's scope and names none (only then may the write-back overlay join).
            named = None if proposal.tool == PREFETCH else (proposal.corpus,)
            one = request.model_copy(update={"corpora": named})

            def made(
                one: SearchRequest = one, proposal: Proposal = proposal, index: int = index
            ) -> SearchRequest:
                query = (query_of() if query_of else proposal.query).strip() or self.question
                searched[index] = query[:4096]
                return one.model_copy(update={"query": searched[index]})

            decision, pack = self.governed.retrieve(
                self.principal, self.session, proposal, made if query_of else made(),
                self.request_id,
            )  # fmt: skip
            self.decisions.append(decision)
            done.append((proposal, decision, pack))
        packs = [p for _, _, p in done if p is not None]
        memory = None
        if proposals and all(p.tool == PREFETCH for p in proposals):
            # A prefetch over the route's scope names no source: the overlay may join it.
            memory = self.governed.memory(
                self.principal, self.session, request, [(d, p) for _, d, p in done],
                self.request_id,
            )  # fmt: skip
        if memory is not None:
            packs.append(memory)
        report: ValidationReport | None = None
        if packs:
            report, packs = self.governed.validate(
                self.principal,
                self.question,
                packs,
                self.session,
                [d for _, d, _ in done],
                self.request_id,
                prior=[c.text for _, c in self.evidence] if with_evidence else (),
            )
            self.validations.append(report)
            self.packs.extend(packs)
        out: list[Retrieved] = []
        packs_iter = iter(packs)
        for index, (proposal, decision, pack) in enumerate(done):
            shown = next(packs_iter) if pack is not None else None
            self.retrievals.append({
                "retrieve_proposal": {"tool": proposal.tool, "corpus": proposal.corpus,
                                      "query": searched.get(index, proposal.query)},
                "corpus": proposal.corpus,
                "pep_verdict": decision.verdict,
                "context_pack_id": shown.context_pack_id if shown else None,
                "validation_passed": report.validation_passed if shown and report else None,
                # This retrieve's share of the request's scope violations.
                "scope_violations": sum(1 for v in report.scope_violations
                                        if v.context_pack_id == shown.context_pack_id)
                if shown and report else 0,
            })  # fmt: skip
            if shown is None:
                out.append(Retrieved(proposal.resource, decision, None, decision.reason))
                continue
            assert report is not None
            if not report.validation_passed:
                out.append(Retrieved(proposal.resource, decision, None, report.reason))
                continue
            self.evidence.extend((shown.context_pack_id, c) for c in shown.chunks)
            out.append(Retrieved(proposal.resource, decision, shown))
        shown_memory = next(packs_iter, None)  # the memory pack comes after the corpus packs
        if shown_memory is not None and report is not None:
            self.trace["session_memory"] = {
                "context_pack_id": shown_memory.context_pack_id,
                "validation_passed": report.validation_passed,
            }
            if report.validation_passed:
                self.evidence.extend((shown_memory.context_pack_id, c)
                                     for c in shown_memory.chunks)  # fmt: skip
        return out


def denied_or(run: Run, fallback: str, *, by_model: bool = False) -> str:
    """Why a request found no evidence: ``denied`` when every retrieve was refused by policy,
    or when the policy gate refused a corpus of the route's scope that the question is about
    (:func:`refused_about`: the answer may be there, and nothing the caller may read answers
    it); ``model_out_of_scope`` when the model (``by_model``) proposed only corpora outside
    the pinned route, which says nothing of the caller's rights; else ``fallback``."""
    retrieves = [d for d in run.decisions if d.kind == "retrieve"]
    if retrieves and all(d.verdict != "ALLOW" for d in retrieves):
        if by_model and all(d.reason == "out_of_scope" for d in retrieves):
            return "model_out_of_scope"
        run.trace["refused_corpora"] = refused(run)
        return "denied"
    about = refused_about(run)
    if about:
        run.trace["refused_corpora"] = about
        return "denied"
    return fallback


def refused(run: Run) -> list[str]:
    """The corpora of the route's scope the policy gate refused on this request (a retrieve
    or a listing), in scope order. A gate that could not decide (``policy_error``: no policy,
    an unrecordable decision) refused nothing anyone could be asked about."""
    scope = run.session.retrieval.scope
    denied = {d.corpus for d in run.decisions
              if d.kind in ("retrieve", "list") and d.verdict != "ALLOW"
              and d.reason not in ("out_of_scope", "policy_error")}  # fmt: skip
    return [c for c in scope if c in denied]


def refused_about(run: Run) -> list[str]:
    """The refused corpora (:func:`refused`) the question is about, by their id and
    description (``[validation] refused_corpus_relevance``); configuration only, never the
    corpus's documents."""
    corpora = refused(run)
    if not corpora:
        return []
    validator = run.governed.validator
    least = validator.settings.refused_corpus_relevance
    described = dict(run.catalog(run.principal.tenant)) if run.catalog is not None else {}
    return [
        c
        for c in corpora
        if topic_score(run.question, c, described.get(c, ""), validator.relevance) >= least
    ]


#: Runs a non-retrieve tool of a workflow stage or a proposal: arguments -> result text.
ToolExecutor = Callable[[dict[str, Any]], str]
