"""The ``temporal`` strategy and time filters: what is in effect, and when.

A document version has a time it is in effect from (its ``effective_at``, else its
``updated_at``) and may name the versions it replaces (``supersedes``, external ids of its
own source system). Two uses, with different guarantees:

- **Filters** (``as_of``, ``time_range``, any strategy) narrow like metadata filters: the
  ``sql`` primitive keeps the readable documents whose time matches, before any leg ranks,
  so a short list is never a truncated one. ``as_of`` keeps versions in effect at that
  instant (time at or before it; an undated document counts as always in effect).
- **Preference** (strategy ``temporal``) reorders a deeper ``hybrid`` ranking (``keyword``
  without vectors) of the same readable candidates, so it never drops one:
  ``score * current * recency`` where ``current`` is ``superseded_weight`` for a version
  that is superseded or not yet in effect at the reference time (``as_of``, else now) and 1
  otherwise, and ``recency = (1 - w) + w * 0.5 ** (age_days / half_life_days)`` with
  ``w = temporal_recency_weight``. Age is counted back from the newest candidate in effect
  (not from the clock, so a ranking does not drift between two identical searches); an
  undated version is taken as one half-life old.

Noninterference: a version counts as superseded only by a version **the caller may read** in
the searched corpora at or below its clearance, and in effect at the reference time (the
same access predicate as every leg, in one SQL statement). So what a caller sees never
depends on a replacement it cannot read: it is shown the version it can read as current, and
the hidden-item marker (when relevant) says whom to ask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from govrag.settings import SearchSettings
from govrag.store.clock import iso
from govrag.store.records import AccessScope
from govrag.types import SearchRequest

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Version:
    """What the temporal order knows of one candidate chunk's document."""

    #: When it is in effect from, in the store's format (``None``: undated).
    effective_at: str | None
    #: Whether a version the caller may read, in effect at the reference time, replaces it.
    superseded: bool


class VersionsFn(Protocol):
    """The :class:`Version` of each of ``chunk_ids`` (readable ones: the ranking's), with
    supersession judged under ``scope`` at the instant ``at`` (store format)."""

    def __call__(
        self, scope: AccessScope, chunk_ids: Sequence[int], *, at: str
    ) -> dict[int, Version]: ...


def reference_time(request: SearchRequest) -> datetime:
    """The instant "current" means: the request's ``as_of``, else now."""
    return request.as_of if request.as_of is not None else datetime.now(UTC)


def time_conditions(request: SearchRequest, doc: str = "d") -> tuple[list[str], list[object]]:
    """SQL conditions (with their bound values) on document ``doc`` for the request's
    ``as_of`` and ``time_range``; none when it has neither."""
    conds: list[str] = []
    params: list[object] = []
    if request.as_of is not None:
        conds.append(f"({doc}.effective_at IS NULL OR {doc}.effective_at <= ?)")
        params.append(iso(request.as_of))
    window = request.time_range
    if window is not None:
        column = f"{doc}.effective_at" if window.field == "effective_at" else f"{doc}.updated_utc"
        conds.append(f"{column} IS NOT NULL")
        if window.start is not None:
            conds.append(f"{column} >= ?")
            params.append(iso(window.start))
        if window.end is not None:
            conds.append(f"{column} <= ?")
            params.append(iso(window.end))
    return conds, params


def temporal_order(
    ranked: Sequence[tuple[int, float]],
    versions: dict[int, Version],
    settings: SearchSettings,
    at: datetime,
) -> list[tuple[int, float]]:
    """``ranked`` reordered by the temporal score (see the module docstring); ties by id."""
    w = settings.temporal_recency_weight
    half_life = settings.temporal_half_life_days
    moment = iso(at)
    dated = [v.effective_at for v in versions.values() if v.effective_at is not None]
    newest = max((t for t in dated if t <= moment), default=None)
    out: list[tuple[int, float]] = []
    for cid, score in ranked:
        version = versions.get(cid)
        when = version.effective_at if version is not None else None
        current = 1.0
        if version is not None and (version.superseded or (when is not None and when > moment)):
            current = settings.superseded_weight
        age_days = half_life  # undated: one half-life old
        if when is not None and newest is not None:
            age_days = max(0.0, _days(newest, when))
        recency = (1.0 - w) + w * 0.5 ** (age_days / half_life)
        out.append((cid, score * current * recency))
    out.sort(key=lambda pair: (-pair[1], pair[0]))
    return out


def _days(later: str, earlier: str) -> float:
    """Days from ``earlier`` to ``later``, both in the store's format."""
    return (_instant(later) - _instant(earlier)).total_seconds() / SECONDS_PER_DAY


def _instant(stored: str) -> datetime:
    return datetime.strptime(stored, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
