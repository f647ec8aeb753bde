"""The sections of ``govrag.toml`` about the request path, after the store has ranked.

``[gateway]``, ``[rights]``, ``[validation]``, ``[policy]``, ``[llm]``, ``[writeback]`` and
``[audit]``: how a pack is built and re-checked, when evidence is too thin, who decides,
which model answers and where the audit log is anchored. No setting here holds a secret
value: the LLM's API key and a rights endpoint's token are read from the environment
variable a setting *names*, and the audit signing key is a file the setting points at.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from govrag.settings.sections import Section, http_url
from govrag.store_url import redact


class GatewaySettings(Section):
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


class RightsCheckerSettings(Section):
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
            raise ValueError(f"url {redact(self.url)!r} is not an http(s) URL")


class RightsSettings(Section):
    #: The checker of source systems without their own entry in ``sources``.
    default: RightsCheckerSettings = RightsCheckerSettings()
    #: Checkers by source system name, e.g. ``[rights.sources.sharepoint]``.
    sources: dict[str, RightsCheckerSettings] = Field(default_factory=dict)


class ValidationSettings(Section):
    """Thresholds below which validation abstains (evidence too thin or off-topic)."""

    #: Fewest chunks, over every pack of the request, that count as sufficient evidence.
    min_chunks: int = Field(default=1, ge=0, le=1000)
    #: Lowest acceptable best chunk score (scores are the reranked fusion scores; 0: off).
    min_top_score: float = Field(default=0.0, ge=0.0)
    #: Least share of the question's analysed terms that must occur in the evidence, however
    #: answerability is judged (an embedder scores a question about household customers
    #: close to the corporate limit; the words tell them apart).
    min_query_coverage: float = Field(default=0.3, ge=0.0, le=1.0)
    #: Answerability with a semantic embedder: least relevance (0..1, see
    #: ``govrag.validation.answerability``) of an evidence sentence that has what the question
    #: asks for. 0.43: calibrated on 2026-12-06 with MiniLM on the bank-eu suite and the dev
    #: split of bank-eu-natural (147 cases with evidence: 0.974 of them judged right on dev,
    #: 0.909 on the held-out test split; bench/RESULTS.md). 0 turns the gate off.
    min_answer_score: float = Field(default=0.43, ge=0.0, le=1.0)
    #: Answerability without one (the ``hash`` embedder): least idf-weighted share of the
    #: question's terms such a sentence holds. 0.21: calibrated as ``min_answer_score`` (0.877
    #: on dev, 0.788 on test: a semantic embedder is much better at this).
    min_answer_coverage: float = Field(default=0.21, ge=0.0, le=1.0)
    #: Answerability by a local cross-encoder (``govrag.validation.cross``; extra
    #: ``semantic``) instead of the embedder: the directory of a sentence-transformers
    #: cross-encoder model (relative to the deployment; nothing is downloaded).
    cross_encoder_path: str | None = None
    #: Its threshold: least probability (0..1) that an evidence sentence answers. 0.5 is the
    #: model's own boundary, not a calibration: calibrate it on your suites (``govrag eval
    #: --suite ... --split dev``). 0 turns the gate off.
    min_cross_score: float = Field(default=0.5, ge=0.0, le=1.0)
    #: When nothing the caller may read answers, a corpus of the route's scope the policy gate
    #: refused it is named as where the answer may be (the outcome is ``denied``, not an
    #: abstention) when the question is at least this relevant to the corpus's id and
    #: ``description`` (:func:`govrag.validation.answerability.topic_score`). 0.3: calibrated
    #: with MiniLM on the dev split of bank-eu-natural and bank-eu (HR questions against the
    #: demo's hr-policies description; bench/RESULTS.md).
    refused_corpus_relevance: float = Field(default=0.3, ge=0.0, le=1.0)
    #: Claim check: least share of an answer sentence's terms found in one cited chunk.
    claim_min_overlap: float = Field(default=0.5, ge=0.0, le=1.0)
    #: What delivery does with answer sentences the cited evidence does not support:
    #: ``remove`` them and flag the answer, or ``abstain`` (reason ``unsupported``).
    unsupported_claims: Literal["remove", "abstain"] = "remove"


class PolicySettings(Section):
    #: The policy bundle deciding for routes without a ``policy_profile``: a bundle in
    #: ``policies/`` or the built-in ``pgar.retrieval.corpus``.
    bundle: str = "pgar.retrieval.corpus"
    #: Longest a decision may take; past it the decision is DENY (``policy_error``).
    timeout_s: float = Field(default=2.0, gt=0.0, le=60.0)


class LlmProfile(Section):
    """``[llm.profiles.<name>]``: a model a route picks with its ``model_profile``; each key
    left out is ``[llm]``'s, except ``api_key_env`` for a profile with a ``base_url`` of its
    own (a key is sent only to the server it was named for)."""

    provider: Literal["extractive", "openai"] | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float | None = Field(default=None, gt=0.0, le=600.0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=16, le=131_072)

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)


class LlmSettings(Section):
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
    #: Named models (``[llm.profiles.<name>]``) a route picks with ``model_profile``; a route
    #: naming none, or one not defined here, gets this ``[llm]``.
    profiles: dict[str, LlmProfile] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        return http_url(value)

    def profile(self, name: str) -> LlmSettings | None:
        """``[llm]`` with profile ``name``'s keys in place (``None``: no such profile)."""
        chosen = self.profiles.get(name)
        if chosen is None:
            return None
        update = {k: v for k, v in chosen.model_dump().items() if v is not None}
        if chosen.base_url not in (None, self.base_url) and chosen.api_key_env is None:
            # A key goes only where it was named for: [llm]'s key never to a profile's server.
            update["api_key_env"] = None
        return self.model_copy(update=update | {"profiles": {}})


class WritebackSettings(Section):
    """The controlled write-back overlay (seed 001): off unless turned on here."""

    enabled: bool = False
    #: Agent ids allowed to write; nobody else's candidates are admitted.
    allowed_agents: list[str] = Field(default_factory=list)


class AuditSettings(Section):
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
    #: Retired public keys (key rotation) that checkpoints signed before a rotation are
    #: checked with, picked by the key id a checkpoint records: PEM files, or folders whose
    #: ``*.pub`` files are keys. ``govrag audit keygen --rotate`` files the retired key into
    #: the first entry (a folder); an entry that does not exist holds no key.
    verify_keys: list[str] = Field(default_factory=lambda: ["keys/audit-keyring"], max_length=64)
    #: A tenant's checkpoint is written after this many events since its last one ...
    checkpoint_every_events: int = Field(default=1000, ge=1, le=1_000_000_000)
    #: ... or at its first event more than this many seconds after its last one.
    checkpoint_every_seconds: float = Field(default=30.0, gt=0.0, le=31_536_000.0)
