"""Review attacks (a1): what P sees still depends on what it may not see.

Each test is one defect found by a hostile reviewer after issue 16, written as the attack a
curious principal P (or a careless operator) would run, and FAILING on the code it was
written against. The rule under attack is README's "What govrag guarantees": what P sees
(results, order, packs, the hidden-item marker, decisions, answers) is identical across worlds
that differ only in what P may not see, and the marker reveals only "relevant material
exists, ask these people", never a count or a score.

1. The marker reveals how many hidden documents hold a word, and how strongly a hidden
   document matches: whether a withheld candidate "counts" is decided by its BM25 score
   *relative to other candidates* (the ``marker_min_relevance`` bar against the best score,
   and the keyword top-k cut), with statistics counted over the hidden documents too.
2. ``ask`` tells P whether its tenant holds any document at all (``is_empty`` is tenant-wide:
   documents above P's clearance, or in corpora its route does not allow, switch the request
   from "ungrounded" to "grounded, no evidence").
3. A request over several corpora names more than ``marker_max_contacts`` contacts.
4. The marker budget is per ``sub``, while everything the marker reveals is keyed on the
   email: a second sub of the same person gets a fresh budget.
5. ``govrag click`` confirms that a document exists in a corpus the PDP would deny P (no
   entitlement, outside its route), and how often others used it: no PEP decision at all.
6. PostgreSQL: one HNSW graph per dimension spans every tenant, so another tenant's vectors
   change what P's approximate vector leg returns (results vanish, ``truncated`` flips).
7. PostgreSQL: whether P's vector leg is exact or a walk is decided by counts of rows P
   cannot read (ACL rows above its clearance, filter matches it cannot read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from govrag.deployment import Deployment
from govrag.harvest.records import Record
from govrag.types import MetadataFilter, Principal, SearchRequest, Strategy

from conftest import (
    BACKENDS,
    PG_APP_ROLE,
    drop_pg_database,
    ident,
    load,
    make_pg_store,
    new_pg_database,
)
from conftest import doc as any_doc

ROUTES = [{"route_id": "qa", "retrieval": {"mode": "tool", "scope": ["c1"]}}]
PROBER = Principal(
    sub="p", email="p@x.example", tenant="t1", doc_entitlements=("c1:read",), clearance="internal"
)
PEOPLE: list[Record] = [ident("p@x.example", "P"), ident("o@x.example", "O")]
#: ``make_world(name, records, routes=ROUTES, **search)``: a fresh deployment per world.
MakeWorld = Callable[..., Deployment]


def doc(external_id: str, text: str, acl: list[str], **kw: Any) -> Record:
    kw.setdefault("corpus", "c1")
    return any_doc(external_id, text, acl, **kw)


def with_claims(principal: Principal, **claims: Any) -> Principal:
    return Principal(**{**principal.model_dump(), **claims})


def worlds(tmp_path: Path, pg: Any | None) -> tuple[MakeWorld, Callable[[], None]]:
    """``make_world`` on SQLite (``pg`` None) or on the PostgreSQL server ``pg``, and the
    function that closes what it opened."""
    opened: list[Deployment] = []
    databases: list[str] = []

    def factory(
        name: str, records: list[Record], routes: Any = ROUTES, **search: Any
    ) -> Deployment:
        root = tmp_path / name
        (root / "routes").mkdir(parents=True)
        (root / "routes" / "routes.json").write_text(json.dumps(routes))
        store: dict[str, Any] = {"url": f"sqlite:///{root / 'govrag.db'}"}
        if pg is not None:
            dsn = new_pg_database(pg)
            databases.append(dsn)
            store = {"url": dsn.replace("://postgres", f"://{PG_APP_ROLE}", 1),
                     "admin_url": dsn, "index_dir": str(root / "index")}  # fmt: skip
        dep = Deployment.load(root, default_tenant="t1", default_route="qa", store=store,
                              embedder={"name": "hash", "dim": 64}, search=search)  # fmt: skip
        opened.append(dep)
        load(dep.store, records)
        return dep

    def close() -> None:
        for dep in opened:
            dep.close()
        for dsn in databases:
            drop_pg_database(pg, dsn)

    return factory, close


@pytest.fixture(params=BACKENDS)
def make_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeWorld]:
    """A fresh deployment per world name on the parametrized backend (records loaded)."""
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    factory, close = worlds(tmp_path, pg)
    yield factory
    close()


@pytest.fixture
def sqlite_world(tmp_path: Path) -> Iterator[MakeWorld]:
    """``make_world`` on SQLite only (for defects above the store)."""
    factory, close = worlds(tmp_path, None)
    yield factory
    close()


def marker(dep: Deployment, query: str, **kw: Any) -> Any:
    return dep.governed.search(PROBER, query, strategy=Strategy.KEYWORD, **kw).hidden


# -- 1. the marker is decided on scores relative to hidden documents --------------------------
def test_the_marker_tells_one_hidden_copy_from_six(make_world: MakeWorld) -> None:
    """Both worlds hold O's memo about zebras, which P may not read but may ask O for; world
    B holds six copies of it. The truth P may learn is the same in both: "material about
    zebras exists, ask O". But the marker counts a hidden candidate only when it scores at
    least half the best one, with idf counted over the hidden copies: six copies make "zebra"
    common, so beside P's own "apple" document the memo no longer counts. A word whose
    readable document frequency P knows is a ruler: P reads off how many hidden documents
    hold "zebra"."""
    readable = [doc("faq", "apple pie recipe", ["P"])]
    memo = [doc("h0", "zebra pie recipe", ["O"], author="O")]
    copies = [doc(f"h{i}", "zebra pie recipe", ["O"], author="O") for i in range(1, 6)]
    one = make_world("one", PEOPLE + readable + memo)
    six = make_world("six", PEOPLE + readable + memo + copies)
    for probe in ("zebra", "apple zebra", "zebra pie", "zebra pie recipe"):
        assert marker(one, probe) == marker(six, probe), probe
    assert marker(one, "zebra pie").present  # the memo is what the marker is for


def test_the_marker_tells_how_strongly_a_hidden_document_matches(
    sqlite_world: MakeWorld,
) -> None:
    """The other handle on the same root: the keyword top-k cut. The hidden memo matches
    "pie cream" in both worlds (with ``top_k=100`` both show the marker); whether it ranks
    above P's sixty readable documents depends on how often it says "pie" (tf 1 or 3), and
    ``top_k`` moves the cut: P reads the hidden document's term frequency off the marker."""
    readable = [doc(f"r{i}", f"pie pie cream w{i}", ["P"]) for i in range(60)]
    weak = sqlite_world(
        "weak", PEOPLE + readable + [doc("m", "pie lemon cream", ["O"], author="O")]
    )
    strong = sqlite_world("strong", PEOPLE + readable + [doc("m", "pie pie pie cream", ["O"],
                                                             author="O")])  # fmt: skip
    assert marker(weak, "pie cream", top_k=100) == marker(strong, "pie cream", top_k=100)
    assert marker(weak, "pie cream", top_k=10) == marker(strong, "pie cream", top_k=10)
    assert marker(weak, "pie cream", top_k=10).present


