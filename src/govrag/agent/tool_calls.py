"""Tool calls from an agent govrag does not orchestrate: the route's tools, governed alike.

An HTTP client or an MCP agent holds its own model; what it sends govrag is the proposal its
model made (a tool name and arguments), never an identity, a tenant or a route change. Such a
call gets exactly what govrag's own agent loop does with a model's proposal
(:mod:`govrag.agent.steps`): the tool must be offered by the manifest of the session's pinned
route and its arguments must validate against the tool's JSON schema
(:func:`~govrag.routes.payload.check_proposal`); the proposal is audited (accepted or
refused); the PEP decides it and commits its audit row before anything runs; a retrieve's
packs pass the validation gate before they are handed out.

- :meth:`CallerTools.retrieve`: a ``retrieve`` tool (one corpus, bound by the tool or named
  in the arguments) -> the validated pack, the hidden-item marker, the decision;
- :meth:`CallerTools.corpora`: the route's ``list`` tool: one decision per corpus of the
  pinned scope, naming only the ALLOWed ones (a DENY is not even named);
- :meth:`CallerTools.document`: the route's ``metadata`` tool on one document the caller may
  read (stored ACL), decided on its corpus, then confirmed by the source's live rights check
  (fail closed). Absent, unreadable, denied and unconfirmed are one :class:`NotFoundError`;
- :meth:`CallerTools.offered` and :meth:`CallerTools.call`: any of those tools, and
  ``search_knowledge`` (:mod:`govrag.agent.search_tool`), by name, as an MCP client lists and
  calls them: one audited proposal per call, then the tool's kind decides what runs.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from govrag.agent import search_tool
from govrag.agent.listings import (
    Catalog,
    CorpusListing,
    DocumentListing,
    list_corpora,
)
from govrag.agent.retrieve import RETRIEVE_TOOL, GovernedResult, GovernedSearch
from govrag.audit.events import ProposalEvent, write
from govrag.audit.trail import recorded
from govrag.errors import InputError, NotFoundError, describe_validation
from govrag.policy.pep import Proposal
from govrag.routes.models import Tool
from govrag.routes.payload import CheckedProposal, check_proposal, offered_tools
from govrag.routes.session import Session, pin_violation, select_route
from govrag.types import DocumentInfo, Principal, Retrieval, SearchRequest, Strategy

#: ``(principal, source system, external id) -> the document``, when the caller may read it
#: (the store's governed read).
ReadDocument = Callable[[Principal, str, str], DocumentInfo | None]
#: ``(principal, source system, external id) -> confirmed?``: the source's live rights check,
#: fail closed.
ConfirmRight = Callable[[Principal, str, str], bool]
#: ``(tenant, source system, external id)``: count a click on a document's source.
CountClick = Callable[[str, str, str], None]


#: What one call of an offered tool gives: by its kind.
ToolOutcome = GovernedResult | CorpusListing | DocumentListing


def tool_request(tool: str, **fields: Any) -> SearchRequest:
    """The store request of a tool call. A value the tool's schema let through but a request
    refuses (a blank query, a NUL in it) is the caller's error, named, not a server fault."""
    try:
        return SearchRequest(**fields)
    except ValueError as exc:
        raise InputError(f"arguments of {tool!r}: {describe_validation(exc)}") from exc


