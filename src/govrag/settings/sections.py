"""Deployment settings: one object, read from init arguments > environment > ``govrag.toml``.

A deployment directory holds ``govrag.toml`` and ``principals.json`` (and, in later layers,
routes, manifests, workflows and policies). ``--deployment DIR`` or ``GOVRAG_DEPLOYMENT``
selects it. Environment variables use the prefix ``GOVRAG_`` and ``__`` for nesting, e.g.
``GOVRAG_SEARCH__RRF_K=30``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from govrag import deployfile
from govrag.errors import ConfigError, describe_validation
from govrag.store_url import parse_store_url, redact
from govrag.types import Classification, Strategy, check_source_system, reserved_source_system

CONFIG_FILE = "govrag.toml"
PRINCIPALS_FILE = "principals.json"
DEPLOYMENT_ENV = "GOVRAG_DEPLOYMENT"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoreSettings(_Section):
    #: ``sqlite:///relative/path.db`` (relative to the deployment directory),
    #: ``sqlite:////absolute/path.db``, ``sqlite://:memory:``, or
    #: ``postgresql://user@host:port/db`` (extra ``postgres``); anything else is refused
    #: (see govrag/store_url.py).
    url: str = "sqlite:///govrag.db"
    #: PostgreSQL only: a URL of the schema owner, used to migrate and create vector indexes
    #: when ``url`` names an application role that owns nothing (recommended: row-level
    #: security is then never bypassed). Default: ``url`` itself.
    admin_url: str | None = None
    #: PostgreSQL only: connections this process keeps open at most.
    pool_size: int = Field(default=4, ge=1, le=256)
    #: Where derived search indexes live; relative to the deployment directory.
    index_dir: str = "index"

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parse_store_url(value)
        return value

    @field_validator("admin_url")
    @classmethod
    def _admin_url(cls, value: str | None) -> str | None:
        if value is not None and parse_store_url(value).kind != "postgresql":
            raise ValueError(f"{redact(value)!r} is not a postgresql:// URL; admin_url is the "
                             "schema owner of a PostgreSQL store")  # fmt: skip
        return value


class EmbedderSettings(_Section):
    name: str = "hash"
    dim: int = Field(default=384, ge=8, le=8192)
    batch_size: int = Field(default=64, ge=1, le=4096)


class SearchSettings(_Section):
    rrf_k: int = Field(default=60, ge=1, le=10_000)
    lexical_weight: float = Field(default=1.0, ge=0.0, le=100.0)
    vector_weight: float = Field(default=1.0, ge=0.0, le=100.0)
    #: How many candidates each leg contributes to fusion (at least top_k).
    fusion_depth: int = Field(default=100, ge=1, le=10_000)
    default_top_k: int = Field(default=10, ge=1, le=1000)
    #: The strategy of ``govrag ask``'s retrieves (and ``govrag search`` without --strategy).
    default_strategy: Strategy = Strategy.HYBRID
    #: Report whether a relevant candidate was removed by access rules (content-free).
    hidden_marker: bool = True
    #: Most contacts (source system, author email) one marker names.
    marker_max_contacts: int = Field(default=3, ge=1, le=20)
    #: Markers shown to one principal per window; past it the marker is withheld (and the
    #: audit event says so). Bounds probing for what exists.
    marker_budget: int = Field(default=50, ge=0, le=1_000_000)
    #: The budget's window, in hours (fixed windows, counted in the truth store).
    marker_window_hours: float = Field(default=24.0, gt=0.0, le=24.0 * 366)
    #: PostgreSQL: when the caller may read at most this many vectors, the vector leg scores
    #: them all (exact) instead of walking the HNSW graph (see bench/RESULTS.md).
    exact_vector_threshold: int = Field(default=20_000, ge=0, le=10_000_000)
    #: PostgreSQL: HNSW candidate list size (``hnsw.ef_search``), raised to the leg's depth.
    hnsw_ef_search: int = Field(default=100, ge=1, le=1000)
    #: PostgreSQL: most index tuples a filtered HNSW scan visits (``hnsw.max_scan_tuples``);
    #: a scan stopped by it marks the result ``truncated``.
    hnsw_max_scan_tuples: int = Field(default=50_000, ge=1000, le=100_000_000)
    #: In a fused (hybrid) ranking, how many of the vector leg's best candidates are fused
    #: (never fewer than top_k); the lexical leg contributes ``fusion_depth``. Both backends
    #: cut at this depth, so they fuse the same candidates. Deeper costs PostgreSQL's
    #: filtered HNSW walk more than linearly and buys little: bench/RESULTS.md (a) and (c).
    vector_fusion_depth: int = Field(default=20, ge=1, le=10_000)

    def hybrid_depths(self, top_k: int) -> tuple[int, int]:
        """How many candidates a fused ranking of ``top_k`` takes from the keyword leg and
        from the vector leg."""
        keyword = max(top_k, self.fusion_depth)
        return keyword, max(top_k, min(keyword, self.vector_fusion_depth))


#: Addresses that stand for nobody in particular (``.example`` domains are real test users).
DEFAULT_PLACEHOLDER_EMAILS = (
    "noreply@*", "no-reply@*", "donotreply@*", "do-not-reply@*", "unknown@*",
    "placeholder@*", "nobody@*", "*@*.invalid", "*@localhost",
)  # fmt: skip


class IngestSettings(_Section):
    chunk_tokens: int = Field(default=300, ge=16, le=8192)
    section_tokens: int = Field(default=1200, ge=16, le=65536)
    #: Largest document text accepted, in bytes of UTF-8.
    max_text_bytes: int = Field(default=2_000_000, ge=1024)
    #: Identity records binding an email that matches one of these globs (case-insensitive
    #: ``fnmatch``) are refused: a placeholder address must never own an account's rights.
    #: Unbinding such an email (``"active": false``) is still allowed.
    placeholder_emails: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PLACEHOLDER_EMAILS), max_length=1000
    )

    @field_validator("placeholder_emails")
    @classmethod
    def _globs(cls, value: list[str]) -> list[str]:
        for glob in value:
            if not glob.strip():
                raise ValueError("an empty pattern; remove it")
        return [glob.strip().casefold() for glob in value]


class CorpusSettings(_Section):
    #: Shown to the model by ``list_corpora``.
    description: str = ""
    #: The corpus as a whole: a caller needs at least this clearance to search it at all
    #: (the PDP's classification rule). Each document's own classification still applies.
    classification: Classification = Classification.PUBLIC
    #: The tenant that owns the corpus (default: ``default_tenant``). The PDP's tenant rule
    #: denies it to callers of any other tenant (reason ``tenant``).
    tenant: str | None = Field(default=None, min_length=1, max_length=256)

    @field_validator("classification", mode="before")
    @classmethod
    def _parse(cls, value: object) -> Classification:
        return Classification.parse(value)


class GatewaySettings(_Section):
    #: Most tokens of one context pack (by the offline word counter); never exceeded.
    token_budget: int = Field(default=2000, ge=16, le=1_000_000)
    #: Candidates fetched from the store for the reranker (at least top_k).
    candidates: int = Field(default=50, ge=1, le=1000)
    #: How much the document's trust score nudges the fused score (0: not at all).
    trust_weight: float = Field(default=0.2, ge=0.0, le=1.0)
    #: Term overlap (Jaccard) at which a chunk counts as a near-duplicate of a better one.
    duplicate_jaccard: float = Field(default=0.9, gt=0.0, le=1.0)
    #: Most chunks of one document in a pack.
    max_per_document: int = Field(default=2, ge=1, le=1000)
    #: ``deterministic``, or ``cross-encoder`` (extra ``semantic`` and ``cross_encoder_path``).
    reranker: Literal["deterministic", "cross-encoder"] = "deterministic"
    #: A local cross-encoder model directory (relative to the deployment directory).
    cross_encoder_path: str | None = None

    def model_post_init(self, __context: object) -> None:
        if self.reranker == "cross-encoder" and not self.cross_encoder_path:
            raise ValueError(
                "reranker 'cross-encoder' needs 'cross_encoder_path', a local model directory"
            )

    #: Ranked results kept in this process's result cache (0 turns the cache off). Entries
    #: are keyed by the caller's ACL fingerprint and the tenant's ACL epoch, so a rights
    #: change is never served from it; the live rights check runs on every request anyway.
    cache_entries: int = Field(default=1024, ge=0, le=1_000_000)


class RightsCheckerSettings(_Section):
    """How the gateway confirms a source system's rights right before packing."""

    #: ``stored``: the truth store's current ACL (sources without a live API);
    #: ``http``: ask the source system's rights endpoint (see docs/rights-check.md).
    kind: Literal["stored", "http"] = "stored"
    #: ``http``: the endpoint a batch of document ids is POSTed to.
    url: str | None = None
    #: ``http``: the whole check, every batch included, must finish within this time;
    #: whatever is unconfirmed by then is withheld (``source_unavailable``).
    deadline_ms: int = Field(default=500, ge=1, le=60_000)
    #: ``http``: most document ids per request.
    batch_size: int = Field(default=50, ge=1, le=1000)
    #: ``http``: most requests in flight at once.
    concurrency: int = Field(default=4, ge=1, le=64)
    #: ``http``: name of the environment variable holding the bearer token, if any.
    token_env: str | None = None

    def model_post_init(self, __context: object) -> None:
        if self.kind == "http" and not self.url:
            raise ValueError("kind 'http' needs 'url', the source's rights endpoint")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} is not an http(s) URL")


