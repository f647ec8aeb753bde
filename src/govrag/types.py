"""Shared value types. Every layer may import this module; it imports nothing of govrag's."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_serializer,
    field_validator,
)


class Classification(IntEnum):
    """Classification levels, low to high. A principal's clearance is a ceiling."""

    PUBLIC = 0
    INTERNAL = 1
    CONFIDENTIAL = 2
    RESTRICTED = 3

    @classmethod
    def parse(cls, value: object) -> Classification:
        """Parse a level name (case-insensitive) or an existing member."""
        if isinstance(value, Classification):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        names = ", ".join(m.name.lower() for m in cls)
        raise ValueError(f"unknown classification {value!r}; use one of: {names}")

    @property
    def label(self) -> str:
        return self.name.lower()


class Strategy(StrEnum):
    """Retrieval strategies available from the store (``docs/strategies.md``).

    ``temporal`` ranks like ``hybrid`` (``keyword`` without vectors), then prefers what is in
    effect now (or at the request's ``as_of``): a version superseded by one the caller may
    read goes below its replacement, one not yet in effect is demoted (and, when turned on,
    older versions lose a recency bonus).
    ``graph`` fuses the ``hybrid`` legs with the graph leg: chunks mentioning the entities
    the question names, their glossary neighbours and the aliases readable chunks state.
    """

    KEYWORD = "keyword"
    SEMANTIC = "semantic"
    HYBRID = "hybrid"
    TEMPORAL = "temporal"
    GRAPH = "graph"


class QueryExpansion(StrEnum):
    """Query expansion before retrieval. govrag expands nothing yet: ``none`` is the only value
    (the write-back overlay joins only unexpanded requests)."""

    NONE = "none"


#: ``source_system`` label of write-back overlay evidence in packs, citations and replay. A label
#: only: what marks memory is :attr:`ChunkOrigin.SESSION_MEMORY`, which no document can carry.
WRITEBACK_SOURCE = "writeback"
#: Source-system names govrag uses itself, refused as a ``source_system`` at ingest (records,
#: configured sources, the filesystem connector): stored evidence can then never pass for
#: the overlay's (``writeback``) or for the store's "everyone" ACL row (``*``).
RESERVED_SOURCE_SYSTEMS = frozenset({WRITEBACK_SOURCE, "*"})


def reserved_source_system(name: str) -> str | None:
    """The reserved name ``name`` stands for (compared after NFKC and casefolding, so
    ``WriteBack`` or a full-width spelling is the same name), else ``None``."""
    folded = unicodedata.normalize("NFKC", name).casefold().strip()
    return folded if folded in RESERVED_SOURCE_SYSTEMS else None


def check_source_system(name: str) -> str:
    """``name``, or :class:`ValueError` naming the reserved name and the fix."""
    reserved = reserved_source_system(name)
    if reserved is not None:
        raise ValueError(
            f"source_system {name!r} is reserved by govrag ({reserved!r} marks "
            + ("write-back overlay evidence" if reserved == WRITEBACK_SOURCE
               else "the store's everyone row")
            + "); name the source system that holds the documents instead"
        )  # fmt: skip
    return name


#: ``corpus`` of session memory (its pack and chunks): memory belongs to no corpus, and no
#: corpus id can be empty.
NO_CORPUS = ""


class ChunkOrigin(StrEnum):
    """Where a hit or pack chunk comes from: a type, not a value data could carry.

    The store and ingest only ever produce ``source`` (the default); only the gateway's
    write-back overlay code sets ``session_memory``. A document whose ``source_system`` is
    ``writeback``, whose id looks like a write-back id or whose metadata has ``writeback.*``
    keys is still a ``source`` chunk: rights-checked at its source, never taken for memory.
    """

    SOURCE = "source"
    SESSION_MEMORY = "session_memory"


def _check_origin(origin: ChunkOrigin, writeback: dict[str, str] | None) -> None:
    """Session memory carries its write-back metadata; nothing else carries any."""
    if (origin is ChunkOrigin.SESSION_MEMORY) != (writeback is not None):
        raise ValueError(
            f"origin {origin.value!r} with writeback={writeback!r}: session memory (and only "
            "session memory) carries its write-back metadata"
        )


