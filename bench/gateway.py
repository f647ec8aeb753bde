"""The gateway's overhead per request, and the live rights check's cost, at 100k chunks.

What the gateway adds to a store search, stage by stage, on the synthetic enterprise corpus
(SQLite, the cached 100k-chunk store of the synthetic benchmark):

- ``search@50``: ``KnowledgeStore.search`` at the reranker's depth (50 candidates): the
  retrieval itself, the baseline the other stages are compared with;
- ``rerank``: the deterministic reranker over those 50, to the top-10;
- ``rights (stored)``: the stored-ACL rights check of the top-10 (one SQL statement);
- ``pack``: packing to the token budget;
- ``validate``: validation (scope, sufficiency with the question's term coverage,
  attribution), without its audit commit (a durable commit is measured in section (e));
- ``gateway, cache miss`` / ``cache hit``: ``Gateway.retrieve`` end to end.

Then the live rights check of a top-20 (20 chunks of 20 documents) against a source rights
server on loopback (``http.server`` in a thread of this process, one request of 20 ids, and
four batches of 5 in parallel), beside the stored-ACL check of the same 20 documents.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench import synthetic
from govrag.eval.metrics import percentile
from govrag.gateway import Gateway
from govrag.gateway.cache import ResultCache
from govrag.gateway.pack import WordCounter, fit_to_budget
from govrag.gateway.rerank import DeterministicReranker
from govrag.gateway.rights import RightsTrim, StoredAclChecker
from govrag.gateway.rights_http import HttpRightsChecker
from govrag.types import ContextPack, SearchHit, SearchRequest, Strategy
from govrag.validation import Validator

Say = synthetic.Say
WARMUP = 5
DEPTH = 50
TOP_K = 10
BUDGET = 2000


def _ms(series: list[float]) -> dict[str, float]:
    return {p: round(percentile(series, q), 3) for p, q in (("p50", 50), ("p95", 95))}


def run(n_docs: int, n_queries: int, seed: int, out_dir: Path, say: Say) -> dict[str, Any]:
    corpus = synthetic.generate(n_docs, seed)
    queries = synthetic.make_queries(corpus.vocab, n_queries, seed)
    root, _, _ = synthetic.cached_store(corpus, out_dir, say)
    store = synthetic.open_store(root)
    try:
        out: dict[str, Any] = {"n_docs": n_docs, "n_queries": n_queries}
        for strategy in (Strategy.KEYWORD, Strategy.HYBRID):
            out[strategy.value] = _stages(store, corpus, queries, strategy)
        out["rights"] = _rights(store, corpus, queries)
    finally:
        store.close()
    return out


def _stages(
    store: Any, corpus: synthetic.Corpus, queries: list[str], strategy: Strategy
) -> dict[str, Any]:
    reranker, counter, validator = DeterministicReranker(), WordCounter(), Validator()
    rights = RightsTrim(StoredAclChecker(store))
    miss = Gateway(store, cache=ResultCache(0), token_budget=BUDGET)
    hit = Gateway(store, token_budget=BUDGET)
    names = ["search@50", "rerank", "rights (stored)", "pack", "validate",
             "gateway, cache miss", "gateway, cache hit"]  # fmt: skip
    series: dict[str, list[float]] = {n: [] for n in names}
    probes = list(corpus.probes)
    for i, query in enumerate([*queries[:WARMUP], *queries]):
        who = probes[i % len(probes)].principal()
        request = SearchRequest(query=query, strategy=strategy, top_k=TOP_K)
        deep = request.model_copy(update={"corpora": (synthetic.CORPUS,), "top_k": DEPTH})
        store.search(who, deep)  # untimed: every stage below then runs on warm caches
        t0 = time.perf_counter()
        result = store.search(who, deep)
        t1 = time.perf_counter()
        ranked = reranker.rerank(query, result.results, TOP_K)
        t2 = time.perf_counter()
        kept, _, _ = rights.trim(who, ranked)
        t3 = time.perf_counter()
        chunks, tokens, _ = fit_to_budget(kept, BUDGET, counter)
        t4 = time.perf_counter()
        pack = ContextPack(context_pack_id="p", corpus=synthetic.CORPUS, chunks=tuple(chunks),
                           policy_version="v", ranker_version=reranker.version,
                           token_counter=counter.name, pack_token_count=tokens,
                           token_budget=BUDGET)  # fmt: skip
        t5 = time.perf_counter()
        validator.validate(who, query, [pack], scope=[synthetic.CORPUS],
                           allowed_corpora=[synthetic.CORPUS], request_id="r",
                           session_id="s")  # fmt: skip
        t6 = time.perf_counter()
        a = miss.retrieve(who, synthetic.CORPUS, request, policy_version="v")
        t7 = time.perf_counter()
        hit.retrieve(who, synthetic.CORPUS, request, policy_version="v")  # fills on the 1st
        t8 = time.perf_counter()
        b = hit.retrieve(who, synthetic.CORPUS, request, policy_version="v")
        t9 = time.perf_counter()
        if [c.chunk_id for c in a.chunks] != [c.chunk_id for c in b.chunks] or not b.cache_hit:
            raise RuntimeError(f"cached pack differs from the uncached one: {query!r}")
        if i >= WARMUP:
            for name, took in zip(names, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t6 - t5, t7 - t6,
                                          t9 - t8), strict=True):  # fmt: skip
                series[name].append(took * 1000)
    figures: dict[str, Any] = {name: _ms(s) for name, s in series.items()}
    base = figures["search@50"]["p50"]
    overhead = sum(figures[n]["p50"] for n in ("rerank", "rights (stored)", "pack", "validate"))
    figures["overhead_p50_ms"] = round(overhead, 3)
    figures["overhead_ratio"] = round(overhead / base, 3)
    for name in names[1:]:
        figures[name]["ratio"] = round(figures[name]["p50"] / base, 3)
    return figures


class _Source:
    """A rights endpoint that confirms every document for every account."""

    @staticmethod
    def handler() -> type[BaseHTTPRequestHandler]:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real rights service would

            def setup(self) -> None:
                super().setup()
                # Headers and body leave in two writes: without this, Nagle's algorithm
                # holds the body for the client's delayed ACK (40 ms on Linux).
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                data = json.dumps({"results": [{"doc_id": d, "allowed": True}
                                               for d in body["doc_ids"]]}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


@contextmanager
def _serve() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Source.handler())
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/rights"
    finally:
        server.shutdown()
        server.server_close()


def _rights(store: Any, corpus: synthetic.Corpus, queries: list[str]) -> dict[str, Any]:
    probes = list(corpus.probes)
    # The top-20 of each probe's widest query, one chunk per document.
    tops: list[tuple[Any, list[SearchHit]]] = []
    for i, probe in enumerate(probes):
        who = probe.principal()
        request = SearchRequest(query=queries[i], strategy=Strategy.KEYWORD, top_k=200,
                                corpora=(synthetic.CORPUS,))  # fmt: skip
        by_doc = {h.doc_id: h for h in store.search(who, request).results}
        tops.append((who, list(by_doc.values())[:20]))
    with _serve() as url:
        one = HttpRightsChecker(url, lambda *_: ["acct"], deadline_ms=2000, batch_size=20)
        four = HttpRightsChecker(url, lambda *_: ["acct"], deadline_ms=2000, batch_size=5,
                                 concurrency=4)  # fmt: skip
        checkers: dict[str, Callable[[Any, list[SearchHit]], Any]] = {
            "stored ACL": RightsTrim(StoredAclChecker(store)).trim,
            "http, 1 x 20 ids": RightsTrim(one).trim,
            "http, 4 x 5 ids": RightsTrim(four).trim,
        }
        series: dict[str, list[float]] = {n: [] for n in checkers}
        sizes = set()
        try:
            for i in range(WARMUP + len(queries)):
                who, top = tops[i % len(tops)]
                sizes.add(len(top))
                for name, trim in checkers.items():
                    t0 = time.perf_counter()
                    kept, withheld, _ = trim(who, top)
                    took = time.perf_counter() - t0
                    if len(kept) != len(top) or withheld.count:
                        raise RuntimeError(f"{name} withheld readable documents")
                    if i >= WARMUP:
                        series[name].append(took * 1000)
        finally:
            one.close()
            four.close()
    figures: dict[str, Any] = {name: _ms(s) for name, s in series.items()}
    base = figures["stored ACL"]["p50"]
    for name in checkers:
        figures[name]["ratio"] = round(figures[name]["p50"] / base, 2)
    figures["chunks_checked"] = sorted(sizes)
    return figures


def table(result: dict[str, Any]) -> str:
    lines = [
        f"\nGateway stages ({result['n_docs']} chunks, {result['n_queries']} queries, SQLite, "
        f"top-{TOP_K} from {DEPTH} candidates; p50 ms, ratio to search@50)",
        f"{'':>20} | {'keyword':>16} | {'hybrid':>16}",
    ]
    kw, hy = result["keyword"], result["hybrid"]
    for name in ("search@50", "rerank", "rights (stored)", "pack", "validate",
                 "gateway, cache miss", "gateway, cache hit"):  # fmt: skip
        cells = [f"{f[name]['p50']:>8.3f} {f[name].get('ratio', 1.0):>6.2f}x" for f in (kw, hy)]
        lines.append(f"{name:>20} | {cells[0]:>16} | {cells[1]:>16}")
    lines.append(
        f"{'overhead':>20} | {kw['overhead_p50_ms']:>8.3f} {kw['overhead_ratio']:>6.2f}x | "
        f"{hy['overhead_p50_ms']:>8.3f} {hy['overhead_ratio']:>6.2f}x   "
        "(rerank + rights + pack + validate)"
    )
    r = result["rights"]
    lines.append(f"\nLive rights check of a top-20 (chunks per check {r['chunks_checked']}; "
                 "p50 / p95 ms, ratio to the stored-ACL check)")  # fmt: skip
    for name in ("stored ACL", "http, 1 x 20 ids", "http, 4 x 5 ids"):
        f = r[name]
        lines.append(f"{name:>20} | {f['p50']:>7.3f} / {f['p95']:>7.3f} | {f['ratio']:>6.2f}x")
    return "\n".join(lines)
