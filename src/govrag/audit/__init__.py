"""The audit log's readers and its anchor: examiner replay of one request from audit records
alone (``replay``), and signed checkpoints of each tenant's chain head kept outside the
database (``keys``, ``checkpoint``, ``auto``, ``anchor``; see docs/audit.md).

The log itself (hash-chained events, written by the store) lives in ``govrag.store.audit``.
"""

from __future__ import annotations

from govrag.audit.replay import replay, shown_request_id
from govrag.audit.replay_records import Replay

__all__ = ["Replay", "replay", "shown_request_id"]
