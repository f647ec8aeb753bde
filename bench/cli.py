"""What a person at a terminal waits for: wall time and peak memory of whole ``govrag`` commands.

Run from the repository root::

    .venv/bin/python -m bench.cli [--repeat N] [--dir DIR]

The bank-eu demo deployment is created (with MiniLM when the semantic extra is
installed, as ``make demo`` does) and ingested once in ``DIR`` (default
``bench/out/cli-demo``); then each command runs ``N`` times (default 5) as a fresh process,
interleaved with the baseline ``python -c pass`` so both see the same machine. The govrag package
is byte-compiled first, as an installed wheel is (an editable install compiles nothing, and
where ``PYTHONDONTWRITEBYTECODE`` is set every run would compile ~130 modules again). Peak memory is
the child's maximum resident set size (``getrusage``), read through a one-shot wrapper process
so every measurement is of one command alone; so is its CPU time (user + system), which other
load on the machine inflates far less than wall time. Prints a table and writes
``bench/out/results-cli.json``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
#: Runs ``argv`` and prints its wall seconds, its peak RSS in KiB and its CPU seconds (the only
#: child).
_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "wall = time.perf_counter() - t\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(wall, usage.ru_maxrss, done.returncode, usage.ru_utime + usage.ru_stime)\n"
    "sys.stderr.write(done.stderr.decode(errors='replace')[-2000:] if done.returncode else '')\n"
)
QUESTION = "What's our wire limit for corporate clients in the EU?"


def measure(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak MiB and CPU seconds of one run of ``argv``; a failing command stops
    the bench."""
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True,
                          text=True, check=True)  # fmt: skip
    wall, peak, rc, cpu = done.stdout.split()
    if rc != "0":
        raise SystemExit(f"{' '.join(argv)} exited {rc}: {done.stderr}")
    return float(wall), int(peak) / 1024, float(cpu)


def prepare(directory: Path) -> str:
    """The demo deployment, ingested, and govrag byte-compiled; returns a request id to
    replay."""
    import govrag

    compileall.compile_dir(Path(govrag.__file__).parent, quiet=1)
    govrag = str(Path(sys.executable).with_name("govrag"))
    if not (directory / "govrag.toml").exists():
        subprocess.run([govrag, "demo", "--dir", str(directory)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    done = subprocess.run([govrag, "ask", QUESTION, "--as", "officer-123", "--json", "-d",
                           str(directory)], check=True, capture_output=True, text=True)  # fmt: skip
    return str(json.loads(done.stdout)["request_id"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=OUT / "cli-demo")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    request_id = prepare(args.dir)
    govrag = str(Path(sys.executable).with_name("govrag"))
    d = ["-d", str(args.dir)]
    commands: dict[str, list[str]] = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "govrag --help": [govrag, "--help"],
        "search --strategy keyword": [govrag, "search", "wire limit", "--as", "officer-123",
                                      "--strategy", "keyword", *d],
        "search --strategy hybrid": [govrag, "search", "wire limit", "--as", "officer-123",
                                     "--strategy", "hybrid", *d],
        "ask (extractive)": [govrag, "ask", QUESTION, "--as", "officer-123", *d],
        "replay": [govrag, "replay", request_id, *d],
    }  # fmt: skip
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeat):  # interleaved: every command sees the same machine
        for name, command in commands.items():
            runs[name].append(measure(command))
    base_wall = statistics.median(w for w, _, _ in runs["python -c pass (baseline)"])
    base_mem = statistics.median(m for _, m, _ in runs["python -c pass (baseline)"])
    rows: dict[str, dict[str, Any]] = {}
    print(f"{'command':<28} {'wall s (median)':>16} {'x baseline':>11} {'peak MiB':>9} "
          f"{'x baseline':>11} {'cpu s':>6}")  # fmt: skip
    for name, values in runs.items():
        wall = statistics.median(w for w, _, _ in values)
        peak = statistics.median(m for _, m, _ in values)
        cpu = statistics.median(c for _, _, c in values)
        rows[name] = {"wall_s": wall, "wall_max_s": max(w for w, _, _ in values),
                      "peak_mib": peak, "cpu_s": cpu, "wall_ratio": wall / base_wall,
                      "peak_ratio": peak / base_mem}  # fmt: skip
        print(f"{name:<28} {wall:>16.2f} {wall / base_wall:>10.0f}x {peak:>9.0f} "
              f"{peak / base_mem:>10.1f}x {cpu:>6.2f}")  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"repeat": args.repeat, "deployment": str(args.dir), "commands": rows,
              "total_s": time.perf_counter() - started}  # fmt: skip
    (OUT / "results-cli.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT / 'results-cli.json'} (total {result['total_s']:.0f} s)")


if __name__ == "__main__":
    main()
