"""The stateful ACL oracle: a world that changes step by step, against the reference model.

``tests/store/test_acl_properties.py`` loads a random world at once and searches it. Here
Hypothesis drives a :class:`~hypothesis.stateful.RuleBasedStateMachine` through the changes a
deployment sees over time, each through the ingest path a connector uses, and after any of
them searches as every caller in every strategy (:func:`acl_model.check_searches`):

- identities bound, rebound to a new email (compare and set) and unbound, each record's
  emails in any case (an address matches in every case); a claim on an account another email
  owns, a rebind naming the wrong previous owner and an unbind sent for someone who does not
  own the account are refused or do nothing, and change nothing;
- group memberships replaced (nesting and cycles allowed);
- documents added, re-sent with another text, ACL (grant, revoke, public), classification,
  corpus or author, and deleted;
- the process switched: two handles on the same storage, as two processes of one deployment
  (each with its own lexical index, as on two hosts); changes and searches go through
  either; and changes sent by another OS process (``ingest_child.py``) with a handle of
  its own.

The model knows nothing of the store: plain dictionaries, the same reference searches as the
random-world test. Both backends; bounded here, ``GOVRAG_DEEP`` (``make test-slow``) runs
four times the examples, and ``make soak`` runs :data:`SOAK_RUNS` times as many machines.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from govrag.embed.hashing import HashEmbedder
from govrag.harvest.ingest import Ingestor, IngestReport
from govrag.harvest.records import DeleteRecord, IdentityRecord, Record
from govrag.store.protocol import KnowledgeStore
from govrag.store.sqlite import SQLiteStore
from govrag.testing import PgServer
from govrag.types import Classification

from acl_model import (
    ACCOUNTS,
    CORPORA,
    EMAILS,
    GROUPS,
    SYSTEMS,
    TENANTS,
    VOCAB,
    RDoc,
    World,
    check_searches,
    doc_record,
)
from conftest import (
    PG_APP_ROLE,
    drop_pg_database,
    examples,
    group,
    ident,
    make_pg_store,
    make_store,
    new_pg_database,
)
from reliability_figures import record

#: ``make soak`` sets ``GOVRAG_SOAK_RUNS``: this many times the machines of ``make test``.
SOAK_RUNS = int(os.environ.get("GOVRAG_SOAK_RUNS", "1"))
#: What the machines of one test did (for the soak's report): steps taken, worlds searched.
DONE: Counter[str] = Counter()

texts = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=10).map(" ".join)
acls = st.sets(st.sampled_from([*ACCOUNTS, *GROUPS, "*"]), max_size=3)
levels = st.integers(min_value=0, max_value=3)
authors = st.none() | st.sampled_from(ACCOUNTS)
queries = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5).map(" ".join)

Key = tuple[str, str, str]  # tenant, source system, account / group / external id
ALL_ACCOUNTS: list[Key] = list(itertools.product(TENANTS, SYSTEMS, ACCOUNTS))
#: Opens two handles on new storage under a folder (as two processes of one deployment
#: would have them), and gives what closes both and disposes of the storage.
Opener = Callable[[Path], tuple[tuple[KnowledgeStore, KnowledgeStore], Callable[[], None]]]


class Writer:
    """Another OS process that sends changes through its own store handle
    (``ingest_child.py``); one per test, opened on each machine's storage in turn."""

    def __init__(self) -> None:
        child = Path(__file__).with_name("ingest_child.py")
        self.process = subprocess.Popen([sys.executable, str(child)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)  # fmt: skip

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the writer process died (exit code {self.process.poll()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def open(self, store: dict[str, str]) -> None:
        self._ask({"op": "open", "store": store})

    def close(self) -> None:
        self._ask({"op": "close"})

    def send(self, tenant: str, record: Record) -> IngestReport:
        line = record.model_dump(mode="json")
        if isinstance(line.get("classification"), int):  # as a feed names it
            line["classification"] = Classification(line["classification"]).name.lower()
        a = self._ask({"op": "send", "tenant": tenant, "record": line})
        return IngestReport(errors=a["errors"], conflicts=a["conflicts"], messages=a["messages"])

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(60)


@contextmanager
def writer() -> Iterator[Writer]:
    w = Writer()
    try:
        yield w
    finally:
        w.stop()


class AclOracle(RuleBasedStateMachine):
    """One store and the model of what was sent to it."""

    def __init__(self, open_stores: Opener, child: Writer | None = None):
        super().__init__()
        #: Another OS process the changes may go through (see :meth:`switch_process`).
        self.child = child
        self.via_child = False
        self._tmp = tempfile.TemporaryDirectory(prefix="govrag-oracle-")
        self.stores, self._dispose = open_stores(Path(self._tmp.name))
        #: The handle the next write goes through (a rule may switch it).
        self.store = self.stores[0]
        self.owners: dict[Key, str] = {}  # (tenant, system, account) -> email
        self.groups: dict[Key, frozenset[str]] = {}
        self.docs: dict[Key, RDoc] = {}  # (tenant, system, external id), in ingest order
        self._ids = itertools.count()
        self.searched = True  # nothing to search before the first change

    def teardown(self) -> None:
        DONE["machines"] += 1
        try:
            self._dispose()
        finally:
            self._tmp.cleanup()

    # -- what a connector sends --------------------------------------------------------------
    def _send(self, tenant: str, record: Record) -> IngestReport:
        DONE["changes sent"] += 1
        if self.via_child and self.child is not None:
            DONE["changes sent by another process"] += 1
            self.searched = False
            return self.child.send(tenant, record)
        ingestor = Ingestor(self.store, tenant, embedder=self.store.embedder)
        ingestor.add("oracle", record)
        ingestor.flush()
        self.searched = False
        return ingestor.report

    def _accepted(self, tenant: str, record: Record) -> None:
        report = self._send(tenant, record)
        assert report.errors == 0, report.messages

    def world(self) -> World:
        identities = frozenset((t, e, s, a) for (t, s, a), e in self.owners.items())
        groups = {k: v for k, v in self.groups.items() if v}
        return World(identities=identities, groups=groups, docs=tuple(self.docs.values()))

    @initialize(data=st.data())
    def seed_world(self, data: st.DataObject) -> None:
        """Start from a world worth searching: each email of the model bound to an account
        of tenant t1 (the governed callers' tenant), and a few documents there and in t2."""
        # Everything drawn first: the store's work between draws would change the global
        # random state Hypothesis watches during a draw (the connection pool's jitter).
        accounts = [
            (data.draw(st.sampled_from(SYSTEMS), label="system"),
             data.draw(st.sampled_from(ACCOUNTS), label="account"))
            for _ in EMAILS[:3]
        ]  # fmt: skip
        n = data.draw(st.integers(min_value=2, max_value=8), label="documents")
        docs = [
            (data.draw(st.sampled_from(["t1", "t1", "t2"]), label="tenant"),
             data.draw(st.sampled_from(SYSTEMS), label="system"),
             data.draw(st.sampled_from(CORPORA), label="corpus"), data.draw(texts, label="text"),
             data.draw(acls, label="acl"), data.draw(levels, label="level"),
             data.draw(authors, label="author"))
            for _ in range(n)
        ]  # fmt: skip
        chained = (data.draw(st.sampled_from(CORPORA), label="corpus"),
                   data.draw(texts, label="text"), data.draw(levels, label="level"))  # fmt: skip
        for email, (system, account) in zip(EMAILS[:3], accounts, strict=True):
            self.bind("t1", email, system, account)
        # A chain two groups deep to the first caller's account (g0 holds g1 holds it), in
        # its system, and a document granted to g0 alone: readable only through the chain.
        system, account = accounts[0]
        self.set_members("t1", system, "g1", {account})
        self.set_members("t1", system, "g0", {"g1"})
        corpus, text, level = chained
        self.add_document("t1", system, corpus, text, {"g0"}, level, None)
        for args in docs:
            self.add_document(*args)

    # -- identities ------------------------------------------------------------------------
    @rule(tenant=st.sampled_from(TENANTS), email=st.sampled_from(EMAILS[:3]),
          system=st.sampled_from(SYSTEMS), account=st.sampled_from(ACCOUNTS))  # fmt: skip
    def bind(self, tenant: str, email: str, system: str, account: str) -> None:
        owner = self.owners.get((tenant, system, account))
        report = self._send(tenant, ident(email.upper() if owner else email, account, system))
        if owner is None or owner == email:
            assert report.errors == 0, report.messages
            self.owners[(tenant, system, account)] = email
        else:  # another email owns it: refused, nothing changes
            assert report.conflicts == 1, report.messages

    @precondition(lambda self: bool(self.owners))
    @rule(data=st.data(), email=st.sampled_from(EMAILS[:3]))
    def rebind(self, data: st.DataObject, email: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.owners)), label="account")
        tenant, system, account = key
        record = IdentityRecord(type="identity", email=email, source_system=system,
                                account_id=account,
                                previous_email=self.owners[key].capitalize())  # fmt: skip
        self._accepted(tenant, record)
        self.owners[key] = email

    @rule(data=st.data(), email=st.sampled_from(EMAILS[:3]))
    def rebind_from_the_wrong_owner(self, data: st.DataObject, email: str) -> None:
        """A rebind whose previous owner is not the account's changes nothing: refused, or a
        no-op when the account is the new email's already."""
        key = data.draw(st.sampled_from(ALL_ACCOUNTS), label="account")  # owned or not
        tenant, system, account = key
        owner = self.owners.get(key)
        wrong = data.draw(st.sampled_from([e for e in EMAILS if e not in (owner, email)]))
        record = IdentityRecord(type="identity", email=email, source_system=system,
                                account_id=account, previous_email=wrong)  # fmt: skip
        report = self._send(tenant, record)
        if owner == email:
            assert report.errors == 0, report.messages
        else:
            assert report.conflicts == 1, report.messages

    @precondition(lambda self: bool(self.owners))
    @rule(data=st.data())
    def unbind_for_another(self, data: st.DataObject) -> None:
        """An unbind sent for an email that does not own the account removes nothing."""
        key = data.draw(st.sampled_from(sorted(self.owners)), label="account")
        tenant, system, account = key
        other = data.draw(st.sampled_from([e for e in EMAILS if e != self.owners[key]]))
        record = IdentityRecord(type="identity", email=other, source_system=system,
                                account_id=account, active=False)  # fmt: skip
        self._accepted(tenant, record)

    @precondition(lambda self: bool(self.owners))
    @rule(data=st.data())
    def unbind(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.owners)), label="account")
        tenant, system, account = key
        record = IdentityRecord(type="identity", email=self.owners[key].upper(),
                                source_system=system, account_id=account,
                                active=False)  # fmt: skip
        self._accepted(tenant, record)
        del self.owners[key]

    # -- groups ----------------------------------------------------------------------------
    @rule(tenant=st.sampled_from(TENANTS), system=st.sampled_from(SYSTEMS),
          name=st.sampled_from(GROUPS),
          members=st.sets(st.sampled_from(ACCOUNTS + GROUPS), max_size=3))  # fmt: skip
    def set_members(self, tenant: str, system: str, name: str, members: set[str]) -> None:
        self._accepted(tenant, group(name, sorted(members), system))
        self.groups[(tenant, system, name)] = frozenset(members)

    # -- documents -------------------------------------------------------------------------
    def _put(self, d: RDoc) -> None:
        self._accepted(d.tenant, doc_record(d))
        self.docs[(d.tenant, d.system, d.ext)] = d

    @precondition(lambda self: len(self.docs) < 14)
    @rule(tenant=st.sampled_from(TENANTS), system=st.sampled_from(SYSTEMS),
          corpus=st.sampled_from(CORPORA), text=texts, acl=acls, level=levels,
          author=authors)  # fmt: skip
    def add_document(self, tenant: str, system: str, corpus: str, text: str,
                     acl: set[str], level: int, author: str | None) -> None:  # fmt: skip
        ext = f"d{next(self._ids)}"
        self._put(RDoc(tenant, system, ext, corpus, text, frozenset(acl), level, author))

    @precondition(lambda self: bool(self.docs))
    @rule(data=st.data(), change=st.sampled_from(["text", "acl", "level", "corpus", "author"]))
    def change_document(self, data: st.DataObject, change: str) -> None:
        key = data.draw(st.sampled_from(list(self.docs)), label="document")
        d = self.docs[key]
        new = {
            "text": lambda: RDoc(*key[:2], d.ext, d.corpus, data.draw(texts), d.acl, d.level,
                                 d.author),
            "acl": lambda: RDoc(*key[:2], d.ext, d.corpus, d.text, frozenset(data.draw(acls)),
                                d.level, d.author),
            "level": lambda: RDoc(*key[:2], d.ext, d.corpus, d.text, d.acl, data.draw(levels),
                                  d.author),
            "corpus": lambda: RDoc(*key[:2], d.ext, data.draw(st.sampled_from(CORPORA)), d.text,
                                   d.acl, d.level, d.author),
            "author": lambda: RDoc(*key[:2], d.ext, d.corpus, d.text, d.acl, d.level,
                                   data.draw(authors)),
        }[change]()  # fmt: skip
        self._put(new)

    # Down to two documents, not fewer: a machine that deleted its world would search
    # nothing for the rest of its steps (empty worlds are the random-world test's).
    @precondition(lambda self: len(self.docs) > 2)
    @rule(data=st.data())
    def delete_document(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(list(self.docs)), label="document")
        tenant, system, ext = key
        self._accepted(tenant, DeleteRecord(type="delete", source_system=system,
                                            external_id=ext))  # fmt: skip
        del self.docs[key]

    # -- processes -------------------------------------------------------------------------
    @rule(to=st.integers(min_value=0, max_value=2))
    def switch_process(self, to: int) -> None:
        """Later writes and searches go through the other handle: what one process wrote,
        the other must search with the same rights (its derived indexes catch up). ``2``:
        later changes are sent by another OS process, when the test runs one."""
        self.via_child = to == 2 and self.child is not None
        if to < 2:
            self.store = self.stores[to]

    # -- searches --------------------------------------------------------------------------
    @rule(query=queries, k=st.integers(min_value=1, max_value=6),
          views=st.lists(st.tuples(levels, st.none() | st.lists(st.sampled_from(CORPORA),
                                                               min_size=1, unique=True)),
                         min_size=1, max_size=3))  # fmt: skip
    def search(self, query: str, k: int, views: list[tuple[int, list[str] | None]]) -> None:
        """The same query at one to three clearances and corpus lists, with nothing changed
        between them: what a search kept (a filter's rows) must serve only its own view."""
        world = self.world()
        for ceiling, corpora in views:
            check_searches(self.store, world, query, ceiling, k, corpora, ordered=False)
        self.searched = True
        DONE["worlds searched"] += 1

    @invariant()
    def searched_after_each_change(self) -> None:
        """A search after every change, whatever Hypothesis drew: no step goes unchecked."""
        if not self.searched:
            check_searches(self.store, self.world(), "wire limit risk", 3, 4, None,
                           ordered=False)  # fmt: skip
            self.searched = True
            DONE["worlds searched"] += 1


