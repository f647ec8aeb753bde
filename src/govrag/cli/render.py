"""Answers and replays for people: what ``govrag ask``, ``govrag replay`` and the demo print."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from govrag.cli.common import err
from govrag.types import ChunkOrigin

if TYPE_CHECKING:
    from govrag.agent.answer import Answer
    from govrag.audit import Replay


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
    out.print(f"[bold]Who?[/] {who['sub']} in session {who['session_id']} on route "
              f"{who['route_id']} ({(who.get('retrieval') or {}).get('mode')})",
              highlight=False)  # fmt: skip
    for p in r.proposed:
        args = p.get("arguments") if "arguments" in p else {"query": p.get("query")}
        state = "" if p.get("accepted", True) else f" REFUSED: {p.get('error')}"
        on = f" on {p['corpus']}" if p.get("corpus") else ""
        out.print(f"[bold]Proposed:[/] {escape(str(p.get('tool')))}{escape(on)} "
                  f"{escape(str(args))}{escape(state)}", highlight=False)  # fmt: skip
    for d in r.decisions:
        out.print(f"[bold]Policy:[/] {d['policy_version']} -> {d['verdict']} ({d['reason']}) "
                  f"on {d['action']} {d['resource']} (audit {d['audit_id']})",
                  highlight=False)  # fmt: skip
    out.print(f"[bold]Verdict before search?[/] {'yes' if r.verdict_before_search else 'NO'}")
    for call in r.llm_calls:
        served = "".join(
            [f" profile {escape(str(call['model_profile']))}" if "model_profile" in call else "",
             f" prompt {escape(str(call['prompt_id']))} ({str(call.get('prompt_sha256'))[:16]}...)"
             if "prompt_id" in call else ""])  # fmt: skip
        out.print(f"[bold]Model call {call['step']}:[/] {escape(str(call['stage']))} "
                  f"{escape(str(call['model']))}{served} payload "
                  f"{str(call['payload_hash'])[:16]}... -> {escape(_outcome(call['result']))}",
                  highlight=False)  # fmt: skip
    for p in r.model_saw:
        chunks = ", ".join(f"{c['chunk_id']} ({c['score']:.3f})" for c in p["chunks"]) or "none"
        ok = "validated" if p["validation_passed"] else "NOT validated (withheld from the model)"
        where = "session memory" if p.get("origin") == "session_memory" else p["corpus"]
        out.print(f"[bold]Model saw:[/] {p['context_pack_id']} {where} {ok}: {chunks}",
                  highlight=False)  # fmt: skip
        marker = p.get("hidden_marker")
        if marker:
            state = "shown" if marker["shown"] else f"withheld ({marker['reason']})"
            contacts = ", ".join(f"{s['source_system']} {s['author_email'] or '(no contact)'}"
                                 for s in marker["sources"])  # fmt: skip
            out.print(f"[bold]Hidden-item marker:[/] {state}: {escape(contacts)}",
                      highlight=False)  # fmt: skip
        if p.get("unchecked"):
            out.print(f"  not checked at a source: {len(p['unchecked'])} chunk(s) "
                      f"({', '.join(sorted({u['reason'] for u in p['unchecked']}))})",
                      highlight=False)  # fmt: skip
    delivered = r.delivered
    for incident in r.incidents:
        if incident.get("kind") == "pin_violation":
            out.print(f"[bold]Refused:[/] a change of pinned route {incident.get('route_id')} "
                      f"to {escape(str(incident.get('attempted')))}",
                      highlight=False)  # fmt: skip
    if r.error is not None:
        e = r.error
        message = e.get("message")
        shown = message if isinstance(message, str) else (message or {}).get("prefix", "")
        out.print(f"[bold]Ended:[/] [red]failed[/] during {escape(str(e.get('stage')))} "
                  f"({escape(str(e.get('error_type')))}: {escape(str(shown))})",
                  highlight=False)  # fmt: skip
    if delivered is None:
        out.print("[bold]Delivered:[/] nothing" if r.error is not None
                  else "[bold]Delivered:[/] (a retrieval without an answer)")  # fmt: skip
    else:
        what = (
            f"abstained: {delivered['reason']}"
            if delivered["abstained"]
            else "citing " + (", ".join(delivered["cited_doc_ids"]) or "nothing")
        )
        out.print(
            f"[bold]Delivered:[/] {what}; answer sha256 {delivered['answer_hash'][:16]}..."
            + (f"; response {delivered['response_id']}" if "response_id" in delivered else ""),
            highlight=False,
        )
        shape = delivered.get("output_schema")
        if shape:
            problems = "; ".join(shape["problems"])
            out.print(f"[bold]Output schema:[/] {escape(shape['schema_id'])} "
                      f"({shape['sha256'][:16]}...): {shape['outcome']}"
                      + (f" ({escape(problems)})" if problems else ""),
                      highlight=False)  # fmt: skip
        escalation = delivered.get("escalation")
        if escalation:
            out.print(f"[bold]Escalated:[/] to queue {escape(str(escalation['queue']))} "
                      f"({escape(str(escalation['reason']))})", highlight=False)  # fmt: skip
    for u in r.unrecognised:  # another govrag's kind or version: shown as stored, unread
        out.print(f"[bold]Not understood:[/] event {u['seq']} ({escape(str(u['kind']))}): "
                  f"{escape(str(u['problem']))}; stored as {escape(str(u['payload'])[:300])}",
                  highlight=False)  # fmt: skip
    out.print(f"audit chain {'intact' if r.chain_ok else 'BROKEN'}")


def _outcome(result: dict[str, Any] | None) -> str:
    """One model call's outcome as a line of the replay."""
    if result is None:
        return "no result recorded (the request ended during the call)"
    if result.get("status") != "ok":
        error = result.get("error")
        shown = error if isinstance(error, str) else (error or {}).get("prefix", "")
        return f"FAILED ({result.get('fault')}): {shown}"
    parts = ["ok"]
    if result.get("finish_reason"):
        parts.append(f"finish {result['finish_reason']}")
    if result.get("prompt_tokens") is not None or result.get("completion_tokens") is not None:
        parts.append(f"{result.get('prompt_tokens')} in / {result.get('completion_tokens')} out "
                     "tokens")  # fmt: skip
    if result.get("tool_calls"):
        parts.append(f"{result['tool_calls']} tool call(s)")
    parts.append(f"{result.get('latency_ms')} ms")
    parts.append(f"reply {str(result.get('reply_hash'))[:16]}...")
    return ", ".join(parts)