class RightsSettings(_Section):
    #: The checker of source systems without their own entry in ``sources``.
    default: RightsCheckerSettings = RightsCheckerSettings()
    #: Checkers by source system name, e.g. ``[rights.sources.sharepoint]``.
    sources: dict[str, RightsCheckerSettings] = {}


class ValidationSettings(_Section):
    """Thresholds below which validation abstains (evidence too thin or off-topic)."""

    #: Fewest chunks, over every pack of the request, that count as sufficient evidence.
    min_chunks: int = Field(default=1, ge=0, le=1000)
    #: Lowest acceptable best chunk score (scores are the reranked fusion scores; 0: off).
    min_top_score: float = Field(default=0.0, ge=0.0)
    #: Least share of the question's analysed terms that must occur in the evidence.
    min_query_coverage: float = Field(default=0.3, ge=0.0, le=1.0)
    #: Claim check: least share of an answer sentence's terms found in one cited chunk.
    claim_min_overlap: float = Field(default=0.5, ge=0.0, le=1.0)
    #: What delivery does with answer sentences the cited evidence does not support:
    #: ``remove`` them and flag the answer, or ``abstain`` (reason ``unsupported``).
    unsupported_claims: Literal["remove", "abstain"] = "remove"


class PolicySettings(_Section):
    #: The policy bundle deciding for routes without a ``policy_profile``: a bundle in
    #: ``policies/`` or the built-in ``pgar.retrieval.corpus``.
    bundle: str = "pgar.retrieval.corpus"
    #: Longest a decision may take; past it the decision is DENY (``policy_error``).
    timeout_s: float = Field(default=2.0, gt=0.0, le=60.0)


