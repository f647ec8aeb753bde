"""The write-back overlay in the gateway: when it joins, its own memory pack, how it merges,
and the cache bypass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from govrag.gateway import ContextPack, Gateway
from govrag.gateway.cache import ResultCache
from govrag.store.protocol import KnowledgeStore
from govrag.types import (
    NO_CORPUS,
    ChunkOrigin,
    MetadataFilter,
    QueryExpansion,
    SearchRequest,
    Strategy,
)
from govrag.writeback import (
    META_KEYS,
    AdmissionGate,
    ControlledWriteBackStore,
    RetrievalScope,
    WriteBackCandidate,
)

from conftest import doc, ident, load, principal

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ANA = principal("ana@x.example")
SESSION = "ses-1"


@pytest.fixture
def bank(sqlite_store: KnowledgeStore) -> KnowledgeStore:
    load(sqlite_store, [ident("ana@x.example", "A"),
                        doc("limits", "wire transfer limits per day are EUR 50,000", ["A"]),
                        doc("faq", "wire transfer questions and answers", ["*"])])  # fmt: skip
    return sqlite_store


def memory(content: str = "the customer confirmed the wire transfer limit is EUR 20,000",
           **kw: object) -> ControlledWriteBackStore:  # fmt: skip
    store = ControlledWriteBackStore.enabled(
        allowed_agents=["agent-1"], tenants={"t1"}, clock=lambda: NOW
    )
    candidate = WriteBackCandidate(
        scope=RetrievalScope("t1", SESSION), source_turn_id="turn-7", agent_id="agent-1",
        gate=AdmissionGate.USER_CONFIRMED, content=content, confidence=0.9,
        expires_at=NOW + timedelta(days=1),
    )  # fmt: skip
    assert store.admit(candidate).admitted
    return store


def memory_pack(
    gateway: Gateway, request: SearchRequest, session: str = SESSION
) -> ContextPack | None:
    corpus = gateway.retrieve(ANA, "main", request, policy_version="p/1", session_id=session)
    assert all(c.origin is ChunkOrigin.SOURCE for c in corpus.chunks)  # never memory in here
    return gateway.memory(ANA, request, policy_version="p/1", session_id=session,
                          packed=corpus.chunks)  # fmt: skip


KEYWORD = SearchRequest(query="wire transfer limit", strategy=Strategy.KEYWORD, top_k=5)


@pytest.mark.parametrize(
    ("request_", "session", "joins"),
    [
        (KEYWORD, SESSION, True),
        (KEYWORD.model_copy(update={"strategy": Strategy.SEMANTIC}), SESSION, False),
        (KEYWORD.model_copy(update={"strategy": Strategy.HYBRID}), SESSION, False),
        (KEYWORD.model_copy(update={"corpora": ("main",)}), SESSION, False),  # named source
        (KEYWORD, "ses-2", False),  # another session's scope is empty
    ],
    ids=["keyword", "semantic", "hybrid", "named-sources", "other-session"],
)
def test_the_overlay_joins_only_eligible_requests(
    bank: KnowledgeStore, request_: SearchRequest, session: str, joins: bool
) -> None:
    gateway = Gateway(bank, overlay=memory())
    assert (memory_pack(gateway, request_, session) is not None) is joins


@pytest.mark.parametrize("expansion", list(QueryExpansion))
def test_every_expansion_value(bank: KnowledgeStore, expansion: QueryExpansion) -> None:
    gateway = Gateway(bank, overlay=memory())
    request = KEYWORD.model_copy(update={"query_expansion": expansion})
    assert (memory_pack(gateway, request) is not None) is (expansion is QueryExpansion.NONE)


def test_a_disabled_store_never_joins(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank, overlay=ControlledWriteBackStore.disabled())
    assert memory_pack(gateway, KEYWORD) is None
    assert Gateway(bank).memory(ANA, KEYWORD, policy_version="p/1", session_id=SESSION) is None


def test_the_memory_pack_is_labelled_with_no_corpus_and_carries_the_seed_metadata(
    bank: KnowledgeStore,
) -> None:
    gateway = Gateway(bank, overlay=memory())
    pack = memory_pack(gateway, KEYWORD)
    assert pack is not None
    assert pack.origin is ChunkOrigin.SESSION_MEMORY and pack.corpus == NO_CORPUS
    assert pack.rights_checks == () and pack.ranker_version.startswith("writeback")
    [chunk] = pack.chunks
    assert chunk.origin is ChunkOrigin.SESSION_MEMORY and chunk.corpus == NO_CORPUS
    assert chunk.source_system == "writeback" and chunk.chunk_id.startswith("writeback:")
    assert chunk.writeback is not None and set(chunk.writeback) == set(META_KEYS)
    assert chunk.writeback["writeback.gate"] == "USER_CONFIRMED"
    assert chunk.writeback["writeback.sourceTurnId"] == "turn-7"
    assert chunk.writeback["writeback.agentId"] == "agent-1"
    assert chunk.writeback["writeback.confidence"] == "0.9"
    assert chunk.writeback["writeback.expiresAt"] == "2026-12-01T12:00:00Z"
    assert chunk.writeback["writeback.supersedes"] == "none"
    assert [(u.chunk_id, u.reason) for u in pack.unchecked] == [(chunk.chunk_id,
                                                                 "session_memory")]  # fmt: skip


def test_memory_that_repeats_a_packed_chunk_is_dropped(bank: KnowledgeStore) -> None:
    """Merged by score and deduplicated together: the rights-checked corpus chunk stays."""
    gateway = Gateway(bank, overlay=memory("wire transfer limits per day are EUR 50,000"))
    corpus = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1", session_id=SESSION)
    assert "limits" in [c.doc_id for c in corpus.chunks]
    kept = gateway.memory(ANA, KEYWORD, policy_version="p/1", session_id=SESSION,
                          packed=corpus.chunks)  # fmt: skip
    assert kept is None
    alone = gateway.memory(ANA, KEYWORD, policy_version="p/1", session_id=SESSION)
    assert alone is not None and len(alone.chunks) == 1


def test_overlay_filters_and_min_score_apply_before_its_top_k(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank, overlay=memory())
    wrong_gate = MetadataFilter(key="writeback.gate", value="TOOL_VERIFIED")
    right_gate = MetadataFilter(key="writeback.gate", value="USER_CONFIRMED")
    doc_filter = MetadataFilter(key="doc_type", value="policy")

    def joins(**update: object) -> bool:
        return memory_pack(gateway, KEYWORD.model_copy(update=update)) is not None

    assert not joins(filters=(wrong_gate,))
    assert joins(filters=(right_gate,))
    # A filter the overlay cannot evaluate matches none of its entries (filters narrow).
    assert not joins(filters=(doc_filter,))
    assert not joins(min_score=1e9)


def test_eligible_requests_bypass_a_shared_cache(bank: KnowledgeStore) -> None:
    """A runtime with write-back enabled and one with it disabled share one result cache:
    eligible requests neither read nor fill it (seed 001)."""
    shared = ResultCache()
    enabled = Gateway(bank, overlay=memory(), cache=shared)
    disabled = Gateway(bank, overlay=ControlledWriteBackStore.disabled(), cache=shared)
    assert memory_pack(enabled, KEYWORD) is not None
    assert len(shared) == 0  # never filled by an eligible request
    assert memory_pack(disabled, KEYWORD) is None
    assert memory_pack(disabled, KEYWORD) is None
    assert shared.hits == 1
    assert memory_pack(enabled, KEYWORD) is not None  # still bypassing, still joined


def test_every_corpus_chunk_is_rights_checked_and_memory_is_listed_unchecked(
    bank: KnowledgeStore,
) -> None:
    gateway = Gateway(bank, overlay=memory())
    corpus = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1", session_id=SESSION)
    assert {c.source_system for c in corpus.chunks} == {"sp"}
    assert [(r.source_system, r.checked) for r in corpus.rights_checks] == [
        ("sp", len(corpus.chunks))]  # fmt: skip
    assert corpus.unchecked == ()
    pack = gateway.memory(ANA, KEYWORD, policy_version="p/1", session_id=SESSION)
    assert pack is not None and {u.chunk_id for u in pack.unchecked} == {
        c.chunk_id for c in pack.chunks}  # fmt: skip
