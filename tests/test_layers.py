"""DESIGN.md section 2's dependency rules, checked on the source (lazy imports included).

The app reaches search only through the PEP: a module of ``agent/`` importing the store or the
gateway would be a path around the policy gate (a failure class of seed 003).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "govrag"

#: (package, packages it must never import)
RULES = [
    ("agent", ("store", "gateway")),
    ("store", ("policy", "gateway", "agent", "routes", "server", "cli", "deployment",
               "validation", "writeback", "harvest")),
    ("policy", ("agent", "server", "cli")),
    ("gateway", ("agent", "server", "cli", "policy")),
    ("writeback", ("agent", "server", "cli")),
    ("validation", ("agent", "server", "cli")),
    ("routes", ("agent", "gateway", "server", "cli")),
]  # fmt: skip


def imported(path: Path) -> set[str]:
    """The govrag subpackages/modules a file imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        out |= {n.split(".")[1] for n in names if n.startswith("govrag.") and n.count(".") >= 1}
    return out


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from govrag.store.sqlite import SQLiteStore\n")
    assert imported(sample) == {"store"}


@pytest.mark.parametrize(("package", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_imports_point_down_the_request_path(package: str, forbidden: tuple[str, ...]) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    broken = [
        f"{f.relative_to(SRC)} imports govrag.{name}"
        for f in files
        for name in sorted(imported(f) & set(forbidden))
    ]
    assert not broken, broken


def test_only_the_edges_know_the_cli() -> None:
    # The package cli/ is the CLI; nothing else may know it (the demo included) but
    # ``python -m govrag``, which is the CLI's other entry point.
    edges = {"cli", "__main__.py"}
    users = [
        f
        for f in SRC.rglob("*.py")
        if "cli" in imported(f) and f.relative_to(SRC).parts[0] not in edges
    ]
    assert users == []
