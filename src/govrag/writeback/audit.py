"""The audit record of one admission decision (admitted or rejected).

Every decision is handed to the store's audit sink as ``audit(tenant, session, payload)``
*before* an admitted entry is indexed; the payload is that of a
:class:`~govrag.audit.events.WritebackAdmissionEvent` (the deployment's sink writes it to the
audit log as that event). The payload never holds the content, only its SHA-256,
and every value is JSON-safe whatever the candidate held: garbage becomes ``None`` (or a short
text form), strings are bounded and have no lone surrogates, numbers are finite.
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import datetime
from typing import Any

from govrag.audit.events import WritebackAdmissionEvent
from govrag.writeback.admission import (
    Fields,
    confidence_value,
    expiry_value,
    instant_text,
    writeback_id,
)
from govrag.writeback.models import (
    MAX_IDENTITY_CHARS,
    AdmissionGate,
    AdmissionReason,
    AuditSink,
)

__all__ = ["PAYLOAD_KEYS", "audit_record", "audit_text", "record_decision"]

#: The store's logger: a sink failure is logged where it always was.
logger = logging.getLogger("govrag.writeback.store")

PAYLOAD_KEYS: tuple[str, ...] = tuple(
    name for name in WritebackAdmissionEvent.model_fields if name not in ("kind", "v")
)
"""Exactly the keys of every audit payload (the fields of :class:`WritebackAdmissionEvent`)."""

#: Strings longer than this are cut in the audit record (a rejected candidate may carry
#: megabytes in an identity field; the record only needs to recognise it).
AUDIT_TEXT_CHARS = MAX_IDENTITY_CHARS


def audit_text(value: Any) -> str | None:
    """A string as bounded, UTF-8-safe text (lone surrogates become ``?``); else ``None``."""
    if not isinstance(value, str):
        return None
    text = str.__str__(value)
    if len(text) > AUDIT_TEXT_CHARS:
        text = f"{text[:AUDIT_TEXT_CHARS]}...[{len(text) - AUDIT_TEXT_CHARS} more characters]"
    return text.encode("utf-8", "replace").decode("utf-8")


def _content_sha256(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    # surrogatepass: a (rejected) content with a lone surrogate still gets a recognisable hash.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _confidence(value: Any) -> float | str | None:
    valid = confidence_value(value)
    if valid is not None:
        return valid
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf": JSON has no such numbers
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    return None


def _expires_at(value: Any) -> str | None:
    utc = expiry_value(value)
    if utc is not None:
        return instant_text(utc)
    if not isinstance(value, datetime):
        return None
    try:
        # A naive datetime still says what the writer meant; it is recorded without a "Z".
        return audit_text(value.isoformat())
    except Exception:  # a tzinfo whose utcoffset misbehaves
        return None


def _gate(value: Any) -> str | None:
    if isinstance(value, AdmissionGate):
        return value.value
    return audit_text(value)


def _would_be_id(fields: Fields) -> str | None:
    """The id the candidate has (or would have had), when its id fields are usable text."""
    parts = (fields.tenant, fields.session, fields.source_turn_id, fields.agent_id, fields.content)
    if not all(isinstance(p, str) for p in parts):
        return None
    try:
        return writeback_id(*parts)
    except UnicodeEncodeError:
        return None


def audit_record(
    fields: Fields, reason: AdmissionReason, entry_id: str | None
) -> tuple[str, str, WritebackAdmissionEvent]:
    """``(tenant, session, event)`` for one decision; tenant/session are ``""`` if unusable.

    ``id`` is the entry's id when admitted; for a rejection it is the id the candidate would
    have had (so an examiner can relate a rejection to a later admission), or ``None``.
    """
    tenant = audit_text(fields.tenant)
    session = audit_text(fields.session)
    event = WritebackAdmissionEvent(
        admitted=reason is AdmissionReason.ADMITTED,
        reason=reason.value,
        id=entry_id if entry_id is not None else _would_be_id(fields),
        tenant=tenant,
        session=session,
        agent_id=audit_text(fields.agent_id),
        gate=_gate(fields.gate),
        source_turn_id=audit_text(fields.source_turn_id),
        content_sha256=_content_sha256(fields.content),
        confidence=_confidence(fields.confidence),
        expires_at=_expires_at(fields.expires_at),
        supersedes=audit_text(fields.supersedes),
    )
    return tenant or "", session or "", event


def record_decision(
    sink: AuditSink | None, fields: Fields, reason: AdmissionReason, entry_id: str | None
) -> bool:
    """Hand one decision's payload to ``sink``; ``False`` if that failed. Never raises."""
    if sink is None:
        logger.debug("write-back decision %s (no audit sink configured)", reason.value)
        return True
    try:
        tenant, session, event = audit_record(fields, reason, entry_id)
        sink(tenant, session, event.payload())
    except Exception:
        logger.exception("write-back audit failed for a %s decision", reason.value)
        return False
    return True
