"""The stateful ACL oracle through the application API: governed searches (the gateway's
result cache on, each asked twice so the second may be a cache hit) and governed answers,
while the world changes under them.

The machine is :class:`test_acl_oracle.AclOracle` (the same changes, the same store-level
checks through either of two handles) on a deployment's store, with two more rules. Its
callers are the deployment's principals, each with a clearance and the corpora it is
entitled to (the PDP's ``<corpus>:read``); all are in tenant ``t1``, so documents of ``t2``
must never reach them. For each governed search and answer, against the reference model:

- every chunk of every pack, and every citation, is of a document the caller may read now
  (its tenant, an entitled corpus of the route, at or below its clearance, its ACL);
- a search repeated with nothing changed in between returns the same chunks, and every
  search returns what the same search on the deployment with the cache off returns (a
  ranking cached before a grant, an identity or a group change is stale);
- a hidden-item marker names only contacts of documents that count for it (its budget may
  withhold one, never invent one).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

import govrag
from govrag.app import Govrag, Memory
from govrag.deployment import Deployment
from govrag.errors import NotFoundError
from govrag.harvest.ingest import IngestReport
from govrag.harvest.records import Record
from govrag.store.protocol import KnowledgeStore
from govrag.testing import PgServer
from govrag.types import ChunkOrigin, HiddenMarker, Principal, Strategy
from govrag.writeback.models import AdmissionGate

from acl_model import (
    CORPORA,
    EMAILS,
    GROUPS,
    LEVELS,
    marker_contacts,
    principals,
    readable_by,
)
from conftest import drop_pg_database, examples, make_pg_store, make_store, pg_store_settings
from reliability_figures import record
from test_acl_oracle import DONE, AclOracle, close_all, queries, run_machines

#: sub -> (email, clearance, entitled corpora): a caller per email of the model (the last one
#: is never bound to an account: it may read nothing), one entitled to ``c1`` alone, and one
#: (``u4``) whose claims differ from ``u0``'s only by its email: the result cache must never
#: hand one the other's ranking, though their clearance and entitlements are the same.
CALLERS = {
    "u0": (EMAILS[0], 1, CORPORA),
    "u1": (EMAILS[1], 2, CORPORA[:1]),
    "u2": (EMAILS[2], 3, CORPORA),
    "u3": (EMAILS[3], 0, CORPORA),
    "u4": (EMAILS[2], 1, CORPORA),
}
Storage = Callable[[Path], tuple[dict[str, Any], Callable[[], None]]]
#: What the governed rules saw, over one test's machines: a run whose checks saw no chunk,
#: citation or marker would prove nothing, so each test asserts it saw some.
SEEN: Counter[str] = Counter()


def _deployment(root: Path, store: dict[str, Any]) -> Deployment:
    govrag.init(root, tenant="t1", corpora=list(CORPORA))
    rows = [{"sub": sub, "email": email, "tenant": "t1", "clearance": LEVELS[level],
             "doc_entitlements": [f"{c}:read" for c in corpora]}
            for sub, (email, level, corpora) in CALLERS.items()]  # fmt: skip
    (root / "principals.json").write_text(json.dumps({"principals": rows}))
    return _open(root, store)


def _open(root: Path, store: dict[str, Any], **overrides: Any) -> Deployment:
    writeback = {"enabled": True, "allowed_agents": sorted(CALLERS)}
    return Deployment.load(root, store=store, embedder={"name": "hash", "dim": 64},
                           writeback=writeback, **overrides)  # fmt: skip


class GovernedOracle(AclOracle):
    """:class:`AclOracle` on a deployment's store, with governed searches and answers."""

    def __init__(self, storage: Storage, second: Callable[[dict[str, Any], Path], KnowledgeStore]):
        self.dep: Deployment | None = None
        self.uncached: Deployment | None = None

        def open_stores(
            root: Path,
        ) -> tuple[tuple[KnowledgeStore, KnowledgeStore], Callable[[], None]]:
            config, drop = storage(root)
            dep = self.dep = _deployment(root / "deploy", config)
            # The same deployment with the gateway's result cache off: what a search must
            # return now, against which a cached answer is compared.
            uncached = self.uncached = _open(root / "deploy", config, gateway={"cache_entries": 0})
            other = second(config, root / "other")

            def dispose() -> None:
                try:
                    close_all((other,))
                    uncached.close()
                    dep.close()
                finally:
                    drop()

            return (dep.store, other), dispose

        super().__init__(open_stores)
        assert self.dep is not None and self.uncached is not None
        self.app = Govrag(self.dep)
        self.fresh = Govrag(self.uncached)
        #: The last searches made (query, strategy, top-k), to ask again later.
        self.recent: list[tuple[str, Strategy, int]] = []
        #: Whether a change was sent since the invariant last ran.
        self.changed = False
        #: Each caller's own session (opened at its first memory), and what was remembered
        #: in each session: the only memory a search in that session may show.
        self.sessions: dict[str, str] = {}
        self.memories: dict[str, set[str]] = {}

    def _caller(self, sub: str) -> tuple[Principal, set[str], list[str]]:
        """The caller, the documents it may read now, and the corpora it may search."""
        assert self.dep is not None
        caller = self.dep.principal(sub)
        _, level, entitled = CALLERS[sub]
        world = self.world()
        mine = principals(world, "t1", caller.email)
        can = {d.ext for d in world.docs if readable_by(mine, d, "t1", level, list(entitled))}
        return caller, can, list(entitled)

    def _question(self, data: st.DataObject) -> str:
        """Words of the vocabulary, or the words of a document one of the callers may read
        (a question some of them can get an answer to)."""
        readable = set().union(*(self._caller(sub)[1] for sub in CALLERS))
        texts = sorted({d.text for d in self.docs.values() if d.ext in readable})
        return data.draw(queries | st.sampled_from(texts) if texts else queries, label="words")

    @rule(data=st.data(), strategy=st.sampled_from(list(Strategy)),
          k=st.integers(min_value=1, max_value=6))  # fmt: skip
    def governed_search(self, data: st.DataObject, strategy: Strategy, k: int) -> None:
        """Every caller searches; each search is asked twice (the second may be a hit of the
        gateway's result cache)."""
        self._search_all(self._question(data), strategy, k)

    def _send(self, tenant: str, record: Record) -> IngestReport:
        self.changed = True
        return super()._send(tenant, record)

    @invariant()
    def last_search_after_each_change(self) -> None:
        """After every change, the last governed search again: the cache's ranking from
        before the change must give what the same search uncached gives now."""
        if self.changed and self.recent:
            self._search_all(*self.recent[-1])
        self.changed = False

    @rule(data=st.data())
    def grant_through_a_group(self, data: st.DataObject) -> None:
        """A search the cache keeps, then a caller's account joins a group that a document
        the search matched is granted to: the invariant's search after the change must find
        what the same search uncached finds (the grant, not the ranking from before it)."""
        candidates = sorted(
            (d.text, d.system, g, account)
            for d in self.docs.values() if d.tenant == "t1"
            for g in sorted(d.acl & set(GROUPS))
            for (tenant, system, account) in self.owners
            if tenant == "t1" and system == d.system
            and account not in self.groups.get(("t1", system, g), frozenset())
        )  # fmt: skip
        if not candidates:
            return
        text, system, g, account = data.draw(st.sampled_from(candidates), label="grant")
        self._search_all(text, Strategy.KEYWORD, 5)
        members = self.groups.get(("t1", system, g), frozenset()) | {account}
        self.set_members("t1", system, g, set(members))
        SEEN["grants through a group"] += 1

    @precondition(lambda self: bool(self.recent))
    @rule(data=st.data())
    def search_again(self, data: st.DataObject) -> None:
        """A search made before, asked again after whatever changed since: a ranking the
        cache kept from before a revocation must not hand out what was revoked."""
        self._search_all(*data.draw(st.sampled_from(self.recent), label="earlier search"))

    def _search_all(self, query: str, strategy: Strategy, k: int) -> None:
        self.recent = [*self.recent[-7:], (query, strategy, k)]
        for sub in CALLERS:
            caller, can, entitled = self._caller(sub)
            first = self.app.callers.search(caller, query, strategy=strategy, top_k=k)
            again = self.app.callers.search(caller, query, strategy=strategy, top_k=k)
            own = self.sessions.get(sub)
            within = [] if own is None else [
                self.app.callers.search(caller, query, strategy=strategy, top_k=k, session=own)
            ]  # fmt: skip
            for result, session in ((first, None), (again, None), *((r, own) for r in within)):
                chunks = [c for p in result.packs for c in p.chunks]
                memory = {c.text for c in chunks if c.origin == ChunkOrigin.SESSION_MEMORY}
                # Memory only in the session it was written in, and only what was written.
                assert memory <= self.memories.get(session or "", set()), (sub, memory)
                SEEN["memories shown"] += len(memory)
                chunks = [c for c in chunks if c.origin != ChunkOrigin.SESSION_MEMORY]
                leaked = {c.doc_id for c in chunks} - can
                assert not leaked, f"{sub} was handed {sorted(leaked)} ({query!r}, {strategy})"
                self._check_marker(result.hidden, query, can, entitled, sub)
            assert [c.chunk_id for c in again.results] == [c.chunk_id for c in first.results]
            # Not only nothing revoked: nothing granted since missing either (a cached ranking
            # from before a grant, an identity or a group change is stale, not just unsafe).
            now = self.fresh.callers.search(caller, query, strategy=strategy, top_k=k)
            assert [c.chunk_id for c in first.results] == [c.chunk_id for c in now.results], (
                f"{sub}'s search {query!r} ({strategy}) differs from the same search uncached"
            )
            SEEN["chunks"] += len(first.results)
            SEEN["governed searches"] += 2

    @rule(data=st.data())
    def governed_answer(self, data: st.DataObject) -> None:
        """Every caller asks."""
        question = self._question(data)
        for sub in CALLERS:
            caller, can, entitled = self._caller(sub)
            answer = self.app.callers.ask(caller, question)
            cited = {c.doc_id for c in answer.citations}
            packed = {c.doc_id for p in answer.packs for c in p.chunks}
            used = (cited | packed) - can
            assert not used, f"{sub}'s answer used {sorted(used)} ({question!r})"
            assert cited <= packed, "a citation that is not in the evidence"
            SEEN["citations"] += len(cited)
            SEEN["governed answers"] += 1
            self._check_marker(answer.hidden, question, can, entitled, sub)

    @rule(sub=st.sampled_from(sorted(CALLERS)), words=queries,
          gate=st.sampled_from(list(AdmissionGate)))  # fmt: skip
    def remember(self, sub: str, words: str, gate: AdmissionGate) -> None:
        """A caller writes memory back into its own session through the admission gates:
        admitted unless raw model output; it shows in that session's searches only."""
        caller, _, _ = self._caller(sub)
        if sub not in self.sessions:
            self.sessions[sub] = self.app.callers.open_session(caller).session_id
        session = self.sessions[sub]
        n = sum(len(m) for m in self.memories.values())
        memory = Memory(
            source_turn_id=f"turn-{n}",
            gate=gate,
            content=f"{words} memo{n}",
            confidence=0.9,
            expires_at=datetime.now(UTC) + timedelta(days=1),
        )
        result = self.app.callers.remember(caller, session, memory)
        assert result.admitted == (gate != AdmissionGate.RAW_MODEL_OUTPUT), result
        if result.admitted:
            self.memories.setdefault(session, set()).add(memory.content)
            SEEN["memories written"] += 1

    @rule()
    def list_corpora(self) -> None:
        """Every caller lists the route's corpora: exactly those of its scope it is entitled
        to, in scope order (never one of another tenant, never one it may not search)."""
        for sub, (_, _, entitled) in CALLERS.items():
            caller, _, _ = self._caller(sub)
            listed = [c.corpus for c in self.app.callers.corpora(caller).corpora]
            assert listed == [c for c in CORPORA if c in entitled], (sub, listed)
            SEEN["corpus listings"] += 1

    @precondition(lambda self: bool(self.docs))
    @rule(data=st.data())
    def document_metadata(self, data: st.DataObject) -> None:
        """Every caller asks for one document's metadata: given when it may read it now,
        otherwise the one answer of a document that does not exist (of any tenant)."""
        d = data.draw(st.sampled_from(sorted(self.docs.values(), key=lambda d: d.ext)))
        for sub in CALLERS:
            caller, can, _ = self._caller(sub)
            try:
                got = self.app.callers.document(caller, d.system, d.ext).document
            except NotFoundError as exc:
                assert d.ext not in can, f"{sub} was refused {d.ext}, which it may read"
                absent = str(self._absent(caller, d.system)).replace("{ext}", d.ext)
                assert str(exc) == absent, (str(exc), absent)
                continue
            assert d.ext in can and d.tenant == "t1", f"{sub} was shown {d.ext}"
            assert (got.external_id, got.corpus) == (d.ext, d.corpus)
            SEEN["documents shown"] += 1

    def _absent(self, caller: Principal, system: str) -> NotFoundError:
        try:
            self.app.callers.document(caller, system, "no-such-document")
        except NotFoundError as exc:
            return NotFoundError(str(exc).replace("no-such-document", "{ext}"))
        raise AssertionError("a document that does not exist was found")

    def _check_marker(
        self, hidden: HiddenMarker, query: str, can: set[str], entitled: Sequence[str], sub: str
    ) -> None:
        if not hidden.present:
            return  # absent is always allowed here: the budget may withhold it
        world = self.world()
        _, level, _ = CALLERS[sub]
        askable = [d for d in world.docs
                   if d.tenant == "t1" and d.corpus in entitled and d.level <= level]  # fmt: skip
        contacts = set(marker_contacts(world, askable, can, query))
        named = {(s.source_system, s.author_email) for s in hidden.sources}
        assert named and named <= contacts, f"the marker named {named - contacts} for {sub}"
        SEEN["markers"] += 1