# -- 2. ask: an empty tenant is a tenant-wide fact ---------------------------------------------
@pytest.mark.parametrize(
    "unseen",
    [
        doc("memo", "merger with halvorsen", ["P"], classification="restricted"),  # (a)
        doc("memo", "merger with halvorsen", ["P"], corpus="x"),  # (d) readable, unrouted
    ],
    ids=["above-clearance", "unrouted-corpus"],
)
def test_ask_does_not_reveal_that_the_tenant_holds_something(
    sqlite_world: MakeWorld, unseen: Record
) -> None:
    """World A's tenant holds no document; world B's holds one P may never see (above its
    clearance, or in a corpus its route does not allow). The orchestrator asks
    ``store.is_empty(tenant)``, tenant-wide: in A it answers ungrounded ("the documents
    available to me do not answer"), in B it searches and abstains ``no_evidence``."""
    seen = []
    for name, records in (("a", PEOPLE), ("b", [*PEOPLE, unseen])):
        answer = sqlite_world(name, records).orchestrator.ask(PROBER, "what about the merger?")
        seen.append((answer.grounded, answer.abstained, answer.reason, answer.answer,
                     [(d.kind, d.corpus, d.verdict) for d in answer.decisions]))  # fmt: skip
    assert seen[0] == seen[1]


