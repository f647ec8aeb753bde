"""ACL pre-filter, hidden-item marker, filters and strategies on the SQLite store."""

from __future__ import annotations

from typing import Any

import pytest

from govrag.store.fusion import rrf
from govrag.store.protocol import KnowledgeStore
from govrag.types import MetadataFilter, SearchRequest, Strategy

from conftest import StoreFactory, doc, group, ident, load, principal

STRATEGIES = [Strategy.KEYWORD, Strategy.SEMANTIC, Strategy.HYBRID]


@pytest.fixture
def bank(store: KnowledgeStore) -> KnowledgeStore:
    load(
        store,
        [
            ident("ana@x.example", "A"),
            ident("ben@x.example", "B"),
            ident("carla@x.example", "C"),
            ident("dora@x.example", "D"),
            group("risk", ["A", "credit"]),
            group("credit", ["C"]),
            doc(
                "wire",
                "wire transfer approval limits",
                ["risk"],
                author="C",
                metadata={"doc_type": "policy", "year": 2026},
            ),
            doc(
                "ops",
                "wire transfer operations console",
                ["B", "A"],
                author="B",
                metadata={"doc_type": "guide", "year": 2025},
            ),
            doc(
                "faq",
                "customers send wire transfer online",
                ["*"],
                classification="public",
                metadata={"doc_type": "faq", "tags": ["public", "customer"]},
            ),
            doc("secret", "wire transfer secret model", ["*"], classification="restricted"),
            doc("model", "credit default model", ["credit"], corpus="risk", author="C"),
        ],
    )
    return store


def ids(
    store: KnowledgeStore,
    email: str,
    query: str,
    strategy: Strategy = Strategy.KEYWORD,
    **kw: object,
) -> list[str]:
    clearance = str(kw.pop("clearance", "confidential"))
    req = SearchRequest(query=query, strategy=strategy, **kw)  # type: ignore[arg-type]
    return [h.doc_id for h in store.search(principal(email, clearance=clearance), req).results]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    ("email", "expected"),
    [
        ("ana@x.example", {"wire", "ops", "faq"}),  # direct, via group, and everyone
        ("ben@x.example", {"ops", "faq"}),
        ("carla@x.example", {"wire", "faq"}),  # nested: credit is a member of risk
        ("dora@x.example", {"faq"}),  # only what everyone may read
        ("nobody@x.example", set()),  # no identity: sees nothing, not even "*"
    ],
)
def test_acl_table(
    bank: KnowledgeStore, strategy: Strategy, email: str, expected: set[str]
) -> None:
    got = ids(bank, email, "wire transfer", strategy, corpora=("main",), top_k=10)
    if strategy is Strategy.KEYWORD:
        assert set(got) == expected
    else:
        assert set(got) <= expected  # dense legs may also rank non-matching readable chunks
        assert expected <= set(got) or len(got) == 10


@pytest.mark.parametrize(
    ("clearance", "expected"),
    [
        ("public", {"faq"}),
        ("internal", {"faq"}),
        ("restricted", {"faq", "secret"}),
    ],
)
def test_classification_ceiling(bank: KnowledgeStore, clearance: str, expected: set[str]) -> None:
    assert set(ids(bank, "dora@x.example", "wire transfer", clearance=clearance)) == expected


def test_hidden_marker_names_source_and_author_only(bank: KnowledgeStore) -> None:
    result = bank.search(
        principal("ben@x.example", clearance="internal"),
        SearchRequest(query="wire transfer approval", strategy=Strategy.KEYWORD, top_k=5),
    )
    assert result.hidden.present
    # "wire" (author C) is unreadable for Ben; "secret" is too, but it is above his
    # clearance: he could not ask anyone for it, so the marker never counts it.
    assert {(s.source_system, s.author_email) for s in result.hidden.sources} == {
        ("sp", "carla@x.example"),
    }
    dumped = result.hidden.model_dump_json()
    for forbidden in ("approval", "limits", "wire", "secret", "score"):
        assert forbidden not in dumped


def test_no_marker_when_everything_relevant_is_readable(bank: KnowledgeStore) -> None:
    result = bank.search(
        principal("ana@x.example", clearance="restricted"),
        SearchRequest(query="wire transfer", strategy=Strategy.KEYWORD),
    )
    assert not result.hidden.present and result.hidden.sources == ()


