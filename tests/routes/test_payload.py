"""Manifest -> LLM payload, and the check of the model's proposals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from govrag.errors import InputError
from govrag.routes.models import Manifest, Retrieval
from govrag.routes.payload import check_proposal, llm_payload, offered_tools
from govrag.types import Principal

RETRIEVE = {
    "type": "object",
    "properties": {"corpus": {"type": "string"}, "query": {"type": "string", "minLength": 1}},
    "required": ["corpus", "query"],
    "additionalProperties": False,
}
MANIFEST = Manifest.model_validate({
    "manifest_id": "bank_v1", "version": "2026.07.1",
    "tools": [
        {"name": "retrieve_documents", "description": "Search one corpus.", "kind": "retrieve",
         "pdp_action": "retrieve_documents", "risk_tier": "medium", "parameters": RETRIEVE},
        {"name": "policy_search", "description": "Search the playbook.", "kind": "retrieve",
         "pdp_action": "policy_search_action", "corpus": "legal-playbook",
         "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
        {"name": "list_corpora", "description": "List corpora.", "kind": "list",
         "pdp_action": "list_corpora_action"},
        {"name": "get_document_metadata", "kind": "metadata", "pdp_action": "metadata_action",
         "parameters": {"type": "object", "properties": {"doc_id": {"type": "string"}},
                        "required": ["doc_id"]}},
    ],
})  # fmt: skip
TOOL_ROUTE = Retrieval(mode="tool", scope=("policy-engine", "legal-playbook"))
PREFETCH = Retrieval(mode="deterministic_prefetch", scope=("policy-engine",))
CLAIMS = Principal(sub="officer-123", email="officer@bank.example", tenant="bank-eu",
                   roles=("corporate_banking_officer",),
                   doc_entitlements=("policy-engine:read",), clearance="confidential")  # fmt: skip


def names(tools: Any) -> list[str]:
    return [t.name for t in tools]


def test_prefetch_routes_strip_retrieve_tools() -> None:
    assert names(offered_tools(MANIFEST, TOOL_ROUTE)) == [
        "retrieve_documents", "policy_search", "list_corpora", "get_document_metadata",
    ]  # fmt: skip
    assert names(offered_tools(MANIFEST, PREFETCH)) == ["list_corpora", "get_document_metadata"]
    assert names(offered_tools(MANIFEST, Retrieval())) == ["list_corpora", "get_document_metadata"]
    assert offered_tools(None, TOOL_ROUTE) == []
    assert names(offered_tools(MANIFEST, TOOL_ROUTE, allowlist=["policy_search"])) == [
        "policy_search"
    ]


def keys_outside_schemas(value: Any) -> set[str]:
    """Every object key of the payload, except inside parameter schemas (whose property
    names, like ``corpus``, are the tool's argument names)."""
    if isinstance(value, list):
        return set().union(*(keys_outside_schemas(v) for v in value))
    if isinstance(value, dict):
        return set(value) | set().union(
            *(keys_outside_schemas(v) for k, v in value.items() if k != "parameters")
        )
    return set()


def test_the_payload_carries_no_claim_and_no_policy_field() -> None:
    payload = llm_payload(
        [{"role": "user", "content": "What's our wire limit for corporate clients in the EU?"}],
        offered_tools(MANIFEST, TOOL_ROUTE),
    )
    text = json.dumps(payload)
    forbidden_keys = {"pdp_action", "risk_tier", "kind", "corpus", "token", "roles",
                      "doc_entitlements", "tenant", "clearance", "sub", "email"}  # fmt: skip
    assert not keys_outside_schemas(payload) & forbidden_keys
    claim_values = [
        CLAIMS.sub, CLAIMS.email, CLAIMS.tenant, *CLAIMS.roles, *CLAIMS.doc_entitlements,
        "confidential", "policy_search_action", "list_corpora_action", "medium",
        "legal-playbook", "permit", "forbid",
    ]  # fmt: skip
    for value in claim_values:
        assert value not in text, value
    assert [t["name"] for t in payload["tools"]][:2] == ["retrieve_documents", "policy_search"]
    assert set(payload["tools"][0]) == {"name", "description", "parameters"}


def test_a_valid_proposal_binds_corpus_and_query() -> None:
    tools = offered_tools(MANIFEST, TOOL_ROUTE)
    arguments = {"corpus": "policy-engine", "query": "wire limits corporate clients EU"}
    p = check_proposal(tools, "retrieve_documents", arguments)
    assert (p.corpus, p.query, p.action) == (
        "policy-engine", "wire limits corporate clients EU", "retrieve_documents",
    )  # fmt: skip
    bound = check_proposal(tools, "policy_search", {"query": "indemnity caps"})
    assert (bound.corpus, bound.action) == ("legal-playbook", "policy_search_action")


@pytest.mark.parametrize(
    ("route", "name", "arguments", "message"),
    [
        (TOOL_ROUTE, "web_search", {"query": "x"}, "'web_search' is not offered"),
        (PREFETCH, "retrieve_documents", {"corpus": "policy-engine", "query": "x"},
         "'retrieve_documents' is not offered"),
        (TOOL_ROUTE, "retrieve_documents", {"query": "x"}, "'corpus' is a required property"),
        (TOOL_ROUTE, "retrieve_documents", {"corpus": "c", "query": ""}, "query: '' should be"),
        (TOOL_ROUTE, "retrieve_documents", {"corpus": 7, "query": "x"}, "corpus: 7 is not of"),
        (TOOL_ROUTE, "retrieve_documents", {"corpus": "c", "query": "x", "tenant": "other"},
         "Additional properties are not allowed ('tenant'"),
        (TOOL_ROUTE, "retrieve_documents", ["policy-engine"], "must be a JSON object"),
        (TOOL_ROUTE, "policy_search", {"query": "x", "corpus": "hr-policies"},
         "bound to corpus 'legal-playbook'"),
        (TOOL_ROUTE, "get_document_metadata", {}, "'doc_id' is a required property"),
    ],
)  # fmt: skip
def test_bad_proposals_are_refused_with_the_field(
    route: Retrieval, name: str, arguments: Any, message: str
) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        check_proposal(offered_tools(MANIFEST, route), name, arguments)