class Frozen(BaseModel):
    """Base of govrag's value objects: immutable, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: Corpus, route, tool and workflow ids: what the deployment files use as keys.
Ident = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")]
#: What a tool does; the PDP groups the actions of each kind (see :data:`ACTION_GROUP_PREFIX`).
ToolKind = Literal["retrieve", "list", "metadata", "other"]
#: How much a tool's call can do (a manifest's ``risk_tier``); the PDP sees it in the request
#: context, so a policy can ask more of a caller for a high-risk tool.
RiskTier = Literal["low", "medium", "high"]
#: Cedar action ids ``kind:<kind>`` group the actions of each tool kind (the PDP's entities).
ACTION_GROUP_PREFIX = "kind:"
RetrievalMode = Literal["none", "deterministic_prefetch", "tool"]


class Retrieval(Frozen):
    """One route's permit for retrieval: whether it happens, who starts it, over what.

    Routes grant it and the PEP enforces it, so it lives here: the policy layer names it
    without importing the route table.
    """

    mode: RetrievalMode = "none"
    #: Hard allowlist of corpus ids; the PEP denies every other corpus.
    scope: tuple[Ident, ...] = ()

    @field_validator("scope")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        duplicates = sorted({c for c in value if value.count(c) > 1})
        if duplicates:
            raise ValueError(f"corpus {duplicates[0]!r} is listed twice; list each corpus once")
        return value


@dataclass(frozen=True)
class CorpusTenancy:
    """Which tenants hold each corpus id.

    A corpus is per tenant: one id names one corpus in every tenant, each with its own
    documents, so one deployment's routes serve every tenant by the same corpus ids. An id
    may be kept to some tenants (``[corpora.<id>] tenants``); to any other tenant that corpus
    does not exist: its sessions' pinned scope leaves it out, a proposal naming it is out of
    scope like an id no route has, and ingest refuses documents into it.
    """

    #: corpus id -> the only tenants that hold it; an id not here is held by every tenant.
    restricted: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def holds(self, tenant: str, corpus: str) -> bool:
        tenants = self.restricted.get(corpus)
        return tenants is None or tenant in tenants

    def scope(self, tenant: str, corpora: Iterable[str]) -> tuple[str, ...]:
        """``corpora`` as ``tenant`` has them, in order."""
        return tuple(c for c in corpora if self.holds(tenant, c))


Identifier = Annotated[str, StringConstraints(min_length=1, max_length=256, strip_whitespace=True)]
#: An e-mail address as written (:func:`check_email` gives the form addresses are matched by).
Email = Annotated[str, StringConstraints(min_length=3, max_length=320)]


def check_email(value: str) -> str:
    """``value`` as e-mail addresses are matched (casefolded), or :class:`ValueError` quoting it
    and naming the fix.

    Principals, identity records and the store compare addresses casefolded, so that
    ``Ana@Bank.Example`` is ``ana@bank.example``. Casefolding does more than change case,
    though: the Kelvin sign becomes ``k``, ``ß`` becomes ``ss``, the final sigma ``σ``. An
    address holding such a character would match another person's (a verified token for
    ``straße@`` would read ``strasse@``'s documents), so it is refused rather than folded:
    every accepted address is compatibility-free (NFKC) and each of its characters casefolds
    to its plain lower case, so two accepted addresses match only when they differ in case
    alone. Surrounding whitespace is refused too, not stripped: what matches is what was sent.
    """
    shown = repr(value) if len(value) <= 100 else f"{value[:100]!r}..."
    if value != value.strip():
        raise ValueError(f"email {shown} has leading or trailing whitespace; remove it")
    if "@" not in value:
        raise ValueError(f"email {shown} has no '@'; give the principal's email address")
    if unicodedata.normalize("NFKC", value) != value:
        raise ValueError(
            f"email {shown} holds compatibility characters (it is not NFKC), which addresses "
            "are matched without, so it could match another address; send it in NFC without "
            "them (ask the identity provider or the source for its plain spelling)"
        )
    for ch in value:
        if ch.casefold() != ch.lower():
            raise ValueError(
                f"email {shown}: {ch!r} (U+{ord(ch):04X}) becomes {ch.casefold()!r} when "
                "addresses are matched, so it would match another address; bind the account "
                f"to an address without {ch!r} (ask the identity provider or the source)"
            )
    return value.casefold()


class Principal(Frozen):
    """Verified claims of a caller. Identity never comes from a request body or tool argument."""

    sub: Identifier
    #: As written (no surrounding whitespace), stored casefolded (:func:`check_email`).
    email: Email
    tenant: Identifier
    roles: tuple[str, ...] = ()
    doc_entitlements: tuple[str, ...] = ()
    clearance: Classification = Classification.INTERNAL
    #: When these claims stop being valid (a bearer token's ``exp``): no session opened with
    #: them outlives it. ``None`` for a local principal (``principals.json``).
    expires_at: AwareDatetime | None = None

    @field_validator("clearance", mode="before")
    @classmethod
    def _parse_clearance(cls, value: object) -> Classification:
        return Classification.parse(value)

    @field_serializer("clearance", when_used="json")
    def _clearance_label(self, value: Classification) -> str:
        # As written and parsed: a JSON dump of a principal reads back as the same one.
        return value.label

    @field_validator("sub", "email", "tenant", "roles", "doc_entitlements")
    @classmethod
    def _text_only(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        # An identity is compared, stored and logged as text: a NUL is refused by PostgreSQL
        # (a "store unavailable" for one caller) yet kept by SQLite, and a lone surrogate has
        # no UTF-8 at all. Claims holding either make no principal, on any backend.
        for text in (value,) if isinstance(value, str) else value:
            if "\x00" in text:
                raise ValueError("holds a NUL character")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("holds an unpaired surrogate") from None
        return value

    @field_validator("email")
    @classmethod
    def _check_email(cls, value: str) -> str:
        return check_email(value)


class DocumentInfo(Frozen):
    """What a caller who may read a document learns of it without its text (a document's
    metadata, ``get_document_metadata``)."""

    source_system: str
    external_id: str
    corpus: str
    title: str
    classification: Classification
    #: As the source system reported it (ISO 8601), when it did.
    updated_at: str | None = None
    #: How many chunks the document was split into.
    chunks: int = Field(ge=0)

    @field_validator("classification", mode="before")
    @classmethod
    def _parse_level(cls, value: object) -> Classification:
        return Classification.parse(value)

    @field_serializer("classification")
    def _level_name(self, level: Classification) -> str:
        return level.name.lower()


class VerifiedToken(Frozen):
    """What a verified bearer token says about its caller (``Govrag.verify_token``)."""

    principal: Principal
    #: When the token stops being valid (its ``exp``): a session must not outlive it.
    expires_at: datetime
    issuer: str
    #: The key that verified it (``None``: a key configured without ``kid``).
    kid: str | None = None


MetaKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")]
MetaValue = str | int | float | bool


class MetadataFilter(Frozen):
    """A typed filter over document metadata. Values are bound parameters, never SQL text.

    ``op`` is one of ``eq`` (value), ``in`` (values), ``range`` (gte and/or lte), ``prefix``
    (value, a string). Filters only narrow what the ACL already allows.
    """

    key: MetaKey
    op: Literal["eq", "in", "range", "prefix"] = "eq"
    value: MetaValue | None = None
    values: tuple[MetaValue, ...] | None = None
    gte: MetaValue | None = None
    lte: MetaValue | None = None

    def model_post_init(self, __context: object) -> None:
        if self.op in ("eq", "prefix") and self.value is None:
            raise ValueError(f"filter on {self.key!r}: op {self.op!r} needs 'value'")
        if self.op == "prefix" and not isinstance(self.value, str):
            raise ValueError(f"filter on {self.key!r}: op 'prefix' needs a string value")
        if self.op == "in" and not self.values:
            raise ValueError(f"filter on {self.key!r}: op 'in' needs a non-empty 'values' list")
        if self.op == "range" and self.gte is None and self.lte is None:
            raise ValueError(f"filter on {self.key!r}: op 'range' needs 'gte' and/or 'lte'")
        for v in self._all_values():
            if isinstance(v, str):
                _check_text(v, f"filter value for {self.key!r}")
            elif isinstance(v, float) and not math.isfinite(v):
                # NaN equals nothing and an infinity bounds nothing: a filter that cannot
                # mean what it says is the caller's mistake, said so, not an empty result.
                raise ValueError(f"filter on {self.key!r}: {v} is not a finite number")

    def _all_values(self) -> list[MetaValue]:
        out: list[MetaValue] = [v for v in (self.value, self.gte, self.lte) if v is not None]
        out.extend(self.values or ())
        return out


def _check_text(value: str, what: str) -> None:
    """Reject strings that are not valid Unicode text (lone surrogates, NUL)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid UTF-8 text ({value!r}); pass UTF-8 text") from exc
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character; remove it")


