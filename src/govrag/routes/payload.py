"""What the LLM may see of a manifest, and the check of what it proposes back.

The payload carries each offered tool's name, description and parameter schema, nothing
else: no ``pdp_action``, ``risk_tier``, bound corpus, token, role, entitlement or policy text
(seed 003, step 2). Retrieve tools are offered only on ``tool`` routes; a prefetch route's
model never sees them (and cannot propose them). A proposal is checked against the same
offer: the tool must be offered, its arguments must validate against its schema, and the
corpus is bound from the tool (if bound) or the arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from govrag.errors import InputError
from govrag.routes.models import Manifest, Retrieval, Tool


def offered_tools(
    manifest: Manifest | None, retrieval: Retrieval, *, allowlist: Sequence[str] | None = None
) -> list[Tool]:
    """The tools the model may propose on this route (and stage, for Pattern 3)."""
    tools = list(manifest.tools if manifest else ())
    if retrieval.mode != "tool":
        tools = [t for t in tools if t.kind != "retrieve"]
    if allowlist is not None:
        tools = [t for t in tools if t.name in set(allowlist)]
    return tools


def tool_schemas(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The tools array of an LLM request: name, description and parameters only."""
    return [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]


def llm_payload(messages: Sequence[dict[str, str]], tools: Sequence[Tool]) -> dict[str, Any]:
    """An LLM request: messages and tool schemas, nothing about the caller or the policy."""
    payload: dict[str, Any] = {"messages": [dict(m) for m in messages]}
    if tools:
        payload["tools"] = tool_schemas(tools)
    return payload


@dataclass(frozen=True)
class CheckedProposal:
    tool: Tool
    arguments: dict[str, Any]
    #: The corpus the call targets (``None`` for a tool that touches no corpus).
    corpus: str | None
    query: str

    @property
    def action(self) -> str:
        return self.tool.pdp_action


def check_proposal(tools: Sequence[Tool], name: str, arguments: Any) -> CheckedProposal:
    """Validate a model's proposal against the offered tools; :class:`InputError` otherwise."""
    from jsonschema import Draft202012Validator

    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        offered = ", ".join(repr(t.name) for t in tools) or "none"
        raise InputError(f"tool {name!r} is not offered on this route (offered: {offered})")
    if not isinstance(arguments, dict):
        raise InputError(f"arguments of {name!r} must be a JSON object")
    errors = sorted(
        Draft202012Validator(tool.parameters).iter_errors(arguments), key=lambda e: list(e.path)
    )
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.path) or "(arguments)"
        raise InputError(f"arguments of {name!r}: {where}: {first.message}")
    corpus = arguments.get("corpus")
    if tool.corpus is not None:
        if corpus is not None and corpus != tool.corpus:
            raise InputError(
                f"tool {name!r} is bound to corpus {tool.corpus!r}; it cannot search {corpus!r}"
            )
        corpus = tool.corpus
    if tool.kind == "retrieve" and not isinstance(corpus, str):
        raise InputError(f"tool {name!r} needs a corpus: give the 'corpus' argument")
    query = arguments.get("query", "")
    return CheckedProposal(
        tool=tool,
        arguments=dict(arguments),
        corpus=corpus if isinstance(corpus, str) else None,
        query=query if isinstance(query, str) else "",
    )