# -- 3. the contact cap holds per pack, not per answer ----------------------------------------
def test_a_request_over_two_corpora_names_at_most_max_contacts(sqlite_world: MakeWorld) -> None:
    routes = [{"route_id": "qa", "retrieval": {"mode": "tool", "scope": ["c1", "c2"]}}]
    authors = [ident(f"a{i}@x.example", f"A{i}") for i in range(6)]
    hidden = [doc(f"h{i}", "merger memo", [f"A{i}"], author=f"A{i}", corpus=f"c{1 + i % 2}")
              for i in range(6)]  # fmt: skip
    dep = sqlite_world("a", PEOPLE + authors + hidden, routes=routes)
    prober = with_claims(PROBER, doc_entitlements=("c1:read", "c2:read"))
    found = dep.governed.search(prober, "merger memo", strategy=Strategy.KEYWORD).hidden
    assert found.present
    assert len(found.sources) <= dep.settings.search.marker_max_contacts, found.sources


# -- 4. the budget is per sub, the rights per email --------------------------------------------
def test_a_second_sub_of_the_same_person_gets_no_fresh_marker_budget(
    sqlite_world: MakeWorld,
) -> None:
    """Two tokens (subs) for the same mailbox resolve to the same rights, and the result cache
    treats them as one caller (``acl_fingerprint`` drops the sub); the marker budget does
    not: each sub probes with its own budget."""
    dep = sqlite_world("a", [*PEOPLE, doc("memo", "merger memo", ["O"], author="O")],
                       marker_budget=1)  # fmt: skip
    shown = [
        dep.governed.search(with_claims(PROBER, sub=sub), "merger memo").hidden.present
        for sub in ("p", "p", "p-laptop", "p-phone")
    ]
    assert shown[0] and sum(shown) == 1, shown


# -- 5. click: an existence oracle without a PEP decision --------------------------------------
def test_click_does_not_confirm_a_document_of_a_corpus_p_may_not_retrieve(
    tmp_path: Path,
) -> None:
    """P's entitlements and route cover ``c1``; a retrieve of corpus ``x`` is DENY. Yet
    ``govrag click sp:x1`` succeeds (and reports everyone's hits) when ``x1`` exists in ``x``
    with P on its ACL, and is refused when it does not: the click checks the stored ACL and
    clearance only, with no PEP/PDP decision on the document's corpus."""
    from govrag.cli.main import app

    runner = CliRunner()
    principals = {
        "principals": [
            {
                "sub": "p",
                "email": "p@x.example",
                "tenant": "t1",
                "doc_entitlements": ["c1:read"],
                "clearance": "internal",
            }
        ]
    }
    seen = []
    for name, extra in (("a", []), ("b", [doc("x1", "merger memo", ["P"], corpus="x")])):
        root = tmp_path / name
        init = runner.invoke(app, ["init", str(root), "--embedder", "hash", "--tenant", "t1",
                                   "--corpus", "c1"])  # fmt: skip
        assert init.exit_code == 0, init.output
        (root / "principals.json").write_text(json.dumps(principals))
        with Deployment.load(root) as dep:
            load(dep.store, [*PEOPLE, doc("faq", "wire limits", ["P"]), *extra])
            denied = dep.governed.search(PROBER, "merger", corpora=["x"])
            assert [d.verdict for d in denied.decisions] == ["DENY"]
        clicked = runner.invoke(app, ["click", "sp:x1", "--as", "p", "--json",
                                      "--deployment", str(root)])  # fmt: skip
        seen.append((clicked.exit_code, clicked.stdout.strip()))
    assert seen[0] == seen[1]


