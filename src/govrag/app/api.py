"""The application API: one object per opened deployment, whose methods are the use cases.

Every edge (the CLI, the demo, the benches, and the HTTP and MCP servers to come) is a thin
adapter over :class:`Govrag`: it turns its input into these calls and their results into its
output, and holds no use-case logic of its own. So a rule (a source lock, a dry run that
writes nothing, a click decided by the policy gate before it counts) is written once and no
edge can skip it.

Identity is never looked up by name here: every method that acts for someone takes a
:class:`~govrag.types.Principal`, the verified claims of the caller (from a token, or from
``principals.json`` through :func:`local_principal` in development). What a principal may
see is decided inside the calls, by the route, the policy gate and the store's ACL filter.

:class:`Govrag` opens nothing until a use case needs it (no database connection, no
embedding model, no policy engine): ``govrag replay`` never loads PyTorch.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from govrag.app.ingest import (
    IngestOutcome,
    ProgressFactory,
    run_ingest,
)
from govrag.deployment import (
    Deployment,
    auth_problems,
    check_deployment,
    load_principals,
    lookup_principal,
)
from govrag.errors import AuthError, ConfigError, InputError, NotFoundError
from govrag.harvest.sources import SourceStatus, list_sources
from govrag.settings import Settings, load_settings
from govrag.types import MetadataFilter, Principal, Strategy, VerifiedToken

if TYPE_CHECKING:
    from govrag.agent.answer import Answer
    from govrag.agent.retrieve import GovernedResult
    from govrag.audit import Replay
    from govrag.audit.anchor import AuditVerification, CheckpointRun
    from govrag.harvest.kinds import ConnectorKind
    from govrag.problems import Problem
    from govrag.routes.config import DeploymentConfig
    from govrag.routes.session import Session
    from govrag.store.audit import AuditEvent
    from govrag.store.curation import CurationReport
    from govrag.store.records import IndexReport
    from govrag.writeback.models import AdmissionResult, WriteBackCandidate


@dataclass(frozen=True)
class SessionInfo:
    """A session as its principal may see it: the route it is pinned to and that route's
    retrieval mode and scope (fixed for the session's life)."""

    session_id: str
    sub: str
    route_id: str
    mode: str
    scope: tuple[str, ...]
    route_table_version: str

    @classmethod
    def of(cls, session: Session) -> SessionInfo:
        r = session.retrieval
        return cls(session.session_id, session.principal.sub, session.route_id, r.mode,
                   tuple(r.scope), session.route_table_version)  # fmt: skip


@dataclass(frozen=True)
class ConfigCheck:
    """Every problem of the deployment's routes, manifests, workflows and policies at once."""

    problems: list[Problem]
    config: DeploymentConfig | None

    @property
    def ok(self) -> bool:
        """``True`` when no problem is an error (warnings allowed)."""
        return not any(not p.warning for p in self.problems)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": [vars(p) | {"severity": "warning" if p.warning else "error"}
                         for p in self.problems],
            "routes": sorted(self.config.routes) if self.config else [],
            "route_table_version": self.config.route_table_version if self.config else None,
        }  # fmt: skip


