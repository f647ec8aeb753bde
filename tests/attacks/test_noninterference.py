"""Noninterference: what a principal sees cannot depend on data it may not see.

The attacker is principal P, who wants to learn something about documents it cannot read:
whether a restricted memo holds a word, how many unreadable documents hold it, what an
unreadable document's metadata says, what another tenant or an unrouted corpus holds. It can
only observe its own outputs: results, scores, packs, the hidden-item marker, validation,
decisions and error messages. So the rule is checked as a two-world property: two worlds
identical except for

(a) documents above P's clearance (whatever their ACL, P's own account included),
(b) metadata values of documents P cannot read,
(c) another tenant's data (P's email has an identity there too; the tenant has its own
    corpora of the same ids),
(d) documents in a corpus the route does not allow (readable by P or not, and P names that
    corpus in some requests),
(e) documents P cannot read at or below its clearance, once P has spent its hidden-item
    marker budget (before that, saying such material exists is the marker's whole purpose),

must give P exactly the same outputs, down to the last bit of every score, for every
strategy, top_k, corpus choice, caller filter (``eq``, ``in``, ``range``, ``prefix``) and
``as_of``, where documents name glossary entities, state aliases and carry identifiers (the
graph leg), carry times and name versions they replace (``supersedes``, which
world B's unreadable documents add, change or drop: a replacement P cannot read never demotes
what P reads),
through the governed path (session, PEP, gateway, marker budget, validation), the store's own
search, an answer (``ask``), document metadata, a click and the metrics exposition an
operator scrapes. Every scenario's worlds are checked to differ, and the base world always
holds documents P cannot read at its clearance, so markers are shown and budgets spent. Ids
that are random per request (request, session, pack, audit, response ids) and timings are
the only differences allowed. On both backends.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from govrag.app.api import Govrag
from govrag.deployment import Deployment
from govrag.harvest.records import Record
from govrag.server.metrics import Metrics
from govrag.types import Classification, MetadataFilter, Principal, SearchRequest, Strategy

from conftest import (
    PG_APP_ROLE,
    doc,
    drop_pg_database,
    examples,
    group,
    ident,
    load,
    new_pg_database,
)

VOCAB = ["wire", "limit", "risk", "credit", "model", "policy", "audit", "loan"]
LEVELS = ["public", "internal", "confidential", "restricted"]
ROUTES = [{"route_id": "qa", "retrieval": {"mode": "tool", "scope": ["c1", "c2"]}}]
#: P reads as account A (directly and through group g); Q is someone else (B, group h).
READABLE_ACLS = (["A"], ["g"], ["*"], ["A", "B"])
UNREADABLE_ACLS = (["B"], ["h"], [])
IDENTITIES: list[Record] = [
    ident("p@x.example", "A"),
    ident("q@x.example", "B"),
    group("g", ["A"]),
    group("h", ["B"]),
]
#: Ids that are new for every request, and timings: they differ between any two runs.
RANDOM_IDS = {"request_id", "session_id", "context_pack_id", "context_pack_ids", "audit_id",
              "response_id", "latency_ms", "elapsed_ms"}  # fmt: skip
#: Two words no drawn text holds: only the base world's probe document (unreadable, at P's
#: clearance) holds them, so asking for them shows P the marker until its budget is spent (a
#: one-word probe never raises it).
PROBE = "zeta omega"
#: Markers P may be shown (per window) in a scenario of kind (e).
SMALL_BUDGET = 2
#: The corpus no route allows.
EXCLUDED = "x"


@dataclass(frozen=True)
class Doc:
    ext: str
    corpus: str
    text: str
    acl: tuple[str, ...]
    level: int
    author: str | None
    meta: int
    tenant: str = "t1"
    #: A year index (``updated_at`` in mid-year 2020 + ``year``), or undated.
    year: int | None = None
    #: Versions this one replaces (the temporal strategy's ``supersedes``).
    supersedes: tuple[str, ...] = ()

    def record(self) -> Record:
        return doc(
            self.ext,
            self.text,
            list(self.acl),
            corpus=self.corpus,
            classification=LEVELS[self.level],
            author=self.author,
            metadata={"k": self.meta, "s": f"tag-{self.meta}"},
            updated_at=None if self.year is None else f"{2020 + self.year}-06-01T00:00:00Z",
            supersedes=[e for e in self.supersedes if e != self.ext],
        )


@dataclass(frozen=True)
class Ask:
    query: str
    strategy: Strategy
    top_k: int
    filter: MetadataFilter | None
    #: The corpora P names (``None``: the route's scope).
    corpora: tuple[str, ...] | None = None
    #: ``as_of`` as a year index (see :attr:`Doc.year`); ``None``: no time filter.
    as_of: int | None = None

    @property
    def as_of_time(self) -> datetime | None:
        return None if self.as_of is None else datetime(2020 + self.as_of, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Scenario:
    clearance: int
    base: tuple[Doc, ...]
    #: World B: ``base`` with these replacements (b), then these documents added (a, c-e).
    changed: tuple[Doc, ...]
    added: tuple[Doc, ...]
    asks: tuple[Ask, ...]
    #: P's marker budget (kind (e): small, spent by the first asks).
    budget: int = 10_000


def _lei(base: str) -> str:
    digits = "".join(str(int(c, 36)) for c in base + "00")
    return f"{base}{98 - int(digits) % 97:02d}"


#: The graph leg's material: glossary entities (one known by an LEI), and phrases that name
#: them, state aliases (defined terms) or carry identifiers. Hidden documents hold them too:
#: an entity or alias only they know must move nothing P sees.
LEIS = (_lei("5493001KJTIIGC8Y1R"), _lei("5493007ORBISCLOUD1"))
GLOSSARY = [
    {"id": "ent-alpha", "type": "organization", "names": ["Alpha Bank", LEIS[0]],
     "relations": [{"type": "parent_of", "target": "ent-beta"}]},
    {"id": "ent-beta", "type": "organization", "names": ["Beta Fund"]},
]  # fmt: skip
GRAPH_PHRASES = ['Alpha Bank ("wire")', "Beta Fund", LEIS[0], LEIS[1], 'Gamma Ltd ("Alpha")',
                 'Delta plc (the "loan")', "Gamma Ltd", "EUR 5,000"]  # fmt: skip
words = st.tuples(
    st.lists(st.sampled_from(VOCAB), min_size=1, max_size=8).map(" ".join),
    st.none() | st.none() | st.sampled_from(GRAPH_PHRASES),
).map(lambda parts: " ".join(p for p in parts if p))
filters = st.none() | st.none() | st.one_of(
    st.builds(lambda v: MetadataFilter(key="k", value=v), st.integers(0, 3)),
    st.builds(lambda vs: MetadataFilter(key="k", op="in", values=tuple(vs)),
              st.lists(st.integers(0, 3), min_size=1, max_size=3)),
    st.builds(lambda lo, hi: MetadataFilter(key="k", op="range", gte=lo, lte=hi),
              st.integers(0, 3) | st.none(), st.integers(0, 3)),
    st.builds(lambda v: MetadataFilter(key="s", op="prefix", value=v),
              st.sampled_from(["tag-", "tag-1", "tag-3", "x"])),
)  # fmt: skip
#: Year indexes of document times and ``as_of`` (or undated).
years = st.none() | st.integers(min_value=0, max_value=5)
#: What a document may name in ``supersedes``: drawn documents, the unreadable one, the probe.
REPLACED = ["d0", "d1", "d2", "d3", "u0", "probe"]
corpus_choices = st.sampled_from([None, None, ("c1",), (EXCLUDED,), ("c2", EXCLUDED)])


KINDS = ("above", "metadata", "tenant", "corpus", "past_budget")


@st.composite
def scenarios(
    draw: st.DrawFn,
    kinds: tuple[str, ...] = KINDS,
    strategies: tuple[Strategy, ...] = (),
    added_words: st.SearchStrategy[str] | None = None,
) -> Scenario:
    """A pair of worlds of one of ``kinds``, and P's asks (in ``strategies``; default all);
    world B's added documents drawn from ``added_words`` (default: like the others)."""
    clearance = draw(st.integers(min_value=0, max_value=2))  # (a) needs a level above it

    def a_doc(
        ext: str, *, level: int, acls: tuple[list[str], ...], corpus: str,
        text: st.SearchStrategy[str] = words,
    ) -> Doc:  # fmt: skip
        return Doc(
            ext=ext,
            corpus=corpus,
            text=draw(text),
            acl=tuple(draw(st.sampled_from(acls))),
            level=level,
            author=draw(st.none() | st.sampled_from(["A", "B"])),
            meta=draw(st.integers(min_value=0, max_value=3)),
            year=draw(years),
            supersedes=tuple(draw(st.lists(st.sampled_from(REPLACED), max_size=2))),
        )

    every_acl = READABLE_ACLS + UNREADABLE_ACLS
    drawn = [
        a_doc(
            f"d{i}",
            level=draw(st.integers(min_value=0, max_value=clearance)),
            acls=every_acl,
            corpus=draw(st.sampled_from(["c1", "c2"])),
        )
        for i in range(draw(st.integers(min_value=1, max_value=8)))
    ]
    # Always something P cannot read at its clearance: the marker has work to do.
    unreadable = a_doc("u0", level=clearance, acls=UNREADABLE_ACLS, corpus="c1")
    probe_doc = Doc("probe", "c2", f"{PROBE} {draw(words)}", ("B",), clearance, "B", 0)
    base = (*drawn, unreadable, probe_doc)
    kind = draw(st.sampled_from(kinds))
    changed: tuple[Doc, ...] = ()
    added: tuple[Doc, ...] = ()
    budget = 10_000
    extra = range(draw(st.integers(min_value=1, max_value=3)))
    a_doc = partial(a_doc, text=words if added_words is None else added_words)  # world B
    if kind == "above":
        added = tuple(
            a_doc(f"x{i}", level=draw(st.integers(clearance + 1, 3)), acls=every_acl,
                  corpus=draw(st.sampled_from(["c1", "c2"])))
            for i in extra
        )  # fmt: skip
    elif kind == "metadata":
        changed = tuple(
            replace(d, meta=(d.meta + draw(st.integers(min_value=1, max_value=3))) % 4,
                    year=draw(years),
                    supersedes=tuple(draw(st.lists(st.sampled_from(REPLACED), max_size=2))))
            for d in base
            if list(d.acl) in UNREADABLE_ACLS
        )  # fmt: skip
    elif kind == "tenant":
        added = tuple(
            replace(a_doc(f"x{i}", level=0, acls=every_acl,
                          corpus=draw(st.sampled_from(["c1", "c2"]))), tenant="t2")
            for i in extra
        )  # fmt: skip
    elif kind == "corpus":
        added = tuple(a_doc(f"x{i}", level=0, acls=every_acl, corpus=EXCLUDED) for i in extra)
    else:  # (e): unreadable at P's clearance, once the budget is spent
        budget = SMALL_BUDGET
        added = tuple(
            a_doc(f"x{i}", level=draw(st.integers(0, clearance)), acls=UNREADABLE_ACLS,
                  corpus=draw(st.sampled_from(["c1", "c2"])))
            for i in extra
        )  # fmt: skip
    # Words u0 holds: a marker whenever two or more distinct ones are asked.
    hidden_words = st.lists(st.sampled_from(unreadable.text.split()), min_size=2,
                            max_size=4).map(" ".join)  # fmt: skip
    asks = tuple(
        Ask(
            query=draw(st.one_of(words, hidden_words, hidden_words)),
            strategy=draw(st.sampled_from(strategies or list(Strategy))),
            top_k=draw(st.integers(min_value=1, max_value=6)),
            filter=draw(filters),
            corpora=draw(corpus_choices),
            as_of=draw(st.none() | st.none() | years),
        )
        for _ in range(draw(st.integers(min_value=1, max_value=3)))
    )
    if kind == "past_budget":
        # The probe words are in no added document: these show the same marker in both
        # worlds and spend the budget; what follows must not depend on the added documents.
        probe = Ask(PROBE, Strategy.KEYWORD, 3, None)
        asks = (probe,) * SMALL_BUDGET + asks + (probe,)
    return Scenario(clearance, base, changed, added, asks, budget)


