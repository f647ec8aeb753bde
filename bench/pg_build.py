"""The PostgreSQL benchmark's database: the synthetic corpus, loaded once and reused.

The corpus is loaded into :mod:`bench.pg_server`'s cluster through ``Ingestor`` by a few
worker processes, as the application role (a role that owns nothing, so forced row-level
security applies); the HNSW index is built after the load. ``build.json`` records the
generator version, a fingerprint of the code that shapes the stored data and the port: a later
run with the same values restarts the server on the existing data (:func:`cached_server`)
instead of loading again. See :mod:`bench.postgres` for the benchmark itself.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import synthetic
from bench.common import say
from bench.pg_server import (
    DATABASE,
    SERVER_SETTINGS,
    dsns,
    fresh_server,
    open_store,
    restart_server,
)
from govrag.embed.hashing import HashEmbedder
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord
from govrag.testing import (
    PgServer,
)

if TYPE_CHECKING:
    pass


#: Bump when the way this module builds the database changes (settings baked into the data
#: directory, roles, database name): cached databases are then rebuilt.
PG_BUILD_VERSION = 1
_BUILD_MARKER = "build.json"


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
    from govrag.store.documents import DocumentRepository

    src = Path(govrag.__file__).parent
    digest = hashlib.sha256(f"pg-build-{PG_BUILD_VERSION}".encode())
    writes = DocumentRepository
    for method in (writes.put_document, writes._write_chunks, Ingestor.flush):
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

    app, admin = dsns(server)
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
    """The tenant's HNSW index (as reopening a store would create it), then planner
    statistics."""
    from govrag.store.pg_schema import ensure_vector_indexes, vector_index_name

    stop = threading.Event()
    watcher = threading.Thread(target=_watch_index_build, args=(server, stop), daemon=True)
    watcher.start()
    try:
        with server.connect(DATABASE, autocommit=True) as conn:
            t0 = time.perf_counter()
            conn.execute("ALTER TABLE vector_spaces ENABLE TRIGGER vector_space_index")
            ensure_vector_indexes(conn)
            index_s = time.perf_counter() - t0
            name = vector_index_name(synthetic.TENANT, synthetic.EMBED_DIM)
            say(f"  HNSW index {name} built in {index_s:.1f}s")
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
            "SELECT pg_relation_size(%s::regclass)",
            (vector_index_name(synthetic.TENANT, synthetic.EMBED_DIM),),
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
            server = restart_server(root / "pg", int(info["port"]))
            if built != _migrations():
                info = _upgrade(server, root, info)
                marker.write_text(json.dumps(info, indent=2))
            return server, root, info, True
        say(f"postgres: {root} was built by other generator or store code; rebuilding")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    say(f"postgres: building {root} ({corpus.n_docs} docs, {n_workers} load workers)")
    server = fresh_server(root / "pg")
    try:
        # Migrated by a store; the tenant's HNSW index, which its first embedded document
        # would create (migration 12's trigger), is built once after the load instead.
        open_store(server, root).close()
        with server.connect(DATABASE, autocommit=True) as conn:
            conn.execute("ALTER TABLE vector_spaces DISABLE TRIGGER vector_space_index")
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
