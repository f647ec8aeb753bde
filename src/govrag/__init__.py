"""govrag: governed retrieval for agentic LLM apps."""

from govrag.errors import (
    ConfigError,
    GovragError,
    IngestError,
    InputError,
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
)

__version__ = "0.1.0"

__all__ = [
    "Classification",
    "ConfigError",
    "GovragError",
    "HiddenMarker",
    "IngestError",
    "InputError",
    "MetadataFilter",
    "MissingExtraError",
    "NotFoundError",
    "Principal",
    "SearchHit",
    "SearchRequest",
    "SearchResult",
    "StoreError",
    "Strategy",
    "__version__",
]
