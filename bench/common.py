"""What every timed benchmark shares: interleaved timing, latency series, output helpers.

Each benchmark module (``bench/synthetic.py``'s runner in ``bench/run.py``, ``bench/postgres.py``
...) times its systems with :func:`time_interleaved` and reports :class:`Series`. They live here,
not in ``bench/run.py``, so a benchmark module never imports the command that runs it: the
runner imports the benchmarks, never the reverse.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from govrag.eval.metrics import percentile

#: Untimed queries each system runs before its timed series.
WARMUP = 5
TOP_K = 10

#: A system under test: query -> (document numbers found, hidden-item marker present).
System = Callable[[str], tuple[list[int], bool]]


def say(message: str) -> None:
    print(message, flush=True)


def sized_parser(prog: str, doc: str | None, quick: dict[str, int], out_dir: Path,
                 results: str) -> argparse.ArgumentParser:  # fmt: skip
    """The parser of a benchmark with sizes (each added by the caller, default ``None``):
    ``--quick`` for a smoke run, ``--seed``, ``--out-dir``; see :func:`fill_sizes`."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=raw)
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {quick} unless given")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=out_dir,
                        help=f"where the cached store and {results} go")  # fmt: skip
    return parser


def fill_sizes(args: argparse.Namespace, quick: dict[str, int], full: dict[str, int]) -> None:
    """Each size not given: ``quick``'s with ``--quick``, else ``full``'s."""
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def ratio(a: float, b: float) -> float | None:
    """``a / b`` to two places; ``None`` when ``b`` is not positive."""
    return round(a / b, 2) if b > 0 else None


@dataclass
class Series:
    """Latencies of one (system, strategy, probe) series and the documents each query found."""

    ms: list[float]
    docs: list[list[int]]
    hidden: list[bool]

    def summary(self) -> dict[str, float]:
        return {
            "p50_ms": round(percentile(self.ms, 50), 3),
            "p95_ms": round(percentile(self.ms, 95), 3),
            "mean_ms": round(statistics.fmean(self.ms), 3),
        }


def time_interleaved(systems: dict[str, System], queries: list[str]) -> dict[str, Series]:
    """Time every system on every query, interleaved query by query.

    Interleaving (with the order rotated per query) spreads any transient slowdown of the
    machine over all systems alike, so the ratios between them stay meaningful on a noisy host.
    Each system first runs the warm-up queries untimed. The timed span is the whole call;
    for govrag that is ``store.search`` (request construction included) and mapping hit ids,
    which costs microseconds.
    """
    names = list(systems)
    for name in names:
        for query in queries[:WARMUP]:
            systems[name](query)
    out = {name: Series([], [], []) for name in names}
    for i, query in enumerate(queries):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            t0 = time.perf_counter()
            docs, hidden = systems[name](query)
            out[name].ms.append((time.perf_counter() - t0) * 1000)
            out[name].docs.append(docs)
            out[name].hidden.append(hidden)
    return out
