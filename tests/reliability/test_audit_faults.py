"""Audit before search under faults: 0 searches without a committed ALLOW, on both backends.

DESIGN.md invariant 2 holds when the audit write fails and when the process dies. A
witness at the store (``audit_witness.py``) checks, over a connection of its own, that
every search's ALLOW is committed before the search runs, and logs it to disk first.

- SIGKILL at random points of a governed-search process (between a committed ALLOW and its
  search, mid-append, mid-checkpoint: checkpoints are due every 7 events): every search the
  witness saw had its ALLOW committed, and after each kill the chain and its signed
  checkpoints verify (``govrag audit verify``) and the next process carries on the same log.
  ``GOVRAG_AUDIT_KILLS`` sets the runs per backend (``make soak``: 100).
- A real I/O error (SQLite): the process's file-size limit makes the audit write fail with
  EFBIG; governed searches are DENY, record nothing, search nothing; lifted, searches work.
- ``pg_terminate_backend`` (PostgreSQL): the server ends govrag's connections while
  searches run; each search is ALLOW with a witnessed search, DENY (the audit write failed),
  or a declared :class:`~govrag.errors.GovragError`; the log verifies and searching recovers.

A locked SQLite database and a full disk are the PEP's own tests
(``tests/policy/test_pep.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import govrag
from govrag.app import Govrag
from govrag.deployment import Deployment
from govrag.errors import GovragError
from govrag.testing import PgServer

from audit_witness import Committed, seen, unwitnessed, watch
from conftest import drop_pg_database, pg_store_settings
from reliability_figures import record

KILLS = int(os.environ.get("GOVRAG_AUDIT_KILLS", "3"))
#: Rounds of ``pg_terminate_backend`` in the PostgreSQL test (``make soak``: 300).
TERMINATIONS = int(os.environ.get("GOVRAG_PG_TERMINATIONS", "15"))
CHILD = Path(__file__).with_name("audit_child.py")
WORDS = ("wire", "limit", "loan", "risk", "audit", "policy", "credit", "fraud")


def _deployment(root: Path, store: dict[str, Any]) -> Deployment:
    govrag.init(root, tenant="t1", corpora=["c1", "c2"])
    rows = [{"sub": "u0", "email": "u0@x.example", "tenant": "t1", "clearance": "internal",
             "doc_entitlements": ["c1:read", "c2:read"]}]  # fmt: skip
    (root / "principals.json").write_text(json.dumps({"principals": rows}))
    rng = random.Random(3)
    lines: list[dict[str, Any]] = [
        {"type": "identity", "email": "u0@x.example", "source_system": "sp", "account_id": "A0"}
    ]
    lines += [{"type": "document", "source_system": "sp", "external_id": f"d{i}",
              "corpus": f"c{1 + i % 2}", "text": " ".join(rng.choices(WORDS, k=30)),
              "acl": ["*"], "classification": "internal"} for i in range(60)]  # fmt: skip
    data = root / "docs.jsonl"
    data.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    dep = _open(root, store)
    assert Govrag(dep).operators.ingest(data).ok
    return dep


def _open(root: Path, store: dict[str, Any]) -> Deployment:
    return Deployment.load(root, store=store, embedder={"name": "hash", "dim": 64},
                           audit={"checkpoint_every_events": 7})  # fmt: skip


#: A backend's deployment: (root, child config, committed-row reader).
Backend = tuple[Path, dict[str, Any], Committed]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    root = tmp_path / "dep"
    if request.param == "sqlite":
        store: dict[str, Any] = {}
        committed = Committed(sqlite=root / "govrag.db")
        drop: Callable[[], None] = lambda: None  # noqa: E731
    else:
        pg: PgServer = request.getfixturevalue("pg_cluster")
        store = pg_store_settings(pg) | {"index_dir": str(tmp_path / "index")}
        committed = Committed(postgres=store["admin_url"])
        drop = lambda: drop_pg_database(pg, store["admin_url"])  # noqa: E731
    _deployment(root, store).close()
    config = {"store": store, "sqlite": str(committed.sqlite or ""),
              "postgres": committed.postgres}  # fmt: skip
    try:
        yield root, config, committed
    finally:
        drop()


def _child(root: Path, config: dict[str, Any], log: Path, mode: str, tag: str
           ) -> subprocess.Popen[str]:  # fmt: skip
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(root), json.dumps(config), str(log), mode, tag],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _verified(root: Path, store: dict[str, Any]) -> None:
    """The chain and its signed checkpoints verify, in a process that did not write them."""
    with Govrag(_open(root, store)) as app:
        report = app.operators.audit_verify()
        assert report.ok, [vars(f) for f in report.findings]


def test_sigkill_never_leaves_a_search_without_a_committed_allow(
    backend: Backend, tmp_path: Path
) -> None:
    root, config, committed = backend
    rng = random.Random(KILLS)
    log = tmp_path / "witness.jsonl"
    for run in range(KILLS):
        proc = _child(root, config, log, "loop", f"r{run}")
        target, started = len(seen(log)) + rng.randint(1, 40), time.monotonic()
        while len(seen(log)) < target:
            if proc.poll() is not None:
                pytest.fail(f"the search process ended by itself: {proc.communicate()[1]}")
            assert time.monotonic() - started < 120, "no search in 120 s"
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.03))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert unwitnessed(log, committed, "t1") == []
        _verified(root, config["store"])
    searches = len(seen(log))
    # ALLOWs whose search never ran: the kill fell between the commit and the search.
    between = len(committed.allows("t1") - {(s.sub, s.corpus, s.query) for s in seen(log)})
    # The kills fell among checkpoint writes too (one is due every 7 events).
    checkpoints = len(list((root / "audit-checkpoints").rglob("*.json")))
    assert searches >= KILLS and checkpoints > 0
    record(f"audit-sigkill-{'postgres' if config['postgres'] else 'sqlite'}", {
        "kills": KILLS, "searches_witnessed": searches, "without_committed_allow": 0,
        "allows_never_searched": between, "checkpoints_written": checkpoints,
        "chain_and_checkpoints_verified": KILLS,
    })  # fmt: skip


def test_a_real_io_error_on_the_audit_write_is_deny_and_searches_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "dep"
    _deployment(root, {}).close()
    db = root / "govrag.db"
    config = {"store": {}, "sqlite": str(db), "postgres": None}
    log = tmp_path / "witness.jsonl"
    proc = _child(root, config, log, "fsize", "io")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    found = json.loads(out.splitlines()[-1])
    assert found["warm"] == ["ALLOW", "ALLOW"] and found["warm_chunks"] > 0
    assert found["fills_failed"] >= 1
    assert found["denied"] and all(d == ["DENY", "policy_error", None] for d in found["denied"])
    assert found["denied_chunks"] == 0
    # Without a session, the session's own audit record fails first: a declared error.
    assert found["new_session"] == "commit failed: disk I/O error"
    assert found["after"] == ["ALLOW", "ALLOW"] and found["after_chunks"] > 0
    committed = Committed(sqlite=db)
    assert unwitnessed(log, committed, "t1") == []
    # No ALLOW of a search made during the fault reached the log.
    assert not any(q.endswith(("io0", "io1", "io2")) for _, _, q in committed.allows("t1"))
    _verified(root, {})
    figures = {"denied_under_io_error": len(found["denied"]),
               "chunks_returned_under_io_error": found["denied_chunks"]}  # fmt: skip
    record("audit-io-error-sqlite", figures)


def test_postgres_connections_ended_mid_run_never_search_without_a_committed_allow(
    pg_cluster: PgServer, tmp_path: Path
) -> None:
    import psycopg

    store = pg_store_settings(pg_cluster) | {"index_dir": str(tmp_path / "index")}
    root, log = tmp_path / "dep", tmp_path / "witness.jsonl"
    committed = Committed(postgres=store["admin_url"])
    dep = _deployment(root, store)
    outcomes: Counter[str] = Counter()
    ended = 0
    try:
        watch(dep.store, committed, log)
        app, caller = Govrag(dep), dep.principal("u0")
        stop = threading.Event()
        rng = random.Random(5)

        def end_connections() -> None:
            nonlocal ended
            with psycopg.connect(store["admin_url"], autocommit=True) as admin:
                for _ in range(TERMINATIONS):
                    time.sleep(rng.uniform(0.02, 0.2))
                    ended += len(admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                        "datname = current_database() AND pid <> pg_backend_pid() "
                        "AND usename <> current_user").fetchall())  # fmt: skip
            stop.set()

        def search(worker: int) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    result = app.callers.search(caller, f"wire limit w{worker} q{i}")
                except GovragError as exc:
                    outcomes[type(exc).__name__] += 1
                    continue
                for d in result.decisions:
                    outcomes[f"{d.verdict} {d.reason}"] += 1

        threads = [threading.Thread(target=end_connections)]
        threads += [threading.Thread(target=search, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not any(t.is_alive() for t in threads), "a search hung on an ended connection"
        assert ended > 0 and len(seen(log)) > 0
        assert unwitnessed(log, committed, "t1") == []
        assert set(outcomes) <= {"ALLOW allowed", "DENY policy_error", "StoreError"}, outcomes
        # Recovery: with the connections left alone, searching works again. How long it
        # takes is a figure (make soak), not a test of speed; the bound only stops a hang.
        stopped, attempts = time.monotonic(), 0
        while True:
            attempts += 1
            try:
                after = app.callers.search(caller, f"wire limit after {attempts}")
                if [d.verdict for d in after.decisions] == ["ALLOW", "ALLOW"] and after.results:
                    break
            except GovragError:
                pass  # a declared error while the pool reconnects: try again, within the bound
            assert time.monotonic() - stopped < 120, "searching did not recover in 120 s"
        recovery = time.monotonic() - stopped
    finally:
        dep.close()
    _verified(root, store)
    print(f"recovered after {recovery:.2f} s, {attempts} attempts; {outcomes}")
    record("audit-terminate-postgres", {"connections_ended": ended,
                                        "searches_witnessed": len(seen(log)),
                                        "without_committed_allow": 0,
                                        "recovery_s": f"{recovery:.2f}",
                                        "recovery_attempts": attempts, **outcomes})  # fmt: skip
    drop_pg_database(pg_cluster, store["admin_url"])
