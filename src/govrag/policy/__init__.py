"""The policy gate: SARAC requests, the Cedar PDP (and, next, the PEP and its audit)."""

from __future__ import annotations

from govrag.policy.pdp import DEFAULT_BUNDLE, CedarPDP, default_bundle
from govrag.policy.sarac import Decision, RequestContext, Resource, SaracRequest, Subject

__all__ = [
    "DEFAULT_BUNDLE", "CedarPDP", "Decision", "RequestContext", "Resource", "SaracRequest",
    "Subject", "default_bundle",
]  # fmt: skip
