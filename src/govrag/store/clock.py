"""The store's timestamps: UTC to the microsecond, as text that sorts in time order anywhere."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime) -> str:
    """``moment`` (timezone-aware) in the store's format."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_iso() -> str:
    return iso(datetime.now(UTC))


def utc_instant(moment: datetime | None) -> str | None:
    """A document's time (``updated_at``, ``effective_at``) in the store's format, so times
    given with different offsets compare as instants in SQL (``None`` stays ``None``)."""
    return None if moment is None else iso(moment)
