"""Noninterference: what a principal sees cannot depend on data it may not see.

The attacker is principal P, who wants to learn something about documents it cannot read:
whether a restricted memo holds a word, how many unreadable documents hold it, what an
unreadable document's metadata says, what another tenant or an unrouted corpus holds. It can
only observe its own outputs: results, scores, packs, the hidden-item marker, validation,
decisions and error messages. So the rule is checked as a two-world property: two worlds
identical except for

(a) documents above P's clearance (whatever their ACL, P's own account included),
(b) metadata values of documents P cannot read,
(c) another tenant's data (P's email has an identity there too),
(d) documents in a corpus the route does not allow (readable by P or not),

must give P exactly the same outputs, down to the last bit of every score, for every
strategy, top_k and caller filter, through the governed path (session, PEP, gateway, marker
budget, validation) and through the store's own search. Ids that are random per request
(request, session, pack, audit ids) are the only difference allowed. On both backends.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from govrag.deployment import Deployment
from govrag.harvest.records import Record
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
#: Ids that are new for every request, and so differ between any two runs.
RANDOM_IDS = {"request_id", "session_id", "context_pack_id", "context_pack_ids", "audit_id"}


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

    def record(self) -> Record:
        return doc(
            self.ext,
            self.text,
            list(self.acl),
            corpus=self.corpus,
            classification=LEVELS[self.level],
            author=self.author,
            metadata={"k": self.meta},
        )


@dataclass(frozen=True)
class Ask:
    query: str
    strategy: Strategy
    top_k: int
    filter_k: int | None


@dataclass(frozen=True)
class Scenario:
    clearance: int
    base: tuple[Doc, ...]
    #: World B: ``base`` with these replacements (b), then these documents added (a, c, d).
    changed: tuple[Doc, ...]
    added: tuple[Doc, ...]
    asks: tuple[Ask, ...]


words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=8).map(" ".join)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    clearance = draw(st.integers(min_value=0, max_value=2))  # (a) needs a level above it

    def a_doc(ext: str, *, level: int, acls: tuple[list[str], ...], corpus: str) -> Doc:
        return Doc(
            ext=ext,
            corpus=corpus,
            text=draw(words),
            acl=tuple(draw(st.sampled_from(acls))),
            level=level,
            author=draw(st.none() | st.sampled_from(["A", "B"])),
            meta=draw(st.integers(min_value=0, max_value=3)),
        )

    every_acl = READABLE_ACLS + UNREADABLE_ACLS
    base = tuple(
        a_doc(
            f"d{i}",
            level=draw(st.integers(min_value=0, max_value=clearance)),
            acls=every_acl,
            corpus=draw(st.sampled_from(["c1", "c2"])),
        )
        for i in range(draw(st.integers(min_value=1, max_value=8)))
    )
    kind = draw(st.sampled_from(["above", "metadata", "tenant", "corpus"]))
    changed: tuple[Doc, ...] = ()
    added: tuple[Doc, ...] = ()
    extra = range(draw(st.integers(min_value=1, max_value=3)))
    if kind == "above":
        added = tuple(
            a_doc(f"x{i}", level=draw(st.integers(clearance + 1, 3)), acls=every_acl,
                  corpus=draw(st.sampled_from(["c1", "c2"])))
            for i in extra
        )  # fmt: skip
    elif kind == "metadata":
        changed = tuple(
            replace(d, meta=draw(st.integers(min_value=0, max_value=3)))
            for d in base
            if list(d.acl) in UNREADABLE_ACLS
        )
    elif kind == "tenant":
        added = tuple(
            replace(a_doc(f"x{i}", level=0, acls=every_acl, corpus="c1"), tenant="t2")
            for i in extra
        )
    else:
        added = tuple(a_doc(f"x{i}", level=0, acls=every_acl, corpus="x") for i in extra)
    asks = tuple(
        Ask(
            query=draw(words),
            strategy=draw(st.sampled_from(list(Strategy))),
            top_k=draw(st.integers(min_value=1, max_value=6)),
            filter_k=draw(st.none() | st.integers(min_value=0, max_value=3)),
        )
        for _ in range(draw(st.integers(min_value=1, max_value=3)))
    )
    return Scenario(clearance, base, changed, added, asks)


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


def observe(dep: Deployment, principal: Principal, ask: Ask) -> list[Any]:
    """Everything P can see of one question: the governed search and the store's own."""
    filters = () if ask.filter_k is None else (MetadataFilter(key="k", value=ask.filter_k),)
    seen: list[Any] = []
    for run in (
        lambda: dep.governed.search(principal, ask.query, strategy=ask.strategy,
                                    top_k=ask.top_k, filters=filters).as_dict(),
        lambda: dep.store.search(principal, SearchRequest(
            query=ask.query, strategy=ask.strategy, top_k=ask.top_k, filters=filters,
            corpora=("c1", "c2"))).model_dump(mode="json"),
    ):  # fmt: skip
        try:
            seen.append(scrub(run()))
        except Exception as exc:  # an error is an output too: its text must not differ
            seen.append(("error", type(exc).__name__, str(exc)))
    return seen


