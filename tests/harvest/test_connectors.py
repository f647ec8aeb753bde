"""The connector layer: JSONL as a connector, dry runs, sources by name or path, state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fs_helpers import write

from govrag.errors import InputError
from govrag.harvest.connector import ConnectorKind, JsonlConnector, slug
from govrag.harvest.harvester import harvest
from govrag.harvest.ingest import ingest_jsonl
from govrag.harvest.sources import list_sources, open_connector, resolve_source
from govrag.harvest.state import load_state, state_path
from govrag.settings import IngestSettings, Settings
from govrag.types import Classification

from conftest import make_store

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "govrag" / "data" / "sample.jsonl"


def test_the_jsonl_connector_ingests_like_ingest_jsonl(tmp_path: Path) -> None:
    bad = tmp_path / "in.jsonl"
    bad.write_bytes(SAMPLE.read_bytes() + b'\n{"type":"nope"}\n\xff\n')
    a, b = make_store(tmp_path / "a"), make_store(tmp_path / "b")
    try:
        expected = ingest_jsonl(a, bad, "t1", embedder=a.embedder)
        report = harvest(
            JsonlConnector(bad, max_text_bytes=2_000_000), b, "t1", embedder=b.embedder
        )
        assert report.as_dict() == expected.as_dict() | {"skipped": 0}
        assert report.messages == expected.messages and report.errors == 2
        assert a.stats("t1") == b.stats("t1")
        again = harvest(JsonlConnector(bad, max_text_bytes=2_000_000), b, "t1")
        assert (again.added, again.unchanged) == (0, expected.added)
    finally:
        a.close()
        b.close()


def test_a_dry_run_without_a_store_would_add_everything(tmp_path: Path) -> None:
    report = harvest(JsonlConnector(SAMPLE, max_text_bytes=2_000_000), None, "t1", dry_run=True)
    assert report.errors == 0 and report.added == 6 and report.chunks > 0
    with pytest.raises(ValueError, match="needs a store"):
        harvest(JsonlConnector(SAMPLE, max_text_bytes=2_000_000), None, "t1")


def test_a_dry_run_sees_its_own_deletes(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s")
    first = {
        "type": "document",
        "source_system": "s",
        "external_id": "d",
        "corpus": "c",
        "text": "one",
        "acl": [],
        "classification": "public",
    }
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(first) + "\n")
    harvest(JsonlConnector(path, max_text_bytes=4096), store, "t1")
    delete = {"type": "delete", "source_system": "s", "external_id": "d"}
    path.write_text("\n".join(json.dumps(r) for r in [delete, first, delete, delete]) + "\n")
    report = harvest(JsonlConnector(path, max_text_bytes=4096), store, "t1", dry_run=True)
    assert (report.deleted, report.added) == (2, 1)  # the third delete finds nothing
    assert store.stats("t1")["documents"] == 1
    store.close()


def settings_with_sources(root: Path) -> Settings:
    return Settings.model_validate(
        {
            "deployment": root,
            "default_tenant": "bank",
            "sources": {
                "docs": {
                    "connector": "filesystem",
                    "path": "shared/docs",
                    "tenant": "kb",
                    "classification": "confidential",
                    "authority_tier": 2,
                },
                "export": {"connector": "jsonl", "path": str(SAMPLE), "source_system": "sp"},
            },
        }
    )


def test_sources_by_name_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_with_sources(tmp_path)
    (tmp_path / "shared/docs").mkdir(parents=True)
    docs = resolve_source(settings, "docs")
    assert (docs.connector, docs.path, docs.source_system, docs.tenant) == (
        ConnectorKind.FILESYSTEM,
        tmp_path / "shared/docs",
        "docs",
        "kb",
    )
    assert docs.classification is Classification.CONFIDENTIAL and docs.authority_tier == 2
    assert docs.state_path == state_path(tmp_path, "docs")
    assert resolve_source(settings, "export").source_system == "sp"
    monkeypatch.chdir(tmp_path / "shared")
    assert resolve_source(settings, "docs/").name == "docs"  # its folder is the source
    other = write(tmp_path, "other/a.txt", "x").parent
    adhoc = resolve_source(settings, str(other))
    assert (adhoc.name, adhoc.connector, adhoc.source_system) == (
        "other",
        ConnectorKind.FILESYSTEM,
        "other",
    )
    assert adhoc.state_path is not None and adhoc.state_path.parent == tmp_path / ".govrag/sources"
    assert resolve_source(settings, str(SAMPLE)).name == "export"  # the configured file
    copy = write(tmp_path, "copy.jsonl", SAMPLE.read_bytes())
    plain = resolve_source(settings, str(copy))
    assert plain.connector is ConnectorKind.JSONL and plain.state_path is None


@pytest.mark.parametrize(
    ("target", "connector", "message"),
    [
        (
            "nope",
            None,
            "'nope' is neither a configured source nor an existing file or folder; "
            "configured sources (sources.<name> tables of govrag.toml): docs, export",
        ),
        ("docs", ConnectorKind.JSONL, "configured with connector 'filesystem'; drop --connector"),
        ("other/a.txt", None, "pass --connector filesystem or --connector jsonl"),
        ("other/a.txt", ConnectorKind.FILESYSTEM, "reads a folder"),
        ("other", ConnectorKind.JSONL, "reads a file"),
    ],
)
def test_bad_source_targets(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    connector: ConnectorKind | None,
    message: str,
) -> None:
    write(tmp_path, "other/a.txt", "x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as info:
        resolve_source(settings_with_sources(tmp_path), target, connector)
    assert message in str(info.value)


def test_list_sources_reads_the_state(tmp_path: Path) -> None:
    settings = settings_with_sources(tmp_path)
    write(tmp_path, "shared/docs/_access.json", {"acl": ["*"]})
    write(tmp_path, "shared/docs/a.md", "# A\n\nalpha")
    rows = {r.name: r for r in list_sources(settings)}
    assert rows["docs"].last_sync is None and rows["docs"].tenant == "kb"
    store = make_store(tmp_path / "store")
    spec = resolve_source(settings, "docs")
    harvest(open_connector(spec, "kb", IngestSettings()), store, "kb")
    export = resolve_source(settings, "export")
    harvest(open_connector(export, "bank", IngestSettings()), store, "bank", dry_run=True)
    rows = {r.name: r for r in list_sources(settings)}
    assert rows["docs"].documents == 1 and rows["docs"].last_run["added"] == 1
    assert rows["docs"].last_sync is not None and rows["export"].last_sync is None
    harvest(open_connector(export, "bank", IngestSettings()), store, "bank")
    rows = {r.name: r for r in list_sources(settings)}
    assert rows["export"].last_run["added"] == 6 and rows["export"].documents is None
    store.close()
    assert export.state_path is not None
    export.state_path.write_text("{not json")
    assert load_state(export.state_path)[0] is None
    rows = {r.name: r for r in list_sources(settings)}
    assert rows["export"].last_sync is None and "unusable" in rows["export"].state_warning


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Risk Models", "Risk-Models"), ("_drafts", "drafts"), ("é", "default"), ("a.b:c", "a.b:c")],
)
def test_slug(name: str, expected: str) -> None:
    assert slug(name) == expected
