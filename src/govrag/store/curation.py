"""The Curation Pass: an absolute recompute of every document's ``trust_score``.

Seed 004: trust is recomputed from current inputs joined at run time, never nudged
incrementally: the source's ``authority_tier`` (from the harvester) and the access counter
(``hits``, ``last_accessed_at``: cited answers and source clicks, never raw retrievals).
The formula (see :class:`~govrag.settings.CurationSettings`)::

    trust = clamp(0.5 + recency * (authority + demand), 0, 1)
    authority = authority_weight * (3 - authority_tier) / 2
    demand = demand_weight * (1 - exp(-hits / demand_scale))
    recency = 0.5 ** (age_days / half_life_days)

where ``age_days`` counts from the last access, or from the document's last change when it was
never accessed. So what nobody uses sinks toward neutral on its own, nothing is deleted, and
running the pass twice at the same time gives the same scores. Trust enters ranking only as
the reranker's bounded prior (``[gateway] trust_weight``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from govrag.settings import CurationSettings

NEUTRAL = 0.5


@dataclass(frozen=True)
class CurationReport:
    tenant: str
    documents: int
    #: Documents whose score changed (by more than 1e-9).
    moved: int
    mean_trust: float
    #: The instant the pass computed ages from (ISO-8601).
    at: str

    def as_dict(self) -> dict[str, object]:
        return {"tenant": self.tenant, "documents": self.documents, "moved": self.moved,
                "mean_trust": round(self.mean_trust, 6), "at": self.at}  # fmt: skip


def trust_score(
    settings: CurationSettings,
    *,
    authority_tier: int,
    hits: int,
    last_accessed: datetime | None,
    changed: datetime,
    now: datetime,
) -> float:
    """The document's trust now (see the module docstring)."""
    authority = settings.authority_weight * (3 - authority_tier) / 2
    demand = settings.demand_weight * (1 - math.exp(-max(0, hits) / settings.demand_scale))
    since = last_accessed if last_accessed is not None and hits > 0 else changed
    age_days = max(0.0, (now - since).total_seconds() / 86_400)
    recency: float = 0.5 ** (age_days / settings.half_life_days)
    return min(1.0, max(0.0, NEUTRAL + recency * (authority + demand)))


def parse_instant(value: str | None, fallback: datetime) -> datetime:
    """A stored ISO-8601 instant; ``fallback`` when missing or unreadable."""
    if not value:
        return fallback
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return fallback
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=fallback.tzinfo)
