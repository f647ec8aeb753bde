"""What a caller may send: typed request bodies, unknown fields refused.

No body carries identity, tenant or clearance: those come from the verified token. A body
names only what to do (a query, a question, a route or session to run on, filters that can
only narrow what the caller's rights already allow).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from govrag.types import MetadataFilter, Strategy

#: Longest query or question accepted over HTTP (a deployment's own limits may be lower).
MAX_QUERY_CHARS = 4000


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchBody(Body):
    """A governed search (``govrag search``): each corpus is decided by the policy gate and
    audited before it is searched."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                       examples=["wire transfer limit for corporate clients"])  # fmt: skip
    corpora: list[str] | None = Field(default=None, description="Default: the route's scope.")
    route: str | None = Field(default=None, description="Default: the deployment's route.")
    session: str | None = Field(default=None, description="Continue this session (yours).")
    strategy: Strategy | None = None
    top_k: int | None = Field(default=None, ge=1, le=100)
    filters: list[MetadataFilter] = Field(default_factory=list)


class AskBody(Body):
    """A grounded, cited answer or an abstention (``govrag ask``)."""

    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                          examples=["What is the EU corporate wire limit?"])  # fmt: skip
    route: str | None = None
    session: str | None = None
    #: Material to work on; never evidence, never cited.
    text: str | None = Field(default=None, max_length=200_000)
