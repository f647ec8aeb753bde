"""Derived search indexes of the SQLite store: outbox apply, rebuild, verify.

The SQL tables are the truth; the tantivy index (per tenant, on disk) and the vector matrix
(per tenant, in memory) are derived from them and catch up from the index outbox.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence

import numpy as np

from govrag.store.analyzer import default_analyzer
from govrag.store.lexical import LexicalIndex
from govrag.store.records import (
    IndexedChunk,
    IndexReport,
    principal_token,
)
from govrag.store.sqlite_base import SQLiteBase
from govrag.store.vectors import VectorIndex


class SQLiteDerived(SQLiteBase):
    """Keeps this process's view of the derived indexes in step with the truth store."""

    def vector_space(self, tenant: str) -> tuple[str, int] | None:
        rows = self._q("SELECT embedder, dim FROM vector_spaces WHERE tenant_id = ?", (tenant,))
        return (rows[0][0], int(rows[0][1])) if rows else None

    # -- derived indexes -------------------------------------------------------------------
    def _lexical_index(self, tenant: str) -> tuple[LexicalIndex, bool]:
        index = self._lexical.get(tenant)
        fresh = False
        if index is None:
            path = None if self.index_dir is None else self.index_dir / _tenant_dir(tenant)
            fresh = path is None or not (path / "applied_seq").exists()
            index = LexicalIndex(path)
            self._lexical[tenant] = index
        return index, fresh

    def _outbox_head(self, tenant: str) -> int:
        rows = self._q(
            "SELECT COALESCE(MAX(seq), 0) FROM index_outbox WHERE tenant_id = ?", (tenant,)
        )
        return int(rows[0][0])

    def sync_indexes(self, tenant: str, *, vectors: bool = True) -> None:
        """Apply pending outbox entries to this process's view of the derived indexes."""
        with self._lock:
            head = self._outbox_head(tenant)
            lexical, fresh = self._lexical_index(tenant)
            if fresh and head > 0:
                self.rebuild_index(tenant)
            elif lexical.loaded_seq < head and lexical.refresh() < head:
                self._apply_pending(tenant, lexical.applied_seq(), lexical)
            if vectors and self.embedder is not None:
                vindex = self._vectors.get(tenant)
                if vindex is None:
                    self._load_vectors(tenant)
                elif vindex.applied_seq < head:
                    self._apply_pending(tenant, vindex.applied_seq, vindex)

    def _apply_pending(self, tenant: str, since: int, index: LexicalIndex | VectorIndex) -> None:
        with self._tx("DEFERRED") as conn:
            head = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM index_outbox WHERE tenant_id = ?", (tenant,)
            ).fetchone()[0]
            doc_ids = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT doc_id FROM index_outbox WHERE tenant_id = ? AND seq > ? "
                    "AND seq <= ?",
                    (tenant, since, head),
                )
            ]
            chunks = self._indexed_chunks(
                conn, tenant, doc_ids, vectors=isinstance(index, VectorIndex)
            )
        if isinstance(index, LexicalIndex):
            index.apply(doc_ids, chunks, int(head))
        else:
            index.replace(doc_ids, chunks)
            index.applied_seq = int(head)

    def rebuild_index(self, tenant: str) -> int:
        """Recreate the tenant's lexical index from the truth store. Returns chunks indexed."""
        lexical, _ = self._lexical_index(tenant)
        with self._tx("DEFERRED") as conn:
            head = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM index_outbox WHERE tenant_id = ?", (tenant,)
            ).fetchone()[0]
            chunks = self._indexed_chunks(conn, tenant, None, vectors=False)
        lexical.apply((), chunks, int(head), reset=True)
        self._vectors.pop(tenant, None)
        return len(chunks)

    def _load_vectors(self, tenant: str) -> None:
        space = self.vector_space(tenant)
        if space is None:
            return
        with self._tx("DEFERRED") as conn:
            head = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM index_outbox WHERE tenant_id = ?", (tenant,)
            ).fetchone()[0]
            chunks = self._indexed_chunks(conn, tenant, None, vectors=True)
        index = VectorIndex(space[1])
        index.replace((), chunks)
        index.applied_seq = int(head)
        self._vectors[tenant] = index

    def _indexed_chunks(
        self,
        conn: sqlite3.Connection,
        tenant: str,
        doc_ids: Sequence[int] | None,
        *,
        vectors: bool,
    ) -> list[IndexedChunk]:
        """Indexed chunks of the given documents (all of the tenant's when None)."""
        columns = "c.chunk_id, c.doc_id, c.text, d.corpus_id, d.classification, d.title" + (
            ", v.embedding" if vectors else ", NULL"
        )
        joins = " JOIN documents d ON d.doc_id = c.doc_id" + (
            " JOIN chunk_vectors v ON v.chunk_id = c.chunk_id" if vectors else ""
        )
        where = " WHERE c.tenant_id = ? AND c.indexed = 1"
        if doc_ids is None:
            rows = conn.execute(
                f"SELECT {columns} FROM chunks c{joins}{where}", (tenant,)
            ).fetchall()
            acl_rows = conn.execute(
                "SELECT doc_id, source_system, principal_id FROM doc_acl WHERE tenant_id = ?",
                (tenant,),
            ).fetchall()
        else:
            # json_each outermost (CROSS JOIN): probe the given documents by index instead of
            # scanning the tenant, so applying one change costs O(change), not O(tenant).
            rows, acl_rows = [], []
            for start in range(0, len(doc_ids), 500):
                ids = json.dumps(list(doc_ids[start : start + 500]))
                # Unary + keeps the planner off the (tenant_id, ...) indexes for these probes.
                rows += conn.execute(
                    f"SELECT {columns} FROM json_each(?) j "
                    f"CROSS JOIN chunks c ON c.doc_id = j.value{joins}"
                    " WHERE +c.tenant_id = ? AND +c.indexed = 1",
                    (ids, tenant),
                ).fetchall()
                acl_rows += conn.execute(
                    "SELECT a.doc_id, a.source_system, a.principal_id FROM json_each(?) j "
                    "CROSS JOIN doc_acl a ON a.doc_id = j.value WHERE +a.tenant_id = ?",
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
                    terms="" if vectors else analyzer.analyze_to_string(f"{title}\n{text}"),
                    acl_tokens=tuple(sorted(acl.get(did, ()))),
                    corpus=corpus,
                    classification=cls,
                    vector=np.frombuffer(blob, dtype=np.float32) if blob is not None else None,
                )
            )
        return out

    def verify_index(self, tenant: str) -> IndexReport:
        """Compare the tenant's lexical index with the truth store (after applying the outbox)."""
        self.sync_indexes(tenant, vectors=False)
        lexical, _ = self._lexical_index(tenant)
        truth = {
            r[0]
            for r in self._q(
                "SELECT chunk_id FROM chunks WHERE tenant_id = ? AND indexed = 1", (tenant,)
            )
        }
        have = lexical.all_chunk_ids()
        return IndexReport(
            tenant=tenant,
            truth_chunks=len(truth),
            lexical_chunks=len(have),
            missing=len(truth - have),
            extra=len(have - truth),
            pending_outbox=max(0, self._outbox_head(tenant) - lexical.applied_seq()),
        )


def _tenant_dir(tenant: str) -> str:
    """A filesystem-safe, collision-free directory name for a tenant id."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in tenant)[:40]
    return f"{safe}-{hashlib.sha256(tenant.encode()).hexdigest()[:12]}"
