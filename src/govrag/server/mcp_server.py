"""``govrag mcp``: a route's governed tools for any MCP client (the official ``mcp`` SDK).

A thin adapter over two methods of the application API: ``tools/list`` is
:meth:`~govrag.app.Govrag.offered_tools` (the route manifest's retrieve, list and metadata
tools, with their JSON schemas as input schemas, and ``search_knowledge`` only while the store
holds something for the tenant), ``tools/call`` is :meth:`~govrag.app.Govrag.call_tool` (the
proposal checked against the schema and audited, PEP-gated, the packs validated). A result is
the HTTP API's answer model for the same use case, as MCP structured content, with a short
text rendering beside it.

Identity never comes from the client: over stdio the server acts for one principal fixed when
it starts (``govrag mcp --as`` or ``--token``). No argument names a principal, a tenant, a
route or a session (the schemas forbid unknown fields). The route is the server's
(``--route``, else the deployment's default); the first call opens a govrag session pinned to
it, and the connection's later calls continue that session.

A refused call (bad arguments, absent or forbidden, denied) is a tool result with
``is_error`` and a one-line message the model may read; it never carries a stack trace.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from govrag import __version__
from govrag.app import CorpusListing, GovernedResult, Govrag, ToolOutcome
from govrag.errors import GovragError
from govrag.server.responses import Corpora, Document, Searched
from govrag.types import Principal

log = logging.getLogger("govrag.mcp")


@dataclass
class Binding:
    """Whom one server acts for, on which route, and the govrag session its calls continue
    (opened by the first call: one stdio connection, one session)."""

    principal: Principal
    route: str | None
    session: str | None = None


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


def build(app: Govrag, binding: Binding) -> Server[Any]:
    """The MCP server of ``app`` for ``binding``."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        def listed() -> list[types.Tool]:
            tools = app.offered_tools(binding.principal, route=binding.route,
                                      session=binding.session)  # fmt: skip
            return [types.Tool(name=t.name, description=t.description,
                               input_schema=t.parameters) for t in tools]  # fmt: skip

        return types.ListToolsResult(tools=await anyio.to_thread.run_sync(listed))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        def called() -> types.CallToolResult:
            try:
                # A session pins its route: the route goes only with the first call.
                outcome = app.call_tool(binding.principal, params.name, params.arguments or {},
                                        route=None if binding.session else binding.route,
                                        session=binding.session)  # fmt: skip
                binding.session = outcome.session_id
                content, text = structured(outcome)
                return types.CallToolResult(content=[types.TextContent(text=text)],
                                            structured_content=content)  # fmt: skip
            except GovragError as exc:
                return refused(str(exc))
            except Exception:  # never a stack trace to the client: the log has it
                log.exception("tool call %r failed", params.name)
                return refused("internal error; the server's log has the detail")

        return await anyio.to_thread.run_sync(called)

    return Server("govrag", version=__version__, on_list_tools=list_tools,
                  on_call_tool=call_tool)  # fmt: skip


def refused(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


async def serve_stdio(app: Govrag, principal: Principal, route: str | None) -> None:
    """Serve ``principal`` over this process's stdin and stdout until the client leaves."""
    from mcp.server.stdio import stdio_server

    server = build(app, Binding(principal, route))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