def check(scenario: Scenario, open_world: Callable[[str], Any]) -> None:
    principal = Principal(
        sub="p",
        email="p@x.example",
        tenant="t1",
        doc_entitlements=("c1:read", "c2:read", "x:read"),
        clearance=Classification(scenario.clearance),
    )
    seen = []
    for name, b in (("a", False), ("b", True)):
        with open_world(name) as dep:
            for tenant, records in world_records(scenario, b=b).items():
                load(dep.store, records, tenant)
            seen.append([observe(dep, principal, ask) for ask in scenario.asks])
    assert seen[0] == seen[1]


def deployment_dir(root: Path) -> Path:
    (root / "routes").mkdir(parents=True, exist_ok=True)
    (root / "routes" / "routes.json").write_text(json.dumps(ROUTES))
    return root


def open_deployment(root: Path, store: dict[str, Any]) -> Deployment:
    return Deployment.load(
        root,
        default_tenant="t1",
        default_route="qa",
        store=store,
        embedder={"name": "hash", "dim": 64},
        # A budget no example exhausts: both worlds must show the same markers anyway.
        search={"marker_budget": 10_000},
    )


def deep(n: int) -> settings:
    return settings(
        max_examples=examples(n),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def run_on_sqlite(scenario: Scenario) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = deployment_dir(Path(tmp) / "dep")

        @contextmanager
        def open_world(name: str) -> Iterator[Deployment]:
            store = {"url": f"sqlite:///{Path(tmp) / name}.db", "index_dir": f"{tmp}/{name}-ix"}
            dep = open_deployment(root, store)
            try:
                yield dep
            finally:
                dep.close()

        check(scenario, open_world)


@deep(10)
@given(scenario=scenarios())
def test_sqlite_outputs_do_not_depend_on_what_p_cannot_see(scenario: Scenario) -> None:
    run_on_sqlite(scenario)


@deep(6)
@given(scenario=scenarios())
def test_postgres_outputs_do_not_depend_on_what_p_cannot_see(
    pg_cluster: Any, scenario: Scenario
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = deployment_dir(Path(tmp) / "dep")

        @contextmanager
        def open_world(name: str) -> Iterator[Deployment]:
            dsn = new_pg_database(pg_cluster)
            store = {
                "url": dsn.replace("://postgres", f"://{PG_APP_ROLE}", 1),
                "admin_url": dsn,
                "index_dir": f"{tmp}/{name}-ix",
            }
            dep = open_deployment(root, store)
            try:
                yield dep
            finally:
                dep.close()
                drop_pg_database(pg_cluster, dsn)

        check(scenario, open_world)


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
              Ask("policy", Strategy.HYBRID, 3, None)),
    )  # fmt: skip
    run_on_sqlite(scenario)
