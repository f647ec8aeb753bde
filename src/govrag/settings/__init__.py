"""Deployment settings: one :class:`Settings` object per deployment, from init arguments >
environment (``GOVRAG_*``) > ``govrag.toml`` > defaults; build it with :func:`load_settings`.

The package holds the sections of ``govrag.toml`` (:mod:`~govrag.settings.sections` for the
store and what feeds it, :mod:`~govrag.settings.request` for the request path), the sources
they are read from (:mod:`~govrag.settings.sources`) and the settings object itself
(:mod:`~govrag.settings.model`). Secrets (store URLs) are held masked: ``repr(settings)``
never shows a password.
"""

from govrag.settings.auth import AuthKey, AuthSettings, ClaimMap
from govrag.settings.model import (
    ARGUMENTS,
    DEPLOYMENT_ENV,
    PRINCIPALS_FILE,
    Settings,
    find_deployment,
    load_settings,
    read_toml,
)
from govrag.settings.request import (
    AuditSettings,
    GatewaySettings,
    LlmProfile,
    LlmSettings,
    PolicySettings,
    RightsCheckerSettings,
    RightsSettings,
    ValidationSettings,
    WritebackSettings,
)
from govrag.settings.sections import (
    DEFAULT_PLACEHOLDER_EMAILS,
    CorpusSettings,
    CurationSettings,
    EmbedderSettings,
    IngestSettings,
    SearchSettings,
    Section,
    SourceSettings,
    StoreSettings,
)
from govrag.settings.server import ServerSettings
from govrag.settings.sources import CONFIG_FILE, ENVIRONMENT

__all__ = [
    "ARGUMENTS",
    "CONFIG_FILE",
    "DEFAULT_PLACEHOLDER_EMAILS",
    "DEPLOYMENT_ENV",
    "ENVIRONMENT",
    "PRINCIPALS_FILE",
    "AuditSettings",
    "AuthKey",
    "AuthSettings",
    "ClaimMap",
    "CorpusSettings",
    "CurationSettings",
    "EmbedderSettings",
    "GatewaySettings",
    "IngestSettings",
    "LlmProfile",
    "LlmSettings",
    "PolicySettings",
    "RightsCheckerSettings",
    "RightsSettings",
    "SearchSettings",
    "Section",
    "ServerSettings",
    "Settings",
    "SourceSettings",
    "StoreSettings",
    "ValidationSettings",
    "WritebackSettings",
    "find_deployment",
    "load_settings",
    "read_toml",
]