#: The years a document's or a request's time may name: stored times are compared as text,
#: so a year must have four digits in UTC (and converting one near year 1 or 9999 to UTC
#: overflows).
FIRST_YEAR, LAST_YEAR = 1000, 9998


def check_instant(value: datetime | None, what: str) -> datetime | None:
    """``value`` if it is ``None`` or an instant whose UTC year lies in FIRST_YEAR..LAST_YEAR;
    else :class:`ValueError` naming ``what`` and the range."""
    if value is None:
        return None
    if not FIRST_YEAR <= value.year <= LAST_YEAR or not (
        FIRST_YEAR <= (value - (value.utcoffset() or timedelta(0))).year <= LAST_YEAR
    ):
        raise ValueError(
            f"{what} {value.isoformat()!r} is outside the years {FIRST_YEAR}-{LAST_YEAR} govrag "
            "stores; give a time in that range"
        )
    return value


#: An instant a request names (``as_of``, a time range's bounds): aware, in the stored years.
Instant = Annotated[AwareDatetime, AfterValidator(lambda v: check_instant(v, "time"))]

TimeField = Literal["updated_at", "effective_at"]


class TimeRange(Frozen):
    """Documents whose ``field`` lies in ``[start, end]`` (either bound may be open).

    ``updated_at`` is when the source last changed the document; ``effective_at`` is when
    that version took effect, which is its ``updated_at`` when the source named no
    ``effective_at``. A document without the time is outside every range.
    """

    field: TimeField = "effective_at"
    start: Instant | None = None
    end: Instant | None = None

    def model_post_init(self, __context: object) -> None:
        if self.start is None and self.end is None:
            raise ValueError("time_range needs 'start' and/or 'end' (ISO 8601 with a zone)")
        if self.start is not None and self.end is not None and self.start > self.end:
            raise ValueError(
                f"time_range start {self.start.isoformat()} is after its end "
                f"{self.end.isoformat()}; swap them"
            )


