"""Events of the model's side of a request: each LLM call (committed before the call is
made: a hash of what is sent, never the text), its outcome, and each tool call the model
proposed (accepted or refused; its arguments bounded)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from govrag.audit.events.base import EVENT_KIND, AuditEventBase, Recorded


class LlmCallEvent(AuditEventBase):
    kind: Literal["llm_call"] = Field("llm_call", exclude=True, validation_alias=EVENT_KIND)
    #: SHA-256 of the canonical JSON of the messages and tools sent.
    payload_hash: str
    model: str
    #: The route's ``model_profile`` that picked the model (``None``: ``[llm]`` served).
    model_profile: str | None = None
    #: The route's prompt and its content's SHA-256 (``None``: govrag's built-in one).
    prompt_id: str | None = None
    prompt_sha256: str | None = None
    stage: str
    #: The call's number in the request (its ``llm_result`` has the same).
    step: int
    tools: tuple[str, ...]
    #: What else bounds the reply (the hash covers messages and tools).
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()


class LlmResultEvent(AuditEventBase):
    """A call's outcome: usage and the reply's hash (``ok``), or its fault (``error``)."""

    kind: Literal["llm_result"] = Field("llm_result", exclude=True, validation_alias=EVENT_KIND)
    stage: str
    step: int
    status: Literal["ok", "error"]
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int
    reply_hash: str | None = None
    tool_calls: int | None = None
    #: ``error`` only: the fault class, and the operator's message (or the exception type).
    fault: str | None = None
    error: Recorded = None


class ProposalEvent(AuditEventBase):
    """One tool call the model proposed: accepted (with the corpus it binds) or refused (with
    the error), or ``tool`` ``"*"`` for the ``calls`` proposals past the request's cap."""

    kind: Literal["proposal"] = Field("proposal", exclude=True, validation_alias=EVENT_KIND)
    tool: Recorded
    accepted: bool
    arguments: Recorded
    corpus: str | None = None
    error: Recorded = None
    calls: int | None = None
