"""Write ``bench/RELIABILITY.md`` from a ``make soak`` run.

``make soak`` runs the crash test and ``tests/reliability/`` at soak scale with
``GOVRAG_RELIABILITY_DIR`` set (each reliability test writes what it checked there, as JSON)
and a JUnit report; this module turns both into the report, with the command, the commit and
the date. A soak that failed writes nothing: ``make`` stops at the failing pytest run, so the
report only ever holds figures of a passing run.

    .venv/bin/python -m bench.reliability [--figures DIR] [--junit FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMMAND = (
    "GOVRAG_RELIABILITY_DIR=bench/out/reliability GOVRAG_CRASH_RUNS=300 "
    "GOVRAG_SOAK_QUERIES=20000 GOVRAG_SOAK_RUNS=20 GOVRAG_AUDIT_KILLS=100 "
    "GOVRAG_PG_TERMINATIONS=300 GOVRAG_CRASH_SERVE_RUNS=100 GOVRAG_BACKUP_RUNS=20 "
    "GOVRAG_LOAD_FAULT_REQUESTS=2000 GOVRAG_LOAD_FAULT_KILLS=200 .venv/bin/python -m pytest -q -s "
    "tests/harvest/test_crash.py tests/reliability --junitxml=bench/out/soak-junit.xml"
)


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                             capture_output=True, text=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def outcomes(junit: Path) -> list[tuple[str, int, int, int, float]]:
    """Per test file: tests, failures (and errors), skipped, seconds."""
    per: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0])
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("classname", "?").rsplit(".", 1)[-1]
        row = per[name]
        row[0] += 1
        row[1] += sum(1 for tag in ("failure", "error") if case.find(tag) is not None)
        row[2] += int(case.find("skipped") is not None)
        row[3] += float(case.get("time", "0"))
    return [(n, int(r[0]), int(r[1]), int(r[2]), r[3]) for n, r in sorted(per.items())]


def render(figures: list[dict[str, Any]], files: list[tuple[str, int, int, int, float]]) -> str:
    lines = [
        "# Reliability figures",
        "",
        f"Written by `make soak` on {datetime.now(UTC):%Y-%m-%d} at commit `{_commit()}`, "
        "from its own run (a failing check stops `make soak` before this file is written).",
        "",
        "```sh",
        "make soak   # = " + COMMAND + " && .venv/bin/python -m bench.reliability",
        "```",
        "",
        "## Tests",
        "",
        "| file | tests | failed | skipped | seconds |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| `{n}` | {t} | {f} | {s} | {sec:.0f} |" for n, t, f, s, sec in files]
    lines += ["", "## What each check saw", ""]
    for entry in figures:
        lines += [f"### {entry['name']}", "", "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {v:,} |" if isinstance(v, int) else f"| {k} | {v} |"
                  for k, v in entry.items() if k != "name"]  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=Path, default=ROOT / "bench/out/reliability")
    parser.add_argument("--junit", type=Path, default=ROOT / "bench/out/soak-junit.xml")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/RELIABILITY.md")
    args = parser.parse_args()
    found = sorted(args.figures.glob("*.json")) if args.figures.is_dir() else []
    if not found or not args.junit.is_file():
        print(f"no soak figures in {args.figures} or no JUnit report {args.junit}: run `make soak`")
        return 1
    figures = [json.loads(p.read_text()) for p in found]
    args.out.write_text(render(figures, outcomes(args.junit)) + "\n")
    print(f"wrote {args.out} ({len(figures)} checks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
