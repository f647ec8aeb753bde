"""The public surface: ``govrag.__all__`` is what a user may rely on, and the example of
``docs/python-api.md`` runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import govrag

ROOT = Path(__file__).resolve().parents[1]

#: Changing this list is changing the public API: do it on purpose, with the docs.
PUBLIC = {
    "AdmissionGate", "AdmissionResult", "Answer", "AuthError", "Callers", "Citation",
    "Classification", "ConfigCheck", "ConfigError", "Examiners", "GovernedResult", "Govrag",
    "GovragError", "HiddenMarker", "IngestError", "IngestOutcome", "InputError", "LlmError",
    "MetadataFilter", "MissingExtraError", "NotFoundError", "Operators", "Principal", "Replay",
    "RetrievalScope", "SearchHit", "SearchRequest", "SearchResult", "SessionInfo",
    "SourceStatus", "StoreError", "Strategy", "VerifiedToken", "WriteBackCandidate",
    "__version__", "evaluate_beir", "init", "local_principal", "open", "restore",
}  # fmt: skip

#: The use cases every edge (CLI, HTTP, MCP) adapts, by the audience each serves.
CALLERS = {
    "search", "ask", "open_session", "session", "retrieve", "corpora", "document",
    "offered_tools", "call_tool", "click", "writeback_admit", "remember", "verify_token",
}  # fmt: skip
EXAMINERS = {"replay", "audit_verify"}
OPERATORS = {
    "ingest", "sources", "replay", "escalations", "audit_verify", "audit_checkpoint",
    "audit_keygen", "audit_rotate_key", "readiness", "curate", "index_verify", "index_rebuild",
    "observe_audit", "config_check", "evaluate_beir", "evaluate_suite", "dev_token", "settings",
    "back_up",
}  # fmt: skip


def test_all_is_the_curated_surface_and_every_name_resolves() -> None:
    assert set(govrag.__all__) == PUBLIC
    for name in govrag.__all__:
        assert getattr(govrag, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        _ = govrag.no_such_thing  # type: ignore[attr-defined]


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_each_audience_gets_its_own_object_with_only_its_use_cases() -> None:
    assert _public(govrag.Govrag) == {"settings", "callers", "examiners", "operators", "close"}
    assert _public(govrag.Callers) == CALLERS
    assert _public(govrag.Examiners) == EXAMINERS
    assert _public(govrag.Operators) == OPERATORS
    # A caller's object reads no audit log: no replay, principal-free or not.
    assert not _public(govrag.Callers) & (OPERATORS | EXAMINERS)
    # Nothing that hands out the wiring (store, gateway, PEP) to bypass the use cases.
    wiring = {"store", "gateway", "pep", "deployment", "orchestrator", "governed"}
    for cls in (govrag.Govrag, govrag.Callers, govrag.Examiners, govrag.Operators):
        assert not _public(cls) & wiring, cls


def test_import_govrag_loads_no_heavy_module() -> None:
    # The value types must not drag in the store, the policy engine or the embedder.
    code = (
        "import sys, govrag; "
        "heavy = [m for m in ('govrag.app', 'govrag.store.sqlite', 'cedarpy', 'torch', "
        "'govrag.deployment') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.strip() == "[]"


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_example_runs(tmp_path: Path) -> None:
    blocks = _python_blocks(ROOT / "docs" / "python-api.md")
    example = next(b for b in blocks if "govrag.init(" in b)
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOVRAG_")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "['wire-limits']" in lines
    assert any("50,000" in line and "'wire-limits'" in line for line in lines)


def test_open_with_ready_settings_refuses_overrides(tmp_path: Path) -> None:
    govrag.init(tmp_path, tenant="bank")
    from govrag.settings import load_settings

    settings = load_settings(tmp_path)
    with govrag.open(settings) as app:
        assert app.settings is settings
        assert app.operators.config_check().ok
    with pytest.raises(TypeError, match="overrides"):
        govrag.open(settings, default_tenant="x")


def test_an_empty_corpus_list_is_refused_not_widened(tmp_path: Path) -> None:
    govrag.init(tmp_path, tenant="bank", corpora=["policies"])
    ana = govrag.Principal(sub="ana", email="ana@bank.example", tenant="bank",
                           doc_entitlements=("policies:read",))  # fmt: skip
    with govrag.open(tmp_path) as app, pytest.raises(govrag.InputError, match="corpora is empty"):
        app.callers.search(ana, "wire limit", corpora=[])
