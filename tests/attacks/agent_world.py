"""A small deployment for attacks on the agent path, and a model that does what it is told.

Two tenants (``t1`` is the deployment's default tenant, ``t2`` another), a tool route over
``policy-engine`` and ``hr-policies``, the seed's three tools plus ``flag_for_review`` (kind
``other``), and a :class:`Scripted` model: an :class:`~govrag.agent.llm.LlmClient` that
returns the replies a test scripts (hostile ones included) and records every payload.
Real store (SQLite or PostgreSQL), real Cedar, real audit log; only the model is scripted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from govrag.agent.llm import LlmReply, Message, ToolCall
from govrag.deployment import Deployment
from govrag.policy.bundle import default_bundle
from govrag.scaffold import RETRIEVAL_MANIFEST

from conftest import PG_APP_ROLE, doc, drop_pg_database, ident, load, new_pg_database

FLAG = {"name": "flag_for_review", "description": "Flag the question for a human reviewer.",
        "parameters": {"type": "object", "properties": {"note": {"type": "string"}},
                       "additionalProperties": False},
        "pdp_action": "flag_for_review", "kind": "other"}  # fmt: skip
MANIFEST = {**RETRIEVAL_MANIFEST, "manifest_id": "agent",
            "tools": [*RETRIEVAL_MANIFEST["tools"], FLAG]}  # fmt: skip
ROUTES = [
    {"route_id": "qa", "tool_manifest": "agent",
     "retrieval": {"mode": "tool", "scope": ["policy-engine", "hr-policies"]}},
]  # fmt: skip
PRINCIPALS = [
    {"sub": "officer", "email": "officer@bank.example", "tenant": "t1",
     "roles": ["reviewer"], "doc_entitlements": ["policy-engine:read"],
     "clearance": "internal"},
    {"sub": "hr", "email": "hr@bank.example", "tenant": "t1",
     "doc_entitlements": ["policy-engine:read", "hr-policies:read"], "clearance": "internal"},
    {"sub": "intruder", "email": "intruder@other.example", "tenant": "t2",
     "doc_entitlements": ["policy-engine:read", "hr-policies:read"], "clearance": "restricted"},
]  # fmt: skip
WIRE = "EU corporate wire limit: EUR 50,000 per day."
RECORDS = [
    ident("officer@bank.example", "A"),
    ident("hr@bank.example", "H"),
    doc("wire-limits", WIRE, ["A", "H"], corpus="policy-engine"),
    doc("leave", "Parental leave is 20 weeks at full pay.", ["H"], corpus="hr-policies"),
]
T2_RECORDS = [
    ident("intruder@other.example", "X"),
    doc("t2-wire", "Tenant two wire limit: EUR 1 per day.", ["X"], corpus="policy-engine"),
    doc("t2-leave", "Tenant two parental leave is one day.", ["X"], corpus="hr-policies"),
]
#: The built-in bundle's rules plus a permit for ``flag_for_review`` (reviewers only).
TOOLS_POLICY = default_bundle().policies + (
    '\npermit (principal, action == Action::"flag_for_review", resource is Tool)\n'
    'when { principal.roles.contains("reviewer") };\n'
)
QUESTION = "What is the EU corporate wire limit?"


class Scripted:
    """An LLM that returns scripted replies in order (the last one again when they run out)."""

    name = "scripted"

    def __init__(self, *replies: LlmReply) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[list[Message], list[dict[str, Any]]]] = []

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> LlmReply:
        self.calls.append((list(messages), list(tools)))
        return self.replies[min(len(self.calls), len(self.replies)) - 1]

    def tool_messages(self, call: int) -> list[dict[str, Any]]:
        """The tool results the model was shown in its ``call``-th payload (0-based)."""
        return [json.loads(m["content"]) for m in self.calls[call][0] if m["role"] == "tool"]


def calls(*proposals: tuple[str, dict[str, Any] | str]) -> LlmReply:
    """A reply proposing tool calls: arguments as an object, or as raw JSON text."""
    out = []
    for i, (name, args) in enumerate(proposals):
        raw = args if isinstance(args, str) else json.dumps(args)
        out.append(ToolCall.parse(f"call-{i}", name, raw))
    return LlmReply(tool_calls=tuple(out))


def answer(text: str = f"{WIRE} [sp:wire-limits#0]") -> LlmReply:
    return LlmReply(text=text)


MakeDeployment = Callable[..., Deployment]


def deployment_factory(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> Iterator[MakeDeployment]:
    """``make(policies=None, **toml)``: a deployment (each call a new process's view) with
    :data:`RECORDS` in ``t1`` and :data:`T2_RECORDS` in ``t2``; ``policies`` is the text of a
    deployment bundle ``agent.tools`` made the default (``[policy] bundle``)."""
    root = tmp_path / "dep"
    (root / "routes").mkdir(parents=True)
    (root / "manifests").mkdir()
    (root / "routes" / "routes.json").write_text(json.dumps(ROUTES))
    (root / "manifests" / "agent.json").write_text(json.dumps(MANIFEST))
    (root / "principals.json").write_text(json.dumps({"principals": PRINCIPALS}))
    store: dict[str, Any] = {"url": f"sqlite:///{root / 'govrag.db'}"}
    dsn = None
    if backend == "postgres":
        dsn = new_pg_database(request.getfixturevalue("pg_cluster"))
        store = {"url": dsn.replace("://postgres", f"://{PG_APP_ROLE}", 1), "admin_url": dsn}
    # The same settings in govrag.toml, for the CLI (``make(**toml)`` overrides them).
    url = store["url"].replace("\\", "/")
    admin = f'admin_url = "{store["admin_url"]}"\n' if "admin_url" in store else ""
    (root / "govrag.toml").write_text(
        f'default_tenant = "t1"\ndefault_route = "qa"\n[store]\nurl = "{url}"\n{admin}'
        '[embedder]\nname = "hash"\ndim = 64\n'
    )
    opened: list[Deployment] = []

    def make(policies: str | None = None, **toml: Any) -> Deployment:
        if policies is not None:
            bundle = root / "policies" / "agent.tools"
            bundle.mkdir(parents=True, exist_ok=True)
            (bundle / "bundle.json").write_text(json.dumps({"name": "agent.tools",
                                                            "version": "v1"}))  # fmt: skip
            (bundle / "rules.cedar").write_text(policies)
            toml = {"policy": {"bundle": "agent.tools"}} | toml
        dep = Deployment.load(root, **toml)
        opened.append(dep)
        return dep

    first = make()
    load(first.store, RECORDS)
    load(first.store, T2_RECORDS, tenant="t2")
    first.store.describe_corpus("t1", "policy-engine", "Payment and wire transfer policies")
    first.store.describe_corpus("t1", "hr-policies", "Leave, pay and disciplinary cases")
    yield make
    for dep in opened:
        dep.close()
    if dsn is not None:
        drop_pg_database(request.getfixturevalue("pg_cluster"), dsn)


def with_model(dep: Deployment, model: Any) -> Deployment:
    """``dep`` answering with ``model`` (set before the orchestrator is built)."""
    dep.__dict__["llm"] = model
    dep.__dict__.pop("orchestrator", None)
    return dep


def events(dep: Deployment, request_id: str, tenant: str = "t1") -> list[Any]:
    return dep.store.audit_events(tenant, request_id=request_id)
