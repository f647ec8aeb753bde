"""The policy gate's cost on a search: a governed retrieve beside the bare store search.

A governed retrieve (``Govrag.search``, the application API) opens or continues a session,
builds the SARAC request, asks the Cedar PDP, commits the decision to the audit log durably (SQLite
``synchronous=FULL``), and only then runs the gateway: a search for the reranker's 50
candidates, the deterministic rerank, packing to the token budget, and the pack's own durable
audit record. The baseline is ``KnowledgeStore.search`` of
the same corpus with the same query and principal, on the same store, interleaved query by
query. Two governed shapes are timed: a new session per search (what ``govrag search`` does:
one more durable commit, the session and its ``route_pinned`` event) and a continued session
(an agent's later turns). The gateway's result cache is off, so both search.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import synthetic
from govrag.app import Govrag
from govrag.deployment import Deployment
from govrag.eval.metrics import percentile
from govrag.types import SearchRequest, Strategy

Say = synthetic.Say
WARMUP = 5


def _deployment(store_root: Path, root: Path, probes: list[synthetic.Probe]) -> Deployment:
    (root / "routes").mkdir(parents=True)
    route = {"route_id": "search", "retrieval": {"mode": "tool", "scope": [synthetic.CORPUS]}}
    (root / "routes" / "search.json").write_text(json.dumps(route))
    principals = [
        p.principal().model_dump(mode="json")
        | {"doc_entitlements": [f"{synthetic.CORPUS}:read"], "clearance": "internal"}
        for p in probes
    ]
    (root / "principals.json").write_text(json.dumps({"principals": principals}))
    return Deployment.load(
        root,
        default_tenant=synthetic.TENANT,
        default_route="search",
        store={"url": f"sqlite:///{store_root / 'govrag.db'}",
               "index_dir": str(store_root / "index")},
        embedder={"name": "hash", "dim": synthetic.EMBED_DIM},
        # Off: the continued session repeats the new session's query, and a cached ranking
        # would time the cache, not the governed path.
        gateway={"cache_entries": 0},
    )  # fmt: skip


def run(n_docs: int, n_queries: int, seed: int, say: Say) -> dict[str, Any]:
    corpus = synthetic.generate(n_docs, seed)
    queries = synthetic.make_queries(corpus.vocab, n_queries, seed)
    probes = list(corpus.probes)
    with tempfile.TemporaryDirectory(prefix="govrag-bench-gov-") as tmp:
        # A store of its own: governed searches append sessions and audit events.
        store_root = Path(tmp) / "store"
        say(f"building a {n_docs}-chunk store for the governed-search benchmark")
        build = synthetic.build_store(corpus, store_root, say)
        dep = _deployment(store_root, Path(tmp) / "dep", probes)
        try:
            out: dict[str, Any] = {"n_docs": n_docs, "n_queries": n_queries,
                                   "build_s": build["build_s"]}  # fmt: skip
            for strategy in (Strategy.KEYWORD, Strategy.HYBRID):
                out[strategy.value] = _time(dep, probes, queries, strategy)
            out["audit_events"] = dep.store.verify_audit(synthetic.TENANT).events
            out["audit_chain_ok"] = dep.store.verify_audit(synthetic.TENANT).ok
        finally:
            dep.close()
            shutil.rmtree(store_root, ignore_errors=True)
    return out


def _time(
    dep: Deployment, probes: list[synthetic.Probe], queries: list[str], strategy: Strategy
) -> dict[str, Any]:
    # The governed path is the application API's; the baseline is the store it wraps.
    app = Govrag(dep)
    series: dict[str, list[float]] = {"bare": [], "new_session": [], "continued": []}
    sessions: dict[str, str] = {}
    for i, query in enumerate([*queries[:WARMUP], *queries]):
        probe = probes[i % len(probes)]
        who = dep.principal(probe.name)
        request = SearchRequest(query=query, strategy=strategy, top_k=10,
                                corpora=(synthetic.CORPUS,))  # fmt: skip
        # Untimed: warms every cache the timed calls use, and lists the readable candidates.
        pool = dep.store.search(who, request.model_copy(update={"top_k": 50}))
        t0 = time.perf_counter()
        dep.store.search(who, request)
        t1 = time.perf_counter()
        fresh = app.callers.search(who, query, strategy=strategy, top_k=10)
        t2 = time.perf_counter()
        sessions.setdefault(probe.name, fresh.session_id)
        later = app.callers.search(
            who, query, strategy=strategy, top_k=10, session=sessions[probe.name]
        )
        t3 = time.perf_counter()
        readable = {h.chunk_id for h in pool.results}
        if not {c.chunk_id for c in fresh.results} <= readable or [
            c.chunk_id for c in later.results
        ] != [c.chunk_id for c in fresh.results]:
            raise RuntimeError(f"governed results are not the readable candidates: {query!r}")
        if i >= WARMUP:
            series["bare"].append((t1 - t0) * 1000)
            series["new_session"].append((t2 - t1) * 1000)
            series["continued"].append((t3 - t2) * 1000)
    figures: dict[str, Any] = {
        name: {p: round(percentile(s, q), 3) for p, q in (("p50", 50), ("p95", 95))}
        for name, s in series.items()
    }
    for name in ("new_session", "continued"):
        figures[f"{name}_ratio_p50"] = round(figures[name]["p50"] / figures["bare"]["p50"], 2)
        figures[f"{name}_added_p50_ms"] = round(figures[name]["p50"] - figures["bare"]["p50"], 3)
    return figures


def table(result: dict[str, Any]) -> str:
    lines = [
        f"\nGoverned search vs bare store search ({result['n_docs']} chunks, "
        f"{result['n_queries']} queries, SQLite, top-10; ms)",
        f"{'':>9} | {'bare p50':>8} | {'new session p50':>15} {'ratio':>6} | "
        f"{'continued p50':>13} {'ratio':>6}",
    ]
    for strategy in ("keyword", "hybrid"):
        f = result[strategy]
        lines.append(
            f"{strategy:>9} | {f['bare']['p50']:>8.3f} | {f['new_session']['p50']:>15.3f} "
            f"{f['new_session_ratio_p50']:>5}x | {f['continued']['p50']:>13.3f} "
            f"{f['continued_ratio_p50']:>5}x"
        )
    lines.append(f"audit events written {result['audit_events']}, chain ok "
                 f"{result['audit_chain_ok']}")  # fmt: skip
    return "\n".join(lines)
