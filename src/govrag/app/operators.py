"""What an operator does: ingest, audit anchoring and replay, indexes, checks, evaluation.

:class:`Operators` is what the operator's edges receive (the CLI's admin commands, the
demo, the benches, the HTTP server's readiness and metrics). Its members act for the
deployment, not for a principal: :meth:`Operators.replay` reads any request of a tenant, so
an edge serving callers or examiners never gets this object (examiners get
:class:`~govrag.app.examiners.Examiners`, which replays in the examiner's own tenant only).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from govrag.app.ingest import IngestOutcome, ProgressFactory, run_ingest
from govrag.app.records import ConfigCheck, Readiness
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
from govrag.errors import AuthError, ConfigError, NotFoundError, require_text
from govrag.eval.governance import SuiteReport
from govrag.eval.suite import Split, suite_problems
from govrag.harvest.sources import SourceStatus, list_sources
from govrag.settings import Settings
from govrag.store.glossary import glossary_problems
from govrag.types import Principal, Strategy

if TYPE_CHECKING:
    from govrag.app.backup import BackupReport
    from govrag.audit import Replay
    from govrag.audit.anchor import AuditVerification, CheckpointRun
    from govrag.audit.escalations import Escalation
    from govrag.audit.keys import Rotation
    from govrag.harvest.kinds import ConnectorKind
    from govrag.store.audit import AuditEvent
    from govrag.store.curation import CurationReport
    from govrag.store.records import IndexReport


class Operators:
    """The use cases of the operator of one opened deployment (see the module docstring)."""

    def __init__(self, deployment: Deployment) -> None:
        self._dep = deployment

    @property
    def settings(self) -> Settings:
        """The deployment's settings (``govrag.toml``, environment, overrides)."""
        return self._dep.settings

    def dev_token(self, sub: str) -> str:
        """A development bearer token for the entry ``sub`` of ``principals.json`` (only with
        ``[auth] dev_tokens = true``; ``govrag token --as SUB``)."""
        from govrag.auth import sign_dev_token

        signed = sign_dev_token(self.settings, local_principal(self.settings, sub))
        try:
            # Verified as a server would: a token the deployment's own settings refuse (an
            # unserved tenant, claims that make no principal) is never handed out.
            self._dep.tokens.verify(signed)
        except AuthError as exc:
            raise ConfigError(f"the development token for {sub!r} would be refused "
                              f"({exc.fault}: {exc.detail}); check [auth] tenants and "
                              "[auth.claims] against principals.json") from exc  # fmt: skip
        return signed

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

    def back_up(self, dest: str | Path) -> BackupReport:
        """Write a backup of the whole deployment (database snapshot, audit checkpoints and
        keys, settings and files) to the new folder ``dest``, while the deployment goes on
        serving; :func:`govrag.restore` puts one back (docs/backup.md)."""
        from govrag.app.backup import back_up

        return back_up(self._dep, Path(dest))

    def observe_audit(self, observer: Callable[[AuditEvent], None]) -> None:
        """Call ``observer(event)`` after each audit event this deployment commits, on the
        committing thread (``event.kind``, ``event.payload``): for counting what the governed
        path decided (the HTTP server's metrics) without reaching below this API. An observer
        must be quick and must not raise (one that raises is logged; the event stands)."""
        self._dep.store.observe_audit(observer)

    def config_check(self) -> ConfigCheck:
        """Validate routes/, manifests/, workflows/ and policies/ against govrag.toml, and
        that every eval suite of evals/ and the glossary (entities/) load."""
        config, problems = check_deployment(self.settings)
        if config is not None:  # scopes are only worth checking in a route table that loads
            problems += unknown_scope_problems(self._dep, config)
        suites = suite_problems(self.settings.deployment)
        suites += glossary_problems(self.settings.deployment)
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
        strategy: Strategy | None = None,
    ) -> SuiteReport:
        """Run the deployment's governance eval suite ``evals/<suite>.jsonl`` (only
        ``route``'s cases and ``split``'s (``dev`` or ``test``), if given; without ``suite``,
        the one ``route``'s ``eval_suite_id`` binds) through the full governed path, each case
        asked as its principal. The report says per route and overall what was found,
        leaked, refused and supported, and which of the suite's thresholds were missed
        (extra ``eval``). ``strategy`` replaces ``[search] default_strategy`` for the run
        (compare strategies on one suite)."""
        require_text(suite=suite, route=route)
        from govrag.app.evaluate import evaluate_suite

        return evaluate_suite(self._dep, suite, route=route, split=split, progress=progress,
                              strategy=strategy)  # fmt: skip


def local_principal(settings: Settings, sub: str) -> Principal:
    """A development identity: the entry ``sub`` of the deployment's ``principals.json``
    (what ``govrag ... --as SUB`` uses). A served deployment takes claims from verified
    tokens instead; an unknown ``sub`` is a :class:`NotFoundError` listing the known ones."""
    path = settings.principals_path
    return lookup_principal(load_principals(path), sub, path)