class SearchRequest(Frozen):
    """What a caller asks the store for. The principal is passed separately, never in here."""

    query: Annotated[str, StringConstraints(max_length=4096)]
    corpora: tuple[Identifier, ...] | None = None
    strategy: Strategy = Strategy.HYBRID
    top_k: int = Field(default=10, ge=1, le=1000)
    filters: tuple[MetadataFilter, ...] = ()
    query_expansion: QueryExpansion = QueryExpansion.NONE
    #: The gateway drops candidates scoring below this (write-back overlay hits included).
    min_score: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    #: The words the hidden-item marker judges, when not the query's: a governed answer's
    #: caller question, while its model searches in words of its own (the hint a person
    #: gets is about what the person asked, whatever model runs).
    marker_query: Annotated[str, StringConstraints(max_length=4096)] | None = None
    #: Only documents in effect at this instant (``effective_at``, else ``updated_at``, at
    #: or before it; undated documents count as always in effect). The ``temporal``
    #: strategy also takes it as "now": what supersedes a version must be in effect by then.
    as_of: Instant | None = None
    #: Only documents whose time lies in the range.
    time_range: TimeRange | None = None

    @property
    def narrowed(self) -> bool:
        """Whether the request narrows by document metadata (filters or times): then no
        hidden-item marker, since metadata of documents the caller cannot read must select
        nothing."""
        return bool(self.filters) or self.as_of is not None or self.time_range is not None

    @field_validator("query")
    @classmethod
    def _check_query(cls, value: str) -> str:
        _check_text(value, "query")
        if not value.strip():
            raise ValueError("query is blank; pass some words to search for")
        return value

    @field_validator("marker_query")
    @classmethod
    def _check_marker_query(cls, value: str | None) -> str | None:
        if value is not None:
            _check_text(value, "marker_query")
        return value


