"""The controlled write-back store: admissions per second and overlay search latency.

Data: the first 1,024 texts of the synthetic corpus (``bench/synthetic.py``: pseudo-words with
Zipfian frequencies, 40-80 words each), written as ``USER_CONFIRMED`` candidates by one
allow-listed agent, with an audit sink that keeps the payloads in a list.

- **admissions/s, one scope**: 1,024 admissions into one fresh (tenant, session) scope, i.e.
  up to the entry cap; **across scopes**: the same 1,024 candidates spread round-robin over
  256 scopes (the scope cap; 4 entries each). Each is the median of a few rounds, each round on
  a fresh store. Baseline, measured on the same candidates in the same run: the floor of any
  admission, analysing the content and hashing the deterministic id (no checks, no index,
  no audit).
- **search p50/p95**: ``store.search(scope, query, top_k=10)`` with the scope at 1,024
  entries, for 200 queries of 2-4 words drawn from the entries' own words. Baseline,
  interleaved query by query: a brute-force BM25 in plain Python over the same 1,024 entries
  analysed beforehand (term counts and lengths precomputed; per query it analyses the query,
  counts document frequencies by scanning every entry, scores every entry, sorts). The top-10
  ids of both are compared: they must agree.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import synthetic
from govrag.eval.metrics import percentile
from govrag.store.analyzer import default_analyzer
from govrag.writeback import (
    MAX_ENTRIES_PER_SCOPE,
    MAX_SCOPES,
    AdmissionGate,
    ControlledWriteBackStore,
    RetrievalScope,
    WriteBackCandidate,
    writeback_id,
)

Say = Callable[[str], None]
AGENT = "bench-agent"
TOP_K = 10
ROUNDS = 5
WARMUP = 10
K1, B = 1.2, 0.75
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _store(audit_log: list[dict[str, Any]]) -> ControlledWriteBackStore:
    return ControlledWriteBackStore.enabled(
        allowed_agents=[AGENT],
        tenants={"bench"},
        clock=lambda: T0,
        audit=lambda tenant, session, payload: audit_log.append(payload),
    )


def _candidates(texts: Sequence[str], scopes: Sequence[RetrievalScope]) -> list[WriteBackCandidate]:
    return [
        WriteBackCandidate(
            scope=scopes[i % len(scopes)],
            source_turn_id=f"turn-{i}",
            agent_id=AGENT,
            gate=AdmissionGate.USER_CONFIRMED,
            content=text,
            confidence=0.9,
            expires_at=T0 + timedelta(days=1),
        )
        for i, text in enumerate(texts)
    ]


def _admit_rate(candidates: Sequence[WriteBackCandidate]) -> float:
    """Median admissions per second over fresh stores; every admission must succeed."""
    rates = []
    for _ in range(ROUNDS):
        store = _store([])
        t0 = time.perf_counter()
        results = [store.admit(c) for c in candidates]
        elapsed = time.perf_counter() - t0
        assert all(r.admitted for r in results), {r.reason for r in results}
        rates.append(len(candidates) / elapsed)
    return statistics.median(rates)


def _floor_rate(candidates: Sequence[WriteBackCandidate]) -> float:
    """Median rate of the irreducible work: analyse the content, hash the id."""
    analyze = default_analyzer().analyze
    rates = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for c in candidates:
            analyze(c.content)
            writeback_id(c.scope.tenant, c.scope.session, c.source_turn_id, c.agent_id, c.content)
        rates.append(len(candidates) / (time.perf_counter() - t0))
    return statistics.median(rates)


class BruteForce:
    """BM25 by scoring every entry, in plain Python, over pre-analysed entries."""

    def __init__(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        analyze = default_analyzer().analyze
        self.ids = list(ids)
        self.counts = [Counter(analyze(t)) for t in texts]
        self.lengths = [sum(c.values()) for c in self.counts]
        self.avgdl = sum(self.lengths) / len(self.lengths)

    def search(self, query: str, top_k: int) -> list[str]:
        terms = list(dict.fromkeys(default_analyzer().analyze(query)))
        n = len(self.counts)
        idf = {}
        for t in terms:
            df = sum(1 for c in self.counts if t in c)
            if df:
                idf[t] = math.log(1 + (n - df + 0.5) / (df + 0.5))
        scored = []
        for doc_id, counts, length in zip(self.ids, self.counts, self.lengths, strict=True):
            score = 0.0
            for t, w in idf.items():
                tf = counts.get(t, 0)
                if tf:
                    score += w * (K1 + 1) * tf / (tf + K1 * (1 - B + B * length / self.avgdl))
            if score > 0:
                scored.append((-score, doc_id))
        scored.sort()
        return [doc_id for _, doc_id in scored[:top_k]]


def _queries(texts: Sequence[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choice(texts).split()
        out.append(" ".join(rng.sample(words, min(len(words), rng.randint(2, 4)))))
    return out


def _ms(series: list[float]) -> dict[str, float]:
    return {p: round(percentile(series, q), 3) for p, q in (("p50", 50), ("p95", 95))}


def run(say: Say, n_queries: int = 200, seed: int = 0) -> dict[str, Any]:
    n = MAX_ENTRIES_PER_SCOPE
    say(f"write-back: generating {n} entries ...")
    texts = synthetic.generate(n, seed).texts
    one_scope = _candidates(texts, [RetrievalScope("bench", "session-0")])
    many = [RetrievalScope("bench", f"session-{i}") for i in range(MAX_SCOPES)]
    across = _candidates(texts, many)
    out: dict[str, Any] = {"entries": n, "scopes": MAX_SCOPES, "queries": n_queries}

    say("write-back: admissions ...")
    out["admit_one_scope_per_s"] = round(_admit_rate(one_scope))
    out["admit_across_scopes_per_s"] = round(_admit_rate(across))
    out["floor_per_s"] = round(_floor_rate(one_scope))

    say("write-back: search ...")
    audit_log: list[dict[str, Any]] = []
    store = _store(audit_log)
    ids = [store.admit(c).id for c in one_scope]
    assert len(audit_log) == n and None not in ids
    scope = one_scope[0].scope
    brute = BruteForce([i for i in ids if i is not None], texts)
    queries = _queries(texts, n_queries, seed)
    for q in queries[:WARMUP]:
        store.search(scope, q, top_k=TOP_K)
        brute.search(q, TOP_K)
    overlay_ms: list[float] = []
    brute_ms: list[float] = []
    mismatches = 0
    for q in queries:
        t0 = time.perf_counter()
        hits = store.search(scope, q, top_k=TOP_K)
        t1 = time.perf_counter()
        expected = brute.search(q, TOP_K)
        t2 = time.perf_counter()
        overlay_ms.append((t1 - t0) * 1000)
        brute_ms.append((t2 - t1) * 1000)
        mismatches += [h.id for h in hits] != expected
    out["overlay"] = _ms(overlay_ms)
    out["brute_force"] = _ms(brute_ms)
    out["top10_mismatches"] = mismatches
    out["audit_records"] = len(audit_log)
    return out


def table(result: dict[str, Any]) -> str:
    one, across, floor = (
        result["admit_one_scope_per_s"],
        result["admit_across_scopes_per_s"],
        result["floor_per_s"],
    )
    across_label = f"across {result['scopes']} scopes"
    ov, bf = result["overlay"], result["brute_force"]
    ratio = ov["p50"] / bf["p50"] if bf["p50"] else float("nan")
    return (
        f"\nWrite-back admissions ({result['entries']} candidates, median of {ROUNDS} rounds)\n"
        f"{'':>26} | {'per s':>9} {'vs floor':>9}\n"
        f"{'one scope':>26} | {one:>9,} {one / floor:>8.2f}x\n"
        f"{across_label:>26} | {across:>9,} {across / floor:>8.2f}x\n"
        f"{'floor (analyse + id hash)':>26} | {floor:>9,}\n"
        f"\nWrite-back search ({result['entries']} entries in one scope, "
        f"{result['queries']} queries, top {TOP_K})\n"
        f"{'':>26} | {'p50 ms':>8} {'p95 ms':>8}\n"
        f"{'overlay search':>26} | {ov['p50']:>8.3f} {ov['p95']:>8.3f}\n"
        f"{'brute-force BM25 (Python)':>26} | {bf['p50']:>8.3f} {bf['p95']:>8.3f}\n"
        f"ratio p50 {ratio:.3f}x (overlay / brute force); "
        f"top-10 mismatches: {result['top10_mismatches']}"
    )


def say(message: str) -> None:
    print(message, flush=True)


if __name__ == "__main__":
    say(table(run(say)))
