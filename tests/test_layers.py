"""DESIGN.md section 2's dependency rules, checked on the source (lazy imports included).

Imports point down the request path. Every top-level package and module of ``src/govrag``
has a level in :data:`LEVELS`, and a module may import only what sits strictly lower (or its
own package): a new package fails :func:`test_every_package_has_a_level` until someone decides
where it belongs. On top of the levels, the design's named rules (:data:`RULES`): the app
reaches search only through the PEP, so ``agent/`` importing the store or the gateway would be
a path around the policy gate (a failure class of seed 003); only ``cli/`` and ``server/``
know the edges; nothing in ``src`` imports ``testing/``. Finally no import cycles at all, at
module level (:func:`test_no_import_cycles`).

What the checker counts as an import: ``import``/``from`` statements anywhere in a file (in
functions, under ``TYPE_CHECKING``), relative imports resolved, and ``import_module`` calls
with a constant ``govrag...`` name. ``from govrag import x`` is an import of ``x``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "govrag"

#: Each top-level name of ``src/govrag`` (a package, a module, ``__init__`` for the package
#: itself), lowest first. A module imports only names of a strictly lower level.
LEVELS = {
    # Value types and the error hierarchy: import nothing of govrag's.
    "types": 0, "errors": 0,
    "strict_json": 1, "store_url": 1,
    # Reading and checking what an operator wrote.
    "deployfile": 2,
    "settings": 3, "problems": 3,
    "embed": 4,
    # Bearer tokens into Principals: beside the embedder, above the settings it reads.
    "auth": 4,
    "store": 5,
    # Off the hot path (harvest) and beside the store (audit log, write-back store).
    "harvest": 6, "audit": 6,
    # The write-back store records every admission as a typed audit event.
    "writeback": 7,
    "eval": 8, "gateway": 8, "validation": 8,
    "policy": 9,
    "routes": 10,
    "agent": 11,
    # The composition root and the application API over it.
    "deployment": 12, "scaffold": 12,
    "app": 13,
    "__init__": 14, "demo": 14,
    # The edges, and helpers for users' own tests: nothing in src imports them.
    "server": 15, "testing": 15,
    # The command line, whose ``govrag serve`` starts the HTTP edge.
    "cli": 16,
    # ``python -m govrag``: runs the CLI.
    "__main__": 17,
}  # fmt: skip

#: Edge packages: only they know the CLI, HTTP and MCP.
EDGES = ("cli", "server", "__main__")

#: (package, packages it must never import): DESIGN.md 2's rules, stated one by one although
#: the levels imply most of them, so each survives a change of levels.
RULES = [
    ("agent", ("store", "gateway")),
    ("store", ("policy", "gateway", "agent", "routes", "server", "cli", "deployment",
               "validation", "writeback", "harvest", "app", "testing")),
    ("policy", ("agent", "server", "cli", "routes", "app", "testing")),
    ("gateway", ("agent", "server", "cli", "policy", "app", "testing")),
    ("writeback", ("agent", "server", "cli", "app", "testing")),
    ("validation", ("agent", "server", "cli", "app", "testing")),
    ("routes", ("agent", "gateway", "server", "cli", "app", "testing")),
    ("harvest", ("policy", "gateway", "agent", "routes", "server", "cli", "app", "testing")),
    ("eval", ("agent", "server", "cli", "app", "testing")),
    ("audit", ("agent", "policy", "gateway", "routes", "server", "cli", "app", "testing")),
    ("embed", ("store", "harvest", "policy", "gateway", "agent", "routes", "server", "cli",
               "app", "testing")),
    ("testing", ("server", "cli")),
    # Identity checks need nothing of the request path.
    ("auth", ("store", "harvest", "policy", "gateway", "agent", "routes", "server", "cli",
              "app", "testing", "embed")),
    # Does not exist yet: HTTP and MCP are adapters over the application API.
    ("server", ("cli", "testing")),
]  # fmt: skip

#: Imports that break a rule today, each a known debt: delete an entry when it disappears (a
#: test fails while a listed one is gone). None today.
KNOWN_EDGE_IMPORTS: set[tuple[str, str]] = set()

#: Import cycles (strongly connected module sets) that exist today and are being removed.
#: Delete the entry when it disappears; every other cycle fails the test. None today.
KNOWN_CYCLES: list[frozenset[str]] = []


def module_name(path: Path, root: Path = SRC) -> str:
    """``govrag.policy.pdp`` for ``src/govrag/policy/pdp.py``; a package for its ``__init__``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top(module: str) -> str:
    """The top-level name ``module`` belongs to (``__init__`` for ``govrag`` itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(path: Path, module: str) -> Iterator[str]:
    """Every dotted govrag name ``path`` (the module ``module``) imports, anywhere in it.

    ``from a import b`` yields ``a.b``: ``b`` may be a module or a name in ``a``, which
    :func:`resolve` tells apart.
    """
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (base if a.name == "*" else f"{base}.{a.name}" for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


@cache
def sources(root: Path = SRC) -> dict[str, Path]:
    return {module_name(f, root): f for f in sorted(root.rglob("*.py"))}


def resolve(name: str, known: dict[str, Path]) -> str:
    """The module ``name`` imports: itself, else the longest known module it starts with
    (``govrag.store.sqlite.SQLiteStore`` -> ``govrag.store.sqlite``; ``govrag.open`` ->
    ``govrag``)."""
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


@cache
def imported(path: Path, module: str = "govrag._sample") -> frozenset[str]:
    """The top-level govrag names a file imports, anywhere in it."""
    known = sources()
    names = (resolve(n, known) for n in imported_modules(path, module))
    return frozenset(top(n) for n in names if n == "govrag" or n.startswith("govrag."))


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from govrag.store.sqlite import SQLiteStore\n")
    assert imported(sample) == {"store"}


def test_the_checker_sees_every_spelling_of_an_import(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "from govrag import deployfile\n"
        "from .. import agent\n"
        "from .sibling import x\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    import govrag.audit.trail\n"
        "def f():\n"
        "    return importlib.import_module('govrag.eval.metrics')\n"
    )
    # As if it were src/govrag/policy/m.py: ``..`` is govrag, ``.`` is govrag.policy.
    assert imported(sample, "govrag.policy.m") == {
        "deployfile", "agent", "policy", "audit", "eval",
    }  # fmt: skip


def test_every_package_has_a_level() -> None:
    names = {top(m) for m in sources()}
    assert names - set(LEVELS) == set(), "give each new package a level in LEVELS"


@pytest.mark.parametrize("package", sorted(LEVELS))
def test_imports_point_down(package: str) -> None:
    broken = [
        f"{path.relative_to(SRC)} imports govrag.{name} (level {LEVELS[name]}) from "
        f"level {LEVELS[package]}"
        for module, path in sources().items()
        if top(module) == package
        for name in sorted(imported(path, module))
        if name != package
        and (package, name) not in KNOWN_EDGE_IMPORTS
        and LEVELS.get(name, len(LEVELS)) >= LEVELS[package]
    ]
    assert not broken, broken


@pytest.mark.parametrize(("package", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_imports_point_down_the_request_path(package: str, forbidden: tuple[str, ...]) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    broken = [
        f"{f.relative_to(SRC)} imports govrag.{name}"
        for f in files
        for name in sorted(imported(f, module_name(f)) & set(forbidden))
    ]
    assert not broken, broken


def test_every_rule_names_known_packages() -> None:
    named = {p for p, forbidden in RULES for p in (p, *forbidden)}
    assert named - set(LEVELS) == set()


def test_only_the_edges_know_the_cli() -> None:
    # cli/ and server/ are the edges (and ``python -m govrag``, which runs the CLI).
    users = [
        f"{path.relative_to(SRC)} imports govrag.{name}"
        for module, path in sources().items()
        if top(module) not in EDGES
        for name in sorted(imported(path, module) & set(EDGES))
        if (top(module), name) not in KNOWN_EDGE_IMPORTS
    ]
    assert users == []


#: What the HTTP and MCP adapters may import: the application API and the value types and
#: errors it speaks in (``server/`` does not exist yet; this is its rule from day one).
SERVER_MAY_IMPORT = {"server", "__init__", "app", "types", "errors"}


def test_the_server_calls_only_the_application_api() -> None:
    broken = [
        f"{path.relative_to(SRC)} imports govrag.{name}"
        for module, path in sources().items()
        if top(module) == "server"
        for name in sorted(imported(path, module) - SERVER_MAY_IMPORT)
    ]
    assert broken == []


def test_known_edge_imports_still_exist() -> None:
    present = {
        (top(module), name) for module, path in sources().items() for name in imported(path, module)
    }
    gone = KNOWN_EDGE_IMPORTS - present
    assert not gone, f"{gone} no longer happen: delete them from KNOWN_EDGE_IMPORTS"


def test_nothing_in_src_imports_testing() -> None:
    # govrag.testing is for users' tests (and govrag's): importing it from the library would
    # make the embedded server a runtime dependency.
    users = [
        str(path.relative_to(SRC))
        for module, path in sources().items()
        if top(module) != "testing" and "testing" in imported(path, module)
    ]
    assert users == []


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module -> the govrag modules it imports (a package when the name is not a module)."""
    modules = sources(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        names = {resolve(n, modules) for n in imported_modules(path, module)}
        graph[module] = {n for n in names if n in modules and n != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(map(sorted, cycles(graph))) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_resolves_names_to_modules(tmp_path: Path) -> None:
    root = tmp_path / "govrag"
    (root / "pkg").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "pkg" / "__init__.py").write_text("from govrag.pkg.a import A\n")
    (root / "pkg" / "a.py").write_text("A = 1\ndef f():\n    from govrag.pkg import b\n")
    (root / "pkg" / "b.py").write_text("from . import a\nfrom govrag.pkg.a import A\n")
    graph = import_graph(root)
    assert graph["govrag.pkg"] == {"govrag.pkg.a"}
    assert graph["govrag.pkg.a"] == {"govrag.pkg.b"}
    assert graph["govrag.pkg.b"] == {"govrag.pkg.a"}
    assert cycles(graph) == [frozenset({"govrag.pkg.a", "govrag.pkg.b"})]


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    unknown = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert unknown == [], "import cycles (a module reaches itself through its imports)"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert gone == [], "these cycles are gone or changed: update KNOWN_CYCLES"


BENCH = SRC.parents[1] / "bench"


def test_the_benchmarks_have_no_import_cycles() -> None:
    # What benchmarks share is bench/common.py: a benchmark never imports the command
    # (bench/run.py) that imports it.
    graph = import_graph(BENCH)
    assert cycles(graph) == []
    assert [m for m, targets in graph.items() if "bench.run" in targets] == []
