"""The one protocol every LLM adapter implements: messages + tool schemas -> text or tool calls.

Messages are chat-completions shaped dicts (``role``: ``system``, ``user``, ``assistant`` or
``tool``; ``content``; an assistant's ``tool_calls``; a tool message's ``tool_call_id``), so
an OpenAI-compatible adapter passes them through unchanged. Tool schemas are what
:func:`govrag.routes.payload.tool_schemas` derives from the manifest (name, description,
parameters): the app never sends tokens, roles, entitlements or policy text, and an adapter
has no way to receive them.

A reply carries the model's proposals, never executed calls: the orchestrator checks each
against the manifest and its schema, and the PEP decides it. Arguments the model sent as
malformed JSON are kept raw (``arguments`` is then ``None``) so the app can refuse them
cleanly and tell the model why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: A chat message (see the module docstring).
Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool the model proposes to call."""

    id: str
    name: str
    #: The parsed JSON arguments; ``None`` when ``raw_arguments`` was not a JSON object.
    arguments: dict[str, Any] | None
    raw_arguments: str = ""

    @classmethod
    def parse(cls, id: str, name: str, raw: str) -> ToolCall:
        """A call from the model's raw argument text (malformed JSON kept, not raised)."""
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError:
            value = None
        return cls(id=id, name=name, arguments=value if isinstance(value, dict) else None,
                   raw_arguments=raw)  # fmt: skip

    def as_message(self) -> dict[str, Any]:
        """This call as an entry of an assistant message's ``tool_calls``."""
        raw = self.raw_arguments or json.dumps(self.arguments or {}, sort_keys=True)
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": raw}}  # fmt: skip


@dataclass(frozen=True)
class LlmReply:
    """What the model returned: text, tool calls, or both."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)
    #: The adapter's model identifier (recorded in the trace).
    model: str = ""


class LlmClient(Protocol):
    """An LLM behind govrag's orchestrator."""

    #: ``extractive``, ``openai:<model>``, ...: recorded in the trace.
    name: str

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> LlmReply:
        """One model call. Adapters raise :class:`~govrag.errors.LlmError` on transport or
        protocol faults (the orchestrator then ends the request cleanly)."""
        ...
