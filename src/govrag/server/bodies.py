"""What a caller may send: typed request bodies, unknown fields refused.

No body carries identity, tenant or clearance: those come from the verified token. A body
names only what to do (a query, a question, a route or session to run on, filters that can
only narrow what the caller's rights already allow).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)

from govrag.app import AdmissionGate
from govrag.server import examples
from govrag.types import Instant, MetadataFilter, Strategy, TimeRange

#: Longest query or question accepted over HTTP (a deployment's own limits may be lower).
MAX_QUERY_CHARS = 4000
#: Bounds on what one search may ask for: each named corpus is a policy decision and an audit
#: record, and each filter or ``in`` value a term of the SQL condition (SQLite refuses an
#: expression deeper than 1000, which a caller must not turn into a "store unavailable").
MAX_CORPORA = 64
MAX_FILTERS = 16
MAX_FILTER_VALUES = 256


def _text(value: str) -> str:
    """Refuse what is not text: a lone surrogate (no UTF-8 for it, so no store or log can
    take it) or a NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds an unpaired surrogate; pass UTF-8 text") from None
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    return value


#: A name the caller sends (a corpus, a route, a session id): short, and text.
Name = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_text)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchBody(Body):
    """A governed search (``govrag search``): each corpus is decided by the policy gate and
    audited before it is searched."""

    model_config = examples.config(examples.SEARCH_BODY)

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                       examples=["wire transfer limit for corporate clients"])  # fmt: skip
    corpora: list[Name] | None = Field(default=None, max_length=MAX_CORPORA,
                                       description="Default: the route's scope.")  # fmt: skip
    route: Name | None = Field(default=None, description="Default: the deployment's route.")
    session: Name | None = Field(default=None, description="Continue this session (yours).")
    strategy: Strategy | None = None
    top_k: int | None = Field(default=None, ge=1, le=100, strict=True)
    filters: list[MetadataFilter] = Field(default_factory=list, max_length=MAX_FILTERS)
    as_of: Instant | None = Field(
        default=None, description="Only versions in effect at this instant (docs/strategies.md)."
    )
    time_range: TimeRange | None = None
    min_score: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

    @field_validator("filters")
    @classmethod
    def _bounded_values(cls, filters: list[MetadataFilter]) -> list[MetadataFilter]:
        if any(len(f.values or ()) > MAX_FILTER_VALUES for f in filters):
            raise ValueError(f"an 'in' filter takes at most {MAX_FILTER_VALUES} values")
        return filters


class AskBody(Body):
    """A grounded, cited answer or an abstention (``govrag ask``)."""

    model_config = examples.config(examples.ASK_BODY)

    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                          examples=["What is the EU corporate wire limit?"])  # fmt: skip
    route: Name | None = None
    session: Name | None = None
    #: Material to work on; never evidence, never cited.
    text: str | None = Field(default=None, max_length=200_000)


class RetrieveBody(Body):
    """A tool call your own model proposed: a retrieve tool of the route's manifest and its
    arguments, checked against the tool's JSON schema."""

    model_config = examples.config(examples.RETRIEVE_BODY)

    tool: Name = Field(examples=["retrieve_documents"])
    #: Checked against the tool's schema (and bounded: see docs/serving.md); never identity.
    arguments: dict[str, Any] = Field(examples=[{"query": "wire limit", "corpus": "policy"}])
    route: Name | None = None
    session: Name | None = None
    strategy: Strategy | None = None
    top_k: int | None = Field(default=None, ge=1, le=100, strict=True)


class SessionBody(Body):
    """Open a session: on ``route``, or the route whose intent matches ``intent``, or the
    deployment's default route (never chosen from a prompt)."""

    model_config = examples.config(examples.SESSION_BODY)

    route: Name | None = Field(default=None, examples=["retail-faq"])
    intent: Name | None = None


class ClickBody(Body):
    """A click on a document's source link (counted only for a document you may read, in a
    corpus of the route's scope)."""

    model_config = examples.config(examples.CLICK_BODY)

    source_system: Name = Field(examples=["sharepoint"])
    external_id: Name = Field(examples=["wire-limits"])
    route: Name | None = Field(default=None, description="Default: the deployment's route.")
    session: Name | None = Field(default=None, description="The session the link was in.")


class MemoryBody(Body):
    """Memory a writer (the verified caller, on ``[writeback] allowed_agents``) offers for
    one of its own sessions."""

    model_config = examples.config(examples.MEMORY_BODY)

    session: Name
    source_turn_id: Name
    gate: AdmissionGate = Field(examples=["USER_CONFIRMED"])
    content: str = Field(min_length=1, max_length=16_384)
    confidence: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    expires_at: AwareDatetime
    supersedes: Name | None = None
