"""The one protocol every LLM adapter implements: messages + tool schemas -> text or tool calls.

Messages are chat-completions shaped dicts (``role``: ``system``, ``user``, ``assistant`` or
``tool``; ``content``; an assistant's ``tool_calls``; a tool message's ``tool_call_id``), so
an OpenAI-compatible adapter passes them through unchanged. Tool schemas are what
:func:`govrag.routes.payload.tool_schemas` derives from the manifest (name, description,
parameters): the app never sends tokens, roles, entitlements or policy text, and an adapter
has no way to receive them.

A reply carries the model's proposals, never executed calls: the orchestrator checks each
against the manifest and its schema, and the PEP decides it. Arguments the model sent as
malformed JSON (or nested past the parser's depth) are kept raw (``arguments`` is then
``None``) so the app can refuse them cleanly and tell the model why. Whatever an adapter
returns, :meth:`LlmReply.screened` (applied to every reply before the app reads it) makes its
text, call ids, tool names and raw arguments valid, bounded text, so nothing a model sends can
make a message, an audit event or the next payload unwritable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from govrag import strict_json
from govrag.audit.trail import safe_text

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
    #: Why ``arguments`` is ``None`` (what the strict reader refused), for the refusal.
    problem: str = ""

    @classmethod
    def parse(cls, id: str, name: str, raw: str) -> ToolCall:
        """A call from the model's raw argument text, read as strictly as any untrusted JSON
        (:mod:`govrag.strict_json`: a repeated key, NaN or a huge integer is no argument
        object); what cannot be read is kept raw, not raised, and refused as a proposal."""
        text = raw.strip()
        try:
            value = strict_json.parse(text, max_int_digits=MAX_ARGUMENT_INT_DIGITS) if text else {}
        except strict_json.JsonProblem as exc:
            return cls(id=id, name=name, arguments=None, raw_arguments=raw,
                       problem=exc.describe())  # fmt: skip
        if not isinstance(value, dict):
            return cls(id=id, name=name, arguments=None, raw_arguments=raw)
        return cls(id=id, name=name, arguments=value, raw_arguments=raw)

    def screened(self) -> ToolCall:
        """This call with its id, name and raw arguments as valid text of bounded length
        (lone surrogates escaped); the parsed arguments are left for the proposal check."""
        raw = self.raw_arguments
        if not raw and self.arguments is not None:
            try:
                raw = json.dumps(self.arguments, sort_keys=True)
            except (TypeError, ValueError, RecursionError):
                raw = "<arguments that are not JSON>"
        return ToolCall(id=_bounded(self.id, MAX_ID_CHARS), name=_bounded(self.name, MAX_ID_CHARS),
                        arguments=self.arguments,
                        raw_arguments=_bounded(raw, MAX_RAW_ARGUMENT_CHARS),
                        problem=self.problem)  # fmt: skip

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
    #: Why the model stopped, as the server said (``stop``, ``length``, ``tool_calls``...);
    #: ``length`` means the reply was cut off by the output limit. ``None``: not reported.
    finish_reason: str | None = None
    #: Token usage as the server reported it (``None``: not reported).
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @property
    def truncated(self) -> bool:
        """The reply was cut off by the output limit (``max_tokens``)."""
        return self.finish_reason == "length"

    def screened(self) -> LlmReply:
        """This reply as the app may handle it: valid text, every call :meth:`ToolCall.screened`."""
        finish = _bounded(self.finish_reason, 64) if self.finish_reason is not None else None
        return LlmReply(text=_bounded(self.text, None), model=_bounded(self.model, MAX_ID_CHARS),
                        tool_calls=tuple(c.screened() for c in self.tool_calls),
                        finish_reason=finish, prompt_tokens=_count(self.prompt_tokens),
                        completion_tokens=_count(self.completion_tokens))  # fmt: skip

    def digest(self) -> str:
        """SHA-256 of the reply's canonical JSON (text and tool calls): what ``llm_result``
        records, so an examiner can match a reply without the log holding its text."""
        calls = [[c.id, c.name, c.raw_arguments] for c in self.tool_calls]
        body = {"text": self.text, "tool_calls": calls}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


#: Longest tool call id or tool name kept (manifest names are at most 128 characters).
MAX_ID_CHARS = 256
#: Longest raw argument text kept; the proposal check refuses far shorter arguments anyway.
MAX_RAW_ARGUMENT_CHARS = 65_536
#: Longest integer literal in a model's tool arguments (a 64-bit integer has at most 20).
MAX_ARGUMENT_INT_DIGITS = 20


def _count(value: object) -> int | None:
    """A token count as reported, or ``None`` when it is not a plausible count."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
        return value
    return None


def _bounded(text: object, limit: int | None) -> str:
    """``text`` as valid UTF-8 text (lone surrogates escaped), cut at ``limit`` characters."""
    value = text if isinstance(text, str) else str(text)
    return safe_text(value[:limit] if limit is not None else value)


class LlmClient(Protocol):
    """An LLM behind govrag's orchestrator."""

    #: ``extractive``, ``openai:<model>``, ...: recorded in the trace.
    name: str

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> LlmReply:
        """One model call. ``max_tokens`` caps this call's output below the adapter's own
        limit (``None``: the adapter's limit); ``stop`` ends generation at any of these
        strings. Adapters raise :class:`~govrag.errors.LlmError` (with its ``fault``) on
        transport or protocol faults; the orchestrator then ends the request cleanly."""
        ...


@dataclass(frozen=True)
class Profiled:
    """The model a route's ``model_profile`` picks (``[llm.profiles.<name>]``), with its
    output limit; ``profile`` is ``None`` when the deployment's ``[llm]`` itself serves."""

    llm: LlmClient
    profile: str | None
    max_tokens: int


#: A route's ``model_profile`` (or ``None``) to the model that serves it.
ModelChooser = Callable[[str | None], Profiled]
