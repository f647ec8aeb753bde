"""The policy gate: SARAC requests, the Cedar PDP (and, next, the PEP and its audit)."""

from __future__ import annotations

from govrag.policy.bundle import DEFAULT_BUNDLE, PolicyBundle, default_bundle
from govrag.policy.pdp import CedarPDP
from govrag.policy.sarac import Decision, RequestContext, Resource, SaracRequest, Subject

__all__ = [
    "DEFAULT_BUNDLE", "CedarPDP", "Decision", "PolicyBundle", "RequestContext", "Resource",
    "SaracRequest", "Subject", "default_bundle",
]  # fmt: skip