class CallerTools:
    """The governed tools of a deployment's routes, for callers with a model of their own."""

    def __init__(
        self,
        governed: GovernedSearch,
        *,
        catalog: Catalog,
        read_document: ReadDocument,
        confirm: ConfirmRight,
        count_click: CountClick,
    ) -> None:
        self._governed = governed
        self._catalog = catalog
        self._read_document = read_document
        self._confirm = confirm
        self._count_click = count_click

    def retrieve(
        self,
        principal: Principal,
        tool: str,
        arguments: Any,
        *,
        route_id: str | None = None,
        session_id: str | None = None,
        strategy: Strategy = Strategy.HYBRID,
        top_k: int = 10,
    ) -> GovernedResult:
        """A ``retrieve`` tool proposal: checked, audited, PEP-gated, its pack validated."""
        with self._call(principal, route_id, session_id) as (session, request_id, where):
            retrieving = [t for t in self._offered(session) if t.kind == "retrieve"]
            checked = self._checked(principal, session, request_id, tool, arguments, retrieving)
            return self._retrieve(principal, session, request_id, where, checked, strategy, top_k)

    def corpora(
        self, principal: Principal, *, route_id: str | None = None, session_id: str | None = None
    ) -> CorpusListing:
        """The route's ``list`` tool: the corpora of the pinned scope the caller may list."""
        with self._call(principal, route_id, session_id) as (session, request_id, _):
            tool = self._tool_of_kind(principal, session, request_id, "list")
            return self._listing(principal, session, request_id, tool)

    def document(
        self,
        principal: Principal,
        source_system: str,
        external_id: str,
        *,
        route_id: str | None = None,
        session_id: str | None = None,
    ) -> DocumentListing:
        """The route's ``metadata`` tool on one document (see the module docstring)."""
        with self._call(principal, route_id, session_id) as (session, request_id, _):
            tool = self._tool_of_kind(principal, session, request_id, "metadata",
                                      {"source_system": source_system,
                                       "external_id": external_id})  # fmt: skip
            return self._describe(principal, session, request_id, tool, source_system,
                                  external_id)  # fmt: skip

    def click(
        self,
        principal: Principal,
        source_system: str,
        external_id: str,
        *,
        route_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        """Count a click on a document's source (the access counter's other signal), only
        for a document ``principal`` may read in a corpus of the pinned route's scope that the
        policy gate lets it retrieve; anything else is the same :class:`NotFoundError`, so a
        click tests nothing."""
        # The session first, whatever the document: an unknown route or someone else's
        # session is refused alike for a document that exists and one that does not.
        with self._call(principal, route_id, session_id) as (session, request_id, _):
            info = self._scoped_document(principal, session, source_system, external_id)
            verdict = "DENY"
            if info is not None:
                # A click is a proposal like any other: decided against the pinned route's
                # scope (a corpus outside it is DENY, as for a retrieve), audited before it
                # counts.
                proposal = Proposal(tool="click", action=RETRIEVE_TOOL, corpus=info.corpus,
                                    query=f"{source_system}:{external_id}")  # fmt: skip
                decision, _ = self._governed.run_tool(
                    principal,
                    session,
                    proposal,
                    lambda: self._count_click(principal.tenant, source_system, external_id),
                    request_id,
                )
                verdict = decision.verdict
            if verdict != "ALLOW":
                ref = f"{source_system}:{external_id}"
                raise NotFoundError(f"no document {ref!r} that {principal.sub!r} may read")

    # -- any offered tool, as an MCP client calls them ----------------------------------------

    def offered(
        self,
        principal: Principal,
        *,
        route_id: str | None = None,
        session_id: str | None = None,
        searchable: bool,
    ) -> list[Tool]:
        """The tools ``principal`` may call on the route (``session_id``'s pinned route, else
        ``route_id``, else the default): the manifest's retrieve, list and metadata tools as
        the route's mode allows them, and ``search_knowledge`` when ``searchable`` (the store
        holds something for the tenant). Opens no session and writes nothing."""
        sessions = self._governed.sessions
        if session_id is not None:
            session = sessions.resume(principal, session_id)
            if route_id is not None and route_id != session.route_id:
                raise pin_violation(session)  # as a call naming another route is
            return self._callable(self._offered(session), session.retrieval, searchable)
        route = select_route(sessions.config, route_id=route_id,
                             default_route=sessions.default_route)  # fmt: skip
        manifest = sessions.config.manifests.get(route.tool_manifest)
        retrieval = sessions.retrieval(principal, route)
        return self._callable(offered_tools(manifest, retrieval), retrieval, searchable)

    def call(
        self,
        principal: Principal,
        name: str,
        arguments: Any,
        *,
        route_id: str | None = None,
        session_id: str | None = None,
        searchable: bool,
        strategy: Strategy = Strategy.HYBRID,
        top_k: int = 10,
    ) -> ToolOutcome:
        """One call of an :meth:`offered` tool: checked against its schema and audited as a
        proposal (accepted or refused), then run as its kind says, PEP-gated like the
        dedicated methods above."""
        with self._call(principal, route_id, session_id) as (session, request_id, where):
            offered = self._callable(self._offered(session), session.retrieval, searchable)
            checked = self._checked(principal, session, request_id, name, arguments, offered)
            tool = checked.tool
            if tool is search_tool.TOOL:
                plan = search_tool.search_request(
                    checked.arguments, session.retrieval.scope,
                    self._governed.retrieve_action(self._governed.route_of(session)))  # fmt: skip
                request = tool_request(tool.name, query=plan.query, strategy=strategy,
                                       top_k=top_k, corpora=plan.corpora,
                                       filters=plan.filters)  # fmt: skip
                return self._governed.run(principal, session, request, plan.proposals,
                                          request_id, where)  # fmt: skip
            if tool.kind == "retrieve":
                return self._retrieve(principal, session, request_id, where, checked, strategy,
                                      top_k)  # fmt: skip
            if tool.kind == "list":
                return self._listing(principal, session, request_id, tool)
            source_system = checked.arguments.get("source_system")
            if not isinstance(source_system, str):
                raise InputError(
                    f"{tool.name!r} needs the document's source_system as well as its doc_id: "
                    "declare a source_system property in the tool's parameters in the manifest"
                )
            return self._describe(principal, session, request_id, tool, source_system,
                                  str(checked.arguments.get("doc_id", "")))  # fmt: skip

    # -- the shared steps --------------------------------------------------------------------

    @staticmethod
    def _callable(tools: list[Tool], retrieval: Retrieval, searchable: bool) -> list[Tool]:
        kept = [t for t in tools if t.kind in ("retrieve", "list", "metadata")]
        names = {t.name for t in kept}
        if searchable and retrieval.mode == "tool" and search_tool.NAME not in names:
            kept.append(search_tool.TOOL)
        return kept

    def _retrieve(
        self,
        principal: Principal,
        session: Session,
        request_id: str,
        where: dict[str, str],
        checked: CheckedProposal,
        strategy: Strategy,
        top_k: int,
    ) -> GovernedResult:
        assert checked.corpus is not None  # check_proposal binds a retrieve's corpus
        request = tool_request(checked.tool.name, query=checked.query, strategy=strategy,
                               top_k=top_k, corpora=(checked.corpus,))  # fmt: skip
        proposal = Proposal(tool=checked.tool.name, action=checked.action,
                            corpus=checked.corpus, query=checked.query,
                            risk_tier=checked.tool.risk_tier)  # fmt: skip
        return self._governed.run(principal, session, request, [proposal], request_id, where)

    def _listing(
        self, principal: Principal, session: Session, request_id: str, tool: Tool
    ) -> CorpusListing:
        entries, _ = list_corpora(self._governed, self._catalog, principal, session, tool,
                                  request_id)  # fmt: skip
        return CorpusListing(request_id, session.session_id, session.route_id, tuple(entries))

    def _describe(
        self,
        principal: Principal,
        session: Session,
        request_id: str,
        tool: Tool,
        source_system: str,
        external_id: str,
    ) -> DocumentListing:
        absent = NotFoundError(
            f"no document {source_system}:{external_id} that {principal.sub!r} may read "
            "on this route"
        )
        info = self._scoped_document(principal, session, source_system, external_id)
        if info is None:
            raise absent
        proposal = Proposal(tool=tool.name, action=tool.pdp_action, corpus=info.corpus,
                            kind="metadata", risk_tier=tool.risk_tier)  # fmt: skip
        decision, confirmed = self._governed.run_tool(
            principal,
            session,
            proposal,
            lambda: self._confirm(principal, info.source_system, info.external_id),
            request_id,
        )
        if not confirmed:
            raise absent
        return DocumentListing(request_id, session.session_id, session.route_id, info, decision)

    def _scoped_document(
        self, principal: Principal, session: Session, source_system: str, external_id: str
    ) -> DocumentInfo | None:
        """The document, if ``principal`` may read it and its corpus is in the session's
        pinned scope. A document outside the scope is absent before any decision: whether a
        decision (an audit row, a metrics count) is made must not say that a corpus the route
        does not allow holds it."""
        info = self._read_document(principal, source_system, external_id)
        return info if info is not None and info.corpus in session.retrieval.scope else None

    @contextmanager
    def _call(
        self, principal: Principal, route_id: str | None, session_id: str | None
    ) -> Iterator[tuple[Session, str, dict[str, str]]]:
        """A request: its id, its session (opened on ``route_id`` or resumed), its trail."""
        request_id = f"req-{secrets.token_hex(8)}"
        session = self._governed.session(principal, request_id=request_id, route_id=route_id,
                                         session_id=session_id)  # fmt: skip
        with self._governed.trail(principal, session, request_id) as where:
            where["stage"] = "proposal"
            yield session, request_id, where

    def _checked(
        self,
        principal: Principal,
        session: Session,
        request_id: str,
        name: str,
        arguments: Any,
        offered: list[Tool],
    ) -> CheckedProposal:
        """``name(arguments)`` checked against ``offered`` (tools of the pinned route) and
        audited as a proposal, accepted or refused."""
        try:
            checked = check_proposal(offered, name, arguments)
        except InputError as exc:
            shown = arguments if isinstance(arguments, dict) else repr(arguments)
            self._record(principal, session, request_id, ProposalEvent(
                tool=recorded(name), accepted=False, error=recorded(str(exc)),
                arguments=recorded(shown)))  # fmt: skip
            raise
        self._record(principal, session, request_id, ProposalEvent(
            tool=name, accepted=True, arguments=recorded(checked.arguments),
            corpus=checked.corpus))  # fmt: skip
        return checked

    def _tool_of_kind(
        self,
        principal: Principal,
        session: Session,
        request_id: str,
        kind: str,
        arguments: dict[str, str] | None = None,
    ) -> Tool:
        """The pinned route's tool of ``kind``, the call audited as its proposal; a route
        that offers none refuses the call (audited too)."""
        tool = next((t for t in self._offered(session) if t.kind == kind), None)
        event = ProposalEvent(
            tool=tool.name if tool else f"({kind})",
            accepted=tool is not None,
            arguments=recorded(arguments or {}),
            error=None if tool else f"route {session.route_id!r} offers no {kind} tool",
        )
        self._record(principal, session, request_id, event)
        if tool is None:
            raise InputError(f"route {session.route_id!r} offers no {kind} tool in its "
                             "manifest; use a route whose manifest has one")  # fmt: skip
        return tool

    def _offered(self, session: Session) -> list[Tool]:
        route = self._governed.route_of(session)
        manifest = self._governed.sessions.config.manifests.get(route.tool_manifest)
        return offered_tools(manifest, session.retrieval)

    def _record(
        self, principal: Principal, session: Session, request_id: str, event: ProposalEvent
    ) -> None:
        write(self._governed.sessions.store, principal.tenant, event, request_id=request_id,
              session_id=session.session_id)  # fmt: skip
