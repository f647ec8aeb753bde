"""A structured answer's shape: read the model's reply against the route's output schema, and
ask once for a repair.

A route with ``output_schema_id`` promises its consumers a JSON shape
(:mod:`govrag.validation.structured`). Models miss shapes often and fix them readily when told
where, so a reply that misses is sent back once: the same conversation, the model's own reply,
then the app's note naming each problem (:func:`~govrag.agent.prompts.repair`), with the same
tools and the same evidence. Only one repair: a model that misses twice is not converging, and
each attempt is a model call the request pays for. What still misses is never delivered: the
request abstains with ``schema_invalid`` (a validation failure, so a route may escalate it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from govrag.agent import prompts
from govrag.agent.llm import LlmReply, Message
from govrag.validation.structured import OutputSchema, Problem, read_answer

#: Makes the repair call: the conversation to send (and the same tools) -> the model's reply.
Repair = Callable[[list[Message]], LlmReply]


@dataclass(frozen=True)
class Shaped:
    """The outcome of the output-schema check of one draft."""

    #: The structured answer (``None``: the reply missed the schema, after any repair).
    value: dict[str, Any] | None
    outcome: Literal["valid", "repaired", "invalid"]
    #: Where the last reply missed and which rule (never the model's words).
    problems: tuple[str, ...] = ()


def conform(
    schema: OutputSchema, reply: LlmReply, messages: Sequence[Message], repair: Repair | None
) -> tuple[LlmReply, Shaped]:
    """The reply to keep and its :class:`Shaped` outcome: ``reply`` itself when it satisfies
    ``schema``; else, when ``repair`` is given (a model step is left), the repaired reply if
    it does; else the last reply, ``invalid``."""
    value, problems = read_answer(reply.text, schema)
    if value is not None:
        return reply, Shaped(value, "valid")
    if repair is None:
        return reply, _invalid(problems, "no model step was left for a repair")
    note = prompts.repair([p.for_model for p in problems])
    conversation = [*messages, {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": note}]  # fmt: skip
    again = repair(conversation)
    if again.tool_calls:
        return again, _invalid([], "the repair proposed tool calls instead of an answer")
    value, problems = read_answer(again.text, schema)
    if value is not None:
        return again, Shaped(value, "repaired")
    return again, _invalid(problems)


def _invalid(problems: Sequence[Problem], *more: str) -> Shaped:
    return Shaped(None, "invalid", tuple(p.recorded for p in problems) + more)
