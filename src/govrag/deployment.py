"""The composition root: one deployment directory's settings and the objects built from them.

A deployment directory holds ``govrag.toml``, ``principals.json``, ``routes/``,
``manifests/``, ``workflows/`` and ``policies/``. :class:`Deployment` wires the request path
from them (store, policy gate, gateway, sessions, validation, orchestrator), each part built
on first use, so a command opens only what it needs. Use cases are not here: they are the
methods of the application API (``govrag/app/api.py``), the one object every edge calls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from govrag.agent import GovernedSearch
from govrag.agent.extractive import ExtractiveResponder
from govrag.agent.limits import RequestLimits
from govrag.agent.llm import LlmClient, Profiled
from govrag.agent.orchestrator import Orchestrator
from govrag.agent.tool_calls import CallerTools
from govrag.audit.auto import Checkpointer
from govrag.audit.checkpoint import CheckpointDir
from govrag.audit.events import WritebackAdmissionEvent, write
from govrag.audit.keys import load_retired_keys, signing_key_problem
from govrag.deployfile import read_json
from govrag.embed import get_embedder
from govrag.embed.base import Embedder
from govrag.embed.cross_encoder import cross_encoder_problem
from govrag.embed.openai_embed import settings_options as openai_options
from govrag.errors import (
    ConfigError,
    MissingExtraError,
    NotFoundError,
    describe_validation,
)
from govrag.gateway import DeterministicReranker, Gateway, Reranker
from govrag.gateway.cache import ResultCache
from govrag.gateway.rights import RightsChecker, RightsTrim, StoredAclChecker
from govrag.policy.marker import MarkerGate
from govrag.policy.pdp import CedarPDP
from govrag.policy.pep import PolicyEnforcementPoint
from govrag.problems import Problem
from govrag.routes.config import DeploymentConfig, check_config, describe_problems
from govrag.routes.session import Sessions
from govrag.settings import (
    CONFIG_FILE,
    LlmSettings,
    RightsCheckerSettings,
    Settings,
    load_settings,
)
from govrag.store import KnowledgeStore, location_problems, open_store
from govrag.store.glossary import Glossary, load_glossary
from govrag.types import Classification, Principal
from govrag.validation import Validator
from govrag.validation.answerability import Relevance, relevance_for
from govrag.writeback import ControlledWriteBackStore

if TYPE_CHECKING:
    from govrag.auth import TokenVerifier


class PrincipalsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principals: list[Principal]


def lookup_principal(principals: dict[str, Principal], sub: str, path: Path) -> Principal:
    """``principals[sub]``; an unknown ``sub`` names the file and the known ones."""
    try:
        return principals[sub]
    except KeyError:
        known = ", ".join(sorted(principals)) or "none"
        raise NotFoundError(
            f"unknown principal {sub!r}: not in {path}; known subs: {known}"
        ) from None


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
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def load(cls, directory: str | Path | None = None, **overrides: Any) -> Deployment:
        return cls(load_settings(directory, **overrides))

    @cached_property
    def principals(self) -> dict[str, Principal]:
        return load_principals(self.settings.principals_path)

    def principal(self, sub: str) -> Principal:
        """The ``principals.json`` entry ``sub`` (development identities)."""
        return lookup_principal(self.principals, sub, self.settings.principals_path)

    @cached_property
    def embedder(self) -> Embedder:
        cfg = self.settings.embedder
        options: dict[str, Any] = {"dim": cfg.dim} if cfg.name == "hash" else {}
        if cfg.name == "minilm":
            # The ONNX export of the model is cached beside the deployment (fast queries).
            options["cache_dir"] = self.settings.resolve_path(cfg.cache_dir)
        elif cfg.name == "openai":
            options = openai_options(cfg)  # the API key read from api_key_env's variable
        return get_embedder(cfg.name, **options)

    @cached_property
    def glossary(self) -> Glossary:
        """The entities the graph leg knows (``entities/*.jsonl``; none without the folder)."""
        return load_glossary(self.settings.deployment)

    @cached_property
    def store(self) -> KnowledgeStore:
        store = open_store(self.settings, self.embedder, self.glossary)
        # Every committed audit event may be due for a signed checkpoint (after its commit).
        store.observe_audit(self.checkpointer.observe)
        return store

    @property
    def opened_store(self) -> KnowledgeStore | None:
        """The store if this deployment has opened it, else ``None`` (nothing is opened)."""
        store: KnowledgeStore | None = self.__dict__.get("store")  # the cached_property's
        return store

    def catalog(self, tenant: str) -> list[tuple[str, str]]:
        """``(corpus id, description)`` of ``tenant``'s corpora: those it holds documents in
        and those ``[corpora]`` describes for it (their description wins), by id."""
        tenancy = self.settings.tenancy
        out = dict(self.store.list_corpora(tenant))
        for corpus_id, corpus in self.settings.corpora.items():
            if tenancy.holds(tenant, corpus_id):
                out[corpus_id] = corpus.description or out.get(corpus_id, "")
        return sorted(out.items())

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

    # -- readiness probes (``Govrag.readiness``): None when sound, else why ------------------

    def schema_problem(self) -> str | None:
        """The store answers, with the schema this code reads (another replica may have
        migrated it since this one opened it)."""
        from govrag.store.migrations import migrations

        found, known = self.store.schema_version(), len(migrations(self.store.backend))
        return None if found == known else f"schema version {found}, this code reads {known}"

    def routes_problem(self) -> str | None:
        return None if self.config.routes else "the deployment has no routes"

    def policy_problem(self) -> str | None:
        problems = sorted({p.problem for p in self.pdps.values() if p.problem})
        return "; ".join(problems) or (None if self.pdps else "no policy bundle loaded")

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
            # The write-back store's sink hands over its event's payload; read back strictly,
            # so a payload that is not the event's is refused (and the entry not indexed).
            event = WritebackAdmissionEvent.model_validate(payload)
            turn = event.source_turn_id
            if tenant not in self.store.tenants():
                # A candidate's scope is what the agent claimed: an unknown tenant gets no
                # audit chain of its own; the decision goes to the deployment's tenant.
                tenant = self.settings.default_tenant
            write(self.store, tenant, event, request_id=f"turn:{turn}" if turn else "writeback",
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
            tenancy=self.settings.tenancy,
        )

    @cached_property
    def relevance(self) -> Relevance:
        """How evidence sentences are scored against a question (answerability, and the
        extractive responder's choice of sentence): the embedder when semantic."""
        return relevance_for(self.embedder)

    @cached_property
    def answering(self) -> Relevance | None:
        """How answerability is judged before synthesis when not by :attr:`relevance`: a
        configured cross-encoder (``[validation] cross_encoder_path``)."""
        path = self.settings.validation.cross_encoder_path
        if not path:
            return None
        from govrag.validation.cross import CrossEncoderRelevance  # torch: only when asked

        return CrossEncoderRelevance(self.settings.resolve_path(path))

    @cached_property
    def governed(self) -> GovernedSearch:
        """Governed retrieves: sessions on this deployment's routes, every corpus PEP-gated."""
        # The route table first: a bad route file is named before any store is opened.
        sessions, pep = self.sessions, self.pep
        validator = Validator(self.settings.validation, audit=self.store,
                              relevance=self.relevance, answering=self.answering)  # fmt: skip
        return GovernedSearch(sessions, pep, validator)

    @cached_property
    def tools(self) -> CallerTools:
        """The routes' tools for callers with a model of their own (HTTP, MCP)."""
        return CallerTools(self.governed, catalog=self.catalog,
                           read_document=self.store.readable_document,
                           confirm=self.rights.confirms,
                           count_click=self._count_click)  # fmt: skip

    def _count_click(self, tenant: str, source_system: str, external_id: str) -> None:
        self.store.record_access(tenant, [(source_system, external_id)], kind="click")

    @cached_property
    def sessions(self) -> Sessions:
        """Sessions on this deployment's routes, pinned at start."""
        config = self.config  # first: a broken config is refused before the store is created
        return Sessions(self.store, config, default_route=self.settings.default_route,
                        tenancy=self.settings.tenancy)  # fmt: skip

    @cached_property
    def tokens(self) -> TokenVerifier:
        """Bearer-token verification from ``[auth]`` (extra ``server``); with
        ``dev_tokens`` also the development key, generated on first use."""
        from govrag.auth import TokenVerifier, dev_key

        dev = [dev_key(self.settings, create=True)] if self.settings.auth.dev_tokens else []
        return TokenVerifier(self.settings, dev_keys=dev)

    @cached_property
    def llm(self) -> LlmClient:
        """The model behind ``govrag ask``: the offline extractive responder by default."""
        return _model(self.settings.llm, self.relevance)

    @cached_property
    def _profiles(self) -> dict[str, Profiled]:
        return {}

    def model(self, profile: str | None) -> Profiled:
        """The model a route's ``model_profile`` picks (``[llm.profiles.<name>]``); ``[llm]``
        for a route naming none or one not defined (``govrag config check`` warns)."""
        cfg = self.settings.llm.profile(profile) if profile is not None else None
        if cfg is None or profile is None:
            return Profiled(self.llm, None, self.settings.llm.max_tokens)
        with self._lock:  # requests of a served deployment run on several threads
            chosen = self._profiles.get(profile)
            if chosen is None:
                chosen = self._profiles[profile] = Profiled(
                    _model(cfg, self.relevance), profile, cfg.max_tokens
                )
            return chosen

    @cached_property
    def orchestrator(self) -> Orchestrator:
        """Questions answered on this deployment's routes (``govrag ask``)."""
        return Orchestrator(
            self.governed,
            self.llm,
            audit=self.store,
            catalog=self.catalog,
            is_empty=self.store.is_empty_for,
            record_access=self.store.record_access,
            strategy=self.settings.search.default_strategy,
            limits=RequestLimits.from_settings(self.settings.llm),
            claim_min_overlap=self.settings.validation.claim_min_overlap,
            unsupported_claims=self.settings.validation.unsupported_claims,
            models=self.model,
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
                            every_seconds=a.checkpoint_every_seconds,
                            verify_keys=self.verify_keys)  # fmt: skip

    @property
    def verify_keys(self) -> list[Path]:
        """``[audit] verify_keys``, resolved: where the retired public keys are."""
        return [self.settings.resolve_path(p) for p in self.settings.audit.verify_keys]

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for opened in ("llm", "embedder"):  # HTTP clients (openai) hold connections
            close = getattr(self.__dict__.get(opened), "close", None)
            if close is not None:
                close()
        if "rights" in self.__dict__:
            for checker in {*self.rights.by_source.values(), self.rights.default}:
                close = getattr(checker, "close", None)
                if close is not None:
                    close()
        for pdp in set(self.__dict__.get("pdps", {}).values()):
            pdp.close()
        if "store" in self.__dict__:
            self.store.close()


def _model(cfg: LlmSettings, relevance: Relevance) -> LlmClient:
    """The client of one model's settings (``[llm]`` or a profile merged into it); the
    extractive stand-in ranks sentences by the deployment's ``relevance``."""
    if cfg.provider == "extractive":
        return ExtractiveResponder(relevance)
    from govrag.agent.openai_chat import OpenAIChatClient  # extra 'http'

    return OpenAIChatClient.from_settings(cfg)


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
    for name, problem in location_problems(settings):
        out.append(Problem(CONFIG_FILE, name, problem))
    scoped = config.scoped_corpora()
    for corpus_id, corpus in sorted(settings.corpora.items()):
        if corpus_id in scoped:
            continue
        # A rule on an id no route has guards nothing: a misspelt id (or one an environment
        # variable cannot spell: GOVRAG_CORPORA__HR_POLICIES is hr_policies) leaves the
        # corpus it meant to every tenant and every clearance. Only a description is harmless.
        guards = corpus.tenants is not None or corpus.classification > Classification.PUBLIC
        out.append(Problem(CONFIG_FILE, f"corpora.{corpus_id}",
                           f"no route's scope names corpus {corpus_id!r}, so this table "
                           f"{'restricts' if guards else 'describes'} nothing; spell the id "
                           "as the routes do (ids are case-sensitive; set ids with '-' in "
                           f"{CONFIG_FILE}, not in the environment) or remove the table",
                           warning=not guards))  # fmt: skip
    for route in config.routes.values():
        profile = route.model_profile
        if profile is not None and profile not in settings.llm.profiles:
            out.append(Problem(f"routes ({route.route_id})", "model_profile",
                               f"route {route.route_id!r} names model_profile {profile!r}, "
                               f"which [llm.profiles] does not define: [llm] serves it; add "
                               f"[llm.profiles.{profile}] to {CONFIG_FILE}",
                               warning=True))  # fmt: skip
    if settings.search.binary_prefilter_rows and settings.embedder.name == "hash":
        # Measured: recall@10 against exact search 0.02-0.13 on hash vectors (their signs
        # say little), 0.997-0.999 on MiniLM's (bench/RESULTS.md (r)).
        out.append(Problem(CONFIG_FILE, "search.binary_prefilter_rows",
                           "the 1-bit prefilter ranks the 'hash' embedder's vectors poorly "
                           "(most of the exact top 10 missed); set it to 0, or use a "
                           "semantic embedder such as 'minilm'", warning=True))  # fmt: skip
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


def auth_problems(dep: Deployment) -> list[Problem]:
    """What stops ``[auth]`` from verifying tokens (checked by ``govrag config check`` only:
    a command that serves nobody must not fail on a key it never uses). With no ``[auth]``
    at all, a warning: nothing is wrong until the deployment is served, and then ``govrag
    serve`` refuses to start, which the operator should learn before deploying it."""
    auth = dep.settings.auth
    if not (auth.keys or auth.jwks_file or auth.dev_tokens):
        return [Problem(CONFIG_FILE, "auth", "no [auth] keys, jwks_file or dev_tokens: no "
                        "bearer token can be verified, so `govrag serve` and `govrag mcp "
                        "--transport http` refuse to start (the CLI, `govrag mcp --as` and "
                        "the Python API work as they are); to serve this deployment, "
                        "configure [auth] (docs/auth.md), or set [auth] dev_tokens = true "
                        "for local development", warning=True)]  # fmt: skip
    try:
        verifier = dep.tokens
    except (ConfigError, MissingExtraError) as exc:
        return [Problem(CONFIG_FILE, "auth", str(exc))]
    if not verifier.keys():
        return [Problem(CONFIG_FILE, "auth.jwks_file", f"{auth.jwks_file} holds no usable key "
                        "(see the log); every token would be refused")]  # fmt: skip
    return []


def model_problems(dep: Deployment) -> list[Problem]:
    """Cross-encoder directories ``govrag.toml`` names that are not one (read from their
    files, no model loaded): found by ``govrag config check`` before the first request."""
    out = []
    wanted = [("validation.cross_encoder_path", dep.settings.validation.cross_encoder_path)]
    if dep.settings.gateway.reranker == "cross-encoder":
        wanted.append(("gateway.cross_encoder_path", dep.settings.gateway.cross_encoder_path))
    for setting, path in wanted:
        if path:
            found = cross_encoder_problem(dep.settings.resolve_path(path), setting=setting)
            if found is not None:
                out.append(Problem(CONFIG_FILE, setting, found))
    return out


def audit_problems(dep: Deployment) -> list[Problem]:
    """What stops the audit anchor from signing checkpoints or checking them: a signing key
    that cannot sign (unreadable, not a key, open to other users: refused, not used), a
    keyring entry that cannot be read or that others can write. A missing key is not one
    (a deployment may take no checkpoints; ``govrag audit verify`` says so)."""
    out = []
    a = dep.settings.audit
    problem = signing_key_problem(dep.settings.resolve_path(a.signing_key))
    if problem is not None:
        out.append(Problem(CONFIG_FILE, "audit.signing_key", problem))
    try:
        load_retired_keys(dep.verify_keys)
    except ConfigError as exc:
        out.append(Problem(CONFIG_FILE, "audit.verify_keys", str(exc)))
    return out


def check_deployment(settings: Settings) -> tuple[DeploymentConfig | None, list[Problem]]:
    """Every problem of the deployment's files and of what ``govrag.toml`` names in them."""
    config, problems = check_config(settings.deployment)
    if config is not None:
        problems += settings_problems(settings, config)
    return (config if not any(not p.warning for p in problems) else None), problems
