"""What the LLM may see of a manifest, and the check of what it proposes back.

The payload carries each offered tool's name, description and parameter schema, nothing
else: no ``pdp_action``, ``risk_tier``, bound corpus, token, role, entitlement or policy text
(seed 003, step 2). Retrieve tools are offered only on ``tool`` routes; a prefetch route's
model never sees them (and cannot propose them). A proposal is checked against the same
offer: the tool must be offered, its arguments must be plain, bounded JSON (an object nested
at most :data:`MAX_ARGUMENT_DEPTH` deep, at most :data:`MAX_ARGUMENT_CHARS` characters, valid
text without NUL, finite numbers) and validate against its schema, and the corpus is bound
from the tool (if bound) or the arguments. Anything else a model sends is an
:class:`InputError`, i.e. a refused proposal, never a crash further down.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from govrag.errors import InputError
from govrag.routes.models import Manifest, Tool
from govrag.types import Retrieval


def offered_tools(
    manifest: Manifest | None, retrieval: Retrieval, *, allowlist: Sequence[str] | None = None
) -> list[Tool]:
    """The tools the model (or a caller) may propose on this route (and stage, for Pattern
    3), as ``retrieval`` (the session's pin: the route's scope as the caller's tenant has it)
    allows them: a retrieve tool bound to a corpus outside it is not offered, and a manifest's
    own ``enum`` of corpora keeps only the corpora in it, so no schema or refusal names a
    corpus the caller's tenant does not hold."""
    tools = list(manifest.tools if manifest else ())
    if retrieval.mode != "tool":
        tools = [t for t in tools if t.kind != "retrieve"]
    if allowlist is not None:
        tools = [t for t in tools if t.name in set(allowlist)]
    out = []
    for tool in tools:
        if tool.kind == "retrieve" and tool.corpus is not None:
            if tool.corpus in retrieval.scope:
                out.append(tool)
            continue
        named = _corpus_enum(tool)
        if named is None:
            out.append(tool)
            continue
        kept = [c for c in named if c in retrieval.scope]
        if kept:
            properties = tool.parameters["properties"]
            corpus = {**properties["corpus"], "enum": kept}
            parameters = {**tool.parameters, "properties": {**properties, "corpus": corpus}}
            out.append(tool.model_copy(update={"parameters": parameters}))
    return out


def _corpus_enum(tool: Tool) -> list[Any] | None:
    """A retrieve tool's own list of corpora (its ``corpus`` argument's ``enum``), if any."""
    properties = tool.parameters.get("properties")
    corpus = properties.get("corpus") if isinstance(properties, dict) else None
    named = corpus.get("enum") if isinstance(corpus, dict) else None
    return named if tool.kind == "retrieve" and isinstance(named, list) else None


def tool_schemas(tools: Sequence[Tool], *, scope: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The tools array of an LLM request: name, description and parameters only.

    With the pinned route's ``scope``, a retrieve tool not bound to a corpus offers exactly
    those corpora as the ``enum`` of its ``corpus`` argument, so a model has names to choose
    from instead of inventing one (the scope only: never the caller's entitlements, which the
    model must not learn). A proposal outside it is still decided by the PEP (DENY
    ``out_of_scope``), so the enum is guidance, not the control."""
    return [
        {
            "name": t.name,
            "description": t.description,
            "parameters": _scoped(t, scope) if scope else t.parameters,
        }
        for t in tools
    ]


def _scoped(tool: Tool, scope: Sequence[str]) -> dict[str, Any]:
    properties = tool.parameters.get("properties")
    if not isinstance(properties, dict):
        return tool.parameters
    corpus = properties.get("corpus")
    if tool.kind != "retrieve" or tool.corpus is not None or not isinstance(corpus, dict):
        return tool.parameters
    named = corpus.get("enum")  # a manifest's own list narrows the scope further
    offered = [c for c in scope if not isinstance(named, list) or c in named]
    return {**tool.parameters,
            "properties": {**properties, "corpus": {**corpus, "enum": offered}}}  # fmt: skip


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


#: Deepest nesting of a proposal's arguments (the object itself is level 1).
MAX_ARGUMENT_DEPTH = 16
#: Longest a proposal's arguments may be, in characters of their JSON.
MAX_ARGUMENT_CHARS = 16_384


def check_arguments(name: str, arguments: Any) -> None:
    """Refuse arguments that are not plain, bounded JSON (see the module docstring). Walks
    the value without recursion, so no nesting depth can exhaust the stack."""
    if not isinstance(arguments, dict):
        raise InputError(f"arguments of {name!r} must be a JSON object")
    stack: list[tuple[Any, str, int]] = [(arguments, "(arguments)", 1)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            raise InputError(f"arguments of {name!r}: {where}: nested deeper than "
                             f"{MAX_ARGUMENT_DEPTH} levels; send flat arguments")  # fmt: skip
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InputError(f"arguments of {name!r}: {where}: a key is not a string")
                _check_string(name, f"{where} key", key)
                shown = key if len(key) <= 32 else f"{key[:32]}..."
                stack.append((item, shown if where == "(arguments)" else f"{where}.{shown}",
                              depth + 1))  # fmt: skip
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_string(name, where, value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"arguments of {name!r}: {where}: {value} is not a finite number")
        elif value is not None and not isinstance(value, bool | int | float):
            raise InputError(f"arguments of {name!r}: {where}: a {type(value).__name__} is "
                             "not a JSON value")  # fmt: skip
    size = len(json.dumps(arguments, ensure_ascii=False))
    if size > MAX_ARGUMENT_CHARS:
        raise InputError(f"arguments of {name!r} are {size:,} characters long; the limit is "
                         f"{MAX_ARGUMENT_CHARS:,}: send shorter arguments")  # fmt: skip


def _check_string(name: str, where: str, value: str) -> None:
    if "\x00" in value:
        raise InputError(f"arguments of {name!r}: {where}: contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"arguments of {name!r}: {where}: is not valid Unicode text (a lone "
                         "surrogate); send UTF-8 text") from None  # fmt: skip


def check_proposal(tools: Sequence[Tool], name: str, arguments: Any) -> CheckedProposal:
    """Validate a model's proposal against the offered tools; :class:`InputError` otherwise."""
    from jsonschema import Draft202012Validator

    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        offered = ", ".join(repr(t.name) for t in tools) or "none"
        shown = repr(name[:64] + ("..." if len(name) > 64 else ""))
        raise InputError(f"tool {shown} is not offered on this route (offered: {offered})")
    check_arguments(name, arguments)
    errors = sorted(
        Draft202012Validator(tool.parameters).iter_errors(arguments), key=lambda e: list(e.path)
    )
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.path) or "(arguments)"
        # jsonschema quotes the whole value ("'...' is too long"): a long one is named by
        # the rule it breaks instead, so the refusal stays short for the model and the log.
        rule = f"{first.validator} {first.validator_value!r}"[:200]
        said = first.message if len(first.message) <= 300 else f"breaks the rule {rule}"
        raise InputError(f"arguments of {name!r}: {where}: {said}")
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