def close_all(stores: tuple[KnowledgeStore, ...]) -> None:
    for store in stores:
        store.close()


@contextmanager
def no_local_constants() -> Iterator[None]:
    """Hypothesis also draws constants it finds in the source of every module imported so far
    (its "local constants", cached per process), so a derandomized run's examples depend on
    what other tests imported before it in the same process: the governed oracle ran other
    machines after the served-load test than alone, and saw no document shown. A fixed run
    must be the same run wherever it runs, so it gets none. Internal names of Hypothesis
    (6.1xx): where they are missing, the run is left as it is."""
    try:
        from hypothesis.internal.cache import LRUCache
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        yield
        return
    get, cache = (getattr(providers, n, None) for n in ("_get_local_constants", "CONSTANTS_CACHE"))
    if get is None or cache is None:
        yield
        return
    providers._get_local_constants = Constants  # an empty set of constants
    providers.CONSTANTS_CACHE = LRUCache(1024)  # not the process's: it holds local ones
    try:
        yield
    finally:
        providers._get_local_constants, providers.CONSTANTS_CACHE = get, cache


def run_machines(
    machine: Callable[[], AclOracle],
    machines: int,
    steps: int,
    *,
    fixed: bool = False,
    name: str | None = None,
) -> None:
    """``machines`` runs of ``machine`` (:data:`SOAK_RUNS` times as many), ``steps`` each.
    ``fixed``: the same machines on every run but a soak's (a test that asserts it saw
    enough to prove something must not depend on the draw). ``name``: what the soak's
    report calls the run."""
    from hypothesis.stateful import run_state_machine_as_test

    DONE.clear()
    derandomize = fixed and SOAK_RUNS == 1
    with no_local_constants() if derandomize else nullcontext():
        run_state_machine_as_test(
            machine,
            settings=settings(max_examples=machines * SOAK_RUNS, stateful_step_count=steps,
                              deadline=None, suppress_health_check=[HealthCheck.too_slow],
                              derandomize=derandomize),
        )  # fmt: skip
    if name is not None:
        record(name, {"steps per machine (at most)": steps, **DONE})


