"""The hidden-item marker's gate: every marker shown is audited, and each principal has a budget.

The marker tells a caller that relevant material exists which it may not read, and whom to
ask (seed 004). Asked often enough, even a content-free yes/no reveals what exists, so the
marker is governed like a retrieve: each one a pack would carry takes a unit of the caller's
budget (``[search] marker_budget`` per ``marker_window_hours``, counted in the truth store,
so every process of a deployment shares it, and by email, where rights come from, so every
token or client of one person shares it); past the budget, or when the budget or the audit
log cannot be written, it is withheld (fail-closed). Either way a ``hidden_marker`` audit event
records what was shown or withheld, and why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from govrag.audit.events import HiddenMarkerEvent, write
from govrag.store.protocol import MarkerLedger
from govrag.types import ContextPack, HiddenMarker, Principal

log = logging.getLogger("govrag.policy")


class MarkerGate:
    """Decides whether a pack's hidden-item marker is shown, and audits that."""

    def __init__(
        self,
        store: MarkerLedger,
        *,
        budget: int = 50,
        window_hours: float = 24.0,
        max_contacts: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.budget = budget
        #: Most contacts one request's marker names, however many packs it merges.
        self.max_contacts = max_contacts
        self.window_seconds = window_hours * 3600.0
        self.clock = clock

    def admit(
        self, principal: Principal, pack: ContextPack, *, request_id: str, session_id: str
    ) -> HiddenMarker:
        """The marker ``pack`` may carry to ``principal``: its own, or none."""
        marker = pack.hidden
        if not marker.present:
            return marker
        window = int(self.clock() // self.window_seconds)
        reason = None
        try:
            used = self.store.consume_marker(
                principal.tenant, principal.email, window=window, budget=self.budget
            )
            if used is None:
                reason = "budget_exhausted"
        except Exception as exc:  # a budget that cannot be counted is a spent one
            log.error("marker budget unavailable for %s: %s", principal.sub, exc)
            used, reason = None, "budget_unavailable"
        try:  # a record that cannot be made or written: the marker is withheld
            record = HiddenMarkerEvent(
                sub=principal.sub,
                corpus=pack.corpus,
                context_pack_id=pack.context_pack_id,
                shown=reason is None,
                reason=reason,
                sources=marker.sources,
                budget=self.budget,
                used=used,
            )
            write(self.store, principal.tenant, record, request_id=request_id,
                  session_id=session_id)  # fmt: skip
        except Exception as exc:  # a marker that is not on record is not shown
            log.error("audit write failed, withholding the marker for %s: %s", principal.sub, exc)
            return HiddenMarker()
        return marker if reason is None else HiddenMarker()
