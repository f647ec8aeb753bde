"""``govrag init``: a starter deployment a newcomer can search within a minute.

``scaffold`` writes the files a deployment needs (settings, one principal, one tool route
over the corpora named, seed 003's three tools and the audit signing key) and nothing at all
when an argument could not make a working deployment: a half-written directory would fail
later, far from the mistake. Beside them it puts ``sample.jsonl``, the bundled sample's
documents of those corpora with the identities and groups that read them, so the first
``govrag ingest`` / ``search`` / ``ask`` has something true to find before the operator's own
data is wired in; it is a separate file the operator ingests or deletes, never loaded behind
their back.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from govrag.audit.keys import generate_key
from govrag.errors import ConfigError, InputError, describe_validation
from govrag.settings import CONFIG_FILE, PRINCIPALS_FILE, AuditSettings
from govrag.types import Principal

#: The tools every scaffolded deployment offers (seed 003's three).
RETRIEVAL_MANIFEST: dict[str, Any] = {
    "manifest_id": "retrieval",
    "version": "1",
    "tools": [
        {
            "name": "retrieve_documents",
            "description": "Search one corpus for passages relevant to a query.",
            "parameters": {
                "type": "object",
                "properties": {
                    "corpus": {"type": "string", "description": "A corpus id from list_corpora"},
                    # Bounded: servers that constrain tool arguments by their schema (llama.cpp)
                    # then cannot generate a runaway query.
                    "query": {
                        "type": "string",
                        "maxLength": 256,
                        "description": "What to look for",
                    },
                },
                "required": ["corpus", "query"],
                "additionalProperties": False,
            },
            "pdp_action": "retrieve_documents",
            "risk_tier": "low",
            "kind": "retrieve",
        },
        {
            "name": "list_corpora",
            "description": "List the corpora you may search, with their descriptions.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            "pdp_action": "list_corpora",
            "kind": "list",
        },
        {
            "name": "get_document_metadata",
            "description": "Title, source and dates of one document.",
            "parameters": {
                "type": "object",
                "properties": {
                    "doc_id": {"type": "string", "maxLength": 256},
                    # Outside govrag's agent loop (MCP) a document is named by both.
                    "source_system": {
                        "type": "string",
                        "maxLength": 128,
                        "description": "The source_system of a result",
                    },
                },
                "required": ["doc_id"],
                "additionalProperties": False,
            },
            "pdp_action": "get_document_metadata",
            "kind": "metadata",
        },
    ],
}


#: The sample ``scaffold`` writes into the deployment (README Quickstart ingests it).
SAMPLE_FILE = "sample.jsonl"


def sample_records(corpora: tuple[str, ...]) -> str:
    """The bundled sample (``govrag/data/sample.jsonl``) cut to ``corpora``: every identity
    and group record, and the documents of those corpora; empty when no document is in them.
    Documents of other corpora are left out because no route of the new deployment could
    search them (ingest would warn about each)."""
    bundled = resources.files("govrag") / "data" / SAMPLE_FILE
    kept: list[str] = []
    documents = 0
    for line in bundled.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["type"] == "document":
            if record["corpus"] not in corpora:
                continue
            documents += 1
        kept.append(line)
    return "\n".join(kept) + "\n" if documents else ""


def _check_scaffold(*, embedder: str, tenant: str, corpora: tuple[str, ...]) -> None:
    """The arguments of :func:`scaffold`, checked as the files written from them would be."""
    from govrag.embed import available_embedders
    from govrag.types import Retrieval

    if embedder not in available_embedders():
        raise InputError(f"--embedder {embedder!r} is unknown; use one of: "
                         f"{', '.join(available_embedders())}")  # fmt: skip
    try:
        Principal(sub="ana", email="ana@bank.example", tenant=tenant)
    except ValidationError as exc:
        raise InputError(f"--tenant {tenant!r}: {describe_validation(exc)}") from exc
    if any(ch < " " or ch == "\x7f" for ch in tenant):
        raise InputError(f"--tenant {tenant!r} holds a control character; use a printable id")
    try:
        Retrieval(mode="tool", scope=corpora)
    except ValidationError as exc:
        raise InputError(
            f"--corpus: {describe_validation(exc)} (a corpus id is letters, digits and "
            "'_.:-', starting with a letter or digit)"
        ) from exc


def scaffold(
    directory: Path,
    *,
    embedder: str,
    tenant: str = "default",
    corpora: tuple[str, ...] = (),
    force: bool = False,
) -> list[Path]:
    """Write a starter deployment: ``govrag.toml``, ``principals.json``, one tool route over
    ``corpora`` (``routes/search.json``), its manifest, the audit signing key and, when the
    bundled sample has documents in ``corpora``, :data:`SAMPLE_FILE`. Never overwrites without
    force, and never replaces an existing signing key; writes nothing at all when an argument
    could not make a working deployment."""
    _check_scaffold(embedder=embedder, tenant=tenant, corpora=corpora)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / CONFIG_FILE
    principals = directory / PRINCIPALS_FILE
    route = directory / "routes" / "search.json"
    manifest = directory / "manifests" / "retrieval.json"
    sample_text = sample_records(corpora)
    sample = directory / SAMPLE_FILE
    for path in (config, principals, route, manifest, *([sample] if sample_text else [])):
        if path.exists() and not force:
            raise ConfigError(f"{path} already exists; pass --force to overwrite it")
    route.parent.mkdir(exist_ok=True)
    manifest.parent.mkdir(exist_ok=True)
    route.write_text(
        json.dumps(
            {
                "route_id": "search",
                "intent": "search",
                "tool_manifest": "retrieval",
                "retrieval": {"mode": "tool", "scope": list(corpora)},
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    manifest.write_text(json.dumps(RETRIEVAL_MANIFEST, indent=2) + "\n", encoding="utf-8")
    config.write_text(
        f"""# govrag deployment settings.