class SearchHit(Frozen):
    """One allowed chunk. ``doc_id`` is the document's external id in its source system."""

    doc_id: str
    chunk_id: str
    corpus: str
    source_system: str
    score: float
    text: str
    #: The document's trust score (0..1, neutral 0.5), recomputed by the Curation Pass.
    trust_score: float = 0.5
    #: ``source`` for everything the store returns; ``session_memory`` only from the overlay.
    origin: ChunkOrigin = ChunkOrigin.SOURCE
    #: A session-memory entry's seed metadata (``writeback.gate``, ``writeback.sourceTurnId``,
    #: ``writeback.agentId``, ``writeback.confidence``, ``writeback.expiresAt``,
    #: ``writeback.supersedes``); ``None`` on every other hit.
    writeback: dict[str, str] | None = None

    def model_post_init(self, __context: object) -> None:
        _check_origin(self.origin, self.writeback)


class HiddenSource(Frozen):
    source_system: str
    author_email: str | None = None


class HiddenMarker(Frozen):
    """Content-free marker: was a relevant candidate removed by access rules, and where.

    Never carries a title, text, score, id or count.
    """

    present: bool = False
    sources: tuple[HiddenSource, ...] = ()


class SearchResult(Frozen):
    query: str
    strategy: Strategy
    results: tuple[SearchHit, ...]
    hidden: HiddenMarker = HiddenMarker()
    #: A scan bound stopped the vector leg early: fewer results than asked may exist.
    truncated: bool = False


class PackChunk(Frozen):
    doc_id: str
    chunk_id: str
    #: The chunk's corpus; :data:`NO_CORPUS` for session memory.
    corpus: str
    source_system: str
    text: str
    score: float
    token_count: int
    #: As :attr:`SearchHit.origin`: ``session_memory`` only in the request's memory pack.
    origin: ChunkOrigin = ChunkOrigin.SOURCE
    #: As :attr:`SearchHit.writeback`: the seed metadata of a session-memory entry.
    writeback: dict[str, str] | None = None

    def model_post_init(self, __context: object) -> None:
        _check_origin(self.origin, self.writeback)


class UncheckedChunk(Frozen):
    """A packed chunk that no source system's live rights check confirmed, and why."""

    chunk_id: str
    #: ``session_memory``: the caller's own session's write-back entry (no source to ask).
    reason: str


class Withheld(Frozen):
    """Chunks kept out of the pack after ranking, by reason; never which ones."""

    count: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)


class RightsCheckSummary(Frozen):
    """How one source system's live rights check went for one pack (counts, never ids)."""

    source_system: str
    #: The checker's kind: ``stored`` or ``http``.
    checker: str
    #: ``ok``, or why unconfirmed chunks were withheld wholesale: ``source_unavailable``
    #: (timeout, connection error, 5xx, 429), ``malformed_response``, ``unknown_account``,
    #: ``checker_error``.
    status: str
    checked: int
    withheld: int


class ContextPack(Frozen):
    """A bounded, attributable pack of one corpus: what validation checks and the model sees.

    A request may also get one pack of ``origin`` ``session_memory``: its write-back overlay
    entries, labelled with no corpus (:data:`NO_CORPUS`), every chunk listed in ``unchecked``.
    """

    context_pack_id: str
    corpus: str
    chunks: tuple[PackChunk, ...]
    policy_version: str
    ranker_version: str
    token_counter: str
    pack_token_count: int
    token_budget: int
    #: Chunks that ranked in but did not fit the budget.
    dropped_for_budget: int = 0
    withheld: Withheld = Withheld()
    hidden: HiddenMarker = HiddenMarker()
    #: The store's vector scan stopped early: fewer candidates than asked may have existed.
    search_truncated: bool = False
    #: The live rights check of the ranked chunks, per source system.
    rights_checks: tuple[RightsCheckSummary, ...] = ()
    #: The ranked candidates came from the result cache (the rights check still ran).
    cache_hit: bool = False
    #: ``source``: chunks of ``corpus``; ``session_memory``: the request's write-back entries.
    origin: ChunkOrigin = ChunkOrigin.SOURCE
    #: Every packed chunk the live rights check did not confirm at a source, and why.
    unchecked: tuple[UncheckedChunk, ...] = ()