class LlmSettings(_Section):
    """The model behind ``govrag ask``."""

    #: ``extractive`` (offline, deterministic: quotes the validated evidence) or ``openai``
    #: (any OpenAI-compatible chat-completions server: OpenAI, vLLM, llama.cpp, Ollama).
    provider: Literal["extractive", "openai"] = "extractive"
    #: ``openai``: the server's base URL, up to and including ``/v1``.
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    #: ``openai``: the environment variable holding the API key. A key is sent only when
    #: this names one explicitly: never a default variable's key to whatever ``base_url``
    #: points at (a local server needs none).
    api_key_env: str | None = None
    #: Seconds to wait for one model reply. A local server may keep generating after govrag
    #: gave up; ``max_tokens`` is what bounds that.
    timeout_s: float = Field(default=60.0, gt=0.0, le=600.0)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    #: Most tokens one model reply may generate (sent with every call). A reply cut off at
    #: this limit is flagged; a grounded answer that was cut off abstains (``truncated``).
    max_tokens: int = Field(default=1024, ge=16, le=131_072)
    #: Most tokens of a workflow's query-formulation reply (a query is one short line; the
    #: call also stops at the first line break).
    query_max_tokens: int = Field(default=64, ge=8, le=1024)
    #: Most model calls of one request (a Pattern 1 loop ends there).
    max_steps: int = Field(default=6, ge=1, le=50)
    #: Most tool calls of one model reply that run; the rest are refused (and audited).
    max_tool_calls_per_reply: int = Field(default=8, ge=1, le=256)
    #: Most tool calls of one request that run; past it tools are refused and no longer
    #: offered, so the model has to answer.
    max_tool_calls: int = Field(default=24, ge=1, le=1000)
    #: Longest question ``ask`` accepts, in characters (it is also the default search
    #: query, itself at most 4,096); a longer one is refused before anything is recorded.
    max_question_chars: int = Field(default=4000, ge=1, le=4096)
    #: Longest caller-supplied text (``ask --text``) accepted, in characters.
    max_text_chars: int = Field(default=200_000, ge=1, le=10_000_000)

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        value = value.strip()  # an env file's trailing newline is not part of the URL
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url {value!r} is not an http(s) URL")
        if any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(f"base_url {value!r} holds whitespace or a control character")
        return value.rstrip("/")


