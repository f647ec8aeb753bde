"""Patterns 2 and 3: a workflow's stages run in order; the workflow, not the model, decides
when to search and where.

Per stage, by its ``llm_role``:

- ``none``: the app runs the stage's tool without the model. A retrieve tool searches the
  stage's corpus (bound by the stage or the tool) with the question; another tool runs its
  registered executor, if any.
- ``query_formulation``: the model writes only the query (a call with no tools); the app binds
  the stage's corpus, and PEP -> pack -> validation follows.
- ``synthesis``: the model answers only from the stage outputs (the validated packs).
- a stage with an ``allowlist`` (Pattern 3): the model proposes tools as in Pattern 1, but
  only those on the stage's allowlist.

There is no prefetch: a tool route searches only where a stage names it.
"""

from __future__ import annotations

from functools import partial

from govrag.agent import prompts
from govrag.agent.llm import Message
from govrag.agent.run import Run, denied_or
from govrag.agent.steps import Steps
from govrag.policy.pep import Proposal
from govrag.routes.models import Stage, Workflow


def run_workflow(
    steps: Steps, run: Run, workflow: Workflow, text: str | None
) -> tuple[str, str | None]:
    """Run the stages; returns the synthesis text and, when it must abstain, the reason."""
    manifest = steps.config.manifests.get(run.route.tool_manifest)
    answer: str | None = None
    stages: list[dict[str, object]] = []
    for stage in workflow.stages:
        tool = manifest.tool(stage.tool) if manifest and stage.tool else None
        note: dict[str, object] = {"stage": stage.id, "llm_role": stage.llm_role}
        if stage.allowlist is not None:  # Pattern 3
            before = len(run.evidence)
            reply, _ = steps.loop(run, text, steps.tools(run, stage.allowlist))
            note["evidence"] = len(run.evidence) - before
            answer = reply or answer
        elif stage.llm_role == "synthesis":
            if not run.evidence:
                break
            answer = steps.synthesize(run, text)
        elif tool is not None and tool.kind == "retrieve":
            corpus = stage.corpus or tool.corpus
            if corpus is None:
                note["skipped"] = "no corpus bound to the stage or its tool"
            elif corpus not in run.session.retrieval.scope:
                # The route has it but the session's pin does not: the caller's tenant holds
                # no corpus of that id ([corpora.<id>] tenants). Such a stage does not exist
                # for it: no trace entry either (its name could say which corpus it searches).
                continue
            else:
                # The PEP decides the stage's corpus first; only an ALLOW asks the model to
                # formulate the query (a denied stage costs no model call).
                ask_model = stage.llm_role == "query_formulation"
                query_of = partial(_formulate, steps, run, stage, corpus)
                (outcome,) = run.retrieve(
                    [Proposal(tool=tool.name, action=tool.pdp_action, corpus=corpus,
                              query=run.question, risk_tier=tool.risk_tier)],
                    query_of=query_of if ask_model else None,
                    # Judged with what the earlier stages found: the playbook's position
                    # answers a contract review beside the clauses, never alone.
                    with_evidence=True,
                )  # fmt: skip
                note.update(
                    {
                        "corpus": corpus,
                        # What was searched (the question when the stage was denied).
                        "query": run.retrievals[-1]["retrieve_proposal"]["query"],
                        "verdict": outcome.decision.verdict,
                        "pack": outcome.pack.context_pack_id if outcome.pack else None,
                        "refused": outcome.refused,
                    }
                )
        elif tool is not None:
            note["output"] = steps.run_tool(run, tool, {"text": text or ""})[:500]
        stages.append(note)
        if not run.steps_left:
            run.trace["step_limit"] = True
            break
    run.trace["stages"] = stages
    if answer is None:
        if run.evidence and run.steps_left:  # no synthesis stage: still answer from outputs
            answer = steps.synthesize(run, text)
        else:
            last = run.validations[-1] if run.validations else None
            failed = last.reason if last and not last.validation_passed else None
            return "", failed or denied_or(run, "no_evidence")
    return answer, None


def _formulate(steps: Steps, run: Run, stage: Stage, corpus: str) -> str:
    """The query the model writes for ``stage``."""
    messages: list[Message] = [
        {
            "role": "system",
            "content": f"{prompts.QUERY_FORMULATION}\nStage: {stage.id}; corpus: {corpus}.",
        },
        {"role": "user", "content": prompts.caller_message(run.question)},
    ]
    # A query is one short line: the reply is capped and stops at the first line break.
    reply = run.call_model(messages, [], stage=stage.id,
                           max_tokens=steps.limits.query_max_tokens, stop=("\n",))  # fmt: skip
    # The model writes the query only: its first line, bounded; never a corpus or a tool.
    return (reply.text.strip().splitlines() or [""])[0][:512] or run.question
