"""The store's timestamps: UTC to the microsecond, as text that sorts in time order anywhere."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime) -> str:
    """``moment`` (timezone-aware) in the store's format."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_iso() -> str:
    return iso(datetime.now(UTC))
