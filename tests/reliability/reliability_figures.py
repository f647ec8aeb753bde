"""What a reliability test checked, kept for ``make soak``'s report.

``make soak`` sets ``GOVRAG_RELIABILITY_DIR``; each reliability test then writes its figures
there as ``<name>.json``, and ``python -m bench.reliability`` turns them (and the run's JUnit
report) into ``bench/RELIABILITY.md``. Without the variable nothing is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

DIR_ENV = "GOVRAG_RELIABILITY_DIR"


def record(name: str, figures: Mapping[str, int | str]) -> None:
    """Keep ``figures`` of the check ``name`` for the report (when a soak asks for it)."""
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{name}.json").write_text(json.dumps({"name": name, **figures}, indent=1) + "\n")
