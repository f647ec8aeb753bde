"""The policy decision point: Cedar policy bundles evaluated with ``cedarpy``.

Default deny, and fail closed: a request the PDP cannot evaluate (bad input, unparsable
policies, an evaluation error, a timeout) is DENY with the reason ``policy_error``. A DENY
says which rule refused (the ``@reason`` annotation of the forbid that matched, or
``no_entitlement`` when nothing permitted).
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from govrag.policy.bundle import PolicyBundle
from govrag.policy.sarac import Decision, Reason, SaracRequest
from govrag.types import ACTION_GROUP_PREFIX

log = logging.getLogger("govrag.policy")
__all__ = ["CedarPDP", "cedar_request", "entities"]

#: How long one decision may take before it is a DENY.
DEFAULT_TIMEOUT_S = 2.0
_REASONS: set[str] = {"no_entitlement", "tenant", "classification"}


#: The Cedar type of each SARAC resource type.
RESOURCE_TYPES = {"corpus": "Corpus", "tool": "Tool"}


def action_group(kind: str) -> str:
    """The Cedar action every action of a tool of ``kind`` is a member of."""
    return f"{ACTION_GROUP_PREFIX}{kind}"


def entities(request: SaracRequest) -> list[dict[str, Any]]:
    """The Cedar entities of a request: the caller, the resource (a corpus or a tool), and the
    action as a member of its kind's group, so a policy can permit every search action
    (``retrieve_documents``, ``policy_search``, ...) as ``action in Action::"kind:retrieve"``."""
    s, r = request.subject, request.resource
    user = {
        "uid": {"type": "User", "id": s.sub},
        "attrs": {
            "tenant": s.tenant,
            "roles": list(s.roles),
            "doc_entitlements": list(s.doc_entitlements),
            "clearance": int(s.clearance),
        },
        "parents": [],
    }
    attrs: dict[str, Any] = {"tenant": r.tenant}
    if r.type == "corpus":
        attrs |= {"read_entitlement": f"{r.id}:read", "classification": int(r.classification)}
    resource = {"uid": {"type": RESOURCE_TYPES[r.type], "id": r.id}, "attrs": attrs,
                "parents": []}  # fmt: skip
    group = {"type": "Action", "id": action_group(request.kind)}
    action = {"uid": {"type": "Action", "id": request.action}, "attrs": {}, "parents": [group]}
    # (Manifests cannot name a ``kind:`` action, so an action is never its own group.)
    return [user, resource, action, {"uid": group, "attrs": {}, "parents": []}]


def cedar_request(request: SaracRequest) -> dict[str, Any]:
    """The Cedar authorization request of a SARAC request."""
    return {
        # Entity references as objects, not ``Type::"id"`` text: no escaping to get wrong.
        "principal": {"type": "User", "id": request.subject.sub},
        "action": {"type": "Action", "id": request.action},
        "resource": {"type": RESOURCE_TYPES[request.resource.type], "id": request.resource.id},
        "context": {
            "query": request.context.query,
            "classification_ceiling": int(request.context.classification_ceiling),
            "route_id": request.context.route_id,
            "risk_tier": request.context.risk_tier,
        },
    }


class CedarPDP:
    """Decides SARAC requests against one policy bundle."""

    def __init__(self, bundle: PolicyBundle, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        import cedarpy

        self.bundle = bundle
        self.policy_version = bundle.policy_version
        self.timeout_s = timeout_s
        self._cedar = cedarpy
        self._reasons: dict[str, str] = {}
        self._error = ""
        #: The bundle parsed once (parsing was most of a decision's cost: ~0.5 ms per call).
        self._policies: Any = None
        try:
            self._policies = cedarpy.PolicySet.from_str(bundle.policies)
            parsed = json.loads(cedarpy.policies_to_json_str(bundle.policies))
            for pid, policy in parsed.get("staticPolicies", {}).items():
                reason = policy.get("annotations", {}).get("reason", "")
                self._reasons[pid] = reason if reason in _REASONS else "no_entitlement"
        except (ValueError, TypeError) as exc:
            # Unparsable policies decide nothing: every request is DENY (policy_error).
            self._error = f"policy bundle {self.policy_version} does not parse: {exc}"
            log.error(self._error)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="govrag-pdp")

    @property
    def problem(self) -> str | None:
        """Why this PDP denies everything (its bundle did not parse), else ``None``."""
        return self._error or None

    def decide(self, request: SaracRequest) -> Decision:
        """ALLOW or DENY with a reason; never raises."""
        if self._error:
            return self._deny("policy_error", self._error)
        try:
            future = self._pool.submit(self._evaluate, request)
            return future.result(timeout=self.timeout_s)
        except FutureTimeout:
            return self._deny("policy_error", f"no decision within {self.timeout_s}s")
        except Exception as exc:  # any fault on the authorization path is DENY
            return self._deny("policy_error", f"{type(exc).__name__}: {exc}")

    def _evaluate(self, request: SaracRequest) -> Decision:
        result = self._cedar.is_authorized(
            cedar_request(request), self._policies, entities(request)
        )
        errors = [str(e) for e in result.diagnostics.errors]
        if errors:
            return self._deny("policy_error", "; ".join(errors))
        matched = list(result.diagnostics.reasons)
        if result.allowed:
            return Decision("ALLOW", "allowed", self.policy_version, ",".join(matched))
        reasons = [self._reasons.get(pid, "no_entitlement") for pid in matched]
        reason: Reason = "no_entitlement"
        for candidate in ("tenant", "classification"):
            if candidate in reasons:
                reason = candidate
                break
        return Decision("DENY", reason, self.policy_version, ",".join(matched))

    def _deny(self, reason: Reason, detail: str) -> Decision:
        return Decision("DENY", reason, self.policy_version, detail)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
