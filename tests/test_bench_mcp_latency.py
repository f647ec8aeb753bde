"""The MCP latency benchmark at a tiny size (``bench/mcp_latency.py``): its command runs end to
end against ``govrag mcp`` over stdio and streamable HTTP in subprocesses, and its own checks
hold (no error, no leaked chunk, the same calls on every path). Its figures are not looked
at: this is a smoke test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_mcp_latency_benchmark_runs_clean_at_a_tiny_size(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "bench.mcp_latency", "--quick", "--chunks", "200", "--calls", "6",
         "--out-dir", str(tmp_path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "results-mcp.json").read_text())
    for name in ("in_process", "stdio", "http"):
        figures = result[name]
        assert figures["calls"] == 6 and figures["errors"] == 0 and figures["leaks"] == 0
        assert figures["chunks_checked"] >= figures["unreadable_by_another"] > 0
    # The same calls, the same answers: every path returned the same number of chunks.
    assert len({result[n]["chunks_checked"] for n in ("in_process", "stdio", "http")}) == 1
    assert "MCP tool-call latency" in done.stdout
