"""The settings' sources: which file is read, how sources merge, and which source an error
names. tests/test_settings.py states precedence; this file pushes on the edges."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from govrag.errors import ConfigError, ConfigFileError
from govrag.settings import ENVIRONMENT, Settings, load_settings
from govrag.types import Classification

FILE = "[search]\nrrf_k = 10\nfusion_depth = 50\n[corpora.a]\ndescription = 'from the file'\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "govrag.toml").write_text(FILE)
    return tmp_path


def test_the_file_of_the_named_deployment_is_read(
    root: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings(deployment=root).search.rrf_k == 10
    # Settings naming no deployment read no file, not even one in the working directory.
    monkeypatch.chdir(root)
    assert Settings().search.rrf_k == 60
    monkeypatch.setenv("GOVRAG_DEPLOYMENT", str(root))
    other = tmp_path_factory.mktemp("empty")
    monkeypatch.chdir(other)
    assert Settings().search.rrf_k == 10
    assert load_settings(other).search.rrf_k == 60  # the argument wins over the variable


def test_a_deployment_key_in_the_file_is_ignored(root: Path) -> None:
    text = (root / "govrag.toml").read_text()
    (root / "govrag.toml").write_text('deployment = "/elsewhere"\n' + text)
    settings = load_settings(root)
    assert settings.deployment == root and settings.search.rrf_k == 10


def test_every_source_merges_key_by_key(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVRAG_SEARCH__DEFAULT_TOP_K", "7")
    monkeypatch.setenv("GOVRAG_CORPORA__A__CLASSIFICATION", "internal")
    settings = load_settings(root, search={"rrf_k": 30})
    search = settings.search
    assert (search.rrf_k, search.fusion_depth, search.default_top_k) == (30, 50, 7)
    corpus = settings.corpora["a"]
    assert (corpus.description, corpus.classification) == ("from the file", Classification.INTERNAL)
    # A whole table as JSON in one variable merges the same way.
    monkeypatch.setenv("GOVRAG_SEARCH", '{"rrf_k": 5}')
    monkeypatch.delenv("GOVRAG_SEARCH__DEFAULT_TOP_K")
    search = load_settings(root).search
    assert (search.rrf_k, search.fusion_depth) == (5, 50)


def test_the_settings_are_frozen(root: Path) -> None:
    settings = load_settings(root)
    with pytest.raises(ValidationError, match="frozen"):
        settings.default_tenant = "other"  # type: ignore[misc]


def test_an_error_names_the_source_of_the_refused_value(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = str(root / "govrag.toml")
    monkeypatch.setenv("GOVRAG_SEARCH__RRF_K", "0")  # overrides the file's valid 10
    with pytest.raises(ConfigError) as info:
        load_settings(root)
    assert str(info.value).startswith(f"{ENVIRONMENT}: field 'search.rrf_k'")
    assert config not in str(info.value)
    # The file's bad value, the environment's good one elsewhere: the file is named.
    monkeypatch.setenv("GOVRAG_SEARCH__RRF_K", "20")
    (root / "govrag.toml").write_text(FILE.replace("fusion_depth = 50", "fusion_depth = 0"))
    with pytest.raises(ConfigError) as info:
        load_settings(root)
    assert str(info.value).startswith(f"{config}: field 'search.fusion_depth'")
    assert ENVIRONMENT not in str(info.value)
    # Problems of several sources: each under its own name, arguments first.
    with pytest.raises(ConfigError) as info:
        load_settings(root, gateway={"candidates": 0}, search={"rrf_k": 0})
    message = str(info.value)
    assert message.startswith("settings: field '")
    arguments = message.split(config)[0]
    assert "field 'search.rrf_k'" in arguments and "field 'gateway.candidates'" in arguments
    assert f"; {config}: field 'search.fusion_depth'" in message


def test_an_unknown_key_from_the_environment_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOVRAG_SEARCH__RRFK", "3")  # typo of RRF_K inside a known table
    with pytest.raises(ConfigError) as info:
        load_settings(root)
    assert str(info.value) == (
        f"{ENVIRONMENT}: unknown field 'search.rrfk'; remove it or check its spelling"
    )


def test_a_table_variable_that_is_not_json_is_named(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOVRAG_STORE", "sqlite:///x.db")
    with pytest.raises(ConfigError, match=r"GOVRAG_STORE cannot be read .*GOVRAG_STORE__KEY"):
        load_settings(root)


def test_a_config_path_that_is_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "govrag.toml").mkdir()
    with pytest.raises(ConfigFileError, match=r"govrag\.toml: cannot be read"):
        load_settings(tmp_path)


def test_the_cli_reports_an_undecodable_variable_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "govrag.toml").write_text("")  # a deployment: the CLI opens no other folder
    done = subprocess.run(
        [sys.executable, "-m", "govrag.cli", "config", "check", "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GOVRAG_SEARCH": "{not json"},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "GOVRAG_SEARCH cannot be read" in lines[0], done.stderr
