"""The ``temporal`` strategy and time filters: what is in effect, and when.

A document version has a time it is in effect from (its ``effective_at``, else its
``updated_at``) and may name the versions it replaces (``supersedes``, external ids of its
own source system). Two uses, with different guarantees:

- **Filters** (``as_of``, ``time_range``, any strategy) narrow like metadata filters: the
  ``sql`` primitive keeps the readable documents whose time matches, before any leg ranks,
  so a short list is never a truncated one. ``as_of`` keeps versions in effect at that
  instant (time at or before it; an undated document counts as always in effect).
- **Preference** (strategy ``temporal``) reorders a deeper ``hybrid`` ranking (``keyword``
  without vectors) of the same readable candidates, so it never drops one. It keeps the
  ranking's own scores (what the gateway's reranker nudges by trust) and:

  1. raises each score by a recency bonus of at most ``temporal_recency_boost`` (off by
     default; settings.py says why): ``score * (1 + boost * 0.5 ** (age_days /
     half_life_days))``. Relative, so scores of different corpora, merged by the gateway,
     stay comparable. Age counts back from the newest candidate in effect (not from the
     clock, so two identical searches score alike); an undated version is one half-life old;
  2. multiplies a version not yet in effect at the reference time (``as_of``, else now) by
     ``superseded_weight`` (0.1);
  3. places a superseded version just below the best-placed version that replaces it, when
     that one is a candidate (a question about the old rule still finds it, right after the
     new one), and multiplies it by ``superseded_weight`` when it is not.

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

    #: The document (the store's id).
    doc: int
    #: When it is in effect from, in the store's format (``None``: undated).
    effective_at: str | None
    #: Versions that replace it (the store's ids) that the caller may read, in effect at the
    #: reference time.
    superseded_by: frozenset[int] = frozenset()


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
    half_life = settings.temporal_half_life_days
    moment = iso(at)
    dated = [v.effective_at for v in versions.values() if v.effective_at is not None]
    newest = max((t for t in dated if t <= moment), default=None)
    boost = settings.temporal_recency_boost
    scores: dict[int, float] = {}
    for cid, base in ranked:
        version = versions.get(cid)
        when = version.effective_at if version is not None else None
        age_days = half_life  # undated (or unreadable as a time): one half-life old
        days = _days(newest, when) if boost and when is not None and newest is not None else None
        if days is not None:
            age_days = max(0.0, days)
        score = base * (1.0 + boost * 0.5 ** (age_days / half_life))
        if when is not None and when > moment:
            score *= settings.superseded_weight
        scores[cid] = score
    candidates = {versions[cid].doc for cid in scores if cid in versions}
    for cid, version in versions.items():
        if cid in scores and version.superseded_by and not version.superseded_by & candidates:
            scores[cid] *= settings.superseded_weight  # replaced by one the words missed
    # Each superseded version just below its best-placed replacement among the candidates;
    # a chain (v1 < v2 < v3) settles in as many passes as it is long.
    for _ in range(len(scores)):
        best: dict[int, float] = {}
        for cid, score in scores.items():
            if cid in versions:
                doc = versions[cid].doc
                best[doc] = max(best.get(doc, 0.0), score)
        moved = False
        for cid, version in versions.items():
            above = [best[d] for d in version.superseded_by if d in best]
            if cid in scores and above and scores[cid] >= max(above):
                scores[cid] = max(above) * (1 - 1e-9)
                moved = True
        if not moved:
            break
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def _days(later: str, earlier: str) -> float | None:
    """Days from ``earlier`` to ``later``, both in the store's format (``None`` when one is
    not: a time written by hand into the database is no reason to fail a search)."""
    try:
        then = datetime.strptime(earlier, "%Y-%m-%dT%H:%M:%S.%fZ")
        now = datetime.strptime(later, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None
    return (now - then).total_seconds() / SECONDS_PER_DAY
