"""Examples for the OpenAPI schema: one request and one answer per route, as a real run of
the scaffolded deployment gives them (ids shortened). A test validates each against its model,
so an example cannot drift from what the API answers.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict


def config(example: dict[str, Any]) -> ConfigDict:
    """The configuration of a request or answer model: unknown fields refused, immutable, and
    ``example`` in its schema."""
    return ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [example]})


_CHUNK: dict[str, Any] = {
    "doc_id": "wire-limits", "chunk_id": "sp:wire-limits#0", "corpus": "policy",
    "source_system": "sp", "text": "The EU corporate wire limit is EUR 50,000 per day.",
    "score": 0.0328, "token_count": 14, "origin": "source", "writeback": None,
}  # fmt: skip
_PACK: dict[str, Any] = {
    "context_pack_id": "pack-79c804f75b2a8a28", "corpus": "policy", "chunks": [_CHUNK],
    "policy_version": "pgar.retrieval.corpus/v3",
    "ranker_version": "deterministic-v1(trust=0.2,dup=0.9,per_doc=2)",
    "token_counter": "words/6", "pack_token_count": 14, "token_budget": 2000,
    "dropped_for_budget": 0, "withheld": {"count": 0, "reasons": {}},
    "hidden": {"present": False, "sources": []}, "search_truncated": False,
    "rights_checks": [{"source_system": "sp", "checker": "stored", "status": "ok",
                       "checked": 1, "withheld": 0}],
    "cache_hit": False, "origin": "source", "unchecked": [],
}  # fmt: skip
_DECISION: dict[str, Any] = {
    "audit_id": "aud-bc74fa1f143f158e", "corpus": "policy", "verdict": "ALLOW",
    "policy_version": "pgar.retrieval.corpus/v3", "reason": "allowed", "kind": "retrieve",
    "action": "retrieve_documents",
}  # fmt: skip
_VALIDATION: dict[str, Any] = {
    "validation_passed": True, "abstain": False, "reason": None, "scope_violations": [],
    "scope_violation_count": 0,
    "sufficiency": {"chunks": 1, "top_score": 0.0328, "query_coverage": 1.0, "min_chunks": 1,
                    "min_top_score": 0.0, "min_query_coverage": 0.3, "sufficient": True},
    "attribution": [{"chunk_id": "sp:wire-limits#0", "doc_id": "wire-limits",
                     "corpus": "policy", "source_system": "sp",
                     "context_pack_id": "pack-79c804f75b2a8a28"}],
}  # fmt: skip
_IDS = {"request_id": "req-b90857515589bb69", "session_id": "ses-4b69f20413031cf8",
        "route_id": "search"}  # fmt: skip

SEARCHED: dict[str, Any] = _IDS | {
    "query": "wire limit", "strategy": "hybrid", "packs": [_PACK], "results": [_CHUNK],
    "hidden": {"present": False, "sources": []}, "truncated": False,
    "decisions": [_DECISION], "validation": _VALIDATION,
}  # fmt: skip
ANSWERED: dict[str, Any] = _IDS | {
    "response_id": "resp-0c2b7d9e41f3a865", "pattern": "1",
    "answer": "The EU corporate wire limit is EUR 50,000 per day. [sp:wire-limits#0]",
    "abstained": False, "reason": None, "llm_fault": None,
    "grounded": True, "flagged": False,
    "citations": [{k: _CHUNK[k] for k in ("doc_id", "chunk_id", "corpus", "source_system",
                                          "origin", "writeback")}],
    "hidden": {"present": False, "sources": [], "hint": None},
    "decisions": [_DECISION], "packs": [_PACK], "validation": _VALIDATION,
    "claims": {"all_supported": True, "unsupported": [], "claims": [
        {"sentence": "The EU corporate wire limit is EUR 50,000 per day. [sp:wire-limits#0]",
         "supported": True, "chunk_id": "sp:wire-limits#0", "overlap": 1.0,
         "cited": ["sp:wire-limits#0"], "unknown": [], "missing": [], "reason": None,
         "asserts": True}]},
    "trace": {"pattern": "1", "mode": "tool", "llm": "extractive", "steps": 3,
              "validation_passed": [True], "scope_violations": 0},
}  # fmt: skip
SESSION: dict[str, Any] = {
    "session_id": "ses-4b69f20413031cf8", "sub": "ana", "route_id": "search", "mode": "tool",
    "scope": ["policy"], "route_table_version": "sha256:3f1c0de2a9b8",
    "expires_at": "2026-12-02T10:00:00.000000Z",
}  # fmt: skip
CORPORA: dict[str, Any] = _IDS | {
    "corpora": [{"corpus": "policy", "description": "Bank policies and procedures."}]
}
DOCUMENT: dict[str, Any] = _IDS | {
    "document": {"source_system": "sp", "external_id": "wire-limits", "corpus": "policy",
                 "title": "Wire transfer limits", "classification": "internal",
                 "updated_at": "2026-11-30T09:00:00Z", "chunks": 1},
    "decision": _DECISION | {"kind": "metadata", "action": "get_document_metadata"},
}  # fmt: skip
ADMISSION: dict[str, Any] = {"admitted": True, "id": "wb-2c1f0e9a7d3b5c40", "reason": "admitted"}
REPLAYED: dict[str, Any] = {
    "request_id": "req-b90857515589bb69", "tenant": "bank",
    "who": {"sub": "ana", "session_id": "ses-4b69f20413031cf8", "route_id": "search",
            "retrieval": {"mode": "tool", "scope": ["policy"]},
            "token_exp": "2026-12-02T10:00:00.000000Z"},
    "proposed": [{"tool": "retrieve_documents", "corpus": "policy", "query": "wire limit"}],
    "decisions": [{"audit_id": "aud-bc74fa1f143f158e", "resource": "policy", "verdict": "ALLOW",
                   "reason": "allowed", "policy_version": "pgar.retrieval.corpus/v3",
                   "action": "retrieve_documents", "kind": "retrieve",
                   "tool": "retrieve_documents", "query": "wire limit"}],
    "verdict_before_search": True,
    "model_saw": [{"context_pack_id": "pack-79c804f75b2a8a28", "corpus": "policy",
                   "origin": "source", "policy_version": "pgar.retrieval.corpus/v3",
                   "ranker_version": "deterministic-v1(trust=0.2,dup=0.9,per_doc=2)",
                   "chunks": [{"chunk_id": "sp:wire-limits#0", "doc_id": "wire-limits",
                               "score": 0.0328, "origin": "source"}],
                   "withheld": {"count": 0, "reasons": {}}, "hidden_marker": None,
                   "unchecked": [], "validation_passed": True}],
    "llm_calls": [], "delivered": None, "chain_ok": True, "incidents": [], "error": None,
    "unrecognised": [],
}  # fmt: skip
VERIFIED: dict[str, Any] = {
    "ok": True, "key_id": "ed25519:9f6a25350611c15995d006626b7b7b7e", "findings": [],
    "warnings": [],
    "tenants": [{"tenant": "bank", "ok": True, "events": 22, "head_seq": 22,
                 "head_hash": "3b089133add0181e408b7d83f0f6b96ed07cb5a72ebee53af3f8499466f97192",
                 "broken": None, "tenant_row": True, "checkpoints": 1, "findings": [],
                 "warnings": [], "checkpoint": {"head_seq": 22, "behind": 0, "age_s": 9.9}}],
}  # fmt: skip
READY: dict[str, Any] = {"ready": True, "checks": {"store": "ok", "routes": "ok", "policy": "ok"}}

SEARCH_BODY: dict[str, Any] = {"query": "wire transfer limit", "corpora": ["policy"],
                               "strategy": "hybrid", "top_k": 5}  # fmt: skip
RETRIEVE_BODY: dict[str, Any] = {
    "tool": "retrieve_documents", "arguments": {"query": "wire limit", "corpus": "policy"},
    "session": "ses-4b69f20413031cf8",
}  # fmt: skip
ASK_BODY: dict[str, Any] = {"question": "What is the EU corporate wire limit?"}
SESSION_BODY: dict[str, Any] = {"route": "search"}
CLICK_BODY: dict[str, Any] = {"source_system": "sp", "external_id": "wire-limits"}
MEMORY_BODY: dict[str, Any] = {
    "session": "ses-4b69f20413031cf8", "source_turn_id": "turn-7", "gate": "USER_CONFIRMED",
    "content": "Ana prefers summaries in German.", "confidence": 0.9,
    "expires_at": "2026-12-09T00:00:00Z",
}  # fmt: skip