# -- 6. PostgreSQL: one HNSW graph per tenant (migration 12) ----------------------------------
def test_another_tenants_vectors_do_not_change_my_vector_results(
    pg_cluster: Any, tmp_path: Path
) -> None:
    """P's tenant t1 is identical in both worlds; in world B another tenant holds 1,100
    vectors next to P's query. With one HNSW graph per dimension, the filtered walk spent
    ``hnsw.max_scan_tuples`` on t2's rows before it reached t1's: P's results vanished and
    ``truncated`` turned true. Each tenant's graph is now its own (migration 12). Small
    figures stand in for the defaults (20,000 readable vectors, 50,000 tuples) to keep the
    test light."""
    prober = with_claims(PROBER, doc_entitlements=())
    request = SearchRequest(query="merger memo", strategy=Strategy.SEMANTIC, top_k=10)
    seen = []
    for world in ("a", "b"):
        dsn = new_pg_database(pg_cluster)
        store = make_pg_store(pg_cluster, dsn, tmp_path / world, exact_vector_threshold=0,
                              hnsw_max_scan_tuples=1000)  # fmt: skip
        try:
            load(store, PEOPLE + [doc(f"r{i}", f"alpha{i} beta{i} gamma", ["P"])
                                  for i in range(30)])  # fmt: skip
            if world == "b":
                other = [doc(f"o{i}", "merger memo", ["Q"]) for i in range(1100)]
                load(store, [ident("q@y.example", "Q"), *other], "t2")
            result = store.search(prober, request)
            seen.append(([(h.doc_id, h.score) for h in result.results], result.truncated))
        finally:
            store.close()
            drop_pg_database(pg_cluster, dsn)
    assert seen[0] == seen[1]


@pytest.mark.parametrize("kind", ["above-clearance", "outside-corpora", "unreadable-metadata"])
def test_what_i_cannot_read_does_not_pick_my_vector_path(
    pg_cluster: Any, tmp_path: Path, kind: str
) -> None:
    """PostgreSQL chooses between the exact vector path and the HNSW walk with
    ``_may_be_few``, whose bound counted what P cannot read: ``doc_acl`` rows naming P's
    principals whatever the document's classification or corpus (a restricted ``"*"``
    document counted; migration 13 gave ACL rows their document's classification and
    corpus), and caller-filter matches whatever their ACL. P's readable set is the same in
    both worlds; world B adds documents above its clearance or outside the corpora it asks
    for, or gives unreadable documents the filtered metadata value: P's search moved to the
    walk and said ``truncated: true``. (README: the walk is taken
    "above exact_vector_threshold *readable* vectors".) ``exact_vector_threshold = 0`` stands
    in for a tenant with more than 20,000 such rows."""
    filtered = kind == "unreadable-metadata"
    filters = (MetadataFilter(key="k", value=1),) if filtered else ()
    corpora = ("c1",) if kind == "outside-corpora" else None
    request = SearchRequest(query="alpha beta", strategy=Strategy.SEMANTIC, top_k=10,
                            filters=filters, corpora=corpora)  # fmt: skip
    prober = with_claims(PROBER, doc_entitlements=())
    seen = []
    for world in ("a", "b"):
        mine = [doc(f"r{i}", f"alpha{i} beta gamma", ["P"], metadata={"k": 1}) for i in range(3)]
        if filtered:  # P reads more than the bound; the filter leaves it three documents
            mine += [doc(f"s{i}", f"alpha{i} beta delta", ["P"], metadata={"k": 2})
                     for i in range(12)]  # fmt: skip
            value = 1 if world == "b" else 2
            mine += [doc(f"x{i}", f"alpha beta {i}", ["O"], metadata={"k": value})
                     for i in range(20)]  # fmt: skip
        elif world == "b" and kind == "above-clearance":
            mine += [doc(f"x{i}", f"alpha beta {i}", ["*"], classification="restricted")
                     for i in range(20)]  # fmt: skip
        elif world == "b":  # in a corpus P does not ask for
            mine += [doc(f"x{i}", f"alpha beta {i}", ["*"], corpus="other")
                     for i in range(20)]  # fmt: skip
        if kind == "outside-corpora":  # in both worlds: the other corpus, and more of
            # P's corpus than the bound (documents P cannot read), so only the ACL rows'
            # bound can pick the exact path
            mine += [doc("o", "unrelated", ["*"], corpus="other")]
            mine += [doc(f"y{i}", f"alpha beta {i}", ["O"]) for i in range(20)]
        dsn = new_pg_database(pg_cluster)
        store = make_pg_store(pg_cluster, dsn, tmp_path / world, exact_vector_threshold=0)
        try:
            load(store, PEOPLE + mine)
            result = store.search(prober, request)
            seen.append(([(h.doc_id, h.score) for h in result.results], result.truncated))
        finally:
            store.close()
            drop_pg_database(pg_cluster, dsn)
    assert seen[0] == seen[1]
