"""The store's timestamps: UTC to the microsecond, as text that sorts in time order anywhere."""

from __future__ import annotations

from datetime import UTC, datetime


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