def test_sqlite_holds_the_reference_model_as_the_world_changes() -> None:
    def open_stores(root: Path) -> tuple[tuple[KnowledgeStore, KnowledgeStore], Callable[[], None]]:
        # One database; each process keeps its own lexical index, as on two hosts.
        other = SQLiteStore(root / "govrag.db", index_dir=root / "index-b",
                            embedder=HashEmbedder(dim=64))  # fmt: skip
        stores = (make_store(root), other)
        child.open({"kind": "sqlite", "db": str(root / "govrag.db"),
                    "index": str(root / "index-c")})  # fmt: skip

        def dispose() -> None:
            child.close()
            close_all(stores)

        return stores, dispose

    with writer() as child:
        run_machines(lambda: AclOracle(open_stores, child), machines=examples(60), steps=40,
                     name="acl-oracle-sqlite")  # fmt: skip


# The connection pool's background threads draw from the global random module (jitter)
# while Hypothesis draws: not this test's strategies, which use none.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
def test_postgres_holds_the_reference_model_as_the_world_changes(pg_cluster: PgServer) -> None:
    from psycopg.conninfo import make_conninfo

    def open_stores(root: Path) -> tuple[tuple[KnowledgeStore, KnowledgeStore], Callable[[], None]]:
        dsn = new_pg_database(pg_cluster)
        # Each process keeps its own lexical index, as on two hosts.
        stores = (
            make_pg_store(pg_cluster, dsn, root / "a"),
            make_pg_store(pg_cluster, dsn, root / "b"),
        )
        child.open({"kind": "postgres", "url": make_conninfo(dsn, user=PG_APP_ROLE),
                    "admin_url": dsn, "index": str(root / "c")})  # fmt: skip

        def dispose() -> None:
            child.close()
            close_all(stores)
            drop_pg_database(pg_cluster, dsn)

        return stores, dispose

    with writer() as child:
        run_machines(lambda: AclOracle(open_stores, child), machines=examples(15), steps=30,
                     name="acl-oracle-postgres")  # fmt: skip
