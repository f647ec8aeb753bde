"""The retrieval gateway: what runs between a committed ALLOW and the caller."""

from __future__ import annotations

from govrag.gateway.search import Gateway

__all__ = ["Gateway"]
