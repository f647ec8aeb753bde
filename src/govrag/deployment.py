"""A deployment directory: ``govrag.toml`` + ``principals.json`` (+ later layers' files).

``govrag init DIR`` scaffolds one; :class:`Deployment` loads it for every command.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from govrag.agent import GovernedSearch
from govrag.agent.extractive import ExtractiveResponder
from govrag.agent.limits import RequestLimits
from govrag.agent.llm import LlmClient
from govrag.agent.orchestrator import Orchestrator
from govrag.agent.retrieve import RETRIEVE_TOOL
from govrag.audit.anchor import AuditVerification, CheckpointRun, checkpoint_now, verify_anchored
from govrag.audit.auto import Checkpointer
from govrag.audit.checkpoint import CheckpointDir
from govrag.audit.keys import generate_key, load_signing_key, verifying_key
from govrag.deployfile import read_json
from govrag.embed import get_embedder
from govrag.embed.base import Embedder
from govrag.errors import (
    ConfigError,
    InputError,
    MissingExtraError,
    NotFoundError,
    describe_validation,
)
from govrag.gateway import DeterministicReranker, Gateway, Reranker
from govrag.gateway.cache import ResultCache
from govrag.gateway.rights import RightsChecker, RightsTrim, StoredAclChecker
from govrag.policy.marker import MarkerGate
from govrag.policy.pdp import CedarPDP
from govrag.policy.pep import PolicyEnforcementPoint, Proposal
from govrag.routes.config import DeploymentConfig, Problem, check_config, describe_problems
from govrag.routes.models import Retrieval
from govrag.routes.session import Sessions
from govrag.settings import (
    CONFIG_FILE,
    PRINCIPALS_FILE,
    AuditSettings,
    RightsCheckerSettings,
    Settings,
    load_settings,
)
from govrag.store import KnowledgeStore, location_problems, open_store
from govrag.types import Principal
from govrag.validation import Validator
from govrag.writeback import ControlledWriteBackStore


class PrincipalsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principals: list[Principal]


def load_principals(path: Path) -> dict[str, Principal]:
    """Principals by ``sub``. Errors name the file, the entry and the field."""
    if not path.exists():
        raise ConfigError(
            f"{path} does not exist; create it with `govrag init` or write "
            '{"principals": [{"sub": ..., "email": ..., "tenant": ..., "clearance": ...}]}'
        )
    raw = read_json(path)
    try:
        parsed = PrincipalsFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation(exc)}") from exc
    out: dict[str, Principal] = {}
    for p in parsed.principals:
        if p.sub in out:
            raise ConfigError(f"{path}: sub {p.sub!r} appears twice; subs must be unique")
        out[p.sub] = p
    return out


@dataclass
class Deployment:
    """Settings plus lazily opened resources of one deployment directory."""

    settings: Settings

    @classmethod
    def load(cls, directory: str | Path | None = None, **overrides: Any) -> Deployment:
        return cls(load_settings(directory, **overrides))

    @cached_property
    def principals(self) -> dict[str, Principal]:
        return load_principals(self.settings.principals_path)

    def principal(self, sub: str) -> Principal:
        try:
            return self.principals[sub]
        except KeyError:
            known = ", ".join(sorted(self.principals)) or "none"
            raise NotFoundError(
                f"unknown principal {sub!r}: not in {self.settings.principals_path}; "
                f"known subs: {known}"
            ) from None

    @cached_property
    def embedder(self) -> Embedder:
        cfg = self.settings.embedder
        options: dict[str, Any] = {"dim": cfg.dim} if cfg.name == "hash" else {}
        if cfg.name == "minilm":
            # The ONNX export of the model is cached beside the deployment (fast queries).
            options["cache_dir"] = self.settings.deployment / ".govrag"
        return get_embedder(cfg.name, **options)

    @cached_property
    def store(self) -> KnowledgeStore:
        store = open_store(self.settings, self.embedder)
        # Every committed audit event may be due for a signed checkpoint (after its commit).
        store.observe_audit(self.checkpointer.observe)
        for corpus_id, corpus in self.settings.corpora.items():
            if corpus.description:
                owner = corpus.tenant or self.settings.default_tenant
                store.describe_corpus(owner, corpus_id, corpus.description)
        return store

    @cached_property
    def config(self) -> DeploymentConfig:
        """Routes, manifests, workflows and policy bundles; every error at once otherwise."""
        config, problems = check_deployment(self.settings)
        if config is None:
            raise ConfigError(describe_problems(self.settings.deployment, problems))
        return config

    @cached_property
    def pdps(self) -> dict[str, CedarPDP]:
        """One PDP per policy bundle, by bundle name and by each profile it serves."""
        out: dict[str, CedarPDP] = {}
        for bundle in self.config.bundles.values():
            pdp = CedarPDP(bundle, timeout_s=self.settings.policy.timeout_s)
            out.update(dict.fromkeys((bundle.name, *bundle.profiles), pdp))
        return out

    @cached_property
    def gateway(self) -> Gateway:
        g = self.settings.gateway
        reranker: Reranker
        if g.reranker == "cross-encoder" and g.cross_encoder_path:
            from govrag.gateway.rerank_cross import CrossEncoderReranker  # extra 'semantic'

            reranker = CrossEncoderReranker(
                self.settings.resolve_path(g.cross_encoder_path),
                duplicate_jaccard=g.duplicate_jaccard,
                max_per_document=g.max_per_document,
            )
        else:
            reranker = DeterministicReranker(
                trust_weight=g.trust_weight,
                duplicate_jaccard=g.duplicate_jaccard,
                max_per_document=g.max_per_document,
            )
        return Gateway(
            self.store,
            reranker=reranker,
            rights=self.rights,
            cache=ResultCache(g.cache_entries),
            overlay=self.writeback,
            token_budget=g.token_budget,
            candidates=g.candidates,
            duplicate_jaccard=g.duplicate_jaccard,
        )

    @cached_property
    def writeback(self) -> ControlledWriteBackStore:
        """The write-back store: disabled unless ``[writeback] enabled``; every admission
        decision is a ``writeback_admission`` audit event (the content only as a hash).

        Its tenant directory is the truth store: a tenant is known when the store has a row
        for it (data was ingested for it, or one of its verified principals opened a
        session). An agent's scope naming any other tenant is refused (``unknown_tenant``)."""
        cfg = self.settings.writeback

        def known_tenant(tenant: str) -> bool:
            return tenant in self.store.tenants()

        def audit(tenant: str, session: str, payload: dict[str, Any]) -> None:
            turn = payload.get("source_turn_id")
            if tenant not in self.store.tenants():
                # A candidate's scope is what the agent claimed: an unknown tenant gets no
                # audit chain of its own; the decision goes to the deployment's tenant.
                tenant = self.settings.default_tenant
            self.store.append_audit(tenant,
                                    "writeback_admission", payload,
                                    request_id=f"turn:{turn}" if turn else "writeback",
                                    session_id=session or "none")  # fmt: skip

        if cfg.enabled:
            return ControlledWriteBackStore.enabled(
                allowed_agents=cfg.allowed_agents, tenants=known_tenant, audit=audit
            )
        return ControlledWriteBackStore.disabled(audit=audit)

    @cached_property
    def rights(self) -> RightsTrim:
        """The live rights check: a checker per source system, the stored ACL by default."""
        r = self.settings.rights
        return RightsTrim(
            self._checker(r.default),
            {name: self._checker(cfg) for name, cfg in r.sources.items()},
        )

    def _checker(self, cfg: RightsCheckerSettings) -> RightsChecker:
        if cfg.kind == "stored" or cfg.url is None:
            return StoredAclChecker(self.store)
        try:
            from govrag.gateway.rights_http import HttpRightsChecker
        except ImportError as exc:
            raise MissingExtraError("httpx", "http", "an 'http' rights checker") from exc
        return HttpRightsChecker(
            cfg.url,
            self.store.source_accounts,
            deadline_ms=cfg.deadline_ms,
            batch_size=cfg.batch_size,
            concurrency=cfg.concurrency,
            token_env=cfg.token_env,
        )

    @cached_property
    def pep(self) -> PolicyEnforcementPoint:
        return PolicyEnforcementPoint(
            self.pdps,
            self.store,
            gateway=self.gateway,
            default_profile=self.settings.policy.bundle,
            corpus_classification={
                cid: c.classification for cid, c in self.settings.corpora.items()
            },
            markers=MarkerGate(
                self.store,
                budget=self.settings.search.marker_budget,
                window_hours=self.settings.search.marker_window_hours,
                max_contacts=self.settings.search.marker_max_contacts,
            ),
            # A corpus belongs to one tenant: its own setting, else the deployment's.
            corpus_tenants={cid: c.tenant for cid, c in self.settings.corpora.items() if c.tenant},
            default_tenant=self.settings.default_tenant,
        )

    @cached_property
    def governed(self) -> GovernedSearch:
        """Governed retrieves: sessions on this deployment's routes, every corpus PEP-gated."""
        config = self.config  # first: a broken config is refused before the store is created
        sessions = Sessions(self.store, config, default_route=self.settings.default_route)
        return GovernedSearch(
            sessions, self.pep, Validator(self.settings.validation, audit=self.store)
        )

    @cached_property
    def llm(self) -> LlmClient:
        """The model behind ``govrag ask``: the offline extractive responder by default."""
        cfg = self.settings.llm
        if cfg.provider == "extractive":
            return ExtractiveResponder()
        from govrag.agent.openai_chat import OpenAIChatClient  # extra 'http'

        return OpenAIChatClient.from_settings(cfg)

    @cached_property
    def orchestrator(self) -> Orchestrator:
        """Questions answered on this deployment's routes (``govrag ask``)."""
        return Orchestrator(
            self.governed,
            self.llm,
            audit=self.store,
            catalog=self.store.list_corpora,
            is_empty=self.store.is_empty_for,
            record_access=self.store.record_access,
            strategy=self.settings.search.default_strategy,
            limits=RequestLimits.from_settings(self.settings.llm),
            claim_min_overlap=self.settings.validation.claim_min_overlap,
            unsupported_claims=self.settings.validation.unsupported_claims,
        )

    @property
    def checkpoints(self) -> CheckpointDir:
        """The audit anchor's checkpoint history (``[audit] checkpoint_dir``)."""
        return CheckpointDir(self.settings.resolve_path(self.settings.audit.checkpoint_dir))

    @cached_property
    def checkpointer(self) -> Checkpointer:
        """The automatic checkpoints: every N events or T seconds of each tenant."""
        a = self.settings.audit
        return Checkpointer(self.checkpoints, self.settings.resolve_path(a.signing_key),
                            every_events=a.checkpoint_every_events,
                            every_seconds=a.checkpoint_every_seconds)  # fmt: skip

    def verify_audit(self, tenant: str | None = None) -> AuditVerification:
        """Every tenant's audit chain (or one tenant's) checked against its signed
        checkpoints; a missing or invalid key is a :class:`ConfigError` (fail closed)."""
        a = self.settings.audit
        public = verifying_key(
            self.settings.resolve_path(a.signing_key),
            self.settings.resolve_path(a.verify_key) if a.verify_key else None,
        )
        return verify_anchored(self.store, self.checkpoints, public, tenant=tenant,
                               every_events=a.checkpoint_every_events,
                               every_seconds=a.checkpoint_every_seconds)  # fmt: skip

    def checkpoint_audit(self, tenant: str | None = None, *, adopt: bool = False) -> CheckpointRun:
        """Sign the current head of every tenant whose chain verifies (``govrag audit
        checkpoint``)."""
        a = self.settings.audit
        key = load_signing_key(self.settings.resolve_path(a.signing_key))
        return checkpoint_now(self.store, self.checkpoints, key, tenant=tenant, adopt=adopt,
                              every_events=a.checkpoint_every_events,
                              every_seconds=a.checkpoint_every_seconds)  # fmt: skip

    def create_audit_key(self) -> tuple[Path, str]:
        """Create the signing key ``[audit] signing_key`` names; returns its path and id."""
        path = self.settings.resolve_path(self.settings.audit.signing_key)
        return path, generate_key(path)

    def click(self, principal: Principal, source_system: str, external_id: str) -> None:
        """Count a click on a document's source (the access counter's other signal). Only a
        document the principal may read, in a corpus the PDP lets it retrieve: the click is
        a proposal like any other, decided and audited before it is counted. A document
        that does not exist, may not be read or lies in a denied corpus gets the same
        :class:`NotFoundError`, so a click is no test of what exists."""
        corpus = self.store.readable_corpus(principal, source_system, external_id)
        verdict = "DENY"
        if corpus is not None:
            proposal = Proposal(tool="click", action=RETRIEVE_TOOL, corpus=corpus,
                                query=f"{source_system}:{external_id}")  # fmt: skip
            done = self.pep.enforce(
                principal,
                Retrieval(mode="tool", scope=(corpus,)),
                proposal,
                lambda _: self.store.record_access(
                    principal.tenant, [(source_system, external_id)], kind="click"
                ),
                route_id="click",
                request_id=f"req-{secrets.token_hex(8)}",
                session_id="",
            )
            verdict = done.decision.verdict
        if verdict != "ALLOW":
            raise NotFoundError(
                f"no document {f'{source_system}:{external_id}'!r} that {principal.sub!r} may read"
            )

    def unrouted_corpora(self, tenant: str) -> list[str]:
        """Corpora of ``tenant`` that no route may search (so every retrieve of them is
        denied); empty when the deployment's config does not load."""
        try:
            scoped = {c for r in self.config.routes.values() for c in r.retrieval.scope}
        except ConfigError:
            return []
        return [c for c, _ in self.store.list_corpora(tenant) if c not in scoped]

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        close_llm = getattr(self.__dict__.get("llm"), "close", None)
        if close_llm is not None:
            close_llm()
        if "rights" in self.__dict__:
            for checker in {*self.rights.by_source.values(), self.rights.default}:
                close = getattr(checker, "close", None)
                if close is not None:
                    close()
        for pdp in set(self.__dict__.get("pdps", {}).values()):
            pdp.close()
        if "store" in self.__dict__:
            self.store.close()


