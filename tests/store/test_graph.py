"""The graph leg: extraction, rows written with chunks, and search under the ACL, both backends.

The world: Orbis Data Holdings (glossary: "Orbis", its LEI) is the parent of Orbis Cloud GmbH.
Documents name them by alias, by LEI only or through the subsidiary; a confidential memo that
ben may not read states an alias of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from govrag.errors import ConfigFileError
from govrag.store.glossary import Glossary, GlossaryEntry, load_glossary
from govrag.store.graph_extract import extract
from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import StoreFactory, doc, ident, load, principal


def lei(base: str) -> str:
    """``base`` (18 characters) with its ISO 17442 check digits."""
    digits = "".join(str(int(c, 36)) for c in base + "00")
    return f"{base}{98 - int(digits) % 97:02d}"


ORBIS_LEI = lei("5493001KJTIIGC8Y1R")
CLOUD_LEI = lei("5493007ORBISCLOUD1")
GLOSSARY = Glossary({
    "ent-orbis": GlossaryEntry("ent-orbis", "organization",
                               ("Orbis Data Holdings plc", "Orbis", ORBIS_LEI),
                               (("parent_of", "ent-orbis-cloud"),)),
    "ent-orbis-cloud": GlossaryEntry("ent-orbis-cloud", "organization",
                                     ("Orbis Cloud GmbH", CLOUD_LEI)),
})  # fmt: skip


def test_identifiers_are_checked_and_normalised() -> None:
    found = extract(
        f"Counterparty LEI {ORBIS_LEI}, not {ORBIS_LEI[:-1]}0; IBAN DE89 3704 0044 0532 0130 00 "
        "and DE00 3704 0044 0532 0130 00; ISIN US0378331005 (not US0378331006); mail "
        "Treasury@Orbis.example; Contract No. FS-2024-117; limits EUR 50,000 and eur 2 million; "
        "signed 1 March 2026, amended 2026-04-15."
    )
    assert found.mentions == {
        ("lei", ORBIS_LEI), ("iban", "DE89370400440532013000"), ("isin", "US0378331005"),
        ("email", "treasury@orbis.example"), ("contract", "FS-2024-117"),
        ("amount", "EUR 50000"), ("amount", "EUR 2000000"), ("date", "2026-03-01"),
        ("date", "2026-04-15"),
    }  # fmt: skip


def test_glossary_names_identifiers_and_defined_terms() -> None:
    found = extract(
        f'This agreement binds ORBIS CLOUD GMBH ("the Provider") and LEI {ORBIS_LEI}.', GLOSSARY
    )
    assert ("entity", "ent-orbis-cloud") in found.mentions  # case-folded, longest name
    assert ("entity", "ent-orbis") in found.mentions  # its LEI is a glossary name
    # "the Provider" is the term "provider", an alias of the party it follows.
    assert found.relations == {(("term", "provider"), ("entity", "ent-orbis-cloud"), "alias_of")}
    assert extract("orbiscope and Orbisian", GLOSSARY).mentions == frozenset()  # whole words


def world(*, with_memo: bool = True) -> list[Any]:
    records = [
        ident("ana@x.example", "A"),
        ident("ben@x.example", "B"),
        doc("onboarding", "Onboarding file: Orbis passed KYC in March.", ["*"]),
        doc("screening", f"Sanctions screening for LEI {CLOUD_LEI}: no match found.", ["*"]),
        doc("exposure", f"Credit exposure to {ORBIS_LEI} is EUR 12 million.", ["*"]),
        doc("incident", "Outage at Orbis Cloud GmbH delayed payments for two hours.", ["*"]),
        doc("weather", "The canteen closes early on Friday.", ["*"]),
        doc("memo", 'Project Zephyr ("Orbis") is a code name for the merger.', ["A"],
            classification="confidential"),
        doc("zephyr", "Project Zephyr milestones are on track.", ["*"]),
    ]  # fmt: skip
    return records if with_memo else [r for r in records if getattr(r, "external_id", "") != "memo"]


def found(store: KnowledgeStore, email: str, query: str, **kw: Any) -> list[tuple[str, float]]:
    request = SearchRequest(query=query, strategy=kw.pop("strategy", Strategy.GRAPH),
                            top_k=kw.pop("top_k", 10), **kw)  # fmt: skip
    hits = store.search(principal(email, clearance="confidential"), request).results
    return [(h.doc_id, h.score) for h in hits]


def reached(store: KnowledgeStore, email: str, query: str) -> set[str]:
    """The documents the graph leg contributes: what ``graph`` scores above ``hybrid`` (the
    same keyword and vector legs, fused with the graph leg's list)."""
    graph = dict(found(store, email, query, top_k=50))
    hybrid = dict(found(store, email, query, top_k=50, strategy=Strategy.HYBRID))
    return {d for d, s in graph.items() if s > hybrid.get(d, 0.0) + 1e-12}


@pytest.fixture
def graphed(open_store: StoreFactory) -> KnowledgeStore:
    store = open_store(glossary=GLOSSARY)
    load(store, world())
    return store


def test_the_graph_finds_what_names_the_entity_another_way(graphed: KnowledgeStore) -> None:
    query = "What do we know about Orbis?"
    # By alias, by LEI, and the subsidiary (by name and by LEI).
    assert reached(graphed, "ben@x.example", query) == {
        "onboarding", "exposure", "incident", "screening"}  # fmt: skip
    got = [d for d, _ in found(graphed, "ben@x.example", query)]
    assert set(got[:4]) == {"onboarding", "exposure", "incident", "screening"}
    keyword = graphed.search(principal("ben@x.example"), SearchRequest(
        query="What do we know about Orbis?", strategy=Strategy.KEYWORD)).results  # fmt: skip
    assert {"exposure", "screening"}.isdisjoint(h.doc_id for h in keyword)


def test_an_alias_only_an_unreadable_chunk_states_moves_nothing(open_store: StoreFactory) -> None:
    with_memo = open_store("with", glossary=GLOSSARY)
    load(with_memo, world())
    without = open_store("without", glossary=GLOSSARY)
    load(without, world(with_memo=False))
    for query in ("What do we know about Orbis?", "Project Zephyr status", "zephyr orbis"):
        assert found(with_memo, "ben@x.example", query) == found(without, "ben@x.example", query)
    # ana reads the memo: for her, "Project Zephyr" is Orbis, and the alias leads there.
    assert {"onboarding", "memo"} <= reached(with_memo, "ana@x.example", "Project Zephyr")
    assert "onboarding" not in reached(with_memo, "ben@x.example", "Project Zephyr")


def test_deleted_documents_take_their_graph_along(graphed: KnowledgeStore) -> None:
    assert "onboarding" in reached(graphed, "ana@x.example", "Project Zephyr")
    assert graphed.delete_document("t1", "sp", "memo")
    assert "onboarding" not in reached(graphed, "ana@x.example", "Project Zephyr")


def test_rarer_entities_weigh_more(open_store: StoreFactory) -> None:
    store = open_store(glossary=GLOSSARY)
    common = [doc(f"pay{i}", f"Payment of EUR 1,000 approved ({i}).", ["*"]) for i in range(6)]
    load(store, [ident("ben@x.example", "B"), *common,
                 doc("rare", f"Payment of EUR 1,000 to {ORBIS_LEI}.", ["*"])])  # fmt: skip
    got = found(store, "ben@x.example", f"EUR 1,000 to {ORBIS_LEI}")
    assert got[0][0] == "rare"


def test_the_glossary_file_is_read_strictly(tmp_path: Any) -> None:
    folder = tmp_path / "entities"
    folder.mkdir()
    good = (
        '{"id": "ent-a", "type": "organization", "names": ["Alpha AG", "Alpha"], '
        '"relations": [{"type": "parent_of", "target": "ent-b"}]}\n'
        "# a comment\n"
        '{"id": "ent-b", "type": "organization", "names": ["Beta"]}\n'
    )
    (folder / "orgs.jsonl").write_text(good)
    glossary = load_glossary(tmp_path)
    assert glossary.entity_named("ALPHA") == "ent-a"
    assert glossary.neighbours("ent-b") == {("parent_of", "ent-a")}
    for bad, words in (
        ('{"id": "ent-c", "type": "organization", "names": ["Beta"]}', "claimed by"),
        ('{"id": "ent-c", "type": "organization", "names": ["C"], "aliases": []}', "aliases"),
        ('{"id": "ent-c", "type": "organization", "names": ["C"], '
         '"relations": [{"type": "owns", "target": "ent-z"}]}', "no glossary line defines"),
        ('{"id": "ent-a", "type": "organization", "names": ["A2"]}', "defined again"),
    ):  # fmt: skip
        (folder / "more.jsonl").write_text(bad + "\n")
        with pytest.raises(ConfigFileError, match=words):
            load_glossary(tmp_path)


def test_a_rebuild_derives_the_graph_with_the_glossary_of_today(open_store: StoreFactory) -> None:
    before = open_store("main")  # no glossary yet: an LEI is only an LEI
    load(before, world())
    query = "What do we know about Orbis?"
    assert "exposure" not in reached(before, "ben@x.example", query)
    after = open_store("main", glossary=GLOSSARY)  # the same storage, as another process
    after.rebuild_index("t1")
    assert reached(after, "ben@x.example", query) == {
        "onboarding", "exposure", "incident", "screening"}  # fmt: skip


def test_config_check_names_a_bad_glossary_and_the_deployment_uses_a_good_one(
    tmp_path: Any,
) -> None:
    import govrag

    from conftest import wire_bank

    root = wire_bank(tmp_path / "dep", routes={})
    (root / "entities").mkdir()
    (root / "entities" / "orgs.jsonl").write_text(
        '{"id": "ent-w", "type": "organization", "names": ["EUR 50,000 desk"], "aliases": []}\n'
    )
    with govrag.open(root) as app:
        problems = [str(p) for p in app.operators.config_check().problems]
    assert any("entities/orgs.jsonl" in p and "aliases" in p for p in problems), problems
    (root / "entities" / "orgs.jsonl").write_text(
        '{"id": "ent-w", "type": "limit", "names": ["the wire limit", "EUR 50,000"]}\n'
    )
    with govrag.open(root) as app:
        assert app.operators.config_check().ok
        app.operators.index_rebuild()
        ana = govrag.local_principal(app.settings, "ana")
        graph = app.callers.search(ana, "the wire limit", strategy=Strategy.GRAPH)
        hybrid = app.callers.search(ana, "the wire limit", strategy=Strategy.HYBRID)
    # The glossary names the limit; the document says only "EUR 50,000".
    assert [h.doc_id for h in graph.results] == ["wire"]
    assert graph.results[0].score > hybrid.results[0].score  # the graph leg added its rank
