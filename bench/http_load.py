"""The HTTP edge under load: ``govrag serve`` beside the application API it adapts.

N concurrent clients (threads, one keep-alive ``httpx`` client each) send ``/v1/retrieve``
(a retrieve tool call) and ``/v1/ask`` (a cited answer from the offline extractive model) to
``govrag serve`` in a subprocess on loopback, over the synthetic enterprise corpus (SQLite,
the cached store of the synthetic benchmark, copied: every request appends sessions and audit
events). Three principals read about 1 %, 10 % and 50 % of it through groups, so a response
could leak in principle.

The baseline is the same workload through the application API in this process: the same
threads, the same requests (principal, kind, query) in the same order, each a call of
:class:`govrag.Govrag` (``retrieve``/``ask``) instead of a request. So the ratio of the two
throughputs is what the HTTP edge costs (token verification, request and response models,
JSON, uvicorn, the loopback socket, and the client's own work, which shares the machine's
cores with the server). Rounds alternate which path goes first, and each round uses fresh
queries on both paths, so neither path's result cache answers what the other warmed.

Every response is checked: any status but 200 (or exception) is an error, and every returned
chunk (results, citations, pack chunks) is checked against an ACL reference computed by
brute force from the generated data (:func:`bench.synthetic.readable_mask`): a chunk the
principal may not read, or of another corpus, is a leak. Both must be 0. That the check has
teeth is counted too: ``unreadable_by_another`` is how many checked chunks another of the
principals may not read (had the server mixed callers up, those would be leaks).

Run from the repository root::

    .venv/bin/python -m bench.http_load [--quick] [--chunks N] [--clients N] [--requests N]
                                        [--rounds N]

or ``python -m bench.run --only http``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import govrag
from bench import synthetic
from bench.common import fill_sizes, ratio, say, sized_parser
from govrag.eval.metrics import percentile
from govrag.types import Principal

Say = synthetic.Say
OUT_DIR = Path(__file__).resolve().parent / "out"
TOOL = "retrieve_documents"
KINDS = ("retrieve", "ask")
#: The HTTP path's throughput as a fraction of the in-process one, at least.
TARGET_RATIO = 0.7
#: The HTTP path's throughput at 100k chunks with 8 clients, at least (issue 33).
TARGET_RPS = 60.0
QUICK = {"chunks": 2_000, "clients": 4, "requests": 40, "rounds": 1, "workers": 1}
FULL = {"chunks": 100_000, "clients": 8, "requests": 400, "rounds": 2, "workers": 2}


@dataclass(frozen=True)
class Request:
    kind: str
    probe: int  # index into the corpus's probes
    query: str


@dataclass
class Tally:
    """One path's figures over its timed phases."""

    ms: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    wall_s: float = 0.0
    #: Each timed phase's throughput, in order (how much the machine moved between rounds).
    round_rps: list[float] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    leaks: int = 0
    chunks_checked: int = 0
    #: Checked chunks another principal may not read: the check could have caught a leak.
    unreadable_by_another: int = 0

    def add_error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(what[:300])

    def summary(self) -> dict[str, Any]:
        every = [m for series in self.ms.values() for m in series]
        out: dict[str, Any] = {
            "requests": len(every),
            "wall_s": round(self.wall_s, 2),
            "throughput_rps": round(len(every) / self.wall_s, 2) if self.wall_s else 0.0,
            "round_rps": self.round_rps,
            "errors": self.errors,
            "error_samples": self.error_samples,
            "leaks": self.leaks,
            "chunks_checked": self.chunks_checked,
            "unreadable_by_another": self.unreadable_by_another,
            "all": _latency(every),
        }
        out.update({kind: _latency(series) for kind, series in self.ms.items()})
        return out


def _latency(series: list[float]) -> dict[str, float]:
    if not series:
        return {}
    figures = {f"p{q}_ms": round(percentile(series, q), 2) for q in (50, 95, 99)}
    return figures | {"mean_ms": round(statistics.fmean(series), 2)}


