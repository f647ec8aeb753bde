"""The write-back overlay in the gateway: when it joins, how it merges, and the cache bypass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from govrag.gateway import Gateway
from govrag.gateway.cache import ResultCache
from govrag.store.protocol import KnowledgeStore
from govrag.types import MetadataFilter, QueryExpansion, SearchRequest, Strategy
from govrag.writeback import (
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


def pack_sources(
    gateway: Gateway, request: SearchRequest, session: str | None = SESSION
) -> list[str]:
    pack = gateway.retrieve(ANA, "main", request, policy_version="p/1", session_id=session)
    return [c.source_system for c in pack.chunks]


KEYWORD = SearchRequest(query="wire transfer limit", strategy=Strategy.KEYWORD, top_k=5)


@pytest.mark.parametrize(
    ("request_", "session", "joins"),
    [
        (KEYWORD, SESSION, True),
        (KEYWORD.model_copy(update={"strategy": Strategy.SEMANTIC}), SESSION, False),
        (KEYWORD.model_copy(update={"strategy": Strategy.HYBRID}), SESSION, False),
        (KEYWORD.model_copy(update={"corpora": ("main",)}), SESSION, False),  # named source
        (KEYWORD, None, False),  # no pinned session: no scope to read
        (KEYWORD, "ses-2", False),  # another session's scope is empty
    ],
    ids=["keyword", "semantic", "hybrid", "named-sources", "no-session", "other-session"],
)
def test_the_overlay_joins_only_eligible_requests(
    bank: KnowledgeStore, request_: SearchRequest, session: str | None, joins: bool
) -> None:
    gateway = Gateway(bank, overlay=memory())
    sources = pack_sources(gateway, request_, session)
    assert ("writeback" in sources) is joins
    assert "sp" in sources  # corpus hits are always there


@pytest.mark.parametrize("expansion", list(QueryExpansion))
def test_every_expansion_value(bank: KnowledgeStore, expansion: QueryExpansion) -> None:
    gateway = Gateway(bank, overlay=memory())
    request = KEYWORD.model_copy(update={"query_expansion": expansion})
    assert ("writeback" in pack_sources(gateway, request)) is (expansion is QueryExpansion.NONE)


def test_a_disabled_store_never_joins(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank, overlay=ControlledWriteBackStore.disabled())
    assert "writeback" not in pack_sources(gateway, KEYWORD)


def test_overlay_and_corpus_hits_merge_by_score_and_dedupe_together(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank, overlay=memory("wire transfer limits per day are EUR 50,000"))
    pack = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1", session_id=SESSION)
    scores = [c.score for c in pack.chunks]
    assert scores == sorted(scores, reverse=True)
    # The memory repeats the "limits" document word for word: only one of them is packed.
    texts = [c.text for c in pack.chunks]
    assert texts.count("wire transfer limits per day are EUR 50,000") == 1


def test_overlay_filters_and_min_score_apply_before_its_top_k(bank: KnowledgeStore) -> None:
    gateway = Gateway(bank, overlay=memory())
    wrong_gate = MetadataFilter(key="writeback.gate", value="TOOL_VERIFIED")
    right_gate = MetadataFilter(key="writeback.gate", value="USER_CONFIRMED")
    doc_filter = MetadataFilter(key="doc_type", value="policy")
    assert "writeback" not in pack_sources(gateway, KEYWORD.model_copy(
        update={"filters": (wrong_gate,)}))  # fmt: skip
    assert "writeback" in pack_sources(gateway, KEYWORD.model_copy(
        update={"filters": (right_gate,)}))  # fmt: skip
    # A filter the overlay cannot evaluate matches none of its entries (filters narrow).
    assert "writeback" not in pack_sources(gateway, KEYWORD.model_copy(
        update={"filters": (doc_filter,)}))  # fmt: skip
    assert pack_sources(gateway, KEYWORD.model_copy(update={"min_score": 1e9})) == []


def test_eligible_requests_bypass_a_shared_cache(bank: KnowledgeStore) -> None:
    """A runtime with write-back enabled and one with it disabled share one result cache:
    the disabled one never sees overlay evidence, whatever ran first."""
    shared = ResultCache()
    enabled = Gateway(bank, overlay=memory(), cache=shared)
    disabled = Gateway(bank, overlay=ControlledWriteBackStore.disabled(), cache=shared)
    assert "writeback" in pack_sources(enabled, KEYWORD)
    assert len(shared) == 0  # never filled by an eligible request
    assert "writeback" not in pack_sources(disabled, KEYWORD)
    assert "writeback" not in pack_sources(disabled, KEYWORD)  # now from the cache
    assert shared.hits == 1
    assert "writeback" in pack_sources(enabled, KEYWORD)  # still bypassing, still joined


def test_overlay_hits_skip_the_source_rights_check_but_corpus_hits_do_not(
    bank: KnowledgeStore,
) -> None:
    gateway = Gateway(bank, overlay=memory())
    pack = gateway.retrieve(ANA, "main", KEYWORD, policy_version="p/1", session_id=SESSION)
    assert {c.source_system for c in pack.chunks} == {"sp", "writeback"}
    assert [r.source_system for r in pack.rights_checks] == ["sp"]  # memory is not re-checked
    assert pack.withheld.count == 0