def test_marker_can_be_turned_off(open_store: StoreFactory) -> None:
    store = open_store(hidden_marker=False)
    load(store, [ident("ben@x.example", "B"), doc("w", "wire transfer", ["X"])])
    result = store.search(principal("ben@x.example"), SearchRequest(query="wire transfer"))
    assert result.results == () and not result.hidden.present


def test_unknown_principal_learns_nothing(bank: KnowledgeStore) -> None:
    result = bank.search(principal("ghost@x.example"), SearchRequest(query="wire transfer"))
    assert result.results == () and not result.hidden.present


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (MetadataFilter(key="doc_type", value="guide"), {"ops"}),
        (MetadataFilter(key="doc_type", op="in", values=("policy", "faq")), {"wire", "faq"}),
        (MetadataFilter(key="year", op="range", gte=2026), {"wire"}),
        (MetadataFilter(key="year", op="range", lte=2025.5), {"ops"}),
        (MetadataFilter(key="doc_type", op="prefix", value="gu"), {"ops"}),
        (MetadataFilter(key="tags", value="customer"), {"faq"}),
        (MetadataFilter(key="doc_type", value="x' OR '1'='1"), set()),
        (MetadataFilter(key="doc_type", value="guide'; DROP TABLE documents; --"), set()),
        (MetadataFilter(key="missing", value="x"), set()),
    ],
)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_filters_only_narrow(
    bank: KnowledgeStore, flt: MetadataFilter, expected: set[str], strategy: Strategy
) -> None:
    got = set(ids(bank, "ana@x.example", "wire transfer", strategy, filters=(flt,)))
    assert got <= expected and (strategy is not Strategy.KEYWORD or got == expected)
    # The documents table survived the injection attempt.
    assert ids(bank, "ana@x.example", "wire transfer")


def test_filter_cannot_widen_acl(bank: KnowledgeStore) -> None:
    # Ben may not read "wire" although it matches the filter exactly.
    flt = MetadataFilter(key="doc_type", value="policy")
    assert ids(bank, "ben@x.example", "wire transfer", filters=(flt,)) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"key": "doc_type", "value": "\udcff"},  # lone surrogate: not UTF-8
        {"key": "doc_type", "value": "a\x00b"},
        {"key": "bad key!", "value": "x"},
        {"key": "k", "op": "in"},
        {"key": "k", "op": "range"},
        {"key": "k", "op": "prefix", "value": 3},
        {"key": "k", "op": "regex", "value": "x"},
    ],
)
def test_bad_filters_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        MetadataFilter.model_validate(bad)


def test_a_corpus_without_documents_is_empty_not_an_error(bank: KnowledgeStore) -> None:
    # An error here would list the tenant's corpora (some of which the caller may not know
    # about) and tell an empty allowed corpus from one that holds documents.
    assert ids(bank, "ana@x.example", "wire", corpora=("nope",)) == []
    assert ids(bank, "ana@x.example", "wire", corpora=("nope", "main")) == ["wire", "ops", "faq"]


@pytest.mark.parametrize("query", ["", "   ", "\udc80abc"])
def test_bad_queries(query: str) -> None:
    with pytest.raises(ValueError):
        SearchRequest(query=query)


def test_corpus_scope(bank: KnowledgeStore) -> None:
    assert ids(bank, "carla@x.example", "credit model", corpora=("risk",)) == ["model"]
    assert ids(bank, "carla@x.example", "credit model", corpora=("main",)) == []


def test_hit_fields(bank: KnowledgeStore) -> None:
    hit = bank.search(
        principal("ana@x.example"), SearchRequest(query="console", strategy=Strategy.KEYWORD)
    ).results[0]
    assert (hit.doc_id, hit.chunk_id, hit.corpus, hit.source_system) == (
        "ops",
        "sp:ops#0",
        "main",
        "sp",
    )
    assert hit.text == "wire transfer operations console" and hit.score > 0


def test_revocation_is_visible_to_the_next_search(bank: KnowledgeStore) -> None:
    assert "wire" in ids(bank, "carla@x.example", "wire transfer")
    load(bank, [group("credit", [])])  # Carla leaves credit, so she leaves risk too
    assert "wire" not in ids(bank, "carla@x.example", "wire transfer")
    assert "ops" in ids(bank, "ben@x.example", "operations console")
    load(
        bank,
        [
            doc(
                "ops",
                "wire transfer operations console",
                ["A"],
                author="B",
                metadata={"doc_type": "guide", "year": 2025},
            )
        ],
    )
    assert "ops" not in ids(bank, "ben@x.example", "operations console")


