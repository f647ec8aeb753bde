"""Controlled write-back (seed ``001``): fail-closed, scoped, bounded, audited retrieval memory.

Production uses :meth:`ControlledWriteBackStore.disabled`; only a composition root that
deliberately builds :meth:`ControlledWriteBackStore.enabled` lets allow-listed agents write.
"""

from __future__ import annotations

from govrag.writeback.admission import writeback_id
from govrag.writeback.audit import PAYLOAD_KEYS
from govrag.writeback.models import (
    ADMITTED_GATES,
    MAX_CONTENT_BYTES,
    MAX_ENTRIES_PER_SCOPE,
    MAX_IDENTITY_CHARS,
    MAX_SCOPES,
    META_AGENT_ID,
    META_CONFIDENCE,
    META_EXPIRES_AT,
    META_GATE,
    META_KEYS,
    META_SOURCE_TURN_ID,
    META_SUPERSEDES,
    SUPERSEDES_NONE,
    AdmissionGate,
    AdmissionReason,
    AdmissionResult,
    AuditSink,
    Clock,
    RetrievalScope,
    TenantDirectory,
    WriteBackCandidate,
    WriteBackHit,
)
from govrag.writeback.store import ControlledWriteBackStore

__all__ = [
    "ADMITTED_GATES", "MAX_CONTENT_BYTES", "MAX_ENTRIES_PER_SCOPE", "MAX_IDENTITY_CHARS",
    "MAX_SCOPES", "META_AGENT_ID", "META_CONFIDENCE", "META_EXPIRES_AT", "META_GATE",
    "META_KEYS", "META_SOURCE_TURN_ID", "META_SUPERSEDES", "PAYLOAD_KEYS", "SUPERSEDES_NONE",
    "AdmissionGate", "AdmissionReason", "AdmissionResult", "AuditSink", "Clock",
    "ControlledWriteBackStore", "RetrievalScope", "TenantDirectory", "WriteBackCandidate",
    "WriteBackHit", "writeback_id",
]  # fmt: skip
