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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from govrag.app.ingest import (
    IngestOutcome,
    ProgressFactory,
    run_ingest,
)
from govrag.app.records import ConfigCheck, Memory, Readiness, SessionInfo
from govrag.app.scope_check import unknown_scope_problems
from govrag.deployment import (
    Deployment,
    audit_problems,
    auth_problems,
    check_deployment,
    load_principals,
    lookup_principal,
    model_problems,
)
from govrag.errors import AuthError, ConfigError, InputError, NotFoundError, require_text
from govrag.eval.governance import SuiteReport
from govrag.eval.suite import Split, suite_problems
from govrag.harvest.sources import SourceStatus, list_sources
from govrag.settings import Settings
from govrag.types import MetadataFilter, Principal, Strategy, VerifiedToken

#: The role a token must carry to replay requests and verify the audit log over an edge.
EXAMINER_ROLE = "examiner"

if TYPE_CHECKING:
    from govrag.agent.answer import Answer
    from govrag.agent.listings import CorpusListing, DocumentListing
    from govrag.agent.retrieve import GovernedResult
    from govrag.agent.tool_calls import ToolOutcome
    from govrag.audit import Replay
    from govrag.audit.anchor import AuditVerification, CheckpointRun
    from govrag.audit.escalations import Escalation
    from govrag.audit.keys import Rotation
    from govrag.harvest.kinds import ConnectorKind
    from govrag.routes.models import Tool
    from govrag.store.audit import AuditEvent
    from govrag.store.curation import CurationReport
    from govrag.store.records import IndexReport
    from govrag.writeback.models import AdmissionResult, WriteBackCandidate


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
        require_text(route=route, session=session)
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
        require_text(route=route, session=session)
        return self._dep.orchestrator.ask(principal, question, route_id=route,
                                          session_id=session, text=text)  # fmt: skip

    def open_session(
        self, principal: Principal, *, route: str | None = None, intent: str | None = None
    ) -> SessionInfo:
        """Open a session pinned to ``route`` (or the route ``intent`` selects, or the default
        route): its retrieval mode and scope never change for the session's life."""
        require_text(route=route, intent=intent)
        request_id = f"req-{secrets.token_hex(8)}"
        opened = self._dep.sessions.open(principal, route_id=route, intent=intent,
                                         request_id=request_id)  # fmt: skip
        return SessionInfo.of(opened)

    def session(self, principal: Principal, session_id: str) -> SessionInfo:
        """A session of ``principal``'s; someone else's and an absent one are the same
        :class:`NotFoundError` (sessions are not enumerable)."""
        require_text(session=session_id)
        return SessionInfo.of(self._dep.sessions.resume(principal, session_id))

    def retrieve(
        self,
        principal: Principal,
        tool: str,
        arguments: Any,
        *,
        route: str | None = None,
        session: str | None = None,
        strategy: Strategy | None = None,
        top_k: int | None = None,
    ) -> GovernedResult:
        """A retrieve tool call your own model proposed (``tool`` of the route's manifest,
        ``arguments`` checked against its JSON schema): audited, PEP-gated, the pack validated
        (:mod:`govrag.agent.tool_calls`). Identity, tenant and route never come from
        ``arguments``."""
        require_text(tool=tool, route=route, session=session)
        s = self.settings.search
        return self._dep.tools.retrieve(
            principal,
            tool,
            arguments,
            route_id=route,
            session_id=session,
            strategy=strategy or s.default_strategy,
            top_k=s.default_top_k if top_k is None else top_k,
        )

    def corpora(
        self, principal: Principal, *, route: str | None = None, session: str | None = None
    ) -> CorpusListing:
        """The corpora of the route's scope ``principal`` may list (each a PEP decision; a
        denied one is not named), with their descriptions."""
        require_text(route=route, session=session)
        return self._dep.tools.corpora(principal, route_id=route, session_id=session)

    def document(
        self,
        principal: Principal,
        source_system: str,
        external_id: str,
        *,
        route: str | None = None,
        session: str | None = None,
    ) -> DocumentListing:
        """A document's metadata (never its text), only when ``principal`` may read it, the
        PEP allows its corpus on the route and its source confirms the right; anything else
        is the same :class:`NotFoundError`."""
        require_text(
            source_system=source_system, external_id=external_id, route=route, session=session
        )
        return self._dep.tools.document(principal, source_system, external_id, route_id=route,
                                        session_id=session)  # fmt: skip

    def offered_tools(
        self, principal: Principal, *, route: str | None = None, session: str | None = None
    ) -> list[Tool]:
        """The tools an agent of ``principal``'s may call on the route (``session``'s, else
        ``route``, else the default): the manifest's retrieve, list and metadata tools as the
        route's mode allows, and ``search_knowledge`` only while the store holds something
        for the tenant. Opens no session, writes nothing."""
        require_text(route=route, session=session)
        searchable = not self._dep.store.is_empty(principal.tenant)
        return self._dep.tools.offered(principal, route_id=route, session_id=session,
                                       searchable=searchable)  # fmt: skip

    def call_tool(
        self,
        principal: Principal,
        tool: str,
        arguments: Any,
        *,
        route: str | None = None,
        session: str | None = None,
    ) -> ToolOutcome:
        """One call of an :meth:`offered_tools` tool, as an MCP client makes it: checked
        against the tool's schema, audited as a proposal, PEP-gated; a retrieve or a search
        gives the validated packs, ``list_corpora`` the listing, a metadata tool the
        document's metadata (:mod:`govrag.agent.tool_calls`)."""
        require_text(tool=tool, route=route, session=session)
        s = self.settings.search
        return self._dep.tools.call(
            principal, tool, arguments, route_id=route, session_id=session,
            searchable=not self._dep.store.is_empty(principal.tenant),
            strategy=s.default_strategy, top_k=s.default_top_k,
        )  # fmt: skip

    def click(
        self,
        principal: Principal,
        source_system: str,
        external_id: str,
        *,
        route: str | None = None,
        session: str | None = None,
    ) -> None:
        """Count a click on a document's source (the access counter's other signal), only for
        a document ``principal`` may read in a corpus of the route's scope (``route``, or
        ``session``'s, or the default route's) that the policy gate lets it retrieve; anything
        else is the same :class:`NotFoundError`, so a click tests nothing."""
        require_text(source_system=source_system, external_id=external_id, route=route,
                     session=session)  # fmt: skip
        self._dep.tools.click(principal, source_system, external_id, route_id=route,
                              session_id=session)  # fmt: skip

    def writeback_admit(self, candidate: WriteBackCandidate) -> AdmissionResult:
        """Offer memory to the controlled write-back store: admitted only through its
        fail-closed gates (and never while ``[writeback] enabled`` is off); every decision
        is audited. The scope's session must be one its writer (``agent_id``) opened in the
        scope's tenant and that is still live: another principal's session, or one nobody
        opened, is the :class:`NotFoundError` of an unknown session (no word on whose it is),
        so no agent writes evidence into someone else's retrievals."""
        from govrag.writeback import WriteBackCandidate
        from govrag.writeback.admission import scope_key, snapshot

        # Read once: what is checked here is exactly what the store admits.
        plain = snapshot(candidate)
        if self._dep.writeback.is_enabled and isinstance(plain, WriteBackCandidate):
            key = scope_key(plain.scope.tenant, plain.scope.session)
            # An unusable scope or writer is the store's to refuse, with its own reason.
            if key is not None and isinstance(plain.agent_id, str):
                self._dep.sessions.owned(key[0], plain.agent_id, key[1])
        return self._dep.writeback.admit(plain)

    def remember(self, agent: Principal, session: str, memory: Memory) -> AdmissionResult:
        """Offer ``memory`` to the write-back store for ``agent``'s own ``session``: the
        writer is the verified caller (its ``sub`` must be on ``[writeback] allowed_agents``),
        the scope its tenant and session; nothing in ``memory`` names either."""
        require_text(session=session)
        own = self._dep.sessions.resume(agent, session)  # someone else's: NotFoundError
        return self.writeback_admit(memory.candidate(agent.tenant, own.session_id, agent.sub))

    # -- the examiner -----------------------------------------------------------------------

    def examiner_replay(self, examiner: Principal, request_id: str) -> Replay:
        """:meth:`replay` for a caller with the ``examiner`` role, in its own tenant. For
        anyone else the request is as absent as one that never ran (one
        :class:`NotFoundError`): the audit log is not a way to learn what others asked."""
        require_text(request_id=request_id)
        if EXAMINER_ROLE not in examiner.roles:
            from govrag.audit import shown_request_id

            raise NotFoundError(f"no request {shown_request_id(request_id)} to replay")
        return self.replay(request_id, tenant=examiner.tenant)

    def examiner_audit_verify(self, examiner: Principal) -> AuditVerification:
        """:meth:`audit_verify` of the caller's own tenant, for the ``examiner`` role only
        (anyone else: :class:`NotFoundError`)."""
        if EXAMINER_ROLE not in examiner.roles:
            raise NotFoundError("no audit verification for this caller")
        return self.audit_verify(examiner.tenant)

    def replay(self, request_id: str, *, tenant: str | None = None) -> Replay:
        """Rebuild one request from the audit log alone."""
        require_text(request_id=request_id, tenant=tenant)
        from govrag.audit import replay

        return replay(self._dep.store, tenant or self.settings.default_tenant, request_id)

    def escalations(self, *, tenant: str | None = None, queue: str | None = None
                    ) -> list[Escalation]:  # fmt: skip
        """The failed validations routes passed to people (``on_validation_failure:
        escalate``), oldest first, from the audit log alone."""
        require_text(tenant=tenant, queue=queue)
        from govrag.audit.escalations import escalations

        return escalations(self._dep.store, tenant or self.settings.default_tenant, queue=queue)

    def audit_verify(self, tenant: str | None = None) -> AuditVerification:
        """Every tenant's audit chain (or one's) checked against its signed checkpoints, each
        with the key it names (the current key or a retired one in ``[audit] verify_keys``);
        a missing or invalid key is a :class:`ConfigError` (fail closed), a signing key open
        to other users a finding (``key_exposed``)."""
        from govrag.audit.anchor import verify_anchored
        from govrag.audit.keys import load_keyring, signing_key_exposure, verifying_key

        a, path = self.settings.audit, self.settings.resolve_path
        public = verifying_key(path(a.signing_key), path(a.verify_key) if a.verify_key else None)
        keyring = load_keyring(public, self._dep.verify_keys)
        return verify_anchored(self._dep.store, self._dep.checkpoints, keyring, tenant=tenant,
                               every_events=a.checkpoint_every_events,
                               every_seconds=a.checkpoint_every_seconds,
                               key_exposure=signing_key_exposure(path(a.signing_key)))  # fmt: skip

    def audit_checkpoint(self, tenant: str | None = None, *, adopt: bool = False) -> CheckpointRun:
        """Sign the current head of every tenant whose chain verifies; a chain that does not
        verify against its checkpoints is refused, never signed."""
        from govrag.audit.anchor import checkpoint_now
        from govrag.audit.keys import load_keyring, load_signing_key

        a = self.settings.audit
        key = load_signing_key(self.settings.resolve_path(a.signing_key))
        keyring = load_keyring(key.public_key(), self._dep.verify_keys)
        return checkpoint_now(self._dep.store, self._dep.checkpoints, key, tenant=tenant,
                              adopt=adopt, keyring=keyring,
                              every_events=a.checkpoint_every_events,
                              every_seconds=a.checkpoint_every_seconds)  # fmt: skip

    def audit_keygen(self) -> tuple[Path, str]:
        """Create the checkpoint signing key ``[audit] signing_key`` names (never replaces
        one); returns its path and key id."""
        from govrag.audit.keys import generate_key

        path = self.settings.resolve_path(self.settings.audit.signing_key)
        return path, generate_key(path)

    def audit_rotate_key(self) -> Rotation:
        """Replace the checkpoint signing key with a new one, keeping the old key's public
        half in the keyring (the first ``[audit] verify_keys`` entry, a folder) so what it
        signed still verifies."""
        from govrag.audit.keys import rotate_key

        a = self.settings.audit
        if not a.verify_keys:
            raise ConfigError(
                "[audit] verify_keys is empty, so a rotated key's checkpoints could not be "
                'checked any more; set verify_keys = ["keys/audit-keyring"] (a folder) first'
            )
        return rotate_key(self.settings.resolve_path(a.signing_key), self._dep.verify_keys[0])

    # -- operations -------------------------------------------------------------------------

    def readiness(self) -> Readiness:
        """Can this deployment answer now? Its store reachable with the schema this code
        reads, its routes and manifests loaded, its policy engines loaded. Never raises: a
        failed check says why (for the operator's log)."""
        dep = self._dep
        return Readiness.probe({"store": dep.schema_problem, "routes": dep.routes_problem,
                                "policy": dep.policy_problem})  # fmt: skip

    def _tenants(self, tenant: str | None) -> list[str]:
        """``[tenant]``, or every tenant the store holds (for the operator use cases; not
        public: listing tenants is no caller's business). A ``tenant`` the store does not
        hold is a :class:`NotFoundError`: a mistyped ``--tenant`` must not pass for a clean
        report about nothing."""
        known = self._dep.store.tenants()
        if tenant is None:
            return known
        if tenant not in known:
            listing = ", ".join(repr(t) for t in known) or "none yet"
            raise NotFoundError(f"tenant {tenant!r} holds nothing in this deployment's store "
                                f"(its tenants: {listing}); check --tenant, or ingest into "
                                "the tenant first")  # fmt: skip
        return [tenant]

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
        """Validate routes/, manifests/, workflows/ and policies/ against govrag.toml, and
        that every eval suite of evals/ loads."""
        config, problems = check_deployment(self.settings)
        if config is not None:  # scopes are only worth checking in a route table that loads
            problems += unknown_scope_problems(self._dep, config)
        suites = suite_problems(self.settings.deployment)
        anchor = audit_problems(self._dep)
        models = model_problems(self._dep)
        return ConfigCheck(problems + auth_problems(self._dep) + anchor + models + suites,
                           config)  # fmt: skip

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

    def evaluate_suite(
        self,
        suite: str | None = None,
        *,
        route: str | None = None,
        split: Split | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> SuiteReport:
        """Run the deployment's governance eval suite ``evals/<suite>.jsonl`` (only
        ``route``'s cases and ``split``'s (``dev`` or ``test``), if given; without ``suite``,
        the one ``route``'s ``eval_suite_id`` binds) through the full governed path, each case
        asked as its principal. The report says per route and overall what was found,
        leaked, refused and supported, and which of the suite's thresholds were missed
        (extra ``eval``)."""
        require_text(suite=suite, route=route)
        from govrag.app.evaluate import evaluate_suite

        return evaluate_suite(self._dep, suite, route=route, split=split, progress=progress)

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close what the use cases opened (store, model client, policy engines)."""
        self._dep.close()

    def __enter__(self) -> Govrag:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_principal(settings: Settings, sub: str) -> Principal:
    """A development identity: the entry ``sub`` of the deployment's ``principals.json``
    (what ``govrag ... --as SUB`` uses). A served deployment takes claims from verified
    tokens instead; an unknown ``sub`` is a :class:`NotFoundError` listing the known ones."""
    path = settings.principals_path
    return lookup_principal(load_principals(path), sub, path)
