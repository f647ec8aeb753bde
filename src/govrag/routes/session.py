"""Sessions: verified claims, a route chosen once, its retrieval object pinned for life.

The intent router selects a ``route_id`` (an explicit route, else the route whose ``intent``
matches, else the deployment's default route). At session start the route's retrieval object
(mode and scope) is pinned and persisted in the store together with the route-table version,
so any process can serve the session and a later edit of the route table does not change it.
An attempt to change mode, scope or route mid-session is refused and audited.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from govrag.audit.events import (
    PinAttempt,
    PinnedRetrieval,
    PinViolationEvent,
    RoutePinned,
    write,
)
from govrag.audit.trail import recorded
from govrag.errors import InputError, NotFoundError, UnknownRouteError
from govrag.routes.config import DeploymentConfig
from govrag.routes.models import Route
from govrag.store.clock import iso, now_iso
from govrag.store.protocol import SessionRecords
from govrag.store.sessions import SessionRow
from govrag.types import CorpusTenancy, Principal, Retrieval


class PinViolation(InputError):
    """A request tried to change the pinned retrieval of a session."""


@dataclass(frozen=True)
class Session:
    session_id: str
    principal: Principal
    route_id: str
    #: Pinned at session start; never changes for the session's life.
    retrieval: Retrieval
    route_table_version: str
    #: When the session ends (the opening token's expiry, store format); ``None``: never.
    expires_at: str | None = None


def select_route(
    config: DeploymentConfig,
    *,
    route_id: str | None = None,
    intent: str | None = None,
    default_route: str | None = None,
) -> Route:
    """The intent router: explicit route, else a rule on ``intent``, else the default."""
    if not config.routes:
        raise NotFoundError(
            "the deployment has no routes, so nothing may be retrieved: add a route row in "
            "routes/*.json (`govrag init DIR --corpus ID` scaffolds one)"
        )
    # What a caller is told names no route but the one it sent: the route table is the
    # operator's (the CLI shows them UnknownRouteError.known_routes).
    if route_id is not None:
        route = config.routes.get(route_id)
        if route is None:
            raise UnknownRouteError(
                f"unknown route {route_id!r}; name a route your deployment's operator gave "
                "you, or none for the default route",
                known_routes=config.routes,
            )
        return route
    if intent is not None:
        matches = [r for r in config.routes.values() if r.intent == intent]
        if len(matches) > 1:
            raise InputError(f"intent {intent!r} matches several routes; name the route "
                             "instead")  # fmt: skip
        if matches:
            return matches[0]
    if default_route is not None:
        return select_route(config, route_id=default_route)
    raise UnknownRouteError(
        f"no route for intent {intent!r} and no default_route set; name a route your "
        "deployment's operator gave you",
        known_routes=config.routes,
    )


class Sessions:
    """Opens, pins and resumes sessions of one deployment."""

    def __init__(
        self,
        store: SessionRecords,
        config: DeploymentConfig,
        *,
        default_route: str | None = None,
        tenancy: CorpusTenancy | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.default_route = default_route
        self.tenancy = tenancy or CorpusTenancy()

    def open(
        self,
        principal: Principal,
        *,
        route_id: str | None = None,
        intent: str | None = None,
        request_id: str,
    ) -> Session:
        """Start a session for verified ``principal`` and pin its route's retrieval."""
        route = select_route(
            self.config, route_id=route_id, intent=intent, default_route=self.default_route
        )
        session_id = f"ses-{secrets.token_hex(8)}"
        retrieval = self.retrieval(principal, route)
        pin = RoutePinned(
            sub=principal.sub,
            route_id=route.route_id,
            retrieval=PinnedRetrieval(mode=retrieval.mode, scope=retrieval.scope),
            route_table_version=self.config.route_table_version,
            token_exp=iso(principal.expires_at) if principal.expires_at else None,
        )
        self.store.create_session(principal.tenant, session_id, pin, request_id=request_id)
        return Session(session_id, principal, route.route_id, retrieval,
                       self.config.route_table_version, pin.token_exp)  # fmt: skip

    def retrieval(self, principal: Principal, route: Route) -> Retrieval:
        """``route``'s retrieval as ``principal``'s tenant has it: a corpus id kept to other
        tenants does not exist for this one, so it is neither pinned nor ever named to it."""
        scope = self.tenancy.scope(principal.tenant, route.retrieval.scope)
        return route.retrieval.model_copy(update={"scope": scope})

    def resume(self, principal: Principal, session_id: str) -> Session:
        """The session as pinned (in any process); only its own principal may resume it."""
        row = self.owned(principal.tenant, principal.sub, session_id)
        retrieval = Retrieval.model_validate(json.loads(row.retrieval_json))
        return Session(row.session_id, principal, row.route_id, retrieval,
                       row.route_table_version, row.expires_at)  # fmt: skip

    def owned(self, tenant: str, sub: str, session_id: str) -> SessionRow:
        """The stored row of ``sub``'s live session ``session_id`` in ``tenant``; one
        :class:`NotFoundError` for an absent session and for someone else's."""
        row = self.store.get_session(tenant, session_id)
        if row is None or row.sub != sub:
            # The same answer for "absent" and "someone else's": sessions are not enumerable.
            raise NotFoundError(f"no session {session_id!r} for this principal")
        if row.expires_at is not None and row.expires_at <= now_iso():
            # A session outlives no token: a fresh token does not revive it.
            raise NotFoundError(f"session {session_id!r} ended at {row.expires_at}, when the "
                                "token that opened it expired; open a new session")  # fmt: skip
        return row

    def change(
        self,
        session: Session,
        *,
        request_id: str,
        route_id: str | None = None,
        mode: str | None = None,
        scope: list[str] | None = None,
    ) -> None:
        """Always refused: mode, scope and route are pinned. The attempt is audited."""
        attempted = {k: recorded(v) for k, v in (("route_id", route_id), ("mode", mode),
                                                  ("scope", scope)) if v is not None}  # fmt: skip
        event = PinViolationEvent(
            sub=session.principal.sub,
            route_id=session.route_id,
            pinned=PinnedRetrieval(mode=session.retrieval.mode, scope=session.retrieval.scope),
            attempted=PinAttempt.model_validate(attempted),
        )
        write(self.store, session.principal.tenant, event, request_id=request_id,
              session_id=session.session_id)  # fmt: skip
        raise pin_violation(session)


def pin_violation(session: Session) -> PinViolation:
    """The refusal of any change to ``session``'s pinned mode, scope or route."""
    return PinViolation(
        f"session {session.session_id!r} is pinned to route {session.route_id!r} "
        f"(mode {session.retrieval.mode!r}, scope {list(session.retrieval.scope)}); "
        "mode, scope and route cannot change mid-session: open a new session"
    )
