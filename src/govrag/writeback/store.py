"""The controlled write-back store (seed ``001``): fail-closed, scoped, bounded, audited memory.

Production builds :meth:`ControlledWriteBackStore.disabled`, which admits nothing and finds
nothing: agents stay read-only unless a composition root deliberately injects an enabled store.

An enabled store keeps one BM25 index per complete (tenant, session) scope, in memory only.
Admission order per candidate (see :mod:`govrag.writeback.admission` for the rules)::

    stateless rules 1-5 (outside the lock)
    -> the tenant directory: is the scope's tenant a tenant of the deployment? (outside the lock)
    -> under the lock: purge the scope's expired entries, supersedes, the tenant's scope cap,
       entry cap
    -> audit the decision -> only if that succeeded, index (and drop the superseded entry)

Tenancy: the caps are per tenant (each tenant may hold :data:`MAX_SCOPES` live scopes of
:data:`MAX_ENTRIES_PER_SCOPE` entries), so a tenant that fills its memory only ever refuses
its own admissions; and a tenant the directory does not know is refused before it can take
any room, so the total is bounded by the deployment's tenants. Purging before a cap refusal
touches only the admitting tenant's scopes.

The lock is held from the stateful checks through indexing, so two concurrent admissions can
never both pass a cap with room for one, nor supersede the same entry twice. That includes the
audit call: a slow audit sink slows admissions (a deliberate price: an index that ran ahead of
its audit trail would break "audit before index"). The lock is re-entrant, so a sink may
search the store, but it must not admit into it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from govrag.errors import ConfigError, InputError
from govrag.writeback.admission import (
    NO_FIELDS,
    Admissible,
    Fields,
    ScopeKey,
    check,
    read_clock,
    read_fields,
    scope_key,
)
from govrag.writeback.audit import record_decision
from govrag.writeback.index import Entry, ScopeIndex, analyze
from govrag.writeback.models import (
    MAX_ENTRIES_PER_SCOPE,
    MAX_IDENTITY_CHARS,
    MAX_SCOPES,
    AdmissionReason,
    AdmissionResult,
    AuditSink,
    Clock,
    RetrievalScope,
    TenantDirectory,
    WriteBackHit,
)

__all__ = ["ControlledWriteBackStore", "utc_now"]

logger = logging.getLogger(__name__)

R = AdmissionReason


def utc_now() -> datetime:
    """The default clock: the current time in UTC."""
    return datetime.now(UTC)


def _no_tenant(tenant: str) -> bool:
    """The directory of a disabled store: it knows no tenant."""
    return False


def _directory(tenants: Collection[str] | TenantDirectory) -> TenantDirectory:
    """The tenant directory: a callable as given, or membership in an explicit collection."""
    if callable(tenants):
        return tenants
    if isinstance(tenants, str) or not isinstance(tenants, Collection):
        # A string would be a collection of its characters.
        raise ConfigError(
            f"tenants={tenants!r} is neither a collection of tenant ids nor a callable "
            "known(tenant) -> bool; pass e.g. ['acme'] or a lookup in the truth store"
        )
    known = frozenset(t for t in tenants if isinstance(t, str))
    if len(known) != len(tenants):
        raise ConfigError(f"tenants={tenants!r} holds a non-string; list tenant ids as strings")
    return known.__contains__


def _allow_list(agents: Iterable[str]) -> frozenset[str]:
    """Validate the allow-list: explicit, usable agent ids only."""
    if isinstance(agents, str):
        # Iterating a string would allow each of its characters as an agent.
        raise ConfigError(
            f"allowed_agents={agents!r} is a single string; pass a collection, e.g. [{agents!r}]"
        )
    out: set[str] = set()
    for agent in agents:
        if scope_key(agent, agent) is None:  # the same rules as any other identity string
            raise ConfigError(
                f"allowed agent {agent!r} is not a non-blank string of at most "
                f"{MAX_IDENTITY_CHARS} characters; list each writer's agent id exactly"
            )
        out.add(str.__str__(agent))
    return frozenset(out)


class ControlledWriteBackStore:
    """Session-scoped, fail-closed write-back memory for retrieval (seed ``001``).

    Build one with :meth:`disabled` (the production default) or :meth:`enabled`; the
    constructor is an implementation detail. Thread-safe.
    """

    def __init__(
        self,
        *,
        enabled: bool,
        allowed_agents: frozenset[str],
        clock: Clock,
        audit: AuditSink | None,
        tenants: TenantDirectory = _no_tenant,
    ) -> None:
        self._enabled = enabled
        self._allowed_agents = allowed_agents
        self._clock = clock
        self._audit_sink = audit
        self._known_tenant: Callable[[str], object] = tenants
        # Re-entrant so a sink that (against the rules) searches the store does not deadlock.
        self._lock = threading.RLock()
        # tenant -> session -> index: the caps are counted per tenant.
        self._scopes: dict[str, dict[str, ScopeIndex]] = {}

    @classmethod
    def disabled(cls, *, audit: AuditSink | None = None) -> ControlledWriteBackStore:
        """A store that rejects every candidate (``DISABLED``, still audited) and finds nothing."""
        return cls(enabled=False, allowed_agents=frozenset(), clock=utc_now, audit=audit)

    @classmethod
    def enabled(
        cls,
        *,
        allowed_agents: Iterable[str],
        tenants: Collection[str] | TenantDirectory,
        clock: Clock | None = None,
        audit: AuditSink | None = None,
    ) -> ControlledWriteBackStore:
        """An enabled store admitting writes from exactly ``allowed_agents``.

        Args:
            allowed_agents: the agent ids that may write (exact match); empty admits nothing.
            tenants: the deployment's tenants (ids, or ``known(tenant) -> bool`` asking the
                truth store); a scope of any other tenant is refused (``UNKNOWN_TENANT``).
                Required: no default could be both safe and useful.
            clock: returns the current aware datetime (default: UTC now); judges expiry.
            audit: ``audit(tenant, session, payload)``, called for every admission decision
                before anything is indexed; if it raises, the candidate is rejected.

        Raises:
            ConfigError: an allowed agent id is not a usable identity, ``tenants`` is neither
                a collection of strings nor callable, or ``clock`` or ``audit`` is not
                callable.
        """
        if clock is not None and not callable(clock):
            raise ConfigError(
                f"clock={clock!r} is not callable; pass e.g. lambda: datetime.now(UTC)"
            )
        if audit is not None and not callable(audit):
            raise ConfigError(f"audit={audit!r} is not callable; pass f(tenant, session, payload)")
        return cls(
            enabled=True,
            allowed_agents=_allow_list(allowed_agents),
            clock=clock or utc_now,
            audit=audit,
            tenants=_directory(tenants),
        )

    @property
    def is_enabled(self) -> bool:
        """Whether the store can admit anything at all."""
        return self._enabled

    @property
    def allowed_agents(self) -> frozenset[str]:
        """The agent ids allowed to write."""
        return self._allowed_agents

    def admit(self, candidate: object) -> AdmissionResult:
        """Decide on ``candidate``, audit the decision, and index it if admitted.

        Never raises: anything unexpected is a rejection (``UNEXPECTED_ERROR``). Re-admitting an
        identical candidate is idempotent (same id, one entry); a re-admission with other gate,
        confidence, expiry or ``supersedes`` is a new decision and replaces those.
        """
        fields: Fields = NO_FIELDS
        admissible: Admissible | None = None
        audited_admission = False
        try:
            fields = read_fields(candidate)
            outcome = check(
                fields,
                enabled=self._enabled,
                allowed_agents=self._allowed_agents,
                clock=self._clock,
            )
            if isinstance(outcome, AdmissionReason):
                return self._reject(fields, outcome)
            # The directory may ask a database: outside the lock, before any room is judged.
            unknown = self._tenant_reason(outcome.scope[0])
            if unknown is not None:
                return self._reject(fields, unknown)
            admissible = outcome
            # Analysing 16 KiB is the slowest step; it needs no lock.
            terms = analyze(outcome.content)
            with self._lock:
                reason = self._judge(outcome)
                if reason is not R.ADMITTED:
                    return self._reject(fields, reason)
                # Audit before index: an entry no audit record speaks for is never searchable.
                audited_admission = True
                if not self._audit(fields, R.ADMITTED, outcome.id):
                    return AdmissionResult(admitted=False, id=None, reason=R.AUDIT_FAILED)
                self._index(outcome, terms)
            return AdmissionResult(admitted=True, id=outcome.id, reason=R.ADMITTED)
        except Exception:
            logger.exception("write-back admission failed unexpectedly; the candidate is rejected")
            if audited_admission and admissible is not None:
                # The record said "admitted" but indexing failed midway: fail closed, so no
                # entry is searchable without a clean record.
                self._forget(admissible)
            self._audit(fields, R.UNEXPECTED_ERROR, None)
            return AdmissionResult(admitted=False, id=None, reason=R.UNEXPECTED_ERROR)

    def search(
        self,
        scope: RetrievalScope,
        query: str,
        top_k: int = 10,
        min_score: float = 0.0,
        filters: Mapping[str, str] | None = None,
    ) -> list[WriteBackHit]:
        """BM25 hits of ``query`` among the live entries of exactly ``scope``.

        ``filters`` (metadata key -> exact required value) and ``min_score`` apply before
        ``top_k``; ranking is by descending score, ties by id. A disabled store, an unusable
        scope (not a complete tenant/session of non-blank strings) or a blank query give ``[]``.

        Raises:
            InputError: ``query`` is not a string, ``top_k`` not an int >= 0, ``min_score`` not
                a finite number, or ``filters`` not a mapping of strings to strings.
            ValueError: the store's clock returned something other than an aware datetime.
        """
        if not self._enabled:
            return []
        _check_search_args(query, top_k, min_score, filters)
        key = scope_key(scope.tenant, scope.session) if isinstance(scope, RetrievalScope) else None
        terms = analyze(query)
        if key is None or not terms or top_k == 0:
            return []
        now = read_clock(self._clock)
        with self._lock:
            index = self._live_index(key, now)
            if index is None:
                return []
            ranked = index.search(terms, top_k=top_k, min_score=min_score, filters=filters or {})
        return [
            WriteBackHit(id=e.id, content=e.content, score=s, metadata=MappingProxyType(e.metadata))
            for e, s in ranked
        ]

    # -- internals (called with the lock held unless noted) ---------------------------------------

    def _tenant_reason(self, tenant: str) -> AdmissionReason | None:
        """``None`` when the directory knows ``tenant``; else why not (no lock needed)."""
        try:
            known = self._known_tenant(tenant)
        except Exception:
            logger.exception("the write-back tenant directory failed; the candidate is refused")
            return R.TENANT_UNVERIFIED
        if known is True:
            return None
        return R.UNKNOWN_TENANT if known is False else R.TENANT_UNVERIFIED

    def _live_index(self, key: ScopeKey, now: datetime) -> ScopeIndex | None:
        """The scope's index after purging expired entries; an emptied scope is dropped."""
        tenant, session = key
        sessions = self._scopes.get(tenant)
        index = sessions.get(session) if sessions is not None else None
        if sessions is None or index is None:
            return None
        index.purge(now)
        if not index:
            del sessions[session]
            if not sessions:
                del self._scopes[tenant]
            return None
        return index

    def _live_scopes(self, tenant: str) -> int:
        return len(self._scopes.get(tenant, ()))

    def _judge(self, candidate: Admissible) -> AdmissionReason:
        """The stateful rules: supersedes, then the scope cap, then the entry cap."""
        index = self._live_index(candidate.scope, candidate.now)
        if candidate.supersedes_given:
            target = candidate.supersedes
            # Only another live entry of this very scope can be replaced; every other case
            # gets the same reason, so the answer says nothing about other scopes.
            if index is None or target is None or target == candidate.id or target not in index:
                return R.SUPERSEDES_NOT_IN_SCOPE
        if index is None:
            tenant = candidate.scope[0]
            if self._live_scopes(tenant) >= MAX_SCOPES:
                # Expired entries free room before a refusal: only this tenant's.
                self._purge_tenant(tenant, candidate.now)
            if self._live_scopes(tenant) >= MAX_SCOPES:
                return R.SCOPE_CAP
            return R.ADMITTED
        # A re-admission or a supersession does not grow the scope; no entry is ever evicted
        # silently to make room.
        grows = candidate.id not in index and candidate.supersedes is None
        if grows and len(index) >= MAX_ENTRIES_PER_SCOPE:
            return R.ENTRY_CAP
        return R.ADMITTED

    def _purge_tenant(self, tenant: str, now: datetime) -> None:
        for session in list(self._scopes.get(tenant, ())):
            self._live_index((tenant, session), now)

    def _index(self, candidate: Admissible, terms: list[str]) -> None:
        tenant, session = candidate.scope
        sessions = self._scopes.setdefault(tenant, {})
        index = sessions.get(session)
        if index is None:
            index = sessions[session] = ScopeIndex()
        if candidate.supersedes is not None:
            index.remove(candidate.supersedes)
        index.put(
            Entry.build(
                candidate.id, candidate.content, terms, candidate.expires_at, candidate.metadata()
            )
        )

    def _forget(self, candidate: Admissible) -> None:
        """Best effort: drop the entry of an admission whose indexing failed midway."""
        try:
            with self._lock:
                tenant, session = candidate.scope
                index = self._scopes.get(tenant, {}).get(session)
                if index is not None:
                    index.remove(candidate.id)
        except Exception:
            logger.exception("could not drop a half-indexed write-back entry")

    def _reject(self, fields: Fields, reason: AdmissionReason) -> AdmissionResult:
        self._audit(fields, reason, None)
        return AdmissionResult(admitted=False, id=None, reason=reason)

    def _audit(self, fields: Fields, reason: AdmissionReason, entry_id: str | None) -> bool:
        """Record one decision; ``False`` if the sink failed. Never raises (lock not needed)."""
        return record_decision(self._audit_sink, fields, reason, entry_id)


def _check_search_args(query: Any, top_k: Any, min_score: Any, filters: Any) -> None:
    """Reject malformed search arguments loudly: they are the caller's bug, not a miss."""
    if not isinstance(query, str):
        raise InputError(f"query={query!r} is not a string; pass the query text")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise InputError(f"top_k={top_k!r} is not an int >= 0; pass e.g. top_k=10")
    try:
        # math.isfinite of a huge int overflows; that is no usable score either.
        finite = (
            isinstance(min_score, int | float)
            and not isinstance(min_score, bool)
            and math.isfinite(min_score)
        )
    except (TypeError, OverflowError):
        finite = False
    if not finite:
        raise InputError(f"min_score={min_score!r} is not a finite number; pass e.g. 0.0")
    if filters is None:
        return
    if not isinstance(filters, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in filters.items()
    ):
        raise InputError(
            f"filters={filters!r} is not a mapping of metadata keys to string values; pass e.g. "
            '{"writeback.gate": "USER_CONFIRMED"}'
        )
