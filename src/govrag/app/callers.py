"""What a caller does: governed search, answers, sessions, tools, clicks and memory.

:class:`Callers` is what an edge serving callers receives (the HTTP and MCP servers, the
CLI's ``search`` and ``ask``): every member acts for a verified
:class:`~govrag.types.Principal` and decides what it may see inside the call (the route, the
policy gate, the store's ACL filter). Nothing here reads the audit log or acts without a
principal: replay is the examiner's (:mod:`govrag.app.examiners`, in the examiner's own
tenant) and the operator's (:mod:`govrag.app.operators`), never a caller's.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from govrag.app.records import Memory, SessionInfo
from govrag.deployment import Deployment
from govrag.errors import InputError, require_text
from govrag.types import MetadataFilter, Principal, Strategy, TimeRange, VerifiedToken

if TYPE_CHECKING:
    from govrag.agent.answer import Answer
    from govrag.agent.listings import CorpusListing, DocumentListing
    from govrag.agent.retrieve import GovernedResult
    from govrag.agent.tool_calls import ToolOutcome
    from govrag.routes.models import Tool
    from govrag.writeback.models import AdmissionResult, WriteBackCandidate


class Callers:
    """The use cases of callers of one opened deployment (see the module docstring)."""

    def __init__(self, deployment: Deployment) -> None:
        self._dep = deployment

    def verify_token(self, token: str | None) -> VerifiedToken:
        """The verified claims of a bearer token (``[auth]``; extra ``server``). Any refusal
        is an :class:`AuthError` whose message is the same fixed line (``fault`` says why,
        for the log); identity never comes from anywhere else on a served deployment."""
        return self._dep.tokens.verify(token)

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
        as_of: datetime | None = None,
        time_range: TimeRange | None = None,
        min_score: float = 0.0,
    ) -> GovernedResult:
        """A governed retrieve: each corpus (default: the route's scope) is decided by the
        policy gate and audited before it is searched; results are only what ``principal``
        may read. Defaults come from ``[search]``. ``filters``, ``as_of`` (versions in
        effect then) and ``time_range`` only narrow; ``min_score`` drops weaker hits."""
        require_text(route=route, session=session)
        if corpora is not None and not corpora:
            # An empty list is more likely a caller's bug than a wish for the whole scope.
            raise InputError("corpora is empty: name at least one corpus, or pass None for "
                             "every corpus in the route's scope")  # fmt: skip
        s = self._dep.settings.search
        return self._dep.governed.search(
            principal,
            query,
            corpora=tuple(corpora) if corpora is not None else None,
            route_id=route,
            session_id=session,
            strategy=strategy or s.default_strategy,
            top_k=s.default_top_k if top_k is None else top_k,
            filters=tuple(filters),
            as_of=as_of,
            time_range=time_range,
            min_score=min_score,
        )

    def ask(
        self,
        principal: Principal,
        question: str,
        *,
        route: str | None = None,
        session: str | None = None,
        text: str | None = None,
        strategy: Strategy | None = None,
    ) -> Answer:
        """A grounded, cited answer or an abstention, on ``route`` (default: the deployment's
        ``default_route``); ``text`` is caller-supplied material to work on, never evidence.
        ``strategy``: the retrieves' (default ``[search] default_strategy``)."""
        require_text(route=route, session=session)
        return self._dep.orchestrator.ask(principal, question, route_id=route,
                                          session_id=session, text=text,
                                          strategy=strategy)  # fmt: skip

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
        s = self._dep.settings.search
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
        s = self._dep.settings.search
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
