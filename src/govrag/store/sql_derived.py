"""Derived search indexes, the same code on every backend: outbox apply, rebuild, verify.

The SQL tables are the truth. Each process derives its own tantivy index per tenant (on disk
under ``index_dir``, or in memory) from them and catches up from the index outbox before it
searches, so any number of processes, on any machines, serve one truth store consistently.
A backend may derive more (SQLite: an in-memory vector matrix) through the same outbox.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from govrag.store.analyzer import default_analyzer
from govrag.store.dialect import Conn
from govrag.store.lexical import LexicalIndex
from govrag.store.lexical_format import access_digest
from govrag.store.records import (
    IndexedChunk,
    IndexReport,
    principal_token,
)
from govrag.store.sql_base import SQLBase, json_list

_HEAD = "SELECT COALESCE(MAX(seq), 0) FROM index_outbox WHERE tenant_id = ?"


class SQLDerived(SQLBase):
    """Keeps this process's view of the derived indexes in step with the truth store."""

    def _vector_space(self, tenant: str) -> tuple[str, int] | None:
        rows = self._q(
            tenant, "SELECT embedder, dim FROM vector_spaces WHERE tenant_id = ?", (tenant,)
        )
        return (rows[0][0], int(rows[0][1])) if rows else None

    # -- derived indexes -------------------------------------------------------------------
    def _lexical_index(self, tenant: str) -> tuple[LexicalIndex, bool]:
        index = self._lexical.get(tenant)
        fresh = False
        if index is None:
            path = None if self.index_dir is None else self.index_dir / _tenant_dir(tenant)
            index = LexicalIndex(path)
            fresh = index.created
            self._lexical[tenant] = index
        return index, fresh

    def _forget_derived(self, tenant: str) -> None:
        with self._lock:
            index, _ = self._lexical_index(tenant)
            index.apply((), [], 0, reset=True)  # empty, at outbox position 0
            self._after_rebuild(tenant)

    def _outbox_head(self, tenant: str) -> int:
        return int(self._q(tenant, _HEAD, (tenant,))[0][0])

    def sync_indexes(self, tenant: str, *, vectors: bool = True) -> None:
        """Apply pending outbox entries to this process's view of the derived indexes."""
        with self._lock:
            head = self._outbox_head(tenant)
            lexical, fresh = self._lexical_index(tenant)
            # An index ahead of the outbox belongs to other data (a recreated database).
            if (fresh and head > 0) or lexical.loaded_seq > head:
                self._rebuild_lexical(tenant)
            elif lexical.loaded_seq < head and lexical.refresh() < head:
                doc_ids, chunks, applied = self._pending(tenant, lexical.applied_seq(), False)
                lexical.apply(doc_ids, chunks, applied)
            if vectors:
                self._sync_vectors(tenant, head)

    def _sync_vectors(self, tenant: str, head: int) -> None:
        """Hook: bring a derived vector index up to ``head`` (none by default)."""

    def _pending(
        self, tenant: str, since: int, vectors: bool
    ) -> tuple[list[int], list[IndexedChunk], int]:
        """Documents changed after outbox position ``since``, their indexed chunks now, and
        the position that state is at (read in one transaction, so they agree)."""
        with self._tx(tenant, read=True) as conn:
            head = int(conn.execute(_HEAD, (tenant,)).fetchone()[0])
            doc_ids = [
                int(r[0])
                for r in conn.execute(
                    "SELECT DISTINCT doc_id FROM index_outbox WHERE tenant_id = ? AND seq > ? "
                    "AND seq <= ?",
                    (tenant, since, head),
                ).fetchall()
            ]
            chunks = self._indexed_chunks(conn, tenant, doc_ids, vectors=vectors)
        return doc_ids, chunks, head

    def _snapshot(self, tenant: str, vectors: bool) -> tuple[list[IndexedChunk], int]:
        """Every indexed chunk of the tenant and the outbox position it is at."""
        with self._tx(tenant, read=True) as conn:
            head = int(conn.execute(_HEAD, (tenant,)).fetchone()[0])
            chunks = self._indexed_chunks(conn, tenant, None, vectors=vectors)
        return chunks, head

    def rebuild_index(self, tenant: str) -> int:
        """Recreate the tenant's lexical index from the truth store, and set any vector row's
        access columns that differ from it (PostgreSQL). Returns chunks indexed."""
        indexed = self._rebuild_lexical(tenant)
        self._vector_access(tenant, repair=True)
        return indexed

    def _rebuild_lexical(self, tenant: str) -> int:
        """This process's lexical index of the tenant, anew from the truth store (also a new
        process's first sync: that one must not scan, let alone write, every vector row)."""
        lexical, _ = self._lexical_index(tenant)
        chunks, head = self._snapshot(tenant, False)
        lexical.apply((), chunks, head, reset=True)
        self._after_rebuild(tenant)
        return len(chunks)

    def _after_rebuild(self, tenant: str) -> None:
        """Hook: drop other derived state of the tenant after a rebuild."""

    def _vector_access(self, tenant: str, *, repair: bool) -> int:
        """Hook: vector rows whose copy of their document's access columns differs from the
        truth (set right when ``repair``). Only PostgreSQL keeps such copies."""
        return 0

    def _indexed_chunks(
        self,
        conn: Conn,
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
        sql = self.dialect.sql
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

    def verify_index(self, tenant: str) -> IndexReport:
        """Compare the tenant's derived indexes with the truth store (after applying the
        outbox): the lexical index's chunks and, per chunk, what its access predicate reads
        (document, corpus, classification, ACL tokens); on PostgreSQL also the vector rows'
        access columns."""
        self.sync_indexes(tenant, vectors=False)
        lexical, _ = self._lexical_index(tenant)
        with self._tx(tenant, read=True) as conn:
            truth = {
                c.chunk_id: access_digest(c.doc_id, c.corpus, c.classification, c.acl_tokens)
                for c in self._indexed_chunks(conn, tenant, None, vectors=False, terms=False)
            }
        have = lexical.all_chunks()
        return IndexReport(
            tenant=tenant,
            truth_chunks=len(truth),
            lexical_chunks=len(have),
            missing=len(truth.keys() - have.keys()),
            extra=len(have.keys() - truth.keys()),
            stale_access=sum(1 for c, d in have.items() if c in truth and truth[c] != d),
            pending_outbox=max(0, self._outbox_head(tenant) - lexical.applied_seq()),
            vector_access_drift=self._vector_access(tenant, repair=False),
        )


def _tenant_dir(tenant: str) -> str:
    """A filesystem-safe, collision-free directory name for a tenant id."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in tenant)[:40]
    return f"{safe}-{hashlib.sha256(tenant.encode()).hexdigest()[:12]}"
