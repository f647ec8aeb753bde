"""govrag: governed retrieval for agentic LLM apps.

The application API is one call away::

    import govrag

    with govrag.open("my-deployment") as app:
        principal = govrag.Principal(sub="ana", email="ana@bank.example", tenant="bank",
                                     doc_entitlements=("policy-engine:read",))
        answer = app.ask(principal, "What is the wire limit for corporate clients?")

``docs/python-api.md`` walks through every use case. What is listed in ``__all__`` is the
public surface; everything else is an implementation detail that may change.

The API and the records it returns are imported on first use (PEP 562), so ``import govrag``
stays cheap for a caller that needs only the value types.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from govrag.errors import (
    AuthError,
    ConfigError,
    GovragError,
    IngestError,
    InputError,
    LlmError,
    MissingExtraError,
    NotFoundError,
    StoreError,
)
from govrag.types import (
    Classification,
    HiddenMarker,
    MetadataFilter,
    Principal,
    SearchHit,
    SearchRequest,
    SearchResult,
    Strategy,
    VerifiedToken,
)

if TYPE_CHECKING:
    from govrag.agent.answer import Answer, Citation
    from govrag.agent.retrieve import GovernedResult
    from govrag.app import (
        Callers,
        ConfigCheck,
        Examiners,
        Govrag,
        IngestOutcome,
        Operators,
        SessionInfo,
        SourceStatus,
        evaluate_beir,
        init,
        local_principal,
        open,
        restore,
    )
    from govrag.audit.replay_records import Replay
    from govrag.writeback.models import (
        AdmissionGate,
        AdmissionResult,
        RetrievalScope,
        WriteBackCandidate,
    )

__version__ = "0.1.0"

#: Public names imported on first use, by the module that defines them.
_LAZY = {
    "Answer": "govrag.agent.answer",
    "Citation": "govrag.agent.answer",
    "GovernedResult": "govrag.agent.retrieve",
    "Callers": "govrag.app",
    "ConfigCheck": "govrag.app",
    "Examiners": "govrag.app",
    "Govrag": "govrag.app",
    "Operators": "govrag.app",
    "IngestOutcome": "govrag.app",
    "SessionInfo": "govrag.app",
    "SourceStatus": "govrag.app",
    "evaluate_beir": "govrag.app",
    "init": "govrag.app",
    "local_principal": "govrag.app",
    "open": "govrag.app",
    "restore": "govrag.app",
    "Replay": "govrag.audit.replay_records",
    "AdmissionGate": "govrag.writeback.models",
    "AdmissionResult": "govrag.writeback.models",
    "RetrievalScope": "govrag.writeback.models",
    "WriteBackCandidate": "govrag.writeback.models",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'govrag' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AdmissionGate",
    "AdmissionResult",
    "Answer",
    "AuthError",
    "Callers",
    "Citation",
    "Classification",
    "ConfigCheck",
    "ConfigError",
    "Examiners",
    "GovernedResult",
    "Govrag",
    "GovragError",
    "HiddenMarker",
    "IngestError",
    "IngestOutcome",
    "InputError",
    "LlmError",
    "MetadataFilter",
    "MissingExtraError",
    "NotFoundError",
    "Operators",
    "Principal",
    "Replay",
    "RetrievalScope",
    "SearchHit",
    "SearchRequest",
    "SearchResult",
    "SessionInfo",
    "SourceStatus",
    "StoreError",
    "Strategy",
    "VerifiedToken",
    "WriteBackCandidate",
    "__version__",
    "evaluate_beir",
    "init",
    "local_principal",
    "open",
    "restore",
]
