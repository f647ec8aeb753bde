"""Settings precedence (init > env > file > defaults) and clear errors for bad files."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from govrag.deployment import Deployment, load_principals
from govrag.errors import ConfigError, NotFoundError
from govrag.scaffold import scaffold
from govrag.settings import Settings, load_settings


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "govrag.toml").write_text("[search]\nrrf_k = 10\nfusion_depth = 50\n")
    assert load_settings(tmp_path).search.rrf_k == 10
    monkeypatch.setenv("GOVRAG_SEARCH__RRF_K", "20")
    settings = load_settings(tmp_path)
    assert (settings.search.rrf_k, settings.search.fusion_depth) == (20, 50)  # merged, not replaced
    assert load_settings(tmp_path, search={"rrf_k": 30}).search.rrf_k == 30


def test_deployment_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVRAG_DEPLOYMENT", str(tmp_path))
    assert load_settings().deployment == tmp_path


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[search]\nrrf_k = 0\n", "search.rrf_k"),
        ("[serach]\nrrf_k = 1\n", "unknown field 'serach'"),
        ("[store\n", "invalid TOML"),
        ("[embedder]\ndim = 'big'\n", "embedder.dim"),
        ("[rights.sources.sp]\nkind = 'http'\n", "'rights.sources.sp': kind 'http' needs 'url'"),
        ("[rights.default]\nkind = 'ldap'\n", "rights.default.kind"),
        ("[rights.sources.sp]\nurl = 'ftp://x'\n", "is not an http(s) URL"),
        ("[validation]\nmin_query_coverage = 2\n", "validation.min_query_coverage"),
        ("[gateway]\ncache_entries = -1\n", "gateway.cache_entries"),
        ("[gateway]\nreranker = 'cross-encoder'\n", "needs 'cross_encoder_path'"),
    ],
)
def test_bad_config_names_file_and_field(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "govrag.toml").write_text(toml)
    with pytest.raises(ConfigError, match=r"govrag\.toml") as info:
        load_settings(tmp_path)
    assert message in str(info.value)


def test_bad_env_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVRAG_SEARCH__RRF_K", "lots")
    with pytest.raises(ConfigError, match="GOVRAG_"):
        load_settings(tmp_path)


def test_missing_deployment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="govrag init"):
        load_settings(tmp_path / "nope")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "invalid JSON"),
        ('{"principals": [{"sub": "a"}]}', "principals.0.email"),
        ('{"principals": [{"sub": "a", "email": "a@x", "tenant": "t", "clearance": "top"}]}',
         "unknown classification 'top'"),
        ('{"principals": [], "extra": 1}', "unknown field 'extra'"),
    ],
)  # fmt: skip
def test_bad_principals(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "principals.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=r"principals\.json") as info:
        load_principals(path)
    assert message in str(info.value)


def test_duplicate_sub_is_rejected(tmp_path: Path) -> None:
    entry = {"sub": "a", "email": "a@x.example", "tenant": "t"}
    (tmp_path / "principals.json").write_text(json.dumps({"principals": [entry, entry]}))
    with pytest.raises(ConfigError, match="appears twice"):
        load_principals(tmp_path / "principals.json")


def test_scaffold_round_trip(tmp_path: Path) -> None:
    scaffold(tmp_path, embedder="hash", tenant="bank")
    dep = Deployment.load(tmp_path)
    assert dep.settings.default_tenant == "bank" and dep.settings.embedder.name == "hash"
    assert dep.principal("ana").email == "ana@bank.example"
    with pytest.raises(NotFoundError, match="known subs: ana"):
        dep.principal("zed")
    assert dep.store.is_empty("bank")
    dep.close()
    assert (tmp_path / "govrag.db").exists()


def test_corpus_descriptions_from_config(tmp_path: Path) -> None:
    scaffold(tmp_path, embedder="hash", tenant="bank")
    with (tmp_path / "govrag.toml").open("a") as fh:
        fh.write('\n[corpora.policy-engine]\ndescription = "Bank policies"\n')
    dep = Deployment.load(tmp_path)
    assert dep.catalog("bank") == [("policy-engine", "Bank policies")]
    assert dep.catalog("other") == [("policy-engine", "Bank policies")]  # per tenant
    dep.close()


def test_unsupported_store_url(tmp_path: Path) -> None:
    # Refused with the settings, before anything is opened (or created).
    with pytest.raises(ConfigError, match=r"unsupported scheme 'mysql'.*accepted forms: sqlite"):
        Deployment.load(tmp_path, store={"url": "mysql://x"})
    assert list(tmp_path.iterdir()) == []


def test_the_scaffolded_file_states_the_defaults(tmp_path: Path) -> None:
    """``govrag init`` writes settings out for people to edit: each value it writes for a
    section's field is that field's default, so the file never silently changes behaviour."""
    scaffold(tmp_path, embedder="hash")
    written = tomllib.loads((tmp_path / "govrag.toml").read_text())
    defaults = Settings.model_fields
    checked = 0
    for section, values in written.items():
        if not isinstance(values, dict) or section not in defaults or section == "embedder":
            continue
        default = defaults[section].default
        for key, value in values.items():
            if isinstance(default, BaseModel) and key in type(default).model_fields:
                assert getattr(default, key) == value, f"[{section}] {key}"
                checked += 1
    assert checked >= 10
