"""Tool-call latency through MCP (stdio and streamable HTTP) beside the application API.

One client calls the route's tools one at a time, alternating ``retrieve_documents`` (one
corpus) and ``search_knowledge`` (the route's scope), over the synthetic enterprise corpus
(SQLite, the synthetic benchmark's cached store, copied), as three principals who read about
1 %, 10 % and 50 % of it. The same calls go three ways:

- **in-process**, the baseline: :meth:`govrag.Govrag.call_tool` in this process;
- **stdio**: ``govrag mcp --as PRINCIPAL`` subprocesses (one per principal: stdio serves one),
  driven by the official ``mcp`` client SDK;
- **http**: ``govrag mcp --transport http`` in a subprocess on loopback, the SDK's streamable
  HTTP client with each principal's bearer token (protocol 2026-07-28: one POST a message).

Each figure is the client's wall time per call; a ratio is a path's p50 over the in-process
p50 measured in the same run. The SDK client lists the tools before its first call (to check
results against their output schemas); that is what an MCP client pays, so it is counted.
Rounds alternate the order of the paths, and every path and round has its own queries, so no
path's result cache answers what another warmed. Every result's chunks are checked against an
ACL reference computed by brute force (``bench.http_load``): errors and leaks must be 0.

Run from the repository root::

    .venv/bin/python -m bench.mcp_latency [--quick] [--chunks N] [--calls N] [--rounds N]

or ``python -m bench.run --only mcp``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np

import govrag
from bench import synthetic
from bench.common import fill_sizes, ratio, say, sized_parser
from bench.http_load import Request, Tally, check, deployment, serve
from govrag.eval.metrics import percentile

OUT_DIR = Path(__file__).resolve().parent / "out"
TOOLS = ("retrieve_documents", "search_knowledge")
PATHS = ("in_process", "stdio", "http")
QUICK = {"chunks": 2_000, "calls": 30, "rounds": 1}
FULL = {"chunks": 20_000, "calls": 300, "rounds": 2}
#: One call: (principal's probe index, tool, query) -> the result's structured content.
Call = Callable[[int, str, str], Awaitable[dict[str, Any]]]


def arguments(tool: str, query: str) -> dict[str, Any]:
    return {"query": query, "corpus": synthetic.CORPUS} if tool == TOOLS[0] else {"query": query}


def _in_process(app: govrag.Govrag, principals: list[Any]) -> Call:
    from govrag.server.responses import Searched

    async def call(probe: int, tool: str, query: str) -> dict[str, Any]:
        outcome = app.callers.call_tool(principals[probe], tool, arguments(tool, query))
        assert isinstance(outcome, govrag.app.GovernedResult)
        # The structured content an MCP client gets, so the work compared is the same.
        return Searched.of(outcome).model_dump(mode="json")

    return call


def _over_mcp(clients: list[Any]) -> Call:
    async def call(probe: int, tool: str, query: str) -> dict[str, Any]:
        result = await clients[probe].call_tool(tool, arguments(tool, query))
        if result.is_error:
            raise RuntimeError(result.content[0].text)
        content: dict[str, Any] = result.structured_content
        return content

    return call


async def _phase(call: Call, calls: Sequence[tuple[int, str, str]], masks: list[Any],
                 tally: Tally | None, ms: list[float]) -> None:  # fmt: skip
    """``calls`` one after another; each timed into ``ms`` and checked into ``tally``
    (``None``: a warm-up, neither)."""
    for probe, tool, query in calls:
        t0 = time.perf_counter()
        try:
            body = await call(probe, tool, query)
        except Exception as exc:  # any failure of the path is an error of the run
            if tally is not None:
                tally.add_error(f"{tool}: {type(exc).__name__}: {exc}")
            continue
        if tally is not None:
            ms.append((time.perf_counter() - t0) * 1000)
            check(tally, Request("retrieve", probe, query), body, masks)


def _figures(ms: list[float], tally: Tally) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": len(ms), "errors": tally.errors, "leaks": tally.leaks,
                           "error_samples": tally.error_samples,
                           "chunks_checked": tally.chunks_checked,
                           "unreadable_by_another": tally.unreadable_by_another}  # fmt: skip
    if ms:
        out |= {f"p{q}_ms": round(percentile(ms, q), 2) for q in (50, 95, 99)}
    return out


def run(n_docs: int, calls: int, rounds: int, seed: int, out_dir: Path, say: Any
        ) -> dict[str, Any]:  # fmt: skip
    """``rounds`` rounds of ``calls`` calls per path."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    corpus = synthetic.generate(n_docs, seed)
    root, build, cached = synthetic.cached_store(corpus, out_dir, say)
    masks = [synthetic.readable_mask(corpus, p) for p in corpus.probes]
    n = len(corpus.probes)
    warmup = 2 * n
    queries = synthetic.make_queries(corpus.vocab, len(PATHS) * (warmup + rounds * calls),
                                     seed + 1)  # fmt: skip
    plan = [(i % n, TOOLS[(i // n) % 2], q) for i, q in enumerate(queries)]
    cursor = 0

    def take(count: int) -> list[tuple[int, str, str]]:
        """The next ``count`` calls of the plan: every phase has queries of its own."""
        nonlocal cursor
        part, cursor = plan[cursor : cursor + count], cursor + count
        return part

    ms: dict[str, list[float]] = {p: [] for p in PATHS}
    tallies = {p: Tally() for p in PATHS}
    src = str(Path(govrag.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="govrag-bench-mcp-") as tmp:
        dep = Path(tmp) / "dep"
        say(f"mcp: copying the {n_docs}-chunk store into a deployment")
        deployment(root, dep, corpus)
        names = [p.name for p in corpus.probes]
        with (
            govrag.open(dep, auth={"dev_tokens": True}) as app,
            serve(dep, Path(tmp) / "mcp.log", ("mcp", "--transport", "http")) as url,
        ):
            principals = [govrag.local_principal(app.settings, name) for name in names]
            tokens = [app.operators.dev_token(name) for name in names]

            async def main() -> None:
                async with AsyncExitStack() as stack:
                    stdio = [await stack.enter_async_context(Client(StdioServerParameters(
                        command=sys.executable, env=env,
                        args=["-m", "govrag", "mcp", "--as", name, "-d", str(dep)])))
                        for name in names]  # fmt: skip
                    http = []
                    for signed in tokens:
                        bearer = {"Authorization": f"Bearer {signed}"}
                        client = httpx.AsyncClient(headers=bearer, timeout=120)
                        await stack.enter_async_context(client)
                        transport = streamable_http_client(f"{url}/mcp", http_client=client)
                        http.append(await stack.enter_async_context(Client(transport)))
                    paths = {"in_process": _in_process(app, principals),
                             "stdio": _over_mcp(stdio), "http": _over_mcp(http)}  # fmt: skip
                    for name, call in paths.items():
                        say(f"mcp: warming up {name}")
                        await _phase(call, take(warmup), masks, None, [])
                    for r in range(rounds):
                        order = list(paths) if r % 2 == 0 else list(reversed(paths))
                        for name in order:
                            say(f"mcp: round {r + 1}/{rounds}: {name}, {calls} calls")
                            await _phase(paths[name], take(calls), masks, tallies[name], ms[name])

            anyio.run(main)
    out: dict[str, Any] = {
        "n_docs": n_docs, "calls_per_round": calls, "rounds": rounds, "seed": seed,
        "store": "sqlite", "store_cached": cached, "build_s": build.get("build_s"),
        "readable_fractions": [round(float(np.mean(m)), 4) for m in masks],
        "mcp_version": _version("mcp"),
    }  # fmt: skip
    out |= {p: _figures(ms[p], tallies[p]) for p in PATHS}
    base = out["in_process"].get("p50_ms", 0.0)
    for p in ("stdio", "http"):
        out[f"{p}_p50_ratio"] = ratio(out[p].get("p50_ms", 0.0), base)
        out[f"{p}_p95_ratio"] = ratio(out[p].get("p95_ms", 0.0),
                                      out["in_process"].get("p95_ms", 0.0))  # fmt: skip
    return out


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def table(result: dict[str, Any]) -> str:
    lines = [
        f"\nMCP tool-call latency ({result['n_docs']} chunks, {result['rounds']} x "
        f"{result['calls_per_round']} sequential calls per path, half retrieve_documents, half "
        f"search_knowledge; mcp {result['mcp_version']}; ms)",
        f"{'path':>10} | {'p50':>7} {'p95':>7} {'p99':>7} | {'p50 ratio':>9} | "
        f"{'errors':>6} {'leaks':>5} {'checked':>7}",
    ]
    for p in PATHS:
        f = result[p]
        shown = "1.0 (base)" if p == "in_process" else f"{result[f'{p}_p50_ratio']}x"
        lines.append(f"{p:>10} | {f.get('p50_ms', 0):>7.2f} {f.get('p95_ms', 0):>7.2f} "
                     f"{f.get('p99_ms', 0):>7.2f} | {shown:>9} | {f['errors']:>6} "
                     f"{f['leaks']:>5} {f['chunks_checked']:>7}")  # fmt: skip
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = sized_parser("python -m bench.mcp_latency", __doc__, QUICK, OUT_DIR,
                          "results-mcp.json")  # fmt: skip
    parser.add_argument("--chunks", type=int, help="corpus size (default 20000)")
    parser.add_argument("--calls", type=int, help="calls per path per round (default 300)")
    parser.add_argument("--rounds", type=int, help="rounds, alternating order (default 2)")
    args = parser.parse_args(argv)
    fill_sizes(args, QUICK, FULL)
    if args.chunks < 100 or args.calls < 1 or args.rounds < 1:
        parser.error("--chunks must be >= 100; --calls and --rounds >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    result = run(args.chunks, args.calls, args.rounds, args.seed, args.out_dir, say)
    say(table(result))
    path = args.out_dir / "results-mcp.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"wrote {path}")
    clean = all(result[p]["errors"] == 0 and result[p]["leaks"] == 0 for p in PATHS)
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
