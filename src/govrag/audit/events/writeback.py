"""The event of one write-back admission decision (seed ``001``): admitted or rejected, with
the reason, and the content only as its hash. Every value was made JSON-safe and bounded by
``govrag.writeback.audit`` (garbage in a rejected candidate becomes ``None`` or short text),
so the fields are loose where a rejected candidate's values may be anything."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from govrag.audit.events.base import EVENT_KIND, AuditEventBase


class WritebackAdmissionEvent(AuditEventBase):
    kind: Literal["writeback_admission"] = Field(
        "writeback_admission", exclude=True, validation_alias=EVENT_KIND
    )
    admitted: bool
    reason: str
    #: The entry's id; for a rejection, the id it would have had (or ``None``).
    id: str | None
    tenant: str | None
    session: str | None
    agent_id: str | None
    gate: str | None
    source_turn_id: str | None
    content_sha256: str | None
    #: A number, or ``"nan"``/``"inf"``/``"-inf"`` text for a non-finite one.
    confidence: float | str | None
    expires_at: str | None
    supersedes: str | None
