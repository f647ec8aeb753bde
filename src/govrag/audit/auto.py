"""Automatic checkpoints: a tenant's head is signed every N events or T seconds.

The :class:`Checkpointer` is an observer of the store's committed audit events
(``store.observe_audit``), so it runs after the commit and can never lose or delay the
event's durability. Per event it costs a dictionary lookup and two comparisons under a lock;
a checkpoint is due when the tenant has none yet, when ``every_events`` events have passed
since the last one, or at the first event more than ``every_seconds`` after it. Only then is
the checkpoint directory read (another process may have taken one meanwhile), the head
signed and one file written (about a millisecond, mostly two fsyncs).

So the events not covered by a checkpoint are at most ``every_events - 1``, all appended
within ``every_seconds`` of the latest checkpoint: that is the tail a database-only attacker
could still cut unseen.

A failure (no key, an unwritable directory, a full disk) is logged and retried at the next
due point, never raised: the event is already committed and stays so. ``govrag audit
verify`` then warns that the latest checkpoint is stale (how many events behind, how old).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from govrag.audit.checkpoint import Checkpoint, CheckpointDir
from govrag.audit.keys import load_signing_key
from govrag.errors import ConfigError
from govrag.store.audit import AuditEvent

log = logging.getLogger("govrag.audit")


@dataclass
class _Mark:
    """The newest checkpoint this process knows of for a tenant (or its last attempt)."""

    seq: int
    at: datetime
    #: ``at`` plus ``every_seconds``: from then on the next event is due.
    deadline: datetime


class Checkpointer:
    """Takes the automatic checkpoints of one deployment (one per process)."""

    def __init__(
        self,
        directory: CheckpointDir,
        signing_key: Path,
        *,
        every_events: int,
        every_seconds: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.directory = directory
        self.signing_key = signing_key
        self.every_events = every_events
        self.every_seconds = every_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._marks: dict[str, _Mark] = {}
        self._key: Ed25519PrivateKey | None = None
        #: Checkpoints this process wrote (for tests and logs).
        self.written = 0

    def _due(self, mark: _Mark, seq: int, now: datetime) -> bool:
        return seq - mark.seq >= self.every_events or (seq > mark.seq and now >= mark.deadline)

    def observe(self, event: AuditEvent) -> None:
        """Called with each committed event; writes a checkpoint when one is due."""
        with self._lock:
            mark = self._marks.get(event.tenant)
            if mark is not None:
                if event.seq <= mark.seq:
                    return  # a checkpoint covers it already (or events came out of order)
                if event.seq - mark.seq < self.every_events and self._clock() < mark.deadline:
                    return  # the common case: two integer comparisons and a clock read
            now = self._clock()
            try:
                key = self._signing_key()
                # Another process may have taken one since: its checkpoint counts as ours.
                latest = self.directory.latest(event.tenant, key.public_key())
                if latest is not None:
                    mark = self._mark(latest.head_seq, latest.created_at)
                    self._marks[event.tenant] = mark
                    if not self._due(mark, event.seq, now):
                        return
                self.directory.write(Checkpoint.of(event, key, at=now))
            except (OSError, ConfigError) as exc:
                detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                log.error(
                    "could not write the audit checkpoint of tenant %r at event %d to %s (%s); "
                    "the event is committed; retrying after %d more events or %.0f s, and "
                    "`govrag audit verify` reports the checkpoint as stale meanwhile",
                    event.tenant, event.seq, self.directory.root, detail,
                    self.every_events, self.every_seconds,
                )  # fmt: skip
                self._key = None  # a replaced or restored key file is read again
            else:
                self.written += 1
            # Written or not: the next attempt is at the next due point, never per event.
            self._marks[event.tenant] = self._mark(event.seq, now)

    def _mark(self, seq: int, at: datetime) -> _Mark:
        return _Mark(seq, at, at + timedelta(seconds=self.every_seconds))

    def _signing_key(self) -> Ed25519PrivateKey:
        if self._key is None:
            self._key = load_signing_key(self.signing_key)
        return self._key
