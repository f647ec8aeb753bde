"""The application API (``govrag.open``): see ``api.py``."""

from govrag.agent.listings import CorpusListing, DocumentListing
from govrag.agent.retrieve import GovernedResult
from govrag.agent.tool_calls import ToolOutcome
from govrag.app.api import Govrag, local_principal
from govrag.app.entry import evaluate_beir, init, open
from govrag.app.ingest import IngestOutcome, ProgressFactory
from govrag.app.records import ConfigCheck, Memory, Readiness, SessionInfo
from govrag.eval.governance import SuiteReport
from govrag.harvest.sources import SourceStatus, SourceSync
from govrag.writeback.models import AdmissionGate

__all__ = [
    "AdmissionGate",
    "ConfigCheck",
    "CorpusListing",
    "DocumentListing",
    "GovernedResult",
    "Govrag",
    "IngestOutcome",
    "Memory",
    "ProgressFactory",
    "Readiness",
    "SessionInfo",
    "SourceStatus",
    "SourceSync",
    "SuiteReport",
    "ToolOutcome",
    "evaluate_beir",
    "init",
    "local_principal",
    "open",
]
