"""Policy decision latency: ``CedarPDP.decide`` beside a direct ``cedarpy`` call.

Both evaluate the same random SARAC requests (the differential test's generator) against the
default bundle ``pgar.retrieval.corpus`` v2, interleaved request by request. The direct call is
the floor (Cedar itself, on the bundle parsed once into a ``cedarpy.PolicySet``, as the PDP
does); the PDP adds building the entities, the deadline (a worker thread) and the DENY reason.
Verdicts are compared too: they must be identical.
"""

from __future__ import annotations

import random
import time
from typing import Any

import cedarpy

from govrag.eval.metrics import percentile
from govrag.policy import CedarPDP, SaracRequest, default_bundle
from govrag.policy.pdp import cedar_request, entities
from govrag.types import Classification

CORPORA = ["policy-engine", "hr-policies", "clause-index", "legal-playbook"]


def random_request(rng: random.Random) -> SaracRequest:
    held = rng.sample(CORPORA, rng.randint(0, 3))
    clearance = rng.randint(0, 3)
    return SaracRequest.model_validate(
        {
            "subject": {"sub": f"user-{rng.randint(0, 999)}", "tenant": rng.choice(["a", "b"]),
                        "doc_entitlements": [f"{c}:read" for c in held],
                        "clearance": clearance},
            "action": rng.choice(["retrieve_documents", "policy_search"]),
            "resource": {"id": rng.choice(CORPORA), "tenant": rng.choice(["a", "b"]),
                         "classification": rng.randint(0, 3)},
            "context": {"query": "wire limits", "route_id": "r",
                        "classification_ceiling": Classification(clearance)},
        }
    )  # fmt: skip


def run(n_requests: int = 5_000, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    requests = [random_request(rng) for _ in range(n_requests)]
    bundle = default_bundle()
    pdp = CedarPDP(bundle)
    parsed = cedarpy.PolicySet.from_str(bundle.policies)
    pdp_ms: list[float] = []
    direct_ms: list[float] = []
    mismatches = 0
    try:
        for r in requests[:200]:  # warm-up
            pdp.decide(r)
        for r in requests:
            t0 = time.perf_counter()
            decision = pdp.decide(r)
            t1 = time.perf_counter()
            direct = cedarpy.is_authorized(cedar_request(r), parsed, entities(r))
            t2 = time.perf_counter()
            pdp_ms.append((t1 - t0) * 1000)
            direct_ms.append((t2 - t1) * 1000)
            mismatches += decision.allowed != direct.allowed
    finally:
        pdp.close()
    out: dict[str, Any] = {"requests": n_requests, "verdict_mismatches": mismatches}
    for name, series in (("pdp", pdp_ms), ("cedarpy", direct_ms)):
        out[name] = {p: round(percentile(series, q), 3) for p, q in (("p50", 50), ("p95", 95))}
    out["ratio_p50"] = round(out["pdp"]["p50"] / out["cedarpy"]["p50"], 2)
    return out


def table(result: dict[str, Any]) -> str:
    pdp, direct = result["pdp"], result["cedarpy"]
    return (
        f"\nPolicy decisions ({result['requests']} random requests, default bundle)\n"
        f"{'':>10} | {'p50 ms':>8} {'p95 ms':>8}\n"
        f"{'CedarPDP':>10} | {pdp['p50']:>8.3f} {pdp['p95']:>8.3f}\n"
        f"{'cedarpy':>10} | {direct['p50']:>8.3f} {direct['p95']:>8.3f}\n"
        f"ratio p50 {result['ratio_p50']}x; verdict mismatches: {result['verdict_mismatches']}"
    )
