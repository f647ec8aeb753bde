"""``govrag mcp``: a route's governed tools for any MCP client (the official ``mcp`` SDK).

A thin adapter over two methods of the application API: ``tools/list`` is
:meth:`~govrag.app.Callers.offered_tools` (the route manifest's retrieve, list and metadata
tools, with their JSON schemas as input schemas, and ``search_knowledge`` only while the store
holds something for the tenant), ``tools/call`` is :meth:`~govrag.app.Callers.call_tool` (the
proposal checked against the schema and audited, PEP-gated, the packs validated). A result is
the HTTP API's answer model for the same use case, as MCP structured content, with a short
text rendering beside it.

Identity never comes from the client. Over stdio the server acts for one principal fixed when
it starts (``govrag mcp --as`` or ``--token``; a token's expiry ends its service); over
streamable HTTP each request's bearer token is verified as the HTTP API verifies one
(:mod:`govrag.server.mcp_http`). No argument names a principal, a tenant, a route or a session
(the schemas forbid unknown fields). A :class:`Binding` says whom a call is for, on which
route, and which govrag session it continues; a transport gives one per request (``bind``),
and the first call of a binding without a session opens one pinned to the route, which the
binding's later calls continue.

A refused call (bad arguments, absent or forbidden, denied) is a tool result with
``is_error`` and a one-line message the model may read; it never carries a stack trace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from govrag import __version__
from govrag.app import Callers, CorpusListing, GovernedResult, ToolOutcome
from govrag.errors import GovragError
from govrag.server.responses import Corpora, Document, Searched
from govrag.types import Principal

log = logging.getLogger("govrag.mcp")


@dataclass
class Binding:
    """Whom calls are for, on which route, and the govrag session they continue (``None``:
    the next call opens one on ``route``, and the binding keeps it)."""

    principal: Principal
    route: str | None
    session: str | None = None
    #: When the identity stops being valid (a start-up token's ``exp``); ``None``: never.
    expires_at: datetime | None = None
    #: When ``session`` ends (the ``exp`` of the token that opened it: no session outlives
    #: its token, and a fresh token does not revive it).
    session_until: datetime | None = None

    def expired(self) -> bool:
        return self.expires_at is not None and datetime.now(UTC) >= self.expires_at

    def session_ended(self) -> bool:
        return self.session_until is not None and datetime.now(UTC) >= self.session_until

    def continued_in(self, session_id: str) -> None:
        """Calls continue ``session_id`` from now on (opened by this call, if it is new)."""
        if session_id != self.session:
            self.session, self.session_until = session_id, self.principal.expires_at


#: How a transport binds a request (the SDK's request context) to a :class:`Binding`.
Bind = Callable[[Any], Binding]
#: The one line a call of an expired binding gets.
EXPIRED = "the token this server was started with has expired; restart it with a fresh one"
INTERNAL = "internal error; the server's log has the detail"


def structured(outcome: ToolOutcome) -> tuple[dict[str, Any], str]:
    """A tool's outcome as the HTTP API's answer model (JSON) and a text rendering."""
    if isinstance(outcome, GovernedResult):
        searched = Searched.of(outcome).model_dump(mode="json")
        lines = [f"{c['source_system']}:{c['doc_id']} ({c['corpus']}, score "
                 f"{c['score']:.3f}): {c['text']}" for c in searched["results"]]  # fmt: skip
        hidden = searched["hidden"]
        if hidden.get("present"):
            lines.append(f"Hidden: {json.dumps(hidden, ensure_ascii=False)}")
        denied = [d["corpus"] for d in searched["decisions"] if d["verdict"] != "ALLOW"]
        if denied:
            lines.append(f"Denied: {', '.join(denied)}")
        return searched, "\n".join(lines) or "No passages you may read match."
    if isinstance(outcome, CorpusListing):
        listed = Corpora.of(outcome).model_dump(mode="json")
        text = "\n".join(f"{c['corpus']}: {c['description']}" for c in listed["corpora"])
        return listed, text or "No corpus of this route is open to you."
    described = Document.of(outcome).model_dump(mode="json")
    return described, json.dumps(described["document"], ensure_ascii=False)


def build(app: Callers, bind: Bind) -> Server[Any]:
    """The MCP server of ``app``; ``bind`` says whom each request is for."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        def listed() -> list[types.Tool]:
            binding = bind(ctx)
            if binding.expired():
                raise MCPError(types.INVALID_REQUEST, EXPIRED)
            tools = app.offered_tools(binding.principal, route=binding.route,
                                      session=binding.session)  # fmt: skip
            return [types.Tool(name=t.name, description=t.description,
                               input_schema=t.parameters) for t in tools]  # fmt: skip

        try:
            return types.ListToolsResult(tools=await anyio.to_thread.run_sync(listed))
        except MCPError:
            raise
        except GovragError as exc:  # an unknown route, a session not the caller's
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        except Exception:
            log.exception("listing the tools failed")
            raise MCPError(types.INTERNAL_ERROR, INTERNAL) from None

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        def called() -> types.CallToolResult:
            try:
                binding = bind(ctx)
                if binding.expired():
                    return refused(EXPIRED)
                # A session pins its route: naming another with it is refused.
                outcome = app.call_tool(binding.principal, params.name, params.arguments or {},
                                        route=binding.route, session=binding.session)  # fmt: skip
                binding.continued_in(outcome.session_id)
                content, text = structured(outcome)
                return types.CallToolResult(content=[types.TextContent(text=text)],
                                            structured_content=content)  # fmt: skip
            except GovragError as exc:
                return refused(str(exc))
            except Exception:  # never a stack trace to the client: the log has it
                log.exception("tool call %r failed", params.name)
                return refused(INTERNAL)

        return await anyio.to_thread.run_sync(called)

    return Server("govrag", version=__version__, on_list_tools=list_tools,
                  on_call_tool=call_tool)  # fmt: skip


def refused(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


async def serve_stdio(app: Callers, binding: Binding) -> None:
    """Serve ``binding`` over this process's stdin and stdout until the client leaves (one
    connection, one binding: its calls continue one session)."""
    from mcp.server.stdio import stdio_server

    server = build(app, lambda ctx: binding)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
