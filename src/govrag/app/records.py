"""What the application API's use cases return that no lower layer defines: a session as its
principal sees it, the deployment check, and the readiness of a served deployment."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from govrag.writeback.models import AdmissionGate, RetrievalScope, WriteBackCandidate

if TYPE_CHECKING:
    from govrag.problems import Problem
    from govrag.routes.config import DeploymentConfig
    from govrag.routes.session import Session


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
    #: When the session ends: the expiry of the token that opened it (``None``: never).
    expires_at: str | None = None

    @classmethod
    def of(cls, session: Session) -> SessionInfo:
        r = session.retrieval
        return cls(session.session_id, session.principal.sub, session.route_id, r.mode,
                   tuple(r.scope), session.route_table_version,
                   session.expires_at)  # fmt: skip


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


@dataclass(frozen=True)
class Readiness:
    """Whether a served deployment can answer: its store reachable with the schema this code
    reads, its routes loaded and its policy engines loaded (``/readyz``)."""

    #: Each check's name and ``None`` when it passed, else why it failed (the operator's text:
    #: served to no caller, logged by the edge).
    checks: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def probe(cls, probes: dict[str, Callable[[], str | None]]) -> Readiness:
        """Run each probe (``None``: sound, else why not); one that raises fails with its
        exception named. Never raises."""
        checks: dict[str, str | None] = {}
        for name, probe in probes.items():
            try:
                checks[name] = probe()
            except Exception as exc:  # a readiness probe reports, never raises
                checks[name] = f"{type(exc).__name__}: {exc}"
        return cls(checks)

    @property
    def ready(self) -> bool:
        return all(v is None for v in self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        """The shape served to callers: pass or fail per check, never why."""
        checks = {k: "ok" if v is None else "failed" for k, v in self.checks.items()}
        return {"ready": self.ready, "checks": checks}


@dataclass(frozen=True)
class Memory:
    """What a writer offers the write-back store (``Govrag.remember``): the content and its
    provenance; the scope and the writer come from the verified caller, never from here."""

    source_turn_id: str
    #: How the content was established (``RAW_MODEL_OUTPUT`` is always refused).
    gate: AdmissionGate
    content: str
    confidence: float
    expires_at: datetime
    supersedes: str | None = None

    def candidate(self, tenant: str, session: str, agent_id: str) -> WriteBackCandidate:
        """This memory as the write-back store's candidate, for the scope and writer the
        caller's verified identity gives."""
        return WriteBackCandidate(
            scope=RetrievalScope(tenant=tenant, session=session),
            source_turn_id=self.source_turn_id,
            agent_id=agent_id,
            gate=self.gate,
            content=self.content,
            confidence=self.confidence,
            expires_at=self.expires_at,
            supersedes=self.supersedes,
        )
