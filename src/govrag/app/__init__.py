"""The application API (``govrag.open``): see ``api.py``."""

from govrag.app.api import (
    ConfigCheck,
    Govrag,
    SessionInfo,
    evaluate_beir,
    init,
    local_principal,
    open,
)
from govrag.app.ingest import IngestOutcome, ProgressFactory
from govrag.harvest.sources import SourceStatus, SourceSync

__all__ = [
    "ConfigCheck",
    "Govrag",
    "IngestOutcome",
    "ProgressFactory",
    "SessionInfo",
    "SourceStatus",
    "SourceSync",
    "evaluate_beir",
    "init",
    "local_principal",
    "open",
]
