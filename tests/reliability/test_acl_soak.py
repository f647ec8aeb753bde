"""The ACL oracle at scale: hundreds of identities, thousands of queries, rights changing.

``test_acl_oracle.py`` explores small worlds step by step; this one holds a large one to
the same reference model (``acl_model.py``): 520 identities over two source systems and two
tenants, 60 nested groups, 1,200 documents, and a stream of queries by random callers in
every strategy, with a batch of rights changes (grants, revocations, rebound and unbound
identities, group changes, reclassification, moves, deletions, new documents) every
:data:`CHANGE_EVERY` queries, each sent through the ingest path. Every result must be
readable by its caller, keyword and semantic rankings must be the reference top-k over what
the caller may read, and the hidden-item marker must follow its rule.

``make test`` runs :data:`QUERIES` queries per backend; ``make soak`` sets
``GOVRAG_SOAK_QUERIES`` (20,000) and prints what it checked.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from govrag.embed.hashing import HashEmbedder
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DeleteRecord, IdentityRecord, Record
from govrag.store.protocol import KnowledgeStore
from govrag.types import Classification, Principal, SearchRequest, Strategy

from acl_model import (
    RDoc,
    World,
    bm25,
    check_marker,
    check_topk,
    doc_record,
    principals,
    readable_by,
)
from conftest import StoreFactory, group, ident
from reliability_figures import record

QUERIES = int(os.environ.get("GOVRAG_SOAK_QUERIES", "400"))
CHANGE_EVERY = 100
CHANGES = 12
TENANTS = ("t1", "t2")
SYSTEMS = ("s1", "s2")
CORPORA = ("c1", "c2", "c3")
N_EMAILS = 260  # per tenant: 520 identities in all
N_GROUPS = 30  # per tenant and system
N_DOCS = 600  # per tenant
EPS = 1e-4


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "bcdfghjklmnpqrstvwz"
    words: set[str] = set()
    while len(words) < 160:
        words.add("".join(rng.choice(letters) + rng.choice("aeiou") for _ in range(3)))
    return sorted(words)


@dataclass
class Model:
    """What was sent to the store, as plain dictionaries."""

    owners: dict[tuple[str, str, str], str] = field(default_factory=dict)
    groups: dict[tuple[str, str, str], frozenset[str]] = field(default_factory=dict)
    docs: dict[tuple[str, str, str], RDoc] = field(default_factory=dict)
    version: int = 0

    def world(self) -> World:
        return World(
            identities=frozenset((t, e, s, a) for (t, s, a), e in self.owners.items()),
            groups={k: v for k, v in self.groups.items() if v},
            docs=tuple(self.docs.values()),
        )


class Soak:
    def __init__(self, store: KnowledgeStore, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.vocab = _vocabulary(self.rng)
        self.model = Model()
        self.emails = {t: [f"u{i:03d}.{t}@x.example" for i in range(N_EMAILS)] for t in TENANTS}
        self.accounts = [f"a{i:03d}" for i in range(N_EMAILS)]
        self.group_ids = [f"g{i:02d}" for i in range(N_GROUPS)]
        self.embedder = HashEmbedder(dim=64)
        self._vectors: dict[str, np.ndarray] = {}
        self._principals: dict[tuple[int, str, str], set[tuple[str, str]]] = {}
        self.checked = {"identities": 0, "searches": 0, "results": 0, "changes": 0, "markers": 0}

    # -- sending ---------------------------------------------------------------------------
    def send(self, tenant: str, records: list[Record]) -> None:
        ingestor = Ingestor(self.store, tenant, embedder=self.store.embedder)
        for i, item in enumerate(records):
            ingestor.add(f"soak {i}", item)
        ingestor.flush()
        assert ingestor.report.errors == 0, ingestor.report.messages
        self.model.version += 1

    def _text(self) -> str:
        return " ".join(self.rng.choices(self.vocab, k=self.rng.randint(2, 10)))

    def _acl(self) -> frozenset[str]:
        pool = [*self.rng.sample(self.accounts, 2), *self.rng.sample(self.group_ids, 2)]
        acl = set(self.rng.sample(pool, self.rng.randint(0, 3)))
        if self.rng.random() < 0.05:
            acl.add("*")
        return frozenset(acl)

    def _new_doc(self, tenant: str, ext: str) -> RDoc:
        return RDoc(
            tenant,
            self.rng.choice(SYSTEMS),
            ext,
            self.rng.choice(CORPORA),
            self._text(),
            self._acl(),
            self.rng.randint(0, 3),
            self.rng.choice([None, *self.accounts[:40]]),
        )

    def build(self) -> None:
        m = self.model
        for tenant in TENANTS:
            records: list[Record] = []
            for i, email in enumerate(self.emails[tenant]):
                system = SYSTEMS[i % 2]
                m.owners[(tenant, system, self.accounts[i])] = email
                records.append(ident(email, self.accounts[i], system))
            for system in SYSTEMS:
                for g in self.group_ids:
                    members = frozenset(
                        self.rng.sample(self.accounts, 6) + self.rng.sample(self.group_ids, 1)
                    )
                    m.groups[(tenant, system, g)] = members
                    records.append(group(g, sorted(members), system))
            for i in range(N_DOCS):
                d = self._new_doc(tenant, f"{tenant}-d{i}")
                m.docs[(tenant, d.system, d.ext)] = d
                records.append(doc_record(d))
            self.send(tenant, records)

    # -- changing --------------------------------------------------------------------------
    def change(self) -> None:
        m = self.model
        tenant = self.rng.choice(TENANTS)
        kind = self.rng.choice(
            [
                "grant",
                "revoke",
                "rebind",
                "unbind",
                "bind",
                "group",
                "reclassify",
                "move",
                "rewrite",
                "delete",
                "add",
            ]
        )
        docs = [k for k in m.docs if k[0] == tenant]
        owned = [k for k in m.owners if k[0] == tenant]
        if kind in ("grant", "revoke", "reclassify", "move", "rewrite", "delete") and docs:
            key = self.rng.choice(docs)
            d = m.docs[key]
            if kind == "delete":
                self.send(
                    tenant, [DeleteRecord(type="delete", source_system=d.system, external_id=d.ext)]
                )
                del m.docs[key]
                self.checked["changes"] += 1
                return
            new = {
                "grant": lambda: replace(d, acl=d.acl | {self.rng.choice(self.accounts)}),
                "revoke": lambda: replace(d, acl=frozenset(sorted(d.acl)[1:])),
                "reclassify": lambda: replace(d, level=self.rng.randint(0, 3)),
                "move": lambda: replace(d, corpus=self.rng.choice(CORPORA)),
                "rewrite": lambda: replace(d, text=self._text()),
            }[kind]()
            self.send(tenant, [doc_record(new)])
            m.docs[key] = new
        elif kind in ("rebind", "unbind") and owned:
            key = self.rng.choice(owned)
            _, system, account = key
            if kind == "rebind":
                email = self.rng.choice(self.emails[tenant])
                record = IdentityRecord(
                    type="identity",
                    email=email,
                    source_system=system,
                    account_id=account,
                    previous_email=m.owners[key],
                )
                self.send(tenant, [record])
                m.owners[key] = email
            else:
                record = IdentityRecord(
                    type="identity",
                    email=m.owners[key],
                    source_system=system,
                    account_id=account,
                    active=False,
                )
                self.send(tenant, [record])
                del m.owners[key]
        elif kind == "bind":
            free = [a for a in self.accounts if (tenant, "s1", a) not in m.owners]
            if free:
                email = self.rng.choice(self.emails[tenant])
                self.send(tenant, [ident(email, free[0], "s1")])
                m.owners[(tenant, "s1", free[0])] = email
        elif kind == "group":
            system, g = self.rng.choice(SYSTEMS), self.rng.choice(self.group_ids)
            members = frozenset(
                self.rng.sample(self.accounts, self.rng.randint(0, 6))
                + self.rng.sample(self.group_ids, self.rng.randint(0, 2))
            )
            self.send(tenant, [group(g, sorted(members), system)])
            m.groups[(tenant, system, g)] = members
        else:  # "add", or a change with nothing to change
            d = self._new_doc(tenant, f"{tenant}-n{m.version}")
            self.send(tenant, [doc_record(d)])
            m.docs[(tenant, d.system, d.ext)] = d
        self.checked["changes"] += 1

    # -- searching -------------------------------------------------------------------------
    def _mine(self, world: World, tenant: str, email: str) -> set[tuple[str, str]]:
        key = (self.model.version, tenant, email)
        if key not in self._principals:
            self._principals = {
                k: v for k, v in self._principals.items() if k[0] == self.model.version
            }
            self._principals[key] = principals(world, tenant, email)
        return self._principals[key]

    def _vector(self, text: str) -> np.ndarray:
        if text not in self._vectors:
            self._vectors[text] = self.embedder.embed_documents([text])[0].astype(np.float64)
        return self._vectors[text]

    def query(self, world: World) -> None:
        tenant = self.rng.choice(TENANTS)
        # A few callers nobody knows (no identity: nothing, not even the marker).
        email = self.rng.choice([*self.emails[tenant], "stranger@x.example"])
        ceiling = self.rng.randint(0, 3)
        corpora = self.rng.choice([None, [self.rng.choice(CORPORA)], list(CORPORA[:2])])
        strategy = self.rng.choice(list(Strategy))
        query = " ".join(self.rng.sample(self.vocab, self.rng.randint(1, 4)))
        k = self.rng.randint(1, 10)
        scope = list(corpora or CORPORA)
        mine = self._mine(world, tenant, email)
        tenant_docs = [d for d in world.docs if d.tenant == tenant]
        can = {d.ext for d in tenant_docs if readable_by(mine, d, tenant, ceiling, scope)}
        caller = Principal(
            sub="soak", email=email, tenant=tenant, clearance=Classification(ceiling)
        )
        request = SearchRequest(
            query=query, strategy=strategy, top_k=k, corpora=tuple(corpora) if corpora else None
        )
        result = self.store.search(caller, request)
        got = [(h.doc_id, h.score) for h in result.results]
        leaked = {e for e, _ in got} - can
        assert not leaked, f"{email} got {sorted(leaked)} it may not read ({request})"
        if strategy is Strategy.KEYWORD:
            check_topk(got, bm25([d for d in tenant_docs if d.ext in can], query), k)
        elif strategy is Strategy.SEMANTIC:
            q = self.embedder.embed_query(query).astype(np.float64)
            dense = {d.ext: float(self._vector(d.text) @ q) for d in tenant_docs if d.ext in can}
            check_topk(got, dense, k)
        else:  # fused: every readable document is embedded, so the vector leg fills it
            assert len(got) == min(k, len(can)), (len(got), k, len(can))
        askable = [d for d in tenant_docs if d.corpus in scope and d.level <= ceiling]
        check_marker(world, tenant, askable, can, result, query, email, ordered=False)
        self.checked["searches"] += 1
        self.checked["results"] += len(got)
        self.checked["markers"] += int(result.hidden.present)

    def run(self, queries: int) -> dict[str, int]:
        self.build()
        self.checked["identities"] = len(self.model.owners)
        world = self.model.world()
        for i in range(queries):
            if i and i % CHANGE_EVERY == 0:
                for _ in range(CHANGES):
                    self.change()
                world = self.model.world()
            self.query(world)
        return self.checked


def test_a_large_world_holds_the_reference_model_as_rights_change(
    open_store: StoreFactory, request: pytest.FixtureRequest
) -> None:
    soak = Soak(open_store(), seed=QUERIES)
    checked = soak.run(QUERIES)
    record(f"acl-soak-{request.node.callspec.id}", checked)
    identities = checked["identities"]
    print(
        f"\nACL soak: {identities} identities, {checked['searches']} searches, "
        f"{checked['results']} results checked, {checked['changes']} rights changes, "
        f"{checked['markers']} markers shown; 0 violations"
    )
    assert checked["searches"] == QUERIES
    assert identities >= 500 and checked["changes"] >= CHANGES * ((QUERIES - 1) // CHANGE_EVERY)
    assert checked["markers"] > 0 and checked["results"] > QUERIES  # the checks saw something