def test_revocation_in_another_process_is_visible(open_store: StoreFactory) -> None:
    a = open_store()
    load(a, [ident("ben@x.example", "B"), doc("d", "quarterly numbers", ["B"])])
    assert ids(a, "ben@x.example", "quarterly") == ["d"]
    b = open_store()  # another process's handle on the same storage
    load(b, [doc("d", "quarterly numbers", ["Z"])])
    assert ids(a, "ben@x.example", "quarterly", Strategy.HYBRID) == []
    assert ids(a, "ben@x.example", "quarterly") == []


def test_stale_index_never_serves_a_revoked_chunk(store: KnowledgeStore) -> None:
    load(store, [ident("ben@x.example", "B"), doc("d", "quarterly numbers", ["B"])])
    assert ids(store, "ben@x.example", "quarterly") == ["d"]
    # Revoke, but keep this process's indexes from catching up (as if the apply lagged).
    load(store, [doc("d", "quarterly numbers", ["Z"])])
    indexes = store._parts.indexes  # type: ignore[attr-defined]
    indexes.sync_indexes = lambda tenant, vectors=True: None
    for strategy in STRATEGIES:
        assert ids(store, "ben@x.example", "quarterly", strategy) == []
    kinds = [kind for kind, _ in store.incidents("t1")]
    assert "acl_recheck_mismatch" in kinds


def test_deleted_documents_disappear(bank: KnowledgeStore) -> None:
    from govrag.harvest.records import DeleteRecord

    load(bank, [DeleteRecord(type="delete", source_system="sp", external_id="faq")])
    for strategy in STRATEGIES:
        assert "faq" not in ids(bank, "dora@x.example", "wire transfer", strategy)


def test_is_empty_and_corpora(store: KnowledgeStore) -> None:
    assert store.is_empty("t1")
    load(store, [doc("d", "text", ["*"], corpus="c1")])
    assert not store.is_empty("t1") and store.is_empty("t2")
    assert store.list_corpora("t1") == [("c1", "")]


def test_top_k_bounds() -> None:
    with pytest.raises(ValueError):
        SearchRequest(query="x", top_k=0)
    with pytest.raises(ValueError):
        SearchRequest(query="x", top_k=1001)


def test_store_implements_the_protocol(store: KnowledgeStore) -> None:
    assert isinstance(store, KnowledgeStore)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_scope_predicates_run_inside_the_engine(store: KnowledgeStore, strategy: Strategy) -> None:
    """Corpus and ceiling must narrow *before* top-k: the re-check is only a safety net, so a
    search that needed it would come back short and record an incident."""
    strong = [doc(f"s{i}", "wire wire wire transfer", ["*"], corpus="a") for i in range(5)]
    secret = [
        doc(f"r{i}", "wire wire wire transfer", ["*"], corpus="b", classification="restricted")
        for i in range(5)
    ]
    weak = [doc(f"w{i}", f"wire note {i}", ["*"], corpus="b") for i in range(5)]
    load(store, [ident("ana@x.example", "A"), *strong, *secret, *weak])
    got = ids(store, "ana@x.example", "wire transfer", strategy, corpora=("b",), top_k=5,
              clearance="internal")  # fmt: skip
    assert sorted(got) == [f"w{i}" for i in range(5)]
    assert store.incidents("t1") == []


def test_drop_tenant_removes_everything_of_it_and_nothing_else(open_store: StoreFactory) -> None:
    a = open_store()
    for tenant in ("t1", "t2"):
        load(a, [ident("ana@x.example", "A"), doc("d", "quarterly numbers", ["A"])], tenant)
    other = open_store()  # another process's handle, with its own derived index
    assert ids(other, "ana@x.example", "quarterly") == ["d"]
    assert a.drop_tenant("t1") == 1
    assert a.tenants() == ["t2"]
    assert set(a.stats("t1").values()) == {0}
    for store in (a, other):
        for strategy in STRATEGIES:
            assert ids(store, "ana@x.example", "quarterly", strategy) == []
        hits = store.search(principal("ana@x.example", tenant="t2"), SearchRequest(query="numbers"))
        assert [h.doc_id for h in hits.results] == ["d"]
    # The tenant can be loaded again from scratch.
    load(a, [ident("ana@x.example", "A"), doc("e", "quarterly forecast", ["A"])])
    assert ids(other, "ana@x.example", "quarterly") == ["e"]


