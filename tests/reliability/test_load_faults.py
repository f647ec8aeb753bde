"""``govrag serve`` under load while its dependencies fail (issue 34, item 5).

A served PostgreSQL deployment whose source system is checked live (``[rights] kind =
"http"``, the loopback rights source of ``tests/rights_server.py``) takes searches from
several client threads, as two principals of different rights, through phases:

1. ``healthy``: the rights source answers;
2. ``rights-slow``: it holds every answer past the check's deadline;
3. ``rights-failing``: it answers 503;
4. ``pg-killed``: it answers again, and govrag's database connections are ended
   (``pg_terminate_backend``) every half second, for a number of rounds;
5. ``recovery``: nothing is killed any more; the time until a search returns results again
   is measured (not asserted: no test depends on timing).

Every response is checked: a 200 may hold only documents its principal may read, by the
stored ACL *and* by the rights source (0 leaks; during the rights faults nothing the source
did not confirm); anything else must be a declared refusal, a problem document of
docs/serving.md's (``store-unavailable``, ``overloaded``, ``deadline-exceeded``), never a
500 or a stack trace. Each phase ends after a number of responses (the fourth: of rounds),
not after a time.
``GOVRAG_LOAD_FAULT_REQUESTS`` sets the responses of each other phase and
``GOVRAG_LOAD_FAULT_KILLS`` the rounds of connections ended (``make soak``: 2,000 and 200).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import govrag
from govrag.testing import PgServer
from rights_server import RightsSource, serve
from server.serving import ServeProcess, bearer, subprocess_env

from conftest import pg_store_settings
from reliability_figures import record

PER_PHASE = int(os.environ.get("GOVRAG_LOAD_FAULT_REQUESTS", "40"))
#: Rounds of ``pg_terminate_backend``, half a second apart (``make soak``: 200).
KILL_ROUNDS = int(os.environ.get("GOVRAG_LOAD_FAULT_KILLS", "6"))
CLIENTS = 4
DECLARED = {"store-unavailable", "overloaded", "deadline-exceeded"}
WORDS = ["wire", "limit", "loan", "risk", "audit", "policy", "credit", "fraud", "model"]
#: sub -> the source account it is bound to.
ACCOUNTS = {"ana": "S-1", "ben": "S-2"}


def _records() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"type": "identity", "email": f"{sub}@bank.example", "source_system": "sp",
         "account_id": account} for sub, account in ACCOUNTS.items()
    ]  # fmt: skip
    for i in range(60):
        text = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(20))
        acl = [["S-1"], ["S-2"], ["S-1", "S-2"]][i % 3]
        rows.append({"type": "document", "source_system": "sp", "external_id": f"d{i}",
                     "corpus": "policy", "title": f"Doc {i}", "classification": "internal",
                     "acl": acl, "text": text})  # fmt: skip
    return rows


class World:
    """The served deployment, its rights source, and what each principal may read."""

    def __init__(self, root: Path, store: dict[str, str], source: RightsSource, url: str):
        self.root = root
        self.source = source
        self.store = store
        rows = _records()
        #: sub -> documents the stored ACL lets it read.
        self.stored = {sub: {r["external_id"] for r in rows
                             if r["type"] == "document" and acct in r["acl"]}
                       for sub, acct in ACCOUNTS.items()}  # fmt: skip
        # The source agrees with the stored ACL, except that it has taken d0 away from ana
        # (a revocation not yet harvested): the live check must withhold it.
        for sub, acct in ACCOUNTS.items():
            source.grant(acct, *sorted(self.stored[sub] - ({"d0"} if sub == "ana" else set())))
        self.readable = {sub: {d for d in docs if ACCOUNTS[sub] in source.readable.get(d, ())}
                         for sub, docs in self.stored.items()}  # fmt: skip
        assert "d0" in self.stored["ana"] and "d0" not in self.readable["ana"]
        govrag.init(root, tenant="bank", corpora=["policy"])
        principals = [{"sub": sub, "email": f"{sub}@bank.example", "tenant": "bank",
                       "clearance": "internal", "doc_entitlements": ["policy:read"]}
                      for sub in ACCOUNTS]  # fmt: skip
        (root / "principals.json").write_text(json.dumps({"principals": principals}))
        feed = root / "feed.jsonl"
        feed.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with govrag.open(root, store=store, auth={"dev_tokens": True}) as app:
            assert app.operators.ingest(feed).ok
            self.headers = {sub: bearer(app, sub) for sub in ACCOUNTS}
        self.env = subprocess_env(
            GOVRAG_AUTH__DEV_TOKENS="true",
            GOVRAG_STORE__URL=store["url"], GOVRAG_STORE__ADMIN_URL=store["admin_url"],
            GOVRAG_RIGHTS__DEFAULT__KIND="http", GOVRAG_RIGHTS__DEFAULT__URL=url,
            GOVRAG_RIGHTS__DEFAULT__DEADLINE_MS="300",
            GOVRAG_SERVER__RATE_PER_MINUTE="1000000", GOVRAG_SERVER__RATE_BURST="100000",
        )  # fmt: skip


@pytest.fixture(scope="module")
def world(pg_cluster: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    source = RightsSource()
    with serve(source) as url:
        yield World(tmp_path_factory.mktemp("load") / "bank", pg_store_settings(pg_cluster),
                    source, url)  # fmt: skip


class Load:
    """Client threads searching until told to stop, every response checked and counted."""

    def __init__(self, world: World, client_url: str) -> None:
        self.world = world
        self.url = client_url
        self.phase = "healthy"
        self.lock = threading.Lock()
        self.counts: Counter[tuple[str, str]] = Counter()  # (phase, outcome)
        self.problems: list[str] = []
        self.leaks: list[str] = []
        self.stop = threading.Event()
        self.took: dict[str, float] = {}  # seconds per phase (reported, never asserted)
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(CLIENTS)]

    def seen(self, phase: str) -> int:
        with self.lock:
            return sum(n for (p, _), n in self.counts.items() if p == phase)

    def _run(self, i: int) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            n = 0
            while not self.stop.is_set():
                sub = ("ana", "ben")[(i + n) % 2]
                query = " ".join(WORDS[(i + n + k) % len(WORDS)] for k in range(3))
                phase = self.phase
                try:
                    r = client.post("/v1/search", headers=self.world.headers[sub],
                                    json={"query": query, "top_k": 20})  # fmt: skip
                except httpx.TransportError as exc:
                    self._count(phase, f"transport:{type(exc).__name__}", problem=True)
                    continue
                # A request under way while the phase changed belongs to neither.
                self._check(phase if self.phase == phase else "between", sub, r)
                n += 1

    def _count(self, phase: str, outcome: str, *, problem: bool = False) -> None:
        with self.lock:
            self.counts[phase, outcome] += 1
            if problem:
                self.problems.append(f"{phase}: {outcome}")

    def _check(self, phase: str, sub: str, r: httpx.Response) -> None:
        if r.status_code == 200:
            found = {hit["doc_id"] for hit in r.json()["results"]}
            leaked = found - self.world.readable[sub]
            with self.lock:
                self.leaks += [f"{phase}: {sub} got {d}" for d in sorted(leaked)]
            self._count(phase, "200 with results" if found else "200 empty")
            return
        body = r.text
        code = r.json().get("type", "").rsplit("/", 1)[-1] if body.startswith("{") else ""
        declared = r.status_code == 503 and code in DECLARED and "Traceback" not in body
        self._count(phase, f"{r.status_code} {code}", problem=not declared)


def _terminate(store: dict[str, str]) -> int:
    """End every connection of govrag's application role; returns how many."""
    with psycopg.connect(store["admin_url"], autocommit=True) as conn:
        user = psycopg.conninfo.conninfo_to_dict(store["url"])["user"]
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE usename = %s AND pid <> pg_backend_pid()",
                            (user,)).fetchall()  # fmt: skip
    return len(rows)


