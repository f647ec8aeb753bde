"""The bounds of one request: how much a caller may send and how much a model may ask for.

A request costs work and audit rows in proportion to what the caller and the model put into
it, so every dimension is capped (``[llm]`` settings):

- the caller's question and text are checked *before* a session is opened or anything is
  recorded: an over-long or malformed input is an :class:`~govrag.errors.InputError` naming
  the limit's setting, and leaves no trace in the audit log (there is no request yet);
- model calls per request (``max_steps``);
- tool calls per model reply (``max_tool_calls_per_reply``) and per request
  (``max_tool_calls``): calls past either cap are refused, audited as one refusal, and never
  run; once the request's cap is spent, no tools are offered any more;
- a workflow's query-formulation reply (``query_max_tokens``, and it stops at a line break);
  every other reply is bounded by the adapter's ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from govrag.errors import InputError

if TYPE_CHECKING:
    from govrag.settings import LlmSettings

C = TypeVar("C")


@dataclass(frozen=True)
class RequestLimits:
    max_steps: int = 6
    max_tool_calls_per_reply: int = 8
    max_tool_calls: int = 24
    max_question_chars: int = 4000
    max_text_chars: int = 200_000
    #: Most tokens of any model reply (``[llm] max_tokens``), and of a workflow's
    #: query-formulation reply (``[llm] query_max_tokens``).
    max_tokens: int = 1024
    query_max_tokens: int = 64

    @classmethod
    def from_settings(cls, llm: LlmSettings) -> RequestLimits:
        return cls(
            max_steps=llm.max_steps,
            max_tool_calls_per_reply=llm.max_tool_calls_per_reply,
            max_tool_calls=llm.max_tool_calls,
            max_question_chars=llm.max_question_chars,
            max_text_chars=llm.max_text_chars,
            max_tokens=llm.max_tokens,
            query_max_tokens=llm.query_max_tokens,
        )

    def check_input(self, question: str, text: str | None) -> None:
        """Refuse a question or caller text that is blank, too long or not valid text."""
        if not question.strip():
            raise InputError("question is blank; ask something")
        _check("question", question, self.max_question_chars, "llm.max_question_chars")
        if text is not None:
            _check("text", text, self.max_text_chars, "llm.max_text_chars")

    def admit(self, calls: Sequence[C], used: int) -> tuple[list[C], list[C]]:
        """Split one reply's tool calls into those that may run and those past a cap, given
        ``used`` calls already run in this request."""
        room = max(0, min(self.max_tool_calls_per_reply, self.max_tool_calls - used))
        return list(calls[:room]), list(calls[room:])

    def cap_message(self, used: int) -> str:
        """Why calls past a cap were refused (said to the model and recorded)."""
        if used >= self.max_tool_calls:
            return (f"tool call limit reached: at most {self.max_tool_calls} tool calls per "
                    "request (llm.max_tool_calls); answer from what you have")  # fmt: skip
        return (f"tool call limit: at most {self.max_tool_calls_per_reply} tool calls per reply "
                "(llm.max_tool_calls_per_reply); these calls were not run")  # fmt: skip


def _check(what: str, value: str, limit: int, setting: str) -> None:
    if len(value) > limit:
        raise InputError(
            f"{what} is {len(value):,} characters long; the limit is {limit:,} ({setting}): "
            f"shorten the {what}, or raise {setting} in govrag.toml"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{what} is not valid UTF-8 text (a lone surrogate at character {exc.start}); "
            "pass UTF-8 text"
        ) from None
    if "\x00" in value:
        raise InputError(f"{what} contains a NUL character; remove it")