class Govrag:
    """One opened deployment. Use as a context manager (or call :meth:`close`)."""

    def __init__(self, deployment: Deployment) -> None:
        self._dep = deployment

    @property
    def settings(self) -> Settings:
        """The deployment's settings (``govrag.toml``, environment, overrides)."""
        return self._dep.settings

    # -- who is calling ----------------------------------------------------------------------

    def verify_token(self, token: str | None) -> VerifiedToken:
        """The verified claims of a bearer token (``[auth]``; extra ``server``). Any refusal
        is an :class:`AuthError` whose message is the same fixed line (``fault`` says why,
        for the log); identity never comes from anywhere else on a served deployment."""
        return self._dep.tokens.verify(token)

    def dev_token(self, sub: str) -> str:
        """A development bearer token for the entry ``sub`` of ``principals.json`` (only with
        ``[auth] dev_tokens = true``; ``govrag token --as SUB``)."""
        from govrag.auth import sign_dev_token

        signed = sign_dev_token(self.settings, local_principal(self.settings, sub))
        try:
            # Verified as a server would: a token the deployment's own settings refuse (an
            # unserved tenant, claims that make no principal) is never handed out.
            self.verify_token(signed)
        except AuthError as exc:
            raise ConfigError(f"the development token for {sub!r} would be refused "
                              f"({exc.fault}: {exc.detail}); check [auth] tenants and "
                              "[auth.claims] against principals.json") from exc  # fmt: skip
        return signed

    # -- getting documents in ---------------------------------------------------------------

    def ingest(
        self,
        source: str | Path,
        *,
        connector: ConnectorKind | None = None,
        tenant: str | None = None,
        dry_run: bool = False,
        progress: ProgressFactory | None = None,
    ) -> IngestOutcome:
        """Ingest a configured source (by name), a folder or a JSONL file. A bad file or line
        is reported in the outcome and skipped, leaving nothing partial; the rest lands."""
        return run_ingest(self._dep, str(source), connector=connector, tenant=tenant,
                          dry_run=dry_run, progress=progress)  # fmt: skip

    def sources(self) -> list[SourceStatus]:
        """The configured sources with their last syncs."""
        return list_sources(self._dep.settings)

    # -- governed retrieval and answers -----------------------------------------------------

    def search(
        self,
        principal: Principal,
        query: str,
        *,
        corpora: Sequence[str] | None = None,
        route: str | None = None,
        session: str | None = None,
        strategy: Strategy | None = None,
        top_k: int | None = None,
        filters: Sequence[MetadataFilter] = (),
    ) -> GovernedResult:
        """A governed retrieve: each corpus (default: the route's scope) is decided by the
        policy gate and audited before it is searched; results are only what ``principal``
        may read. Defaults come from ``[search]``."""
        if corpora is not None and not corpora:
            # An empty list is more likely a caller's bug than a wish for the whole scope.
            raise InputError("corpora is empty: name at least one corpus, or pass None for "
                             "every corpus in the route's scope")  # fmt: skip
        s = self.settings.search
        return self._dep.governed.search(
            principal,
            query,
            corpora=tuple(corpora) if corpora is not None else None,
            route_id=route,
            session_id=session,
            strategy=strategy or s.default_strategy,
            top_k=s.default_top_k if top_k is None else top_k,
            filters=tuple(filters),
        )

    def ask(
        self,
        principal: Principal,
        question: str,
        *,
        route: str | None = None,
        session: str | None = None,
        text: str | None = None,
    ) -> Answer:
        """A grounded, cited answer or an abstention, on ``route`` (default: the deployment's
        ``default_route``); ``text`` is caller-supplied material to work on, never evidence."""
        return self._dep.orchestrator.ask(principal, question, route_id=route,
                                          session_id=session, text=text)  # fmt: skip

    def open_session(
        self, principal: Principal, *, route: str | None = None, intent: str | None = None
    ) -> SessionInfo:
        """Open a session pinned to ``route`` (or the route ``intent`` selects, or the default
        route): its retrieval mode and scope never change for the session's life."""
        request_id = f"req-{secrets.token_hex(8)}"
        opened = self._dep.sessions.open(principal, route_id=route, intent=intent,
                                         request_id=request_id)  # fmt: skip
        return SessionInfo.of(opened)

    def session(self, principal: Principal, session_id: str) -> SessionInfo:
        """A session of ``principal``'s; someone else's and an absent one are the same
        :class:`NotFoundError` (sessions are not enumerable)."""
        return SessionInfo.of(self._dep.sessions.resume(principal, session_id))

    def click(self, principal: Principal, source_system: str, external_id: str) -> None:
        """Count a click on a document's source (the access counter's other signal), only for
        a document ``principal`` may read in a corpus the policy gate lets it retrieve;
        anything else is the same :class:`NotFoundError`, so a click tests nothing."""
        from govrag.agent.retrieve import RETRIEVE_TOOL
        from govrag.policy.pep import Proposal
        from govrag.types import Retrieval

        store = self._dep.store
        corpus = store.readable_corpus(principal, source_system, external_id)
        verdict = "DENY"
        if corpus is not None:
            # A click is a proposal like any other: decided and audited before it counts.
            proposal = Proposal(tool="click", action=RETRIEVE_TOOL, corpus=corpus,
                                query=f"{source_system}:{external_id}")  # fmt: skip
            done = self._dep.pep.enforce(
                principal,
                Retrieval(mode="tool", scope=(corpus,)),
                proposal,
                lambda _: store.record_access(
                    principal.tenant, [(source_system, external_id)], kind="click"
                ),
                route_id="click",
                request_id=f"req-{secrets.token_hex(8)}",
                session_id="",
            )
            verdict = done.decision.verdict
        if verdict != "ALLOW":
            ref = f"{source_system}:{external_id}"
            raise NotFoundError(f"no document {ref!r} that {principal.sub!r} may read")

    def writeback_admit(self, candidate: WriteBackCandidate) -> AdmissionResult:
        """Offer memory to the controlled write-back store: admitted only through its
        fail-closed gates (and never while ``[writeback] enabled`` is off); every decision
        is audited."""
        return self._dep.writeback.admit(candidate)

    # -- the examiner -----------------------------------------------------------------------

    def replay(self, request_id: str, *, tenant: str | None = None) -> Replay:
        """Rebuild one request from the audit log alone."""
        from govrag.audit import replay

        return replay(self._dep.store, tenant or self.settings.default_tenant, request_id)

    def audit_verify(self, tenant: str | None = None) -> AuditVerification:
        """Every tenant's audit chain (or one's) checked against its signed checkpoints; a
        missing or invalid key is a :class:`ConfigError` (fail closed)."""
        from govrag.audit.anchor import verify_anchored
        from govrag.audit.keys import verifying_key

        a, path = self.settings.audit, self.settings.resolve_path
        public = verifying_key(path(a.signing_key), path(a.verify_key) if a.verify_key else None)
        return verify_anchored(self._dep.store, self._dep.checkpoints, public, tenant=tenant,
                               every_events=a.checkpoint_every_events,
                               every_seconds=a.checkpoint_every_seconds)  # fmt: skip

    def audit_checkpoint(self, tenant: str | None = None, *, adopt: bool = False) -> CheckpointRun:
        """Sign the current head of every tenant whose chain verifies; a chain that does not
        verify against its checkpoints is refused, never signed."""
        from govrag.audit.anchor import checkpoint_now
        from govrag.audit.keys import load_signing_key

        a = self.settings.audit
        key = load_signing_key(self.settings.resolve_path(a.signing_key))
        return checkpoint_now(self._dep.store, self._dep.checkpoints, key, tenant=tenant,
                              adopt=adopt, every_events=a.checkpoint_every_events,
                              every_seconds=a.checkpoint_every_seconds)  # fmt: skip

    def audit_keygen(self) -> tuple[Path, str]:
        """Create the checkpoint signing key ``[audit] signing_key`` names (never replaces
        one); returns its path and key id."""
        from govrag.audit.keys import generate_key

        path = self.settings.resolve_path(self.settings.audit.signing_key)
        return path, generate_key(path)

    # -- operations -------------------------------------------------------------------------

    def _tenants(self, tenant: str | None) -> list[str]:
        """``[tenant]``, or every tenant the store holds (for the operator use cases; not
        public: listing tenants is no caller's business)."""
        return [tenant] if tenant else self._dep.store.tenants()

    def curate(self, tenant: str | None = None) -> list[CurationReport]:
        """Recompute every document's trust score from authority and access (idempotent)."""
        cfg = self.settings.curation
        return [self._dep.store.curate(t, cfg) for t in self._tenants(tenant)]

    def index_verify(self, tenant: str | None = None) -> list[IndexReport]:
        """Compare the derived search indexes with the truth store, per tenant."""
        return [self._dep.store.verify_index(t) for t in self._tenants(tenant)]

    def index_rebuild(self, tenant: str | None = None) -> dict[str, int]:
        """Recreate the derived search indexes from the truth store; chunks indexed per
        tenant."""
        return {t: self._dep.store.rebuild_index(t) for t in self._tenants(tenant)}

    def observe_audit(self, observer: Callable[[AuditEvent], None]) -> None:
        """Call ``observer(event)`` after each audit event this deployment commits, on the
        committing thread (``event.kind``, ``event.payload``): for counting what the governed
        path decided (the HTTP server's metrics) without reaching below this API. An observer
        must be quick and must not raise (one that raises is logged; the event stands)."""
        self._dep.store.observe_audit(observer)

    def config_check(self) -> ConfigCheck:
        """Validate routes/, manifests/, workflows/ and policies/ against govrag.toml."""
        config, problems = check_deployment(self.settings)
        return ConfigCheck(problems + auth_problems(self._dep), config)

    def evaluate_beir(
        self,
        beir_dir: str | Path,
        *,
        strategy: Strategy = Strategy.KEYWORD,
        split: str = "test",
        top_k: int = 100,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Retrieval quality on a BEIR dataset loaded into this deployment's store and
        embedder (a throw-away tenant, dropped afterwards)."""
        from govrag.eval.runner import run_beir_eval

        return run_beir_eval(beir_dir, strategy=strategy, split=split, top_k=top_k,
                             progress=progress, store=self._dep.store,
                             search=self.settings.search)  # fmt: skip

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close what the use cases opened (store, model client, policy engines)."""
        self._dep.close()

    def __enter__(self) -> Govrag:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(deployment: str | Path | Settings | None = None, **overrides: Any) -> Govrag:
    """Open the deployment in ``deployment`` (a directory; default ``GOVRAG_DEPLOYMENT`` or
    the current directory) or described by ready :class:`Settings`. ``overrides`` take
    precedence over the environment and ``govrag.toml`` (e.g. ``default_tenant="bank"``)."""
    if isinstance(deployment, Settings):
        if overrides:
            raise TypeError("pass overrides with a directory, not with ready Settings")
        return Govrag(Deployment(deployment))
    return Govrag(Deployment(load_settings(deployment, **overrides)))


def local_principal(settings: Settings, sub: str) -> Principal:
    """A development identity: the entry ``sub`` of the deployment's ``principals.json``
    (what ``govrag ... --as SUB`` uses). A served deployment takes claims from verified
    tokens instead; an unknown ``sub`` is a :class:`NotFoundError` listing the known ones."""
    path = settings.principals_path
    return lookup_principal(load_principals(path), sub, path)


def evaluate_beir(
    beir_dir: str | Path,
    *,
    strategy: Strategy = Strategy.KEYWORD,
    split: str = "test",
    embedder: str = "hash",
    top_k: int = 100,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Retrieval quality on a BEIR dataset loaded into a temporary SQLite store (no
    deployment needed): nDCG@10, recall@100 and latency figures."""
    from govrag.eval.runner import run_beir_eval

    return run_beir_eval(beir_dir, strategy=strategy, split=split, embedder=embedder,
                         top_k=top_k, progress=progress)  # fmt: skip


def init(
    directory: str | Path,
    *,
    embedder: str = "hash",
    tenant: str = "default",
    corpora: Sequence[str] = (),
    force: bool = False,
) -> list[Path]:
    """Write a starter deployment into ``directory`` (``govrag init``): settings, one
    principal entitled to ``corpora``, a tool route over them, seed 003's three tools and the
    audit signing key. Returns the files written; writes nothing when an argument could not
    make a working deployment, and never overwrites without ``force``."""
    from govrag.scaffold import scaffold

    return scaffold(Path(directory), embedder=embedder, tenant=tenant, corpora=tuple(corpora),
                    force=force)  # fmt: skip
