"""The sections of ``govrag.toml`` about the knowledge store and what feeds it.

``[store]``, ``[embedder]``, ``[search]``, ``[ingest]``, ``[corpora.<id>]``,
``[sources.<name>]`` and ``[curation]``: where documents live, how they are indexed and
ranked, and how they get in. The request path's sections (gateway, validation, policy,
model, audit) are in :mod:`govrag.settings.request`. Every section refuses unknown keys.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from govrag.store_url import SecretUrl, parse_store_url, redact
from govrag.types import Classification, Strategy, check_source_system


class Section(BaseModel):
    """A table of ``govrag.toml``: an unknown key is refused, never ignored (a typo must not
    silently leave a default in force)."""

    # hide_input_in_errors: a refused value is named by its field, never echoed (a password).
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class StoreSettings(Section):
    #: ``sqlite:///relative/path.db`` (relative to the deployment directory),
    #: ``sqlite:////absolute/path.db``, ``sqlite://:memory:``, or
    #: ``postgresql://user@host:port/db`` (extra ``postgres``); anything else is refused
    #: (see govrag/store_url.py).
    #: Held as a :class:`~govrag.store_url.SecretUrl`: shown with its password masked.
    url: SecretUrl = SecretUrl("sqlite:///govrag.db")
    #: PostgreSQL only: a URL of the schema owner, used to migrate and create vector indexes
    #: when ``url`` names an application role that owns nothing (recommended: row-level
    #: security is then never bypassed). Default: ``url`` itself.
    admin_url: SecretUrl | None = None
    #: PostgreSQL only: connections this process keeps open at most.
    pool_size: int = Field(default=4, ge=1, le=256)
    #: Where derived search indexes live; relative to the deployment directory.
    index_dir: str = "index"

    # The URL grammar is checked by SecretUrl itself, refusals masked.
    @field_validator("admin_url")
    @classmethod
    def _admin_url(cls, value: SecretUrl | None) -> SecretUrl | None:
        if value is not None and parse_store_url(value).kind != "postgresql":
            raise ValueError(f"{str(value)!r} is not a postgresql:// URL; admin_url is the "
                             "schema owner of a PostgreSQL store")  # fmt: skip
        return value


def http_url(value: str) -> str:
    """A server's ``base_url``: http(s), no whitespace or control character, no trailing
    ``/``; a refusal quotes it with any password masked."""
    value = value.strip()  # an env file's trailing newline is not part of the URL
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"base_url {redact(value)!r} is not an http(s) URL")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"base_url {redact(value)!r} holds whitespace or a control character")
    return value.rstrip("/")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EmbedderSettings(Section):
    #: ``hash``, ``minilm`` or ``openai`` (any OpenAI-compatible embeddings server).
    name: str = "hash"
    #: Vector length: ``hash`` makes vectors this long; ``openai`` expects the server's to be
    #: this long and refuses any other (set it to the model's, e.g. 1536).
    dim: int = Field(default=384, ge=8, le=8192)
    batch_size: int = Field(default=64, ge=1, le=4096)
    #: Where files derived from the model are cached (``minilm``: its ONNX query encoder,
    #: exported once); relative to the deployment directory. Deployments of one model may
    #: share one (entries are keyed by the model's files and written atomically).
    cache_dir: str = Field(default=".govrag", min_length=1)
    #: ``openai``: the server's base URL, up to and including ``/v1``.
    base_url: str = "https://api.openai.com/v1"
    #: ``openai``: the embedding model the server serves. Vectors are stored under
    #: ``openai:<model>``, so changing it means re-ingesting.
    model: str = "text-embedding-3-small"
    #: ``openai``: the environment variable holding the API key (the key itself is never
    #: written in govrag.toml). A key is sent only when this names one, as for ``[llm]``.
    api_key_env: str | None = None
    #: ``openai``: seconds one request may take, reply included.
    timeout_s: float = Field(default=30.0, gt=0.0, le=600.0)
    #: ``openai``: retries of a request refused with 429 or 5xx, timed out or not
    #: connected (exponential backoff); 0: no retry.
    max_retries: int = Field(default=3, ge=0, le=10)

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        return http_url(value)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        value = value.strip()
        if not value or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(f"model {value!r} must be a non-empty name without whitespace "
                             "or control characters, as the server lists it")  # fmt: skip
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        # Names a variable: a value that is not a name is most likely the key itself, pasted
        # here by mistake, so it is refused without being quoted.
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError("api_key_env must name an environment variable (letters, digits "
                             "and '_', e.g. OPENAI_API_KEY), not hold the key itself")  # fmt: skip
        return value


class SearchSettings(Section):
    rrf_k: int = Field(default=60, ge=1, le=10_000)
    lexical_weight: float = Field(default=1.0, ge=0.0, le=100.0)
    vector_weight: float = Field(default=1.0, ge=0.0, le=100.0)
    #: The graph leg's weight in the ``graph`` strategy's fusion.
    graph_weight: float = Field(default=1.0, ge=0.0, le=100.0)
    #: How many candidates each leg contributes to fusion (at least top_k).
    fusion_depth: int = Field(default=100, ge=1, le=10_000)
    default_top_k: int = Field(default=10, ge=1, le=1000)
    #: The strategy of ``govrag ask``'s retrieves (and ``govrag search`` without --strategy).
    default_strategy: Strategy = Strategy.HYBRID
    #: The ``temporal`` strategy (govrag/store/temporal.py): the most a fresh version's score
    #: is raised for recency (an older one's bonus halves with each half-life; 0: off); the
    #: age at which it halves; and the factor on a version not yet in effect (or superseded
    #: by one the words did not find). Off by default, chosen on the dev split of the
    #: strategies suite (bench/RESULTS.md (v)): a 2 % bonus helped questions about the rule in
    #: force (+0.04 nDCG@10) but cost questions answered by older contracts 0.15, because a
    #: governed answer merges its corpora's packs by score and fused scores tie at the top of
    #: every corpus, so recency decided those ties. Turn it on for a route over one corpus.
    temporal_recency_boost: float = Field(default=0.0, ge=0.0, le=1.0)
    temporal_half_life_days: float = Field(default=365.0, gt=0.0, le=36_500.0)
    superseded_weight: float = Field(default=0.1, ge=0.0, le=1.0)
    #: Report whether a relevant candidate was removed by access rules (content-free).
    hidden_marker: bool = True
    #: Most contacts (source system, author email) one marker names.
    marker_max_contacts: int = Field(default=3, ge=1, le=20)
    #: When a withheld document counts for the marker: it holds at least
    #: ``max(2, ceil(share * n))`` of the query's ``n`` distinct analysed terms (a query of
    #: fewer than 2 never raises it; see govrag/store/search.py). In (0, 1].
    #: 0.5: calibrated on 2026-12-06 on the dev split of bank-eu-natural (hint correctness
    #: 0.925 at 0.6, 1.0 at 0.5; bank-eu unchanged at 0.667), reported on its test split
    #: (bench/RESULTS.md).
    marker_min_term_share: float = 0.5
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
    #: SQLite: when the caller may read more than this many vectors, the vector leg first
    #: ranks them by 1-bit codes (Hamming distance) and scores exactly only the
    #: ``binary_rescore`` x depth closest; 0 turns it off (always exact). An approximation:
    #: recall against exact search in bench/RESULTS.md (r) and (s).
    binary_prefilter_rows: int = Field(default=0, ge=0, le=1_000_000_000)
    #: SQLite: how many rows per result the 1-bit ranking keeps for exact scoring.
    binary_rescore: int = Field(default=40, ge=1, le=10_000)

    @field_validator("marker_min_term_share")
    @classmethod
    def _term_share(cls, value: float) -> float:
        # Written out so NaN is refused too, and the message names the table and key.
        if not 0.0 < value <= 1.0:
            raise ValueError("[search] marker_min_term_share must be a share in (0, 1] (the "
                             "part of a query's terms a withheld document must hold), e.g. "
                             "0.6")  # fmt: skip
        return value

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


class IngestSettings(Section):
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


class CorpusSettings(Section):
    #: Shown to the model by ``list_corpora``.
    description: str = ""
    #: The corpus as a whole: a caller needs at least this clearance to search it at all
    #: (the PDP's classification rule). Each document's own classification still applies.
    classification: Classification = Classification.PUBLIC
    #: The only tenants that hold this corpus (default: every tenant; a corpus is per
    #: tenant, each with its own documents). To any other tenant the corpus does not exist:
    #: out of its sessions' scope, and ingest refuses documents into it.
    tenants: tuple[Annotated[str, StringConstraints(min_length=1, max_length=256)], ...] | None = (
        None
    )

    @model_validator(mode="before")
    @classmethod
    def _one_tenant(cls, value: Any) -> Any:
        # ``tenant = "x"`` (before corpora were per tenant) keeps its meaning: only x has it.
        if isinstance(value, dict) and "tenant" in value:
            if "tenants" in value:
                raise ValueError("give tenants (a list) or tenant, not both; keep tenants")
            value = {k: v for k, v in value.items() if k != "tenant"} | {
                "tenants": [value["tenant"]]
            }
        return value

    @field_validator("classification", mode="before")
    @classmethod
    def _parse(cls, value: object) -> Classification:
        return Classification.parse(value)

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not value:
            raise ValueError("is empty, so no tenant could use the corpus; name at least one "
                             "tenant, or remove the key for every tenant")  # fmt: skip
        if value is not None and any(t != t.strip() for t in value):
            raise ValueError("a tenant id has surrounding white space; remove it")
        return value


class SourceSettings(Section):
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


class CurationSettings(Section):
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