def _until(load: Load, phase: str, n: int, during: Callable[[], None] | None = None,
           enough: Callable[[], bool] | None = None) -> None:  # fmt: skip
    """Run ``phase`` until it has ``n`` responses (and ``enough()``), calling ``during()``."""
    load.phase = phase
    started = time.monotonic()
    deadline = time.monotonic() + 600  # a hang guard, never a timing assertion
    while load.seen(phase) < n or (enough is not None and not enough()):
        assert time.monotonic() < deadline, f"{phase}: {load.seen(phase)} responses in 600 s"
        if during is not None:
            during()
        time.sleep(0.05)
    load.took[phase] = time.monotonic() - started


def test_served_searches_under_rights_and_database_faults_leak_nothing(world: World) -> None:
    server = ServeProcess("load", world.root, world.env)
    server.wait_ready()
    load = Load(world, str(server.client.base_url))
    ended = Counter[str]()
    try:
        for t in load.threads:
            t.start()
        _until(load, "healthy", PER_PHASE)
        world.source.mode, world.source.delay_s = "read_timeout", 2.0
        world.source.release.clear()
        _until(load, "rights-slow", PER_PHASE // 4)
        world.source.release.set()
        world.source.mode = "5xx"
        _until(load, "rights-failing", PER_PHASE)
        world.source.mode = "ok"

        last = [0.0]

        def kill() -> None:  # a round every half second, so connections come back between
            if time.monotonic() - last[0] >= 0.5:
                ended["connections"] += _terminate(world.store)
                ended["rounds"] += 1
                last[0] = time.monotonic()

        # Rounds, not responses: while connections keep being ended, a response can take a
        # checkout's whole timeout (the figures say how many came back, and how).
        _until(load, "pg-killed", CLIENTS, during=kill,
               enough=lambda: ended["rounds"] >= KILL_ROUNDS)  # fmt: skip
        stopped = time.monotonic()
        load.phase = "recovery"
        while load.counts["recovery", "200 with results"] == 0:
            assert time.monotonic() - stopped < 120, dict(load.counts)
            time.sleep(0.01)
        recovery_s = time.monotonic() - stopped
    finally:
        load.stop.set()
        for t in load.threads:
            t.join(120)
        server.stop()

    assert load.leaks == [], load.leaks[:10]
    assert load.problems == [], (load.problems[:10], dict(load.counts))
    # The faults were real: the slow and failing source withheld everything it did not
    # confirm (a 200 then holds no document at all), and connections were ended.
    for phase in ("rights-slow", "rights-failing"):
        assert load.counts[phase, "200 with results"] == 0, dict(load.counts)
        assert load.counts[phase, "200 empty"] > 0, dict(load.counts)
    assert load.counts["healthy", "200 with results"] > 0
    assert ended["connections"] > 0
    record("load-faults-postgres", {
        "responses": sum(load.counts.values()), "leaks": len(load.leaks),
        "undeclared": len(load.problems), "connections_ended": ended["connections"],
        "termination_rounds": ended["rounds"], "recovery_s": f"{recovery_s:.2f}",
        **{f"{p} s": f"{t:.1f}" for p, t in load.took.items()},
        **{f"{p} / {o}": n for (p, o), n in sorted(load.counts.items())},
    })  # fmt: skip