# Environment variables override them: GOVRAG_<SECTION>__<KEY>.
default_tenant = {json.dumps(tenant)}
default_route = "search"       # routes/search.json; `govrag search --route ID` picks another

[store]
url = "sqlite:///govrag.db"   # relative to this directory
# url = "postgresql://govrag_app@db.internal:5432/govrag"   # with pip install 'govrag[postgres]'
# admin_url = "postgresql://govrag_owner@db.internal:5432/govrag"   # see docs/scaling.md
index_dir = "index"           # derived search indexes; rebuild with `govrag index rebuild`

[embedder]
name = {json.dumps(embedder)}   # "minilm" (semantic, govrag[semantic]), "hash" (not semantic) or
                    # "openai" (a server: base_url, model, api_key_env; see the README)
dim = 384

[search]
rrf_k = 60
lexical_weight = 1.0
vector_weight = 1.0
fusion_depth = 100            # keyword candidates a hybrid ranking fuses
vector_fusion_depth = 20      # vector candidates it fuses (deeper: slower on PostgreSQL)
default_top_k = 10
hidden_marker = true          # report (content-free) that an unreadable relevant item exists

[ingest]
chunk_tokens = 300
section_tokens = 1200
max_text_bytes = 2000000

[policy]
bundle = "pgar.retrieval.corpus"   # built-in: needs "<corpus>:read" in doc_entitlements
timeout_s = 2.0

[audit]
# Signed checkpoints of each tenant's audit chain head, outside the database (docs/audit.md).
checkpoint_dir = "audit-checkpoints"   # better: storage the database's admins cannot write
signing_key = "keys/audit-signing-key.pem"   # Ed25519, mode 0600; written by govrag init
# verify_key = "keys/audit-signing-key.pub"   # an examiner's copy of the public key
# verify_keys = ["keys/audit-keyring"]   # retired public keys (govrag audit keygen --rotate)
checkpoint_every_events = 1000   # a checkpoint after this many events of a tenant ...
checkpoint_every_seconds = 30.0   # ... or at its first event this long after the last one

# Describe corpora for the model (shown by list_corpora) and classify them as a whole:
# [corpora.policy-engine]
# description = "Bank policies: limits, approvals, controls"
# classification = "internal"     # callers below this clearance are denied the corpus
# tenants = ["bank"]              # only these tenants have it (default: each tenant has its own)
""",
        encoding="utf-8",
    )
    principals.write_text(
        json.dumps(
            {
                "principals": [
                    {
                        "sub": "ana",
                        "email": "ana@bank.example",
                        "tenant": tenant,
                        "roles": ["analyst"],
                        "doc_entitlements": [f"{c}:read" for c in corpora],
                        "clearance": "internal",
                    }
                ]
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    written = [config, principals, route, manifest]
    if sample_text:
        sample.write_text(sample_text, encoding="utf-8")
        written.append(sample)
    key = directory / AuditSettings().signing_key
    if not key.exists():
        generate_key(key)
        written.append(key)
    return written