class SourceSettings(_Section):
    """One configured source of documents (``[sources.<name>]``), read by ``govrag ingest NAME``."""

    #: ``filesystem`` (a folder of .md, .txt, .html, .pdf) or ``jsonl`` (an export file).
    connector: Literal["filesystem", "jsonl"]
    #: The folder or file; relative to the deployment directory.
    path: str
    #: The source system its documents, accounts and groups belong to (default: the name).
    source_system: str | None = None
    #: Filesystem: the corpus of every document (default: each file's top-level folder).
    corpus: str | None = None
    #: 1 (most authoritative) to 5; the Curation Pass reads it.
    authority_tier: int = Field(default=3, ge=1, le=5)
    #: Filesystem: the classification of documents that do not state one.
    classification: Classification = Classification.INTERNAL
    #: The tenant its documents land in (default: ``default_tenant``).
    tenant: str | None = None
    #: Filesystem: whether a file's front matter may put it in another corpus than its
    #: folder's. Off: whoever may edit a file could otherwise move it into a corpus that
    #: other routes and policies expose, so such a file is refused with an error.
    allow_front_matter_corpus: bool = False

    @field_validator("classification", mode="before")
    @classmethod
    def _parse(cls, value: object) -> Classification:
        return Classification.parse(value)

    @field_validator("source_system")
    @classmethod
    def _not_reserved(cls, value: str | None) -> str | None:
        return None if value is None else check_source_system(value)


class CurationSettings(_Section):
    """The Curation Pass: ``trust = 0.5 + recency * (authority + demand)``, clamped to 0..1.

    ``authority = authority_weight * (3 - authority_tier) / 2`` (tier 1 raises, tier 5 lowers);
    ``demand = demand_weight * (1 - exp(-hits / demand_scale))`` from the access counter;
    ``recency = 0.5 ** (days since the last access, or since the document changed when it was
    never accessed, / half_life_days)``: what nobody uses sinks toward neutral (0.5).
    """

    half_life_days: float = Field(default=90.0, gt=0.0, le=36_500.0)
    authority_weight: float = Field(default=0.3, ge=0.0, le=0.5)
    demand_weight: float = Field(default=0.2, ge=0.0, le=0.5)
    demand_scale: float = Field(default=10.0, gt=0.0, le=1e9)


class WritebackSettings(_Section):
    """The controlled write-back overlay (seed 001): off unless turned on here."""

    enabled: bool = False
    #: Agent ids allowed to write; nobody else's candidates are admitted.
    allowed_agents: list[str] = []


