"""What the derived indexes read of the truth store: the index outbox and the indexed chunks.

Every change to a document appends an outbox entry in the same transaction as the change
(``database.append_outbox``). A derived index (the lexical index, SQLite's vector matrix)
remembers the outbox position it has applied and catches up from here: the documents changed
since that position and their indexed chunks now, read in one transaction so they agree.
Plain functions of a :class:`~govrag.store.database.Database`: they hold no state.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    with db.tx(tenant, read=True) as conn:
        head = int(conn.execute(_HEAD, (tenant,)).fetchone()[0])
        chunks = indexed_chunks(conn, db.dialect, tenant, None, vectors=vectors)
    return chunks, head


def vector_space(db: Database, tenant: str) -> tuple[str, int] | None:
    """``(embedder, dimensions)`` of the tenant's vectors; None before the first one."""
    rows = db.q(tenant, "SELECT embedder, dim FROM vector_spaces WHERE tenant_id = ?", (tenant,))
    return (rows[0][0], int(rows[0][1])) if rows else None


def indexed_chunks(
    conn: Conn,
    dialect: Dialect,
    tenant: str,
    doc_ids: Sequence[int] | None,
    *,
    vectors: bool,
    terms: bool = True,
) -> list[IndexedChunk]:
    """Indexed chunks of the given documents (all of the tenant's when None); without
    ``terms`` (and with ``vectors``) their text is not analyzed."""
    columns = "c.chunk_id, c.doc_id, c.text, d.corpus_id, d.classification, d.title" + (
        ", v.embedding" if vectors else ", NULL"
    )
    joins = " JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id" + (
        " JOIN chunk_vectors v ON v.tenant_id = c.tenant_id AND v.chunk_id = c.chunk_id"
        if vectors
        else ""
    )
    sql = dialect.sql
    if doc_ids is None:
        rows = conn.execute(
            sql(
                f"SELECT {columns} FROM chunks c{joins} "
                "WHERE c.tenant_id = ? AND c.indexed = {true}"
            ),
            (tenant,),
        ).fetchall()
        acl_rows = conn.execute(
            "SELECT doc_id, source_system, principal_id FROM doc_acl WHERE tenant_id = ?",
            (tenant,),
        ).fetchall()
    else:
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
    acl: dict[int, list[str]] = {}
    for doc_id, ss, pid in acl_rows:
        acl.setdefault(doc_id, []).append(principal_token(ss, pid))
    analyzer = default_analyzer()
    out = []
    for cid, did, text, corpus, cls, title, blob in rows:
        out.append(
            IndexedChunk(
                chunk_id=cid,
                doc_id=did,
                # The title travels with every chunk, as it does for the embedder.
                terms=""
                if vectors or not terms
                else analyzer.analyze_to_string(f"{title}\n{text}"),
                acl_tokens=tuple(sorted(acl.get(did, ()))),
                corpus=corpus,
                classification=cls,
                vector=np.frombuffer(blob, dtype=np.float32) if blob is not None else None,
            )
        )
    return out