def settings_problems(settings: Settings, config: DeploymentConfig) -> list[Problem]:
    """What ``govrag.toml`` names that the deployment's routes and policies do not have."""
    out = []
    if settings.default_route is not None and settings.default_route not in config.routes:
        known = ", ".join(repr(r) for r in sorted(config.routes)) or "none"
        out.append(
            Problem(
                CONFIG_FILE,
                "default_route",
                f"{settings.default_route!r} is not a route in routes/ (known: {known}); "
                "name one of them",
            )
        )
    for field, problem in location_problems(settings):
        out.append(Problem(CONFIG_FILE, field, problem))
    if config.bundle_for(settings.policy.bundle) is None:
        known = ", ".join(repr(b) for b in sorted(config.bundles))
        out.append(
            Problem(
                CONFIG_FILE,
                "policy.bundle",
                f"no policy bundle {settings.policy.bundle!r} (known: {known}); name a bundle "
                "in policies/ or the built-in 'pgar.retrieval.corpus'",
            )
        )
    return out


def check_deployment(settings: Settings) -> tuple[DeploymentConfig | None, list[Problem]]:
    """Every problem of the deployment's files and of what ``govrag.toml`` names in them."""
    config, problems = check_config(settings.deployment)
    if config is not None:
        problems += settings_problems(settings, config)
    return (config if not any(not p.warning for p in problems) else None), problems


