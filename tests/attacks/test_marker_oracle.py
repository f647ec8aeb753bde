"""The hidden-item marker is not an oracle: attacks by a curious principal.

The marker tells P that relevant material it may not read exists, and whom to ask. P tries
to turn it into a yes/no oracle about documents it could never ask for (above its clearance),
about a word or a metadata value of a document (by probing with filters and ranges), about
how many documents are hidden, or to probe without limit. Each attempt must learn nothing
beyond "relevant material exists here, ask these people", and every marker shown must be on
the audit record, within P's budget. On both backends.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from govrag.audit.replay import replay
from govrag.deployment import Deployment
from govrag.harvest.records import Record
from govrag.types import MetadataFilter, Principal, SearchRequest, Strategy

from conftest import BACKENDS, PG_APP_ROLE, drop_pg_database, ident, load, new_pg_database
from conftest import doc as any_doc

ROUTES = [{"route_id": "qa", "retrieval": {"mode": "tool", "scope": ["c1"]}}]
PROBER = Principal(
    sub="p", email="p@x.example", tenant="t1", doc_entitlements=("c1:read",), clearance="internal"
)
PEOPLE: list[Record] = [ident("p@x.example", "P"), ident("o@x.example", "O")]
MakeDeployment = Callable[..., Deployment]


def doc(external_id: str, text: str, acl: list[str], **kw: Any) -> Record:
    return any_doc(external_id, text, acl, corpus="c1", **kw)


@pytest.fixture(params=BACKENDS)
def make_deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeDeployment]:
    """``make_deployment(records, **search)``: a deployment on the parametrized backend;
    records are loaded by the first call, later calls are other processes' views."""
    root = tmp_path / "dep"
    (root / "routes").mkdir(parents=True)
    (root / "routes" / "routes.json").write_text(json.dumps(ROUTES))
    store: dict[str, Any] = {"url": f"sqlite:///{root / 'govrag.db'}"}
    dsn = None
    if request.param == "postgres":
        dsn = new_pg_database(request.getfixturevalue("pg_cluster"))
        store = {"url": dsn.replace("://postgres", f"://{PG_APP_ROLE}", 1), "admin_url": dsn}
    opened: list[Deployment] = []

    def factory(records: list[Record] | None = None, **search: Any) -> Deployment:
        dep = Deployment.load(root, default_tenant="t1", default_route="qa", store=store,
                              embedder={"name": "hash", "dim": 64}, search=search)  # fmt: skip
        opened.append(dep)
        if records is not None:
            load(dep.store, PEOPLE + records)
        return dep

    yield factory
    for dep in opened:
        dep.close()
    if dsn is not None:
        drop_pg_database(request.getfixturevalue("pg_cluster"), dsn)


def marker(dep: Deployment, query: str, **kw: Any) -> Any:
    return dep.governed.search(PROBER, query, **kw).hidden


@pytest.mark.parametrize("strategy", list(Strategy))
def test_a_word_in_a_document_above_my_clearance_raises_no_marker(
    make_deployment: MakeDeployment, strategy: Strategy
) -> None:
    dep = make_deployment([
        doc("faq", "quarterly policy overview", ["P"]),
        doc("memo", "merger with halvorsen", ["*"], classification="restricted", author="O"),
    ])  # fmt: skip
    for probe in ("merger", "halvorsen", "merger halvorsen", "merger halvorsen policy"):
        assert not marker(dep, probe, strategy=strategy).present, probe


def test_the_same_word_at_my_clearance_is_what_the_marker_is_for(
    make_deployment: MakeDeployment,
) -> None:
    dep = make_deployment([doc("memo", "merger with halvorsen", ["O"], author="O")])
    hidden = marker(dep, "merger with halvorsen", strategy=Strategy.KEYWORD)
    assert hidden.present
    assert [(s.source_system, s.author_email) for s in hidden.sources] == [("sp", "o@x.example")]


@pytest.mark.parametrize(
    "probe",
    [
        MetadataFilter(key="deal", value="halvorsen"),
        MetadataFilter(key="amount", op="range", gte=1_000_000),
        MetadataFilter(key="amount", op="range", lte=1_500_000),
        MetadataFilter(key="deal", op="prefix", value="halv"),
        MetadataFilter(key="deal", op="in", values=("acme", "halvorsen")),
    ],
)
def test_metadata_of_an_unreadable_document_selects_nothing(
    make_deployment: MakeDeployment, probe: MetadataFilter
) -> None:
    """A binary search over a hidden deal's amount, or a guess at its name: no marker,
    whatever the filter, because filters never select hidden candidates."""
    dep = make_deployment([
        doc("deal", "merger memo", ["O"], author="O",
            metadata={"deal": "halvorsen", "amount": 1_250_000}),
        doc("note", "merger notes", ["P"], metadata={"deal": "other", "amount": 5}),
    ])  # fmt: skip
    for strategy in Strategy:
        result = dep.governed.search(PROBER, "merger memo", strategy=strategy, filters=(probe,))
        assert not result.hidden.present
        assert all(c.doc_id == "note" for c in result.results)
    unfiltered = marker(dep, "merger memo", strategy=Strategy.KEYWORD)
    assert unfiltered.present  # unfiltered: it is there


