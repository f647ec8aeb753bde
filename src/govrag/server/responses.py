"""What the HTTP API answers: a typed model per route, so the OpenAPI schema says it exactly.

Each model is the JSON shape of the application API's result (``as_dict``) that the CLI's
``--json`` prints too; a handler validates the result into its model, so a response that
strays from its schema is a server error here, never a surprise for a client. Packs, chunks
and the hidden-item marker are govrag's own value types. Nested records whose fields belong
to another layer's report (validation, claim checks, the answer's trace, a replay's parts) are
JSON objects here: their shape is documented with the report that makes them.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from govrag.app import Replay
from govrag.server import examples
from govrag.types import ContextPack, DocumentInfo, HiddenMarker, PackChunk, Strategy

if TYPE_CHECKING:
    from govrag.app import CorpusListing, DocumentListing, GovernedResult


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Health(Out):
    model_config = examples.config({"status": "ok"})

    status: Literal["ok"] = "ok"


class Ready(Out):
    """``ready`` only when every check passed; why one failed is in the server's log."""

    model_config = examples.config(examples.READY)

    ready: bool
    checks: dict[str, Literal["ok", "failed"]] = Field(
        examples=[{"store": "ok", "routes": "ok", "policy": "ok"}]
    )


class Decision(Out):
    """The policy gate's decision on one proposal, committed to the audit log before anything
    ran (``audit_id``: its audit event; ``None`` only when even the audit write failed)."""

    audit_id: str | None
    corpus: str
    verdict: Literal["ALLOW", "DENY"]
    policy_version: str
    reason: str = Field(examples=["allowed", "no_entitlement", "out_of_scope"])
    kind: str = Field(examples=["retrieve"])
    action: str = Field(examples=["retrieve_documents"])


class Searched(Out):
    """A governed retrieve: per corpus a decision, per ALLOW a validated pack."""

    model_config = examples.config(examples.SEARCHED)

    request_id: str = Field(examples=["req-5f0c2a9d1e7b3c44"])
    session_id: str = Field(examples=["ses-0a1b2c3d4e5f6a7b"])
    route_id: str
    query: str
    strategy: Strategy
    packs: list[ContextPack]
    #: Every pack's chunks merged by score, at most ``top_k``.
    results: list[PackChunk]
    hidden: HiddenMarker
    truncated: bool
    decisions: list[Decision]
    #: The validation gate's report (scope, sufficiency, attribution).
    validation: dict[str, Any]

    @classmethod
    def of(cls, result: GovernedResult) -> Searched:
        return cls.model_validate(result.as_dict())


class Citation(Out):
    doc_id: str
    chunk_id: str
    corpus: str
    source_system: str
    origin: str
    writeback: dict[str, str] | None = None


class Answered(Out):
    """A grounded answer whose citations come only from the validated evidence, or an
    abstention with its reason."""

    model_config = examples.config(examples.ANSWERED)

    request_id: str
    response_id: str
    session_id: str
    route_id: str
    pattern: str = Field(examples=["tool_loop"])
    answer: str
    #: On a route with an output schema: the answer as its JSON object (else ``null``).
    structured: dict[str, Any] | None = None
    abstained: bool
    reason: str | None = Field(examples=[None, "no_evidence", "denied"])
    llm_fault: str | None
    grounded: bool
    flagged: bool
    citations: list[Citation]
    #: The hidden-item marker, with ``hint``: whom to ask, never what they hold.
    hidden: dict[str, Any]
    decisions: list[Decision]
    packs: list[ContextPack]
    validation: dict[str, Any] | None
    claims: dict[str, Any] | None
    trace: dict[str, Any]


class SessionView(Out):
    """A session as its own principal sees it: the route it is pinned to, for life."""

    model_config = examples.config(examples.SESSION)

    session_id: str = Field(examples=["ses-0a1b2c3d4e5f6a7b"])
    sub: str
    route_id: str = Field(examples=["retail-faq"])
    mode: str = Field(examples=["tool"])
    scope: list[str] = Field(examples=[["policy", "faq"]])
    route_table_version: str
    #: When the session ends: the expiry of the token that opened it.
    expires_at: str | None = Field(examples=["2026-12-02T10:00:00.000000Z"])


class Corpus(Out):
    corpus: str
    description: str


class Corpora(Out):
    """The corpora of the route's scope the policy gate let the caller list."""

    model_config = examples.config(examples.CORPORA)

    request_id: str
    session_id: str
    route_id: str
    corpora: list[Corpus]

    @classmethod
    def of(cls, listing: CorpusListing) -> Corpora:
        return cls.model_validate(asdict(listing))


class Document(Out):
    """A document's metadata (never its text), for a caller who may read it."""

    model_config = examples.config(examples.DOCUMENT)

    request_id: str
    session_id: str
    route_id: str
    document: DocumentInfo
    decision: Decision

    @classmethod
    def of(cls, found: DocumentListing) -> Document:
        out = asdict(found)
        out["document"] = found.document  # the value type itself, not its fields as a dict
        return cls.model_validate(out)


class Admission(Out):
    """The write-back store's answer: admitted (with the entry's id) or the rule it broke."""

    model_config = examples.config(examples.ADMISSION)

    admitted: bool
    id: str | None
    reason: str = Field(examples=["admitted", "agent_not_allowed"])


class Replayed(Replay, Out):
    """One request rebuilt from the audit log alone (``govrag replay``): the typed replay
    records, as the CLI reads them."""

    model_config = examples.config(examples.REPLAYED)


class Verified(Out):
    """The caller's tenant's audit chain checked against its signed checkpoints (where the
    checkpoints are kept is the operator's, not served)."""

    model_config = examples.config(examples.VERIFIED)

    ok: bool
    key_id: str
    tenants: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    warnings: list[str]