#: The tools every scaffolded deployment offers (seed 003's three).
RETRIEVAL_MANIFEST: dict[str, Any] = {
    "manifest_id": "retrieval",
    "version": "1",
    "tools": [
        {
            "name": "retrieve_documents",
            "description": "Search one corpus for passages relevant to a query.",
            "parameters": {
                "type": "object",
                "properties": {
                    "corpus": {"type": "string", "description": "A corpus id from list_corpora"},
                    # Bounded: servers that constrain tool arguments by their schema (llama.cpp)
                    # then cannot generate a runaway query.
                    "query": {
                        "type": "string",
                        "maxLength": 256,
                        "description": "What to look for",
                    },
                },
                "required": ["corpus", "query"],
                "additionalProperties": False,
            },
            "pdp_action": "retrieve_documents",
            "risk_tier": "low",
            "kind": "retrieve",
        },
        {
            "name": "list_corpora",
            "description": "List the corpora you may search, with their descriptions.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            "pdp_action": "list_corpora",
            "kind": "list",
        },
        {
            "name": "get_document_metadata",
            "description": "Title, source and dates of one document.",
            "parameters": {
                "type": "object",
                "properties": {"doc_id": {"type": "string", "maxLength": 256}},
                "required": ["doc_id"],
                "additionalProperties": False,
            },
            "pdp_action": "get_document_metadata",
            "kind": "metadata",
        },
    ],
}