class AuditSettings(_Section):
    """The audit log's anchor outside the database: signed checkpoints of each tenant's chain
    head (docs/audit.md). Paths are relative to the deployment directory."""

    #: Where checkpoints are written: one folder per tenant, an append-only history of files.
    #: Put it where the database's administrators cannot write (another host, WORM storage).
    checkpoint_dir: str = "audit-checkpoints"
    #: The Ed25519 private key (PEM) that signs checkpoints; ``govrag init`` and
    #: ``govrag audit keygen`` create it (mode 0600). It must never be in the database.
    signing_key: str = "keys/audit-signing-key.pem"
    #: A public key (PEM) ``govrag audit verify`` checks signatures with, for an examiner who
    #: does not hold the signing key. Default: the signing key's own public half; when both
    #: are readable they must match.
    verify_key: str | None = None
    #: A tenant's checkpoint is written after this many events since its last one ...
    checkpoint_every_events: int = Field(default=1000, ge=1, le=1_000_000_000)
    #: ... or at its first event more than this many seconds after its last one.
    checkpoint_every_seconds: float = Field(default=30.0, gt=0.0, le=31_536_000.0)


class Settings(BaseSettings):
    """Every setting of a deployment. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="GOVRAG_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    deployment: Path = Path(".")
    default_tenant: str = "default"
    #: The route ``govrag search`` and sessions use when the caller names none.
    default_route: str | None = None
    store: StoreSettings = StoreSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    search: SearchSettings = SearchSettings()
    ingest: IngestSettings = IngestSettings()
    corpora: dict[str, CorpusSettings] = {}
    policy: PolicySettings = PolicySettings()
    gateway: GatewaySettings = GatewaySettings()
    rights: RightsSettings = RightsSettings()
    validation: ValidationSettings = ValidationSettings()
    llm: LlmSettings = LlmSettings()
    writeback: WritebackSettings = WritebackSettings()
    sources: dict[str, SourceSettings] = {}
    curation: CurationSettings = CurationSettings()
    audit: AuditSettings = AuditSettings()

    @field_validator("sources")
    @classmethod
    def _source_names(cls, value: dict[str, SourceSettings]) -> dict[str, SourceSettings]:
        for name, cfg in value.items():
            if cfg.source_system is None and reserved_source_system(name) is not None:
                raise ValueError(
                    f"[sources.{name}] sets no source_system, so it would be its name {name!r}, "
                    "which govrag reserves; set source_system to the system the documents "
                    "come from"
                )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file is read by load_settings and passed as the lowest-priority source.
        return init_settings, env_settings

    def resolve_path(self, value: str) -> Path:
        """A path from the settings, relative to the deployment directory."""
        p = Path(value)
        return p if p.is_absolute() else self.deployment / p

    @property
    def principals_path(self) -> Path:
        return self.deployment / PRINCIPALS_FILE


def find_deployment(explicit: str | Path | None = None) -> Path:
    """The deployment directory: the explicit argument, else ``GOVRAG_DEPLOYMENT``, else cwd."""
    raw = explicit if explicit is not None else os.environ.get(DEPLOYMENT_ENV)
    path = Path(raw) if raw else Path.cwd()
    if not path.is_dir():
        raise ConfigError(
            f"deployment directory {str(path)!r} does not exist; "
            f"create one with: govrag init {path}"
        )
    return path


def read_toml(path: Path) -> dict[str, Any]:
    """Parse ``govrag.toml``; a problem (syntax, encoding, nesting) names the file and where."""
    return deployfile.read_toml(path)


def load_settings(deployment: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings for a deployment: ``overrides`` > environment > ``govrag.toml`` > defaults."""
    root = find_deployment(deployment)
    config_path = root / CONFIG_FILE
    file_values: dict[str, Any] = read_toml(config_path) if config_path.exists() else {}
    file_values.pop("deployment", None)
    try:
        # Only what the environment set: defaults stay unset and so do not mask the file.
        env_values = Settings().model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, "environment (GOVRAG_* variables)")) from exc
    merged = _deep_merge(_deep_merge(file_values, env_values), overrides)
    merged["deployment"] = root
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        source = str(config_path) if config_path.exists() else "settings"
        raise ConfigError(_describe(exc, source)) from exc


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _describe(exc: ValidationError, source: str) -> str:
    return f"{source}: {describe_validation(exc)}"