def test_governed_sqlite_holds_the_reference_model() -> None:
    def storage(root: Path) -> tuple[dict[str, Any], Callable[[], None]]:
        root.mkdir(parents=True, exist_ok=True)
        return {"url": f"sqlite:///{root / 'govrag.db'}", "index_dir": str(root / "index")}, (
            lambda: None
        )

    def second(config: dict[str, Any], _: Path) -> KnowledgeStore:
        return make_store(Path(config["url"].removeprefix("sqlite:///")).parent)

    SEEN.clear()
    run_machines(
        lambda: GovernedOracle(storage, second), machines=examples(12), steps=30, fixed=True
    )
    record("governed-oracle-sqlite", {"steps per machine (at most)": 30, **DONE, **SEEN})
    print(f"\ngoverned oracle: {dict(SEEN)}")
    assert min(SEEN["chunks"], SEEN["citations"], SEEN["markers"],
               SEEN["grants through a group"], SEEN["documents shown"],
               SEEN["memories shown"]) > 0, SEEN  # fmt: skip


# The connection pool's background threads draw from the global random module (jitter)
# while Hypothesis draws: not this test's strategies, which use none.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
def test_governed_postgres_holds_the_reference_model(pg_cluster: PgServer) -> None:
    def storage(root: Path) -> tuple[dict[str, Any], Callable[[], None]]:
        config = pg_store_settings(pg_cluster) | {"index_dir": str(root / "index")}
        return config, lambda: drop_pg_database(pg_cluster, config["admin_url"])

    def second(config: dict[str, Any], index: Path) -> KnowledgeStore:
        return make_pg_store(pg_cluster, config["admin_url"], index)

    SEEN.clear()
    run_machines(
        lambda: GovernedOracle(storage, second), machines=examples(8), steps=30, fixed=True
    )
    record("governed-oracle-postgres", {"steps per machine (at most)": 30, **DONE, **SEEN})
    print(f"\ngoverned oracle: {dict(SEEN)}")
    # Its fewer machines draw few answerable questions (the SQLite test's cite): what it
    # must have seen is chunks, markers and grants.
    assert min(SEEN["chunks"], SEEN["markers"], SEEN["grants through a group"]) > 0, SEEN