def _check_scaffold(*, embedder: str, tenant: str, corpora: tuple[str, ...]) -> None:
    """The arguments of :func:`scaffold`, checked as the files written from them would be."""
    from govrag.embed import available_embedders
    from govrag.routes.models import Retrieval

    if embedder not in available_embedders():
        raise InputError(f"--embedder {embedder!r} is unknown; use one of: "
                         f"{', '.join(available_embedders())}")  # fmt: skip
    try:
        Principal(sub="ana", email="ana@bank.example", tenant=tenant)
    except ValidationError as exc:
        raise InputError(f"--tenant {tenant!r}: {describe_validation(exc)}") from exc
    if any(ch < " " or ch == "\x7f" for ch in tenant):
        raise InputError(f"--tenant {tenant!r} holds a control character; use a printable id")
    try:
        Retrieval(mode="tool", scope=corpora)
    except ValidationError as exc:
        raise InputError(
            f"--corpus: {describe_validation(exc)} (a corpus id is letters, digits and "
            "'_.:-', starting with a letter or digit)"
        ) from exc


def scaffold(
    directory: Path,
    *,
    embedder: str,
    tenant: str = "default",
    corpora: tuple[str, ...] = (),
    force: bool = False,
) -> list[Path]:
    """Write a starter deployment: ``govrag.toml``, ``principals.json``, one tool route over
    ``corpora`` (``routes/search.json``), its manifest and the audit signing key. Never
    overwrites without force, and never replaces an existing signing key; writes nothing at
    all when an argument could not make a working deployment."""
    _check_scaffold(embedder=embedder, tenant=tenant, corpora=corpora)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / CONFIG_FILE
    principals = directory / PRINCIPALS_FILE
    route = directory / "routes" / "search.json"
    manifest = directory / "manifests" / "retrieval.json"
    for path in (config, principals, route, manifest):
        if path.exists() and not force:
            raise ConfigError(f"{path} already exists; pass --force to overwrite it")
    route.parent.mkdir(exist_ok=True)
    manifest.parent.mkdir(exist_ok=True)
    route.write_text(
        json.dumps(
            {
                "route_id": "search",
                "intent": "search",
                "tool_manifest": "retrieval",
                "retrieval": {"mode": "tool", "scope": list(corpora)},
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    manifest.write_text(json.dumps(RETRIEVAL_MANIFEST, indent=2) + "\n", encoding="utf-8")
    config.write_text(
        f"""# govrag deployment settings.
# Environment variables override them: GOVRAG_<SECTION>__<KEY>.
default_tenant = {json.dumps(tenant)}
default_route = "search"       # routes/search.json; `govrag search --route ID` picks another

[store]
url = "sqlite:///govrag.db"   # relative to this directory
# url = "postgresql://govrag_app@db.internal:5432/govrag"   # with pip install 'govrag[postgres]'
# admin_url = "postgresql://govrag_owner@db.internal:5432/govrag"   # see docs/scaling.md
index_dir = "index"           # derived search indexes; rebuild with `govrag index rebuild`

[embedder]
name = {json.dumps(embedder)}   # "minilm" (semantic, govrag[semantic]) or "hash" (not semantic)
dim = 384

[search]
rrf_k = 60
lexical_weight = 1.0
vector_weight = 1.0
fusion_depth = 100            # keyword candidates a hybrid ranking fuses
vector_fusion_depth = 20      # vector candidates it fuses (deeper: slower on PostgreSQL)
default_top_k = 10
hidden_marker = true          # report (content-free) that an unreadable relevant item exists

[ingest]
chunk_tokens = 300
section_tokens = 1200
max_text_bytes = 2000000

[policy]
bundle = "pgar.retrieval.corpus"   # built-in: needs "<corpus>:read" in doc_entitlements
timeout_s = 2.0

[audit]
# Signed checkpoints of each tenant's audit chain head, outside the database (docs/audit.md).
checkpoint_dir = "audit-checkpoints"   # better: storage the database's admins cannot write
signing_key = "keys/audit-signing-key.pem"   # Ed25519, mode 0600; written by govrag init
# verify_key = "keys/audit-signing-key.pub"   # an examiner's copy of the public key
checkpoint_every_events = 1000   # a checkpoint after this many events of a tenant ...
checkpoint_every_seconds = 30.0   # ... or at its first event this long after the last one

# Describe corpora for the model (shown by list_corpora) and classify them as a whole:
# [corpora.policy-engine]
# description = "Bank policies: limits, approvals, controls"
# classification = "internal"     # callers below this clearance are denied the corpus
""",
        encoding="utf-8",
    )
    principals.write_text(
        json.dumps(
            {
                "principals": [
                    {
                        "sub": "ana",
                        "email": "ana@bank.example",
                        "tenant": tenant,
                        "roles": ["analyst"],
                        "doc_entitlements": [f"{c}:read" for c in corpora],
                        "clearance": "internal",
                    }
                ]
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    written = [config, principals, route, manifest]
    key = directory / AuditSettings().signing_key
    if not key.exists():
        generate_key(key)
        written.append(key)
    return written
