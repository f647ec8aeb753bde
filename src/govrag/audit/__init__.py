"""The audit log's readers: examiner replay of one request from audit records alone.

The log itself (hash-chained events, written by the store) lives in ``govrag.store.audit``.
"""

from __future__ import annotations

from govrag.audit.replay import Replay, replay

__all__ = ["Replay", "replay"]
