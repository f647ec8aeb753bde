"""A deployment directory: ``govrag.toml`` + ``principals.json`` (+ later layers' files).

``govrag init DIR`` scaffolds one; :class:`Deployment` loads it for every command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from govrag.embed import get_embedder
from govrag.embed.base import Embedder
from govrag.errors import ConfigError, NotFoundError, describe_validation
from govrag.settings import CONFIG_FILE, PRINCIPALS_FILE, Settings, load_settings
from govrag.store import KnowledgeStore, open_store
from govrag.types import Principal


class PrincipalsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principals: list[Principal]


def load_principals(path: Path) -> dict[str, Principal]:
    """Principals by ``sub``. Errors name the file, the entry and the field."""
    if not path.exists():
        raise ConfigError(
            f"{path} does not exist; create it with `govrag init` or write "
            '{"principals": [{"sub": ..., "email": ..., "tenant": ..., "clearance": ...}]}'
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    try:
        parsed = PrincipalsFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation(exc)}") from exc
    out: dict[str, Principal] = {}
    for p in parsed.principals:
        if p.sub in out:
            raise ConfigError(f"{path}: sub {p.sub!r} appears twice; subs must be unique")
        out[p.sub] = p
    return out


@dataclass
class Deployment:
    """Settings plus lazily opened resources of one deployment directory."""

    settings: Settings

    @classmethod
    def load(cls, directory: str | Path | None = None, **overrides: Any) -> Deployment:
        return cls(load_settings(directory, **overrides))

    @cached_property
    def principals(self) -> dict[str, Principal]:
        return load_principals(self.settings.principals_path)

    def principal(self, sub: str) -> Principal:
        try:
            return self.principals[sub]
        except KeyError:
            known = ", ".join(sorted(self.principals)) or "none"
            raise NotFoundError(
                f"unknown principal {sub!r}: not in {self.settings.principals_path}; "
                f"known subs: {known}"
            ) from None

    @cached_property
    def embedder(self) -> Embedder:
        cfg = self.settings.embedder
        options: dict[str, Any] = {"dim": cfg.dim} if cfg.name == "hash" else {}
        return get_embedder(cfg.name, **options)

    @cached_property
    def store(self) -> KnowledgeStore:
        store = open_store(self.settings, self.embedder)
        for corpus_id, corpus in self.settings.corpora.items():
            if corpus.description:
                store.describe_corpus(self.settings.default_tenant, corpus_id, corpus.description)
        return store

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()


def scaffold(
    directory: Path, *, embedder: str, tenant: str = "default", force: bool = False
) -> list[Path]:
    """Write a starter ``govrag.toml`` and ``principals.json``. Never overwrites without force."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / CONFIG_FILE
    principals = directory / PRINCIPALS_FILE
    for path in (config, principals):
        if path.exists() and not force:
            raise ConfigError(f"{path} already exists; pass --force to overwrite it")
    config.write_text(
        f"""# govrag deployment settings.
# Environment variables override them: GOVRAG_<SECTION>__<KEY>.
default_tenant = "{tenant}"

[store]
url = "sqlite:///govrag.db"   # relative to this directory
# url = "postgresql://govrag_app@db.internal:5432/govrag"   # with pip install 'govrag[postgres]'
# admin_url = "postgresql://govrag_owner@db.internal:5432/govrag"   # see docs/scaling.md
index_dir = "index"           # derived search indexes; rebuild with `govrag index rebuild`

[embedder]
name = "{embedder}"           # "minilm" (semantic, needs govrag[semantic]) or "hash" (not semantic)
dim = 384

[search]
rrf_k = 60
lexical_weight = 1.0
vector_weight = 1.0
fusion_depth = 100
default_top_k = 10
hidden_marker = true          # report (content-free) that an unreadable relevant item exists

[ingest]
chunk_tokens = 300
section_tokens = 1200
max_text_bytes = 2000000

# Describe corpora for the model (shown by list_corpora):
# [corpora.policy-engine]
# description = "Bank policies: limits, approvals, controls"
""",
        encoding="utf-8",
    )
    principals.write_text(
        json.dumps(
            {
                "principals": [
                    {
                        "sub": "ana",
                        "email": "ana@bank.example",
                        "tenant": tenant,
                        "roles": ["analyst"],
                        "doc_entitlements": [],
                        "clearance": "internal",
                    }
                ]
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return [config, principals]