def world_records(s: Scenario, *, b: bool) -> dict[str, list[Record]]:
    """Records per tenant; world B replaces ``changed`` documents and appends ``added`` ones
    (after the shared ones, so both worlds ingest the shared documents in the same order)."""
    swap = {d.ext: d for d in s.changed} if b else {}
    out: dict[str, list[Record]] = {"t1": [*IDENTITIES, *(swap.get(d.ext, d).record()
                                                         for d in s.base)]}  # fmt: skip
    for d in s.added if b else ():
        out.setdefault(d.tenant, list(IDENTITIES)).append(d.record())
    return out


def scrub(value: Any) -> Any:
    """``value`` without the ids that are random per request."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in RANDOM_IDS}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def _outcome(run: Callable[[], Any]) -> Any:
    try:
        return scrub(run())
    except Exception as exc:  # an error is an output too: its text must not differ
        return ("error", type(exc).__name__, str(exc))


def observe(dep: Deployment, principal: Principal, ask: Ask, *, budgeted: bool) -> list[Any]:
    """Everything P can see of one question: the governed search, an answer and (unless
    ``budgeted``) the store's own search. The marker budget is the policy gate's, above the
    store: no edge reaches the store's search without it, so a scenario that spends the
    budget observes only what the edges give."""
    filters = () if ask.filter is None else (ask.filter,)
    seen = [
        _outcome(lambda: dep.governed.search(
            principal, ask.query, strategy=ask.strategy, top_k=ask.top_k, filters=filters,
            corpora=ask.corpora, as_of=ask.as_of_time).as_dict()),
        _outcome(lambda: dep.orchestrator.ask(principal, ask.query).as_dict()),
    ]  # fmt: skip
    if not budgeted:
        seen.append(_outcome(lambda: dep.store.search(principal, SearchRequest(
            query=ask.query, strategy=ask.strategy, top_k=ask.top_k, filters=filters,
            corpora=("c1", "c2"), as_of=ask.as_of_time)).model_dump(mode="json")))  # fmt: skip
    return seen


def observe_documents(app: Govrag, principal: Principal, exts: list[str]) -> list[Any]:
    """What P gets asking for each document's metadata, then clicking it (any document of
    either world, and one of neither)."""
    seen = []
    for ext in exts:
        described = _outcome(
            partial(lambda e: app.callers.document(principal, "sp", e).as_dict(), ext)
        )
        seen.append((described, _outcome(partial(app.callers.click, principal, "sp", ext))))
    return seen


def exposition(metrics: Metrics) -> list[str]:
    """The metrics an operator scrapes, less when each series was created (a timestamp)."""
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


def check(scenario: Scenario, open_world: Callable[[str, int], Any]) -> str:
    """Observe P in both worlds of ``scenario``; they must see the same. Returns how often
    P was shown the marker (for Hypothesis's statistics)."""
    principal = Principal(
        sub="p",
        email="p@x.example",
        tenant="t1",
        doc_entitlements=("c1:read", "c2:read", f"{EXCLUDED}:read"),
        clearance=Classification(scenario.clearance),
    )
    worlds = [world_records(scenario, b=b) for b in (False, True)]
    assert worlds[0] != worlds[1], "the two worlds must differ"
    exts = sorted({d.ext for d in (*scenario.base, *scenario.added)} | {"absent"})
    seen = []
    for name, records in zip("ab", worlds, strict=True):
        with open_world(name, scenario.budget) as dep:
            metrics = Metrics(lambda: 0.0)
            app = Govrag(dep)
            app.operators.observe_audit(metrics.observe)
            for tenant, tenant_records in records.items():
                load(dep.store, tenant_records, tenant)
            budgeted = scenario.budget == SMALL_BUDGET
            asked = [observe(dep, principal, ask, budgeted=budgeted) for ask in scenario.asks]
            documents = observe_documents(app, principal, exts)
            seen.append([asked, documents, exposition(metrics)])
    assert seen[0] == seen[1]
    shown = [a[0]["hidden"]["present"] for a in seen[0][0] if isinstance(a[0], dict)]
    if scenario.budget == SMALL_BUDGET:
        # The budget path is taken: the probes show the marker until it is spent, and the
        # last probe (after it) shows none, in both worlds alike.
        assert shown[:SMALL_BUDGET] == [True] * SMALL_BUDGET and shown[-1] is False
    return f"marker shown in {'some' if any(shown) else 'no'} searches"


def deployment_dir(root: Path) -> Path:
    (root / "routes").mkdir(parents=True, exist_ok=True)
    (root / "routes" / "routes.json").write_text(json.dumps(ROUTES))
    (root / "entities").mkdir(exist_ok=True)
    (root / "entities" / "glossary.jsonl").write_text("\n".join(json.dumps(e) for e in GLOSSARY))
    return root


def open_deployment(
    root: Path, store: dict[str, Any], budget: int, search: dict[str, Any] | None = None
) -> Deployment:
    return Deployment.load(
        root,
        default_tenant="t1",
        default_route="qa",
        store=store,
        embedder={"name": "hash", "dim": 64},
        search={"marker_budget": budget, **(search or {})},
    )


def deep(n: int) -> settings:
    return settings(
        max_examples=examples(n),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def run_on_sqlite(scenario: Scenario, search: dict[str, Any] | None = None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        root = deployment_dir(Path(tmp) / "dep")

        @contextmanager
        def open_world(name: str, budget: int) -> Iterator[Deployment]:
            store = {"url": f"sqlite:///{Path(tmp) / name}.db", "index_dir": f"{tmp}/{name}-ix"}
            dep = open_deployment(root, store, budget, search)
            try:
                yield dep
            finally:
                dep.close()

        return check(scenario, open_world)


@deep(30)
@given(scenario=scenarios())
def test_sqlite_outputs_do_not_depend_on_what_p_cannot_see(scenario: Scenario) -> None:
    event(run_on_sqlite(scenario))


@deep(15)
@given(scenario=scenarios())
def test_sqlite_outputs_do_not_depend_on_what_p_cannot_see_with_the_binary_prefilter(
    scenario: Scenario,
) -> None:
    """The vector leg's 1-bit prefilter forced on (every search over more than one readable
    vector, one row kept per result): which rows it keeps depends on what P may read only."""
    event(run_on_sqlite(scenario, {"binary_prefilter_rows": 1, "binary_rescore": 1}))


@deep(30)
@given(scenario=scenarios())
def test_postgres_outputs_do_not_depend_on_what_p_cannot_see(
    pg_cluster: Any, scenario: Scenario
) -> None:
    event(run_on_postgres(pg_cluster, scenario))


def run_on_postgres(pg_cluster: Any, scenario: Scenario) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        root = deployment_dir(Path(tmp) / "dep")

        @contextmanager
        def open_world(name: str, budget: int) -> Iterator[Deployment]:
            dsn = new_pg_database(pg_cluster)
            store = {
                "url": dsn.replace("://postgres", f"://{PG_APP_ROLE}", 1),
                "admin_url": dsn,
                "index_dir": f"{tmp}/{name}-ix",
            }
            dep = open_deployment(root, store, budget)
            try:
                yield dep
            finally:
                dep.close()
                drop_pg_database(pg_cluster, dsn)

        return check(scenario, open_world)


#: World B gives P's unreadable documents other times and replaced versions; P ranks by time.
replacements = scenarios(kinds=("metadata",), strategies=(Strategy.TEMPORAL,))


@deep(20)
@given(scenario=replacements)
def test_sqlite_replacements_p_cannot_read_demote_nothing(scenario: Scenario) -> None:
    """The temporal strategy prefers a version over those it ``supersedes`` only when P may
    read it: an unreadable replacement (drawn, changed or dropped) changes no score."""
    event(run_on_sqlite(scenario))


@deep(8)
@given(scenario=replacements)
def test_postgres_replacements_p_cannot_read_demote_nothing(
    pg_cluster: Any, scenario: Scenario
) -> None:
    event(run_on_postgres(pg_cluster, scenario))


#: P asks by entity: hidden documents name glossary entities, state aliases, hold LEIs.
by_entity = scenarios(
    kinds=("past_budget", "above", "corpus", "tenant"),
    strategies=(Strategy.GRAPH,),
    added_words=st.tuples(words, st.sampled_from(GRAPH_PHRASES)).map(" ".join),
)


@deep(20)
@given(scenario=by_entity)
def test_sqlite_entities_p_cannot_read_move_nothing(scenario: Scenario) -> None:
    """The graph leg reaches chunks only through entities and aliases of chunks P may read."""
    event(run_on_sqlite(scenario))


@deep(8)
@given(scenario=by_entity)
def test_postgres_entities_p_cannot_read_move_nothing(pg_cluster: Any, scenario: Scenario) -> None:
    event(run_on_postgres(pg_cluster, scenario))


def test_a_world_pair_where_the_old_marker_and_scores_leaked() -> None:
    """One fixed pair, the attack spelled out: P probes for a restricted memo with the word
    'merger' (above its clearance) and for how many unreadable documents hold 'loan'."""
    memo = Doc("memo", "c1", "merger policy", ("A",), 3, "B", 0)
    readable = Doc("faq", "c1", "loan policy", ("A",), 1, None, 0)
    hidden = Doc("h1", "c1", "loan audit", ("B",), 1, "B", 0)
    other = Doc("o1", "c2", "audit calendar", ("g",), 0, None, 0)
    scenario = Scenario(
        clearance=1,
        base=(readable, hidden, other),
        changed=(),
        added=(memo, replace(hidden, ext="h2", level=3)),
        asks=(Ask("merger", Strategy.KEYWORD, 3, None), Ask("loan", Strategy.KEYWORD, 3, None),
              Ask("loan audit", Strategy.KEYWORD, 3, None),
              Ask("policy", Strategy.HYBRID, 3, None)),
    )  # fmt: skip
    run_on_sqlite(scenario)


def test_a_world_pair_where_a_hidden_alias_would_steer_the_graph() -> None:
    """One fixed pair for the graph leg: a memo P may not read (at its clearance, once the
    marker budget is spent) says the word 'wire' stands for Alpha Bank; P asks about wires.
    Were the memo's alias followed, P's readable Alpha Bank file would rise."""
    alpha = Doc("alpha", "c1", f"credit file of Alpha Bank {LEIS[0]}", ("A",), 1, None, 0)
    wires = Doc("wires", "c1", "wire policy limit", ("A",), 1, None, 0)
    memo = Doc("memo", "c1", 'risk audit Alpha Bank ("wire") model', ("B",), 1, "B", 0)
    probe = Doc("probe", "c2", f"{PROBE} audit", ("B",), 1, "B", 0)
    asks = (Ask(PROBE, Strategy.KEYWORD, 3, None),) * SMALL_BUDGET + (
        Ask("wire policy", Strategy.GRAPH, 3, None),
        Ask("wire", Strategy.GRAPH, 5, None),
    )
    scenario = Scenario(clearance=1, base=(alpha, wires, probe), changed=(), added=(memo,),
                        asks=asks, budget=SMALL_BUDGET)  # fmt: skip
    run_on_sqlite(scenario)
