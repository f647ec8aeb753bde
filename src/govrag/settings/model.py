"""The settings of one deployment: init arguments > environment > ``govrag.toml`` > defaults.

A deployment directory holds ``govrag.toml`` and ``principals.json`` (and routes,
manifests, workflows and policies). ``--deployment DIR`` or ``GOVRAG_DEPLOYMENT`` selects
it. Environment variables use the prefix ``GOVRAG_`` and ``__`` for nesting, e.g.
``GOVRAG_SEARCH__RRF_K=30``; they override single keys of the file's tables.
:class:`Settings` declares the sources (:mod:`govrag.settings.sources`); pydantic-settings
reads and merges them, and :func:`load_settings` turns a refusal into a
:class:`~govrag.errors.ConfigError` naming the file or the environment to fix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError, field_validator
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from govrag import deployfile
from govrag.errors import ConfigError, describe_validation
from govrag.settings.auth import AuthSettings
from govrag.settings.request import (
    AuditSettings,
    GatewaySettings,
    LlmSettings,
    PolicySettings,
    RightsSettings,
    ValidationSettings,
    WritebackSettings,
)
from govrag.settings.sections import (
    CorpusSettings,
    CurationSettings,
    EmbedderSettings,
    IngestSettings,
    SearchSettings,
    SourceSettings,
    StoreSettings,
)
from govrag.settings.server import ServerSettings
from govrag.settings.sources import (
    CONFIG_FILE,
    ENVIRONMENT,
    DeploymentFileSource,
    MaskedSource,
    origin,
    read_config,
)
from govrag.types import CorpusTenancy, reserved_source_system

PRINCIPALS_FILE = "principals.json"
DEPLOYMENT_ENV = "GOVRAG_DEPLOYMENT"
#: How an error names values passed to :func:`load_settings` by its caller.
ARGUMENTS = "settings"


class Settings(BaseSettings):
    """Every setting of a deployment. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="GOVRAG_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        # A refused value is named by its field, never echoed: it may be a password.
        hide_input_in_errors=True,
    )

    deployment: Path = Path(".")
    default_tenant: str = "default"
    #: The route ``govrag search`` and sessions use when the caller names none.
    default_route: str | None = None
    store: StoreSettings = StoreSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    search: SearchSettings = SearchSettings()
    ingest: IngestSettings = IngestSettings()
    corpora: dict[str, CorpusSettings] = {}
    policy: PolicySettings = PolicySettings()
    gateway: GatewaySettings = GatewaySettings()
    rights: RightsSettings = RightsSettings()
    validation: ValidationSettings = ValidationSettings()
    llm: LlmSettings = LlmSettings()
    writeback: WritebackSettings = WritebackSettings()
    sources: dict[str, SourceSettings] = {}
    curation: CurationSettings = CurationSettings()
    audit: AuditSettings = AuditSettings()
    auth: AuthSettings = AuthSettings()
    server: ServerSettings = ServerSettings()

    @field_validator("sources")
    @classmethod
    def _source_names(cls, value: dict[str, SourceSettings]) -> dict[str, SourceSettings]:
        for name, cfg in value.items():
            if cfg.source_system is None and reserved_source_system(name) is not None:
                raise ValueError(
                    f"[sources.{name}] sets no source_system, so it would be its name {name!r}, "
                    "which govrag reserves; set source_system to the system the documents "
                    "come from"
                )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No .env file and no secrets directory: a deployment is its directory and the
        # process environment. See govrag/settings/sources.py.
        return (
            MaskedSource(init_settings),
            MaskedSource(env_settings),
            DeploymentFileSource(settings_cls),
        )

    def resolve_path(self, value: str) -> Path:
        """A path from the settings, relative to the deployment directory."""
        p = Path(value)
        return p if p.is_absolute() else self.deployment / p

    @property
    def principals_path(self) -> Path:
        return self.deployment / PRINCIPALS_FILE

    @property
    def tenancy(self) -> CorpusTenancy:
        """Which tenants hold each corpus id (``[corpora.<id>] tenants``; default: all)."""
        return CorpusTenancy({cid: frozenset(c.tenants) for cid, c in self.corpora.items()
                              if c.tenants is not None})  # fmt: skip


def find_deployment(explicit: str | Path | None = None) -> Path:
    """The deployment directory: the explicit argument, else ``GOVRAG_DEPLOYMENT``, else cwd."""
    raw = explicit if explicit is not None else os.environ.get(DEPLOYMENT_ENV)
    path = Path(raw) if raw else Path.cwd()
    if not path.is_dir():
        raise ConfigError(
            f"deployment directory {str(path)!r} does not exist; "
            f"create one with: govrag init {path}"
        )
    return path


def read_toml(path: Path) -> dict[str, Any]:
    """Parse ``govrag.toml``; a problem (syntax, encoding, nesting) names the file and where."""
    return deployfile.read_toml(path)


def load_settings(deployment: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings for a deployment: ``overrides`` > environment > ``govrag.toml`` > defaults."""
    root = find_deployment(deployment)
    try:
        return Settings(**{**overrides, "deployment": root})
    except SettingsError as exc:  # the environment source could not decode a value
        raise ConfigError(_undecodable(exc)) from exc
    except ValidationError as exc:
        raise ConfigError(_describe(exc, root, overrides)) from exc


def _undecodable(exc: SettingsError) -> str:
    # pydantic-settings names the field, never the value: "... for field "store" from ..."
    named = re.search(r'field "([^"]+)"', str(exc))
    var = f"GOVRAG_{named.group(1).upper()}" if named else "a GOVRAG_* variable"
    return (
        f"{ENVIRONMENT}: {var} cannot be read ({exc}); a variable naming a whole table must "
        f"hold a JSON object: set its keys one by one instead ({var}__KEY=value)"
    )


def _describe(exc: ValidationError, root: Path, overrides: dict[str, Any]) -> str:
    """Each problem under the name of the source its value came from: the caller's
    arguments, the environment or the file (the file too when no source holds it)."""
    config = root / CONFIG_FILE
    fallback = str(config) if config.exists() else ARGUMENTS
    layers = [
        (ARGUMENTS, overrides),
        (ENVIRONMENT, EnvSettingsSource(Settings)()),
        (fallback, read_config(root)),
    ]
    groups: dict[str, list[ErrorDetails]] = {}
    for err in exc.errors():
        groups.setdefault(origin(err["loc"], layers, fallback), []).append(err)
    names = [name for name, _ in layers]
    return "; ".join(
        f"{name}: {describe_validation(_Problems(errors))}"
        for name, errors in sorted(groups.items(), key=lambda group: names.index(group[0]))
    )


class _Problems(Exception):
    """The problems of a ``ValidationError`` that one source supplied, in the shape
    :func:`~govrag.errors.describe_validation` reads (an ``errors()`` method)."""

    def __init__(self, errors: list[ErrorDetails]) -> None:
        super().__init__()
        self._errors = errors

    def errors(self) -> list[ErrorDetails]:
        return self._errors