def test_a_vector_neighbour_alone_never_raises_the_marker(make_deployment: MakeDeployment) -> None:
    """No hidden document shares a word with the query: the semantic leg still ranks the
    nearest hidden vector first, but that is no evidence of relevance."""
    dep = make_deployment([doc("memo", "merger with halvorsen", ["O"], author="O")])
    for strategy in (Strategy.SEMANTIC, Strategy.HYBRID):
        assert not marker(dep, "quarterly payroll calendar", strategy=strategy).present


def test_a_weak_match_does_not_count_beside_a_strong_one(make_deployment: MakeDeployment) -> None:
    dep = make_deployment([
        doc("strong", "wire limit wire limit approval", ["P"]),
        doc("weak", "limit of the cafeteria budget for desserts and other sweets", ["O"],
            author="O"),
    ])  # fmt: skip
    # The hidden document ranks (top 2) but holds one of the three words (two would count).
    result = dep.governed.search(PROBER, "wire limit approval", strategy=Strategy.KEYWORD,
                                 top_k=2)  # fmt: skip
    assert [c.doc_id for c in result.results] == ["strong"]
    assert not result.hidden.present


def test_the_marker_cannot_be_read_as_a_count(make_deployment: MakeDeployment) -> None:
    people = [ident(f"a{i}@x.example", f"A{i}") for i in range(8)]
    hidden = [doc(f"h{i}", "merger memo", [f"A{i}"], author=f"A{i}") for i in range(8)]
    dep = make_deployment(people + hidden)
    result = marker(dep, "merger memo", strategy=Strategy.KEYWORD)
    assert result.present and len(result.sources) == 3  # marker_max_contacts
    dumped = result.model_dump_json()
    for forbidden in ("h0", "memo", "merger", "score", "count"):
        assert forbidden not in dumped


def test_every_marker_is_audited_and_the_budget_withholds_it(
    make_deployment: MakeDeployment,
) -> None:
    dep = make_deployment([doc("memo", "merger with halvorsen", ["O"], author="O")],
                          marker_budget=2)  # fmt: skip
    shown = [dep.governed.search(PROBER, "halvorsen merger").hidden.present for _ in range(2)]
    # Another process of the deployment shares the budget: it lives in the truth store.
    other = make_deployment(marker_budget=2)
    third = other.governed.search(PROBER, "halvorsen merger")
    assert shown == [True, True] and not third.hidden.present
    events = [e for e in dep.store.audit_events("t1") if e.kind == "hidden_marker"]
    assert [(e.payload["shown"], e.payload["reason"], e.payload["used"]) for e in events] == [
        (True, None, 1), (True, None, 2), (False, "budget_exhausted", None)]  # fmt: skip
    assert all(e.payload["sub"] == "p" and e.payload["corpus"] == "c1" for e in events)
    # The examiner sees it in the request's replay.
    (saw,) = replay(dep.store, "t1", third.request_id).model_saw
    assert saw.model_dump(mode="json")["hidden_marker"] == {
        "shown": False, "reason": "budget_exhausted",
        "sources": [{"source_system": "sp", "author_email": "o@x.example"}]}  # fmt: skip
    assert third.packs[0].hidden.present is False


def test_a_zero_budget_turns_markers_off_but_keeps_the_record(
    make_deployment: MakeDeployment,
) -> None:
    dep = make_deployment([doc("memo", "merger memo", ["O"], author="O")], marker_budget=0)
    assert not dep.governed.search(PROBER, "merger memo").hidden.present
    (event,) = [e for e in dep.store.audit_events("t1") if e.kind == "hidden_marker"]
    assert (event.payload["shown"], event.payload["reason"]) == (False, "budget_exhausted")


def test_the_store_search_never_ranks_above_the_ceiling(make_deployment: MakeDeployment) -> None:
    """Below the governed path too: the store's own marker for P, over every strategy."""
    dep = make_deployment([doc("memo", "merger memo", ["*"], classification="confidential")])
    for strategy in Strategy:
        result = dep.store.search(PROBER, SearchRequest(query="merger memo", strategy=strategy))
        assert not result.hidden.present and not result.results