#: One call of a path: the request -> the response as JSON (raises on any failure).
Call = Callable[[Request], dict[str, Any]]


def _returned(kind: str, body: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Every chunk a response hands the caller: ``(doc_id, corpus)``."""
    for pack in body["packs"]:
        for chunk in pack["chunks"]:
            yield chunk["doc_id"], pack["corpus"]
    if kind == "retrieve":
        for hit in body["results"]:
            yield hit["doc_id"], synthetic.CORPUS  # results are the packs' chunks, merged
    else:
        for citation in body["citations"]:
            yield citation["doc_id"], citation["corpus"]


def check(tally: Tally, request: Request, body: dict[str, Any], masks: list[Any]) -> None:
    """Count ``body``'s chunks into ``tally``: each one ``request``'s principal may not read
    (by the brute-force reference ``masks``), or of another corpus, is a leak."""
    readable = masks[request.probe]
    for doc_id, corpus in _returned(request.kind, body):
        tally.chunks_checked += 1
        try:
            index = synthetic.doc_index(doc_id)
            allowed = corpus == synthetic.CORPUS and 0 <= index < len(readable)
            allowed = allowed and bool(readable[index])
        except ValueError:
            allowed = False
        tally.leaks += not allowed
        if allowed:
            others = (m for i, m in enumerate(masks) if i != request.probe)
            tally.unreadable_by_another += any(not m[index] for m in others)


def _phase(
    call_for: Callable[[int], Call],
    requests: Sequence[Request],
    clients: int,
    masks: list[Any],
    tally: Tally | None,
) -> None:
    """``requests`` spread over ``clients`` threads (client ``c`` sends every ``c``-th one,
    in order); figures into ``tally`` (``None``: a warm-up, untimed)."""
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        call = call_for(c)
        start.wait()
        for request in requests[c::clients]:
            t0 = time.perf_counter()
            try:
                body = call(request)
            except Exception as exc:  # any failure of the path is an error of the run
                if tally is not None:
                    with lock:
                        tally.add_error(f"{request.kind}: {type(exc).__name__}: {exc}")
                continue
            ms = (time.perf_counter() - t0) * 1000
            if tally is not None:
                with lock:
                    tally.ms[request.kind].append(ms)
                    check(tally, request, body, masks)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    if tally is not None:
        wall = time.perf_counter() - t0
        tally.wall_s += wall
        tally.round_rps.append(round(len(requests) / wall, 2))


def _in_process(app: govrag.Govrag, principals: list[Principal]) -> Callable[[int], Call]:
    def call_for(_: int) -> Call:
        def call(request: Request) -> dict[str, Any]:
            who = principals[request.probe]
            if request.kind == "retrieve":
                arguments = {"query": request.query, "corpus": synthetic.CORPUS}
                return app.callers.retrieve(who, TOOL, arguments).as_dict()
            return app.callers.ask(who, request.query).as_dict()

        return call

    return call_for


def _over_http(url: str, tokens: list[str], opened: list[httpx.Client]) -> Callable[[int], Call]:
    def call_for(_: int) -> Call:
        client = httpx.Client(base_url=url, timeout=120)
        opened.append(client)

        def call(request: Request) -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {tokens[request.probe]}"}
            if request.kind == "retrieve":
                arguments = {"query": request.query, "corpus": synthetic.CORPUS}
                body = {"tool": TOOL, "arguments": arguments}
                r = client.post("/v1/retrieve", json=body, headers=headers)
            else:
                r = client.post("/v1/ask", json={"question": request.query}, headers=headers)
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
            out: dict[str, Any] = r.json()
            return out

        return call

    return call_for


def deployment(store_root: Path, dep: Path, corpus: synthetic.Corpus) -> None:
    """A scaffolded deployment (route ``search`` over the corpus, the retrieval tools, keys)
    whose store is a copy of the cached one and whose principals are the probes."""
    govrag.init(dep, tenant=synthetic.TENANT, corpora=[synthetic.CORPUS])
    for db in store_root.glob("govrag.db*"):
        shutil.copy2(db, dep / db.name)
    shutil.copytree(store_root / "index", dep / "index")
    principals = [
        p.principal().model_dump(mode="json")
        | {"doc_entitlements": [f"{synthetic.CORPUS}:read"], "clearance": "internal"}
        for p in corpus.probes
    ]
    (dep / "principals.json").write_text(json.dumps({"principals": principals}))


@contextmanager
def serve(
    dep: Path, log: Path, command: Sequence[str] = ("serve",), *, workers: int = 1
) -> Iterator[str]:
    """``govrag serve`` (or ``govrag COMMAND``, which takes ``--port``) on a free loopback
    port, in a subprocess running this checkout's govrag, with ``workers`` processes; yields
    its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = str(Path(govrag.__file__).resolve().parents[1])
    env = {**os.environ, "GOVRAG_AUTH__DEV_TOKENS": "true",
           # The bench measures the governed path under load, not the per-caller rate limit
           # (three principals send hundreds of requests a minute each).
           "GOVRAG_SERVER__RATE_PER_MINUTE": "1000000", "GOVRAG_SERVER__RATE_BURST": "100000",
           "GOVRAG_SERVER__WORKERS": str(workers),
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    with log.open("w") as sink:  # uvicorn logs every request: a file, never an unread pipe
        process = subprocess.Popen(
            [sys.executable, "-m", "govrag", *command, "--port", str(port), "-d", str(dep)],
            env=env, stdout=subprocess.DEVNULL, stderr=sink,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"govrag serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"govrag serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run(
    n_docs: int,
    clients: int,
    requests: int,
    rounds: int,
    seed: int,
    out_dir: Path,
    say: Say,
    *,
    workers: int = 1,
) -> dict[str, Any]:
    """``rounds`` rounds of ``requests`` requests per path, over ``clients`` threads; the
    server with ``workers`` processes."""
    corpus = synthetic.generate(n_docs, seed)
    root, build, cached = synthetic.cached_store(corpus, out_dir, say)
    masks = [synthetic.readable_mask(corpus, p) for p in corpus.probes]
    warmup = 2 * clients
    queries = synthetic.make_queries(corpus.vocab, warmup + rounds * requests, seed + 1)
    workload = [
        Request(KINDS[i % 2], (i // 2) % len(corpus.probes), q) for i, q in enumerate(queries)
    ]
    tallies = {"in_process": Tally(), "http": Tally()}
    with tempfile.TemporaryDirectory(prefix="govrag-bench-http-") as tmp:
        dep = Path(tmp) / "dep"
        say(f"http: copying the {n_docs}-chunk store into a deployment")
        deployment(root, dep, corpus)
        opened: list[httpx.Client] = []
        with govrag.open(dep, auth={"dev_tokens": True}) as app:
            principals = [govrag.local_principal(app.settings, p.name) for p in corpus.probes]
            tokens = [app.operators.dev_token(p.name) for p in corpus.probes]
            paths = {"in_process": _in_process(app, principals)}
            try:
                with serve(dep, Path(tmp) / "serve.log", workers=workers) as url:
                    paths["http"] = _over_http(url, tokens, opened)
                    for name, path in paths.items():
                        say(f"http: warming up {name}")
                        _phase(path, workload[:warmup], clients, masks, None)
                    for r in range(rounds):
                        part = workload[warmup + r * requests : warmup + (r + 1) * requests]
                        order = list(paths) if r % 2 == 0 else list(reversed(paths))
                        for name in order:
                            say(f"http: round {r + 1}/{rounds}: {name}, {len(part)} requests")
                            _phase(paths[name], part, clients, masks, tallies[name])
            finally:
                for client in opened:
                    client.close()
    out: dict[str, Any] = {
        "n_docs": n_docs, "clients": clients, "requests_per_round": requests, "rounds": rounds,
        "seed": seed, "workers": workers,
        "server": f"govrag serve (subprocess, uvicorn, {workers} worker process"
                  f"{'es' if workers > 1 else ''}), loopback",
        "store": "sqlite", "store_cached": cached, "build_s": build.get("build_s"),
        "readable_fractions": [round(float(np.mean(m)), 4) for m in masks],
    }  # fmt: skip
    out.update({name: tally.summary() for name, tally in tallies.items()})
    http, base = out["http"], out["in_process"]
    out["throughput_ratio"] = ratio(http["throughput_rps"], base["throughput_rps"])
    out["p50_ratio"] = ratio(http["all"].get("p50_ms", 0.0), base["all"].get("p50_ms", 0.0))
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        f"\nHTTP load ({result['n_docs']} chunks, {result['clients']} clients, "
        f"{result['rounds']} x {result['requests_per_round']} requests per path, half "
        f"/v1/retrieve, half /v1/ask; {result['server']}; ms)",
        f"{'path':>10} | {'req/s':>7} | {'p50':>7} {'p95':>7} {'p99':>7} | "
        f"{'retrieve p50':>12} {'ask p50':>8} | {'errors':>6} {'leaks':>5} {'checked':>7}",
    ]
    for name in ("in_process", "http"):
        f = result[name]
        a, rt, ask = f["all"], f["retrieve"], f["ask"]
        lines.append(
            f"{name:>10} | {f['throughput_rps']:>7.1f} | {a.get('p50_ms', 0):>7.2f} "
            f"{a.get('p95_ms', 0):>7.2f} {a.get('p99_ms', 0):>7.2f} | "
            f"{rt.get('p50_ms', 0):>12.2f} {ask.get('p50_ms', 0):>8.2f} | "
            f"{f['errors']:>6} {f['leaks']:>5} {f['chunks_checked']:>7}"
        )
    got = result["throughput_ratio"]
    verdict = "ok" if got is not None and got >= TARGET_RATIO else "MISS"
    pairs = zip(result["http"]["round_rps"], result["in_process"]["round_rps"], strict=True)
    rounds = ", ".join(f"{h}/{b}" for h, b in pairs)
    lines.append(f"per round, req/s http/in-process: {rounds}")
    lines.append(f"http throughput / in-process: {got}x (target >= {TARGET_RATIO}: {verdict}); "
                 f"p50 http / in-process {result['p50_ratio']}x")  # fmt: skip
    rps = result["http"]["throughput_rps"]
    lines.append(f"http throughput {rps} req/s (target >= {TARGET_RPS:.0f} at 100k chunks and 8 "
                 f"clients: {'ok' if rps >= TARGET_RPS else 'MISS'})")  # fmt: skip
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = sized_parser("python -m bench.http_load", __doc__, QUICK, OUT_DIR,
                          "results-http.json")  # fmt: skip
    parser.add_argument("--chunks", type=int, help="corpus size (default 100000)")
    parser.add_argument("--clients", type=int, help="concurrent clients (default 8)")
    parser.add_argument("--requests", type=int, help="requests per path per round (default 400)")
    parser.add_argument("--rounds", type=int, help="rounds, alternating order (default 2)")
    parser.add_argument("--workers", type=int, help="server processes (default 2; quick: 1)")
    args = parser.parse_args(argv)
    fill_sizes(args, QUICK, FULL)
    if min(args.clients, args.requests, args.rounds, args.workers) < 1 or args.chunks < 100:
        parser.error("--chunks must be >= 100; --clients, --requests, --rounds and --workers "
                     ">= 1")  # fmt: skip
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    result = run(args.chunks, args.clients, args.requests, args.rounds, args.seed,
                 args.out_dir, say, workers=args.workers)  # fmt: skip
    say(table(result))
    path = args.out_dir / "results-http.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"wrote {path}")
    clean = all(
        result[p]["errors"] == 0 and result[p]["leaks"] == 0 for p in ("http", "in_process")
    )
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
