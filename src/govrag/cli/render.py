"""Answers and replays for people: what ``govrag ask``, ``govrag replay`` and the demo print."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from govrag.audit.replay_records import ProposedCall
from govrag.cli.common import err
from govrag.types import ChunkOrigin

if TYPE_CHECKING:
    from govrag.agent.answer import Answer
    from govrag.audit import Replay
    from govrag.audit.replay_records import LlmOutcome


def print_answer(answer: Answer, out: Console) -> None:
    """An answer for people: the text, its sources, the decisions and hints."""
    err.print(f"request {answer.request_id}, session {answer.session_id}, route "
              f"{answer.route_id} (pattern {answer.pattern})", highlight=False)  # fmt: skip
    for d in answer.decisions:
        if d.verdict != "ALLOW":
            what = d.corpus if d.kind == "retrieve" else f"{d.action} on {d.corpus}"
            out.print(f"[red]DENY[/] {what}: {d.reason.replace('_', ' ')} "
                      f"(audit {d.audit_id})", highlight=False)  # fmt: skip
    label = "[yellow]abstained[/]" if answer.abstained else "[green]answer[/]"
    why = f" ({answer.reason.replace('_', ' ')})" if answer.reason else ""
    out.print(f"{label}{why}: {escape(answer.answer)}", highlight=False)
    if not answer.grounded:
        out.print("[yellow]note:[/] not based on the organisation's documents", highlight=False)
    for c in answer.citations:
        where = c.corpus if c.origin is ChunkOrigin.SOURCE else "session memory"
        out.print(f"  source: [bold]{c.doc_id}[/] ({where}, {c.source_system}) {c.chunk_id}",
                  highlight=False)  # fmt: skip
    if answer.hint:
        out.print(f"[yellow]hint:[/] {escape(answer.hint)}", highlight=False)
    if answer.flagged and answer.claims:
        out.print(f"[yellow]removed, not supported by the cited chunks:[/] "
                  f"{escape(' | '.join(answer.claims.unsupported))}", highlight=False)  # fmt: skip


def print_replay(r: Replay, out: Console) -> None:
    """The examiner's six questions, answered."""
    who = r.who
    mode = who.retrieval.mode if who.retrieval else None
    out.print(f"[bold]Who?[/] {who.sub} in session {who.session_id} on route {who.route_id} "
              f"({mode})", highlight=False)  # fmt: skip
    for p in r.proposed:
        if isinstance(p, ProposedCall):
            args, on = p.arguments, p.corpus
            state = "" if p.accepted else f" REFUSED: {p.error}"
        else:
            args, on, state = {"query": p.query}, p.corpus, ""
        where = f" on {on}" if on else ""
        out.print(f"[bold]Proposed:[/] {escape(str(p.tool))}{escape(where)} "
                  f"{escape(str(args))}{escape(state)}", highlight=False)  # fmt: skip
    for d in r.decisions:
        out.print(f"[bold]Policy:[/] {d.policy_version} -> {d.verdict} ({d.reason}) "
                  f"on {d.action} {d.resource} (audit {d.audit_id})",
                  highlight=False)  # fmt: skip
    out.print(f"[bold]Verdict before search?[/] {'yes' if r.verdict_before_search else 'NO'}")
    for call in r.llm_calls:
        served = "".join(
            [f" profile {escape(str(call.model_profile))}" if call.model_profile else "",
             f" prompt {escape(str(call.prompt_id))} ({str(call.prompt_sha256)[:16]}...)"
             if call.prompt_id else ""])  # fmt: skip
        out.print(f"[bold]Model call {call.step}:[/] {escape(call.stage)} "
                  f"{escape(call.model)}{served} payload "
                  f"{call.payload_hash[:16]}... -> {escape(_outcome(call.result))}",
                  highlight=False)  # fmt: skip
    for pack in r.model_saw:
        chunks = ", ".join(f"{c.chunk_id} ({c.score:.3f})" for c in pack.chunks) or "none"
        ok = "validated" if pack.validation_passed else "NOT validated (withheld from the model)"
        where = "session memory" if pack.origin == "session_memory" else pack.corpus
        out.print(f"[bold]Model saw:[/] {pack.context_pack_id} {where} {ok}: {chunks}",
                  highlight=False)  # fmt: skip
        marker = pack.hidden_marker
        if marker:
            state = "shown" if marker.shown else f"withheld ({marker.reason})"
            contacts = ", ".join(f"{s.source_system} {s.author_email or '(no contact)'}"
                                 for s in marker.sources)  # fmt: skip
            out.print(f"[bold]Hidden-item marker:[/] {state}: {escape(contacts)}",
                      highlight=False)  # fmt: skip
        if pack.unchecked:
            out.print(f"  not checked at a source: {len(pack.unchecked)} chunk(s) "
                      f"({', '.join(sorted({u.reason for u in pack.unchecked}))})",
                      highlight=False)  # fmt: skip
    delivered = r.delivered
    for incident in r.incidents:
        if incident.kind == "pin_violation":
            attempted = incident.attempted.model_dump(mode="json") if incident.attempted else None
            out.print(f"[bold]Refused:[/] a change of pinned route {incident.route_id} "
                      f"to {escape(str(attempted))}", highlight=False)  # fmt: skip
    if r.error is not None:
        e = r.error
        out.print(f"[bold]Ended:[/] [red]failed[/] during {escape(e.stage)} "
                  f"({escape(e.error_type)}: {escape(str(_shown(e.message)))})",
                  highlight=False)  # fmt: skip
    if delivered is None:
        out.print("[bold]Delivered:[/] nothing" if r.error is not None
                  else "[bold]Delivered:[/] (a retrieval without an answer)")  # fmt: skip
    else:
        what = (
            f"abstained: {delivered.reason}"
            if delivered.abstained
            else "citing " + (", ".join(delivered.cited_doc_ids) or "nothing")
        )
        out.print(
            f"[bold]Delivered:[/] {what}; answer sha256 {delivered.answer_hash[:16]}..."
            + (f"; response {delivered.response_id}" if delivered.response_id else ""),
            highlight=False,
        )
        shape = delivered.output_schema
        if shape:
            problems = "; ".join(shape.problems)
            out.print(f"[bold]Output schema:[/] {escape(shape.schema_id)} "
                      f"({shape.sha256[:16]}...): {shape.outcome}"
                      + (f" ({escape(problems)})" if problems else ""),
                      highlight=False)  # fmt: skip
        escalation = delivered.escalation
        if escalation:
            out.print(f"[bold]Escalated:[/] to queue {escape(escalation.queue)} "
                      f"({escape(escalation.reason)})", highlight=False)  # fmt: skip
    for u in r.unrecognised:  # another govrag's kind or version: shown as stored, unread
        out.print(f"[bold]Not understood:[/] event {u.seq} ({escape(u.kind)}): "
                  f"{escape(u.problem)}; stored as {escape(u.payload[:300])}",
                  highlight=False)  # fmt: skip
    out.print(f"audit chain {'intact' if r.chain_ok else 'BROKEN'}")


def _shown(recorded: object) -> object:
    """A recorded value as a line shows it: itself, or a long one's prefix."""
    if isinstance(recorded, dict):
        return recorded.get("prefix", "")
    return recorded if recorded is not None else ""


def _outcome(result: LlmOutcome | None) -> str:
    """One model call's outcome as a line of the replay."""
    if result is None:
        return "no result recorded (the request ended during the call)"
    if result.status != "ok":
        return f"FAILED ({result.fault}): {_shown(result.error)}"
    parts = ["ok"]
    if result.finish_reason:
        parts.append(f"finish {result.finish_reason}")
    if result.prompt_tokens is not None or result.completion_tokens is not None:
        parts.append(f"{result.prompt_tokens} in / {result.completion_tokens} out tokens")
    if result.tool_calls:
        parts.append(f"{result.tool_calls} tool call(s)")
    parts.append(f"{result.latency_ms} ms")
    parts.append(f"reply {str(result.reply_hash)[:16]}...")
    return ", ".join(parts)
