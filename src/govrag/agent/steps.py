"""The steps every pattern is made of, shared by the orchestrator and the workflow runner.

- :meth:`Steps.loop`: the model proposes tools (Pattern 1, and a Pattern 3 stage with its
  allowlist) within ``max_steps``; each proposal is checked against the manifest and its
  schema, decided by the PEP, and its observation returned; refusals are observations too;
- :meth:`Steps.observe`: one reply's tool calls, capped per reply and per request
  (:mod:`govrag.agent.limits`); retrieves are validated together (:meth:`Run.retrieve`);
- :meth:`Steps.run_tool`: a tool that does not search, PEP-gated like a retrieve
  (``list_corpora`` one decision per corpus of the route's scope, naming only the ALLOWed
  ones; ``get_document_metadata`` only for a document of this request's validated evidence;
  any other tool decided on the tool itself, its executor run only after an ALLOW);
- :meth:`Steps.synthesize`: one call with no tools, answering only from validated evidence.

What the caller sent reaches a model only fenced as untrusted data
(:func:`~govrag.agent.prompts.caller_message`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from govrag.agent import prompts
from govrag.agent.limits import RequestLimits
from govrag.agent.listings import Catalog, list_corpora, listing_json
from govrag.agent.llm import Message, ToolCall
from govrag.agent.retrieve import GovernedSearch
from govrag.agent.run import Run, ToolExecutor, denied_or
from govrag.audit.events import ProposalEvent
from govrag.audit.trail import recorded, safe_text
from govrag.errors import InputError
from govrag.policy.pep import Proposal
from govrag.routes.models import Tool
from govrag.routes.payload import check_proposal, offered_tools, tool_schemas
from govrag.types import PackChunk


class Steps:
    """The shared steps of one deployment's patterns (see the module docstring)."""

    def __init__(
        self,
        governed: GovernedSearch,
        *,
        catalog: Catalog,
        executors: dict[str, ToolExecutor],
        limits: RequestLimits,
    ) -> None:
        self.governed = governed
        self.catalog = catalog
        #: Tool executors by name; the caller's dict itself, so a registration is seen.
        self.executors = executors
        self.limits = limits

    @property
    def config(self) -> Any:
        return self.governed.sessions.config

    def loop(self, run: Run, text: str | None, tools: list[Tool]) -> tuple[str, str | None]:
        messages: list[Message] = [
            {"role": "system", "content": run.system(prompts.TOOLS)},
            {"role": "user", "content": prompts.caller_message(run.question, text)},
        ]
        reply_text = ""
        first = len(run.evidence)  # this loop's messages hold exactly the evidence after it
        while run.steps_left:
            # Once the request's tool calls are spent, nothing is offered: the model answers.
            offered = tools if run.tool_calls < self.limits.max_tool_calls else []
            schemas = tool_schemas(offered, scope=run.session.retrieval.scope)
            reply = run.call_model(messages, schemas, stage="loop")
            if not reply.tool_calls:
                reply_text = run.drafted(reply, run.evidence[first:], messages, schemas)
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

    def tools(self, run: Run, allowlist: tuple[str, ...] | None) -> list[Tool]:
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
                run.record(ProposalEvent(tool=recorded(call.name), accepted=False,
                                         error=recorded(str(exc)),
                                         arguments=recorded(call.raw_arguments)))  # fmt: skip
                results[i] = prompts.refusal(error=str(exc))
                continue
            run.record(ProposalEvent(tool=call.name, accepted=True,
                                     arguments=recorded(checked.arguments),
                                     corpus=corpus))  # fmt: skip
            if checked.tool.kind == "retrieve" and corpus is not None:
                retrieves.append((i, Proposal(tool=checked.tool.name, action=checked.action,
                                              corpus=corpus, query=checked.query,
                                              risk_tier=checked.tool.risk_tier)))  # fmt: skip
            else:
                results[i] = self.run_tool(run, checked.tool, checked.arguments)
        if excess:  # never run; one audit event, however many there were
            error = self.limits.cap_message(run.tool_calls)
            run.record(
                ProposalEvent(
                    tool="*",
                    accepted=False,
                    error=error,
                    calls=len(excess),
                    arguments=recorded(sorted({c.name for c in excess})),
                )
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

    def run_tool(self, run: Run, tool: Tool, arguments: dict[str, Any]) -> str:
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
                                kind="metadata", risk_tier=tool.risk_tier)  # fmt: skip
            return self._gated(run, proposal, lambda: self._describe(run, chunk))
        executor = self.executors.get(tool.name)

        def execute() -> str:
            if executor is None:
                return prompts.refusal(error=f"tool {tool.name!r} has no executor in this runtime")
            return executor(arguments)

        other = Proposal(tool=tool.name, action=tool.pdp_action, corpus=None, kind="other",
                         risk_tier=tool.risk_tier)  # fmt: skip
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
        entries, decisions = list_corpora(self.governed, self.catalog, run.principal,
                                          run.session, tool, run.request_id)  # fmt: skip
        run.decisions.extend(decisions)
        return listing_json(entries)

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
            {"role": "system", "content": f"{run.system(prompts.SYNTHESIS)}\n\n{context}"},
            {"role": "user", "content": prompts.caller_message(run.question, text)},
        ]
        return run.drafted(run.call_model(messages, [], stage="synthesis"), handed, messages)
