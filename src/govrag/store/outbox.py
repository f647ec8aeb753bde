"""What the derived indexes read of the truth store: the index outbox and the indexed chunks.

Every change to a document appends an outbox entry in the same transaction as the change
(``database.append_outbox``). A derived index (the lexical index, SQLite's vector matrix)
remembers the outbox position it has applied and catches up from here: the documents changed
since that position and their indexed chunks now, read in one transaction so they agree.
Plain functions of a :class:`~govrag.store.database.Database`: they hold no state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from govrag.store.analyzer import default_analyzer
from govrag.store.database import Database, json_list
from govrag.store.dialect import Conn, Dialect
from govrag.store.records import IndexedChunk, principal_token

_HEAD = "SELECT COALESCE(MAX(seq), 0) FROM index_outbox WHERE tenant_id = ?"


def outbox_head(db: Database, tenant: str) -> int:
    """The tenant's last outbox position (0: no change yet)."""
    return int(db.q(tenant, _HEAD, (tenant,))[0][0])


def pending(
    db: Database, tenant: str, since: int, *, vectors: bool
) -> tuple[list[int], list[IndexedChunk], int]:
    """Documents changed after outbox position ``since``, their indexed chunks now, and
    the position that state is at (read in one transaction, so they agree)."""
    with db.tx(tenant, read=True) as conn:
        head = int(conn.execute(_HEAD, (tenant,)).fetchone()[0])
        doc_ids = [
            int(r[0])
            for r in conn.execute(
                "SELECT DISTINCT doc_id FROM index_outbox WHERE tenant_id = ? AND seq > ? "
                "AND seq <= ?",
                (tenant, since, head),
            ).fetchall()
        ]
        chunks = indexed_chunks(conn, db.dialect, tenant, doc_ids, vectors=vectors)
    return doc_ids, chunks, head


def snapshot(db: Database, tenant: str, *, vectors: bool) -> tuple[list[IndexedChunk], int]:
    """Every indexed chunk of the tenant and the outbox position it is at."""
    chunks: list[IndexedChunk] = []
    head = stream_snapshot(db, tenant, chunks.extend, vectors=vectors)
    return chunks, head


def stream_snapshot(
    db: Database,
    tenant: str,
    consume: Callable[[Iterable[IndexedChunk]], object],
    *,
    vectors: bool,
) -> int:
    """Feed every indexed chunk of the tenant to ``consume`` as it is read, in the
    transaction that read them, and return the outbox position they are at. A million
    chunks' vectors are never all held twice: each row is dropped once consumed."""
    with db.tx(tenant, read=True) as conn:
        head = int(conn.execute(_HEAD, (tenant,)).fetchone()[0])
        consume(tenant_chunks(conn, db.dialect, tenant, vectors=vectors))
    return head


def vector_space(db: Database, tenant: str) -> tuple[str, int] | None:
    """``(embedder, dimensions)`` of the tenant's vectors; None before the first one."""
    rows = db.q(tenant, "SELECT embedder, dim FROM vector_spaces WHERE tenant_id = ?", (tenant,))
    return (rows[0][0], int(rows[0][1])) if rows else None


#: Rows read from the truth store at a time when streaming a tenant's chunks.
_BATCH = 4096


def _select(*, vectors: bool, text: bool) -> tuple[str, str]:
    """The chunk columns and joins: the text and title only when terms are analyzed, the
    vector only when asked for."""
    columns = "c.chunk_id, c.doc_id, " + ("c.text, d.title" if text else "NULL, NULL")
    columns += ", d.corpus_id, d.classification" + (", v.embedding" if vectors else ", NULL")
    joins = " JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id" + (
        " JOIN chunk_vectors v ON v.tenant_id = c.tenant_id AND v.chunk_id = c.chunk_id"
        if vectors
        else ""
    )
    return columns, joins


def tenant_chunks(
    conn: Conn, dialect: Dialect, tenant: str, *, vectors: bool, terms: bool = True
) -> Iterator[IndexedChunk]:
    """Every indexed chunk of the tenant, read ``_BATCH`` rows at a time; without ``terms``
    (and with ``vectors``) their text is not read."""
    acl = _acl_tokens(conn.execute(
        "SELECT doc_id, source_system, principal_id FROM doc_acl WHERE tenant_id = ?", (tenant,)
    ).fetchall())  # fmt: skip
    columns, joins = _select(vectors=vectors, text=terms and not vectors)
    cur = conn.execute(
        dialect.sql(
            f"SELECT {columns} FROM chunks c{joins} WHERE c.tenant_id = ? AND c.indexed = {{true}}"
        ),
        (tenant,),
    )
    while rows := cur.fetchmany(_BATCH):
        yield from _chunks(rows, acl, vectors=vectors, terms=terms)


def indexed_chunks(
    conn: Conn,
    dialect: Dialect,
    tenant: str,
    doc_ids: Sequence[int],
    *,
    vectors: bool,
    terms: bool = True,
) -> list[IndexedChunk]:
    """Indexed chunks of the given documents; without ``terms`` (and with ``vectors``)
    their text is not analyzed."""
    columns, joins = _select(vectors=vectors, text=terms and not vectors)
    sql = dialect.sql
    # The id list drives (pinned join): probe the given documents by index instead of
    # scanning the tenant, so applying one change costs O(change), not O(tenant).
    # SQLite's unary + keeps its planner off the (tenant_id, ...) indexes here.
    rows, acl_rows = [], []
    for start in range(0, len(doc_ids), 500):
        ids = json_list(doc_ids[start : start + 500])
        rows += conn.execute(
            sql(
                f"SELECT {columns} FROM {{ids}} "
                f"{{pin}} chunks c ON c.doc_id = j.value{joins} "
                "WHERE {plus}c.tenant_id = ? AND {plus}c.indexed = {true}"
            ),
            (ids, tenant),
        ).fetchall()
        acl_rows += conn.execute(
            sql(
                "SELECT a.doc_id, a.source_system, a.principal_id FROM {ids} "
                "{pin} doc_acl a ON a.doc_id = j.value WHERE {plus}a.tenant_id = ?"
            ),
            (ids, tenant),
        ).fetchall()
    return list(_chunks(rows, _acl_tokens(acl_rows), vectors=vectors, terms=terms))


def _acl_tokens(rows: Iterable[Sequence[Any]]) -> dict[int, tuple[str, ...]]:
    acl: dict[int, list[str]] = {}
    for doc_id, ss, pid in rows:
        acl.setdefault(doc_id, []).append(principal_token(ss, pid))
    return {doc_id: tuple(sorted(tokens)) for doc_id, tokens in acl.items()}


def _chunks(
    rows: Iterable[Sequence[Any]], acl: dict[int, tuple[str, ...]], *, vectors: bool, terms: bool
) -> Iterator[IndexedChunk]:
    analyzer = default_analyzer()
    for cid, did, text, title, corpus, cls, blob in rows:
        yield IndexedChunk(
            chunk_id=cid,
            doc_id=did,
            # The title travels with every chunk, as it does for the embedder.
            terms="" if vectors or not terms else analyzer.analyze_to_string(f"{title}\n{text}"),
            acl_tokens=acl.get(did, ()),
            corpus=corpus,
            classification=cls,
            vector=np.frombuffer(blob, dtype=np.float32) if blob is not None else None,
        )
