"""The HTTP load benchmark at a tiny size (``bench/http_load.py``): its command runs end to end
against ``govrag serve`` in a subprocess, and its own checks hold (no error, no leaked chunk,
the same requests on both paths). Its figures are not looked at: this is a smoke test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_http_load_benchmark_runs_clean_at_a_tiny_size(tmp_path: Path, workers: int) -> None:
    """With ``workers`` 2, ``govrag serve`` answers from two processes ([server] workers)."""
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "bench.http_load", "--quick", "--chunks", "200", "--clients", "2",
         "--requests", "6", "--workers", str(workers), "--out-dir", str(tmp_path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "results-http.json").read_text())
    for name in ("http", "in_process"):
        figures = result[name]
        assert figures["requests"] == 6 and figures["errors"] == 0 and figures["leaks"] == 0
        # Some of what was checked another principal may not read: a mix-up would show.
        assert figures["chunks_checked"] >= figures["unreadable_by_another"] > 0
    # The same requests, the same answers: both paths returned the same number of chunks.
    assert result["http"]["chunks_checked"] == result["in_process"]["chunks_checked"]
    assert "http throughput / in-process" in done.stdout
    assert result["workers"] == workers
