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

It never *adopts* a tenant. A first checkpoint signs whatever the log holds, so signing one
for a tenant whose chain is already under way would launder a cut: delete the checkpoint
folder (or restore it empty), cut the log, make one request, and the cut chain would verify
clean. A tenant's first checkpoint is therefore written automatically only when its history
starts at the tenant's first event: the event signed is event 1, or this process saw event
1 itself (and its checkpoint could not be written then); and only when no checkpoint file of
the tenant exists (valid or not) and this process never knew one. Otherwise the tenant is
left unanchored, logged once as a warning, and ``govrag audit verify`` keeps reporting it
(``unanchored``) until an operator who checked the log signs it (``govrag audit checkpoint
--tenant T`` or ``--adopt``). A log wiped to nothing *and* a checkpoint history removed look
like a new tenant; nothing outside the database remembers either.

A failure (no key, a key open to other users, an unwritable directory, a full disk) is
logged and retried at the next due point, never raised: the event is already committed and
stays so. ``govrag audit verify`` then warns that the latest checkpoint is stale (how many
events behind, how old), or reports the exposed key. The key file is looked at (one
``stat``) at each due point, so a rotated key or changed permissions take effect without a
restart.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from govrag.audit.checkpoint import Checkpoint, CheckpointDir
from govrag.audit.keys import Keyring, load_keyring, load_signing_key
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
    #: This process wrote or read a checkpoint of the tenant: one must exist.
    anchored: bool = False
    #: This process saw the tenant's first event (seq 1): while the tenant has no checkpoint
    #: history, its first checkpoint may sign a later head (the one at event 1 could not be
    #: written).
    origin: bool = False


class Checkpointer:
    """Takes the automatic checkpoints of one deployment (one per process)."""

    def __init__(
        self,
        directory: CheckpointDir,
        signing_key: Path,
        *,
        every_events: int,
        every_seconds: float,
        verify_keys: Sequence[Path] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.directory = directory
        self.signing_key = signing_key
        self.verify_keys = tuple(verify_keys)
        self.every_events = every_events
        self.every_seconds = every_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._marks: dict[str, _Mark] = {}
        #: The key and keyring in use, and the key file's identity they were read from.
        self._signer: tuple[Ed25519PrivateKey, Keyring] | None = None
        self._signer_file: tuple[int, ...] | None = None
        #: Tenants this process refused to adopt and said so (once each).
        self._warned: set[str] = set()
        #: Checkpoints this process wrote (for tests and logs).
        self.written = 0

    def _due(self, mark: _Mark, seq: int, now: datetime) -> bool:
        return seq - mark.seq >= self.every_events or (seq > mark.seq and now >= mark.deadline)

    def observe(self, event: AuditEvent) -> None:
        """Called with each committed event; writes a checkpoint when one is due."""
        with self._lock:
            mark = self._marks.get(event.tenant)
            if mark is not None:
                # A tenant's first event seen after a later one (concurrent first requests):
                # the chain starts here, so it may still be what anchors it.
                start = event.seq == 1 and not mark.anchored
                if event.seq <= mark.seq and not start:
                    return  # a checkpoint covers it already (or events came out of order)
                if (not start and event.seq - mark.seq < self.every_events
                        and self._clock() < mark.deadline):  # fmt: skip
                    return  # the common case: two integer comparisons and a clock read
            self._attempt(event, mark, self._clock())

    def _attempt(self, event: AuditEvent, mark: _Mark | None, now: datetime) -> None:
        t = event.tenant
        anchored = mark is not None and mark.anchored
        origin = event.seq == 1 or (mark is not None and mark.origin)
        try:
            key, keyring = self._signing()
            # Another process may have taken one since: its checkpoint counts as ours.
            latest = self.directory.latest(t, keyring)
            if latest is not None:
                anchored = True
                self._warned.discard(t)  # anchored again: a later refusal is news
                self._marks[t] = self._mark(latest.head_seq, latest.created_at, anchored=True)
                if not self._due(self._marks[t], event.seq, now):
                    return
            else:
                refusal = self._refusal(event, anchored=anchored, origin=origin)
                if refusal is not None:
                    if t not in self._warned:
                        self._warned.add(t)
                        log.warning(
                            "not signing an automatic audit checkpoint of tenant %r at event "
                            "%d: %s. A first checkpoint signs whatever the log holds, so it "
                            "would hide a cut or wiped log; `govrag audit verify` reports the "
                            "tenant as unanchored until an operator has checked its log and "
                            "signs it with `govrag audit checkpoint --tenant %s`",
                            t, event.seq, refusal, t,
                        )  # fmt: skip
                    # Looked at again at the next due point (an operator may have signed it).
                    self._marks[t] = self._mark(event.seq, now, anchored=anchored, origin=origin)
                    return
            self.directory.write(Checkpoint.of(event, key, at=now))
        except (OSError, ConfigError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            log.error(
                "could not write the audit checkpoint of tenant %r at event %d to %s (%s); "
                "the event is committed; retrying after %d more events or %.0f s, and "
                "`govrag audit verify` reports the checkpoint as stale meanwhile",
                t, event.seq, self.directory.root, detail, self.every_events, self.every_seconds,
            )  # fmt: skip
            self._signer = None  # a replaced or restored key file is read again
            # Written or not: the next attempt is at the next due point, never per event.
            self._marks[t] = self._mark(event.seq, now, anchored=anchored, origin=origin)
        else:
            self.written += 1
            self._warned.discard(t)
            self._marks[t] = self._mark(event.seq, now, anchored=True)

    def _refusal(self, event: AuditEvent, *, anchored: bool, origin: bool) -> str | None:
        """Why no first checkpoint may sign ``event`` (its tenant has no valid checkpoint);
        None when its history starts at the tenant's first event."""
        if self.directory.has_history(event.tenant):
            return (f"its checkpoint files in {self.directory.root} do not verify (edited, or "
                    "signed by a key that is neither the signing key nor in [audit] "
                    "verify_keys)")  # fmt: skip
        if anchored:
            return (f"this process saw checkpoints of it, but none is in {self.directory.root} "
                    "now: its checkpoint history was removed")  # fmt: skip
        if not origin:
            return (f"it has no checkpoint in {self.directory.root}, but its chain already has "
                    f"{event.seq - 1} earlier events (was the checkpoint folder removed or "
                    "restored empty?)")  # fmt: skip
        return None

    def _mark(self, seq: int, at: datetime, *, anchored: bool = False,
              origin: bool = False) -> _Mark:  # fmt: skip
        return _Mark(seq, at, at + timedelta(seconds=self.every_seconds), anchored, origin)

    def _signing(self) -> tuple[Ed25519PrivateKey, Keyring]:
        """The signing key and the keyring, read again whenever the key file changed (a
        rotation, a chmod): one ``stat`` per due checkpoint."""
        try:
            st = os.stat(self.signing_key)
            ident: tuple[int, ...] | None = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_mode,
                                             st.st_uid)  # fmt: skip
        except OSError:
            ident = None  # loading says why
        if self._signer is None or ident != self._signer_file:
            key = load_signing_key(self.signing_key)
            self._signer = (key, load_keyring(key.public_key(), self.verify_keys))
            self._signer_file = ident
        return self._signer