@pytest.mark.parametrize("part", ["_marker_candidates", "_marker_contacts"])
def test_a_failing_marker_fails_the_search(
    bank: KnowledgeStore, monkeypatch: pytest.MonkeyPatch, part: str
) -> None:
    """Its index query beside the ranking, its truth-store reads beside it (PostgreSQL) or
    after it (SQLite): a marker that fails in either is the search's failure, never a
    silently absent marker."""
    import govrag.store.search as search_module

    def broken(*args: object) -> object:
        raise RuntimeError("marker broke")

    monkeypatch.setattr(search_module, part, broken)
    with pytest.raises(RuntimeError, match="marker broke"):
        ids(bank, "dora@x.example", "wire transfer", Strategy.HYBRID)


def test_a_failing_ranking_waits_for_the_marker(
    bank: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the restricted ranking fails, the search returns only after the marker's reads
    are done (a caller may close the store at once)."""
    import threading
    import time

    import govrag.store.search as search_module

    real_marker, real_rank = search_module._marker_candidates, search_module._rank
    marker_done = threading.Event()

    def slow_marker(*args: Any) -> Any:
        time.sleep(0.2)
        result = real_marker(*args)
        marker_done.set()
        return result

    def rank(*args: Any, acl: bool) -> Any:
        if acl:
            raise RuntimeError("ranking broke")
        return real_rank(*args, acl=acl)

    monkeypatch.setattr(search_module, "_marker_candidates", slow_marker)
    monkeypatch.setattr(search_module, "_rank", rank)
    with pytest.raises(RuntimeError, match="ranking broke"):
        ids(bank, "dora@x.example", "wire transfer", Strategy.HYBRID)
    assert marker_done.is_set()


@pytest.mark.parametrize(
    ("strategy", "top_k", "vector_fusion_depth", "asked"),
    [
        (Strategy.HYBRID, 3, 5, 5),
        (Strategy.HYBRID, 3, 2, 3),  # never below top_k
        (Strategy.HYBRID, 3, 50, 10),  # never beyond fusion_depth
        (Strategy.SEMANTIC, 3, 5, 3),  # a plain vector ranking is cut at top_k
    ],
)
def test_hybrid_fuses_the_keyword_depth_with_the_vector_depth(
    open_store: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
    strategy: Strategy,
    top_k: int,
    vector_fusion_depth: int,
    asked: int,
) -> None:
    """A hybrid ranking is RRF of the keyword leg's top ``fusion_depth`` and the vector leg's
    top ``vector_fusion_depth`` (clamped to [top_k, fusion_depth]), on every backend alike."""
    store = open_store(fusion_depth=10, vector_fusion_depth=vector_fusion_depth, vector_weight=2.0)
    words = ["wire", "transfer", "limit", "approval", "payment", "swift", "console", "fraud"]
    docs = [
        doc(f"d{i:02}", " ".join(words[(i * j + i // 3) % len(words)] for j in range(1, 2 + i % 5)),
            ["*"])
        for i in range(30)
    ]  # fmt: skip
    load(store, [ident("ana@x.example", "A"), *docs])
    query = "wire transfer approval fraud"
    limits: list[int] = []
    leg = store._vectors.leg  # type: ignore[attr-defined]

    def spy(*args: Any, **kwargs: Any) -> Any:
        limits.append(kwargs["limit"])
        return leg(*args, **kwargs)

    monkeypatch.setattr(store._vectors, "leg", spy)  # type: ignore[attr-defined]
    got = ids(store, "ana@x.example", query, strategy, top_k=top_k)
    assert set(limits) == {asked}  # the restricted ranking and the marker's alike
    if strategy is Strategy.HYBRID:
        # The fused top 3, recomputed from keyword and semantic searches at the legs' depths.
        keyword = ids(store, "ana@x.example", query, Strategy.KEYWORD, top_k=10)
        vector = ids(store, "ana@x.example", query, Strategy.SEMANTIC, top_k=asked)
        assert len(keyword) == 10 and len(vector) == asked
        number = {d.external_id: i for i, d in enumerate(docs)}
        legs = [([number[d] for d in keyword], 1.0), ([number[d] for d in vector], 2.0)]
        assert got == [docs[i].external_id for i, _ in rrf(legs)[:top_k]]
