"""The application API (``govrag.open``): see ``api.py``."""

from govrag.agent.listings import CorpusListing, DocumentListing
from govrag.agent.retrieve import GovernedResult
from govrag.agent.tool_calls import ToolOutcome
from govrag.app.api import Govrag
from govrag.app.backup import BackupReport
from govrag.app.callers import Callers
from govrag.app.entry import evaluate_beir, init, open
from govrag.app.examiners import EXAMINER_ROLE, Examiners
from govrag.app.ingest import IngestOutcome, ProgressFactory
from govrag.app.operators import Operators, local_principal
from govrag.app.records import ConfigCheck, Memory, Readiness, SessionInfo
from govrag.app.restoring import RestoreReport, restore
from govrag.audit.events import (
    ContextPackEvent,
    IncidentEvent,
    PepDecisionEvent,
    ValidationEvent,
    parse_event,
)

# The typed audit events an observer (``Operators.observe_audit``) reads its rows as.
from govrag.audit.replay_records import Replay
from govrag.eval.governance import SuiteReport
from govrag.harvest.sources import SourceStatus, SourceSync
from govrag.writeback.models import AdmissionGate

__all__ = [
    "EXAMINER_ROLE",
    "AdmissionGate",
    "BackupReport",
    "Callers",
    "ConfigCheck",
    "ContextPackEvent",
    "CorpusListing",
    "DocumentListing",
    "Examiners",
    "GovernedResult",
    "Govrag",
    "IncidentEvent",
    "IngestOutcome",
    "Memory",
    "Operators",
    "PepDecisionEvent",
    "ProgressFactory",
    "Readiness",
    "Replay",
    "RestoreReport",
    "SessionInfo",
    "SourceStatus",
    "SourceSync",
    "SuiteReport",
    "ToolOutcome",
    "ValidationEvent",
    "evaluate_beir",
    "init",
    "local_principal",
    "open",
    "parse_event",
    "restore",
]
