"""Documents and their ACLs, as ingest writes them; the same SQL on every backend.

A document is written whole or not at all: its row, ACL rows, metadata rows, chunks and
vectors in one transaction, with an index-outbox entry (the derived indexes catch up from
it) and, when rights changed, a bump of the tenant's ACL epoch (cached results expire).
Dropping a tenant is here too: it deletes the documents and everything else of the tenant
but its audit log, then this process's derived indexes of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.embed.base import embedder_setting
from govrag.errors import ConfigError, InputError, StoreError
from govrag.store.clock import now_iso
from govrag.store.database import (
    Database,
    append_outbox,
    bump_epoch,
    claim,
    ensure_source,
    ensure_tenant,
    forget_tenant,
    json_list,
    vector_param,
)
from govrag.store.derived import DerivedIndexes
from govrag.store.dialect import Conn
from govrag.store.graph import write_chunk_graph
from govrag.store.records import EVERYONE, DocumentWrite, StoredHashes, titled
from govrag.store.search import SearchConfig

#: Every table holding a tenant's rows, children before parents, except the audit log
#: (append-only: it outlives a dropped tenant) and the tenant row itself.
_TENANT_TABLES = (
    "relations", "chunk_entities", "entities", "access_counter", "incidents",
    "index_outbox", "doc_supersedes", "doc_meta", "doc_acl", "chunk_vectors", "chunks", "documents",
    "vector_spaces", "group_members", "groups", "identities", "source_systems", "corpora",
    "sessions", "marker_budget",
)  # fmt: skip


class DocumentRepository:
    """The harvester's documents: write, compare, delete; and dropping a whole tenant."""

    def __init__(self, db: Database, indexes: DerivedIndexes, config: SearchConfig) -> None:
        self._db = db
        #: Read at each write: the glossary the graph rows are derived with.
        self._config = config
        self._indexes = indexes

    def stored_hashes(
        self, tenant: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], StoredHashes]:
        """Hashes of already-stored documents, keyed by (source system, external id)."""
        out: dict[tuple[str, str], StoredHashes] = {}
        for start in range(0, len(keys), 400):
            batch = keys[start : start + 400]
            rows = self._db.q(
                tenant,
                # The key list drives (pinned join): one unique-index probe per key, never a
                # scan of the tenant's documents (which SQLite picks without statistics).
                self._db.dialect.sql(
                    "SELECT d.source_system, d.external_id, d.content_hash, d.record_hash "
                    "FROM {pairs} {pin} documents d "
                    "ON d.tenant_id = ? AND d.source_system = t.ss AND d.external_id = t.pid"
                ),
                (json_list([list(k) for k in batch]), tenant),
            )
            for ss, ext, th, rh in rows:
                out[(ss, ext)] = StoredHashes(text_hash=th, record_hash=rh)
        return out

    def put_document(self, tenant: str, doc: DocumentWrite) -> str:
        """Write one document atomically. Returns ``added``, ``updated`` or ``unchanged``.

        A document another configured source wrote is refused for ``doc.writer``
        (:class:`~govrag.errors.SourceConflict`), even when the record is the same: the
        writer would otherwise count it as its own, and delete it when its copy goes."""
        with self._db.tx(tenant) as conn:
            ensure_tenant(conn, self._db.dialect, tenant)
            key = (tenant, doc.source_system, doc.external_id)
            if doc.writer is not None:
                claim(conn, "documents", "external_id", key, doc.writer, kind="document",
                      delete=False)  # fmt: skip
            row = conn.execute(
                "SELECT doc_id, content_hash, record_hash, classification FROM documents "
                "WHERE tenant_id = ? AND source_system = ? AND external_id = ?",
                key,
            ).fetchone()
            if row is not None and row[2] == doc.record_hash:
                return "unchanged"
            if doc.chunks is None and (row is None or row[1] != doc.text_hash):
                raise StoreError(
                    f"document {doc.external_id!r} changed content but arrived without chunks"
                )
            ensure_source(conn, tenant, doc.source_system)
            conn.execute(
                "INSERT INTO corpora(tenant_id, corpus_id, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (tenant, doc.corpus, now_iso()),
            )
            values = (
                doc.corpus,
                doc.title,
                doc.author,
                doc.classification,
                doc.authority_tier,
                doc.updated_at,
                doc.metadata_json,
                doc.text_hash,
                doc.record_hash,
                now_iso(),
                doc.effective_at,
                doc.updated_utc,
            )
            if row is None:
                cur = conn.execute(
                    "INSERT INTO documents(corpus_id, title, author_account, classification, "
                    "authority_tier, updated_at, metadata, content_hash, record_hash, "
                    "ingested_at, effective_at, updated_utc, writer, tenant_id, "
                    "source_system, external_id) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING doc_id",
                    (*values, doc.writer, tenant, doc.source_system, doc.external_id),
                )
                doc_id = int(cur.fetchone()[0])
                rights_changed = True
                old_acl: set[tuple[str, str]] = set()
            else:
                doc_id = int(row[0])
                conn.execute(
                    "UPDATE documents SET corpus_id = ?, title = ?, author_account = ?, "
                    "classification = ?, authority_tier = ?, updated_at = ?, metadata = ?, "
                    "content_hash = ?, record_hash = ?, ingested_at = ?, effective_at = ?, "
                    "updated_utc = ? WHERE tenant_id = ? AND doc_id = ?",
                    (*values, tenant, doc_id),
                )
                rights_changed = row[3] != doc.classification
                old_acl = {
                    (r[0], r[1])
                    for r in conn.execute(
                        self._by_doc("SELECT source_system, principal_id FROM doc_acl"),
                        (tenant, doc_id),
                    ).fetchall()
                }
                conn.execute(self._by_doc("DELETE FROM doc_meta"), (tenant, doc_id))
                conn.execute(self._by_doc("DELETE FROM doc_supersedes"), (tenant, doc_id))
                if doc.chunks is not None:
                    conn.execute(self._by_doc("DELETE FROM chunks"), (tenant, doc_id))
            new_acl = {(EVERYONE if p == EVERYONE else doc.source_system, p) for p in doc.acl}
            if new_acl != old_acl:
                rights_changed = True
                conn.execute(self._by_doc("DELETE FROM doc_acl"), (tenant, doc_id))
                conn.executemany(
                    "INSERT INTO doc_acl(tenant_id, doc_id, source_system, principal_id) "
                    "VALUES (?, ?, ?, ?)",
                    [(tenant, doc_id, ss, p) for ss, p in sorted(new_acl)],
                )
            conn.executemany(
                "INSERT INTO doc_meta(tenant_id, doc_id, key, value_text, value_num) "
                "VALUES (?, ?, ?, ?, ?)",
                [(tenant, doc_id, k, t, n) for k, t, n in doc.metadata_rows],
            )
            conn.executemany(
                "INSERT INTO doc_supersedes(tenant_id, doc_id, external_id) VALUES (?, ?, ?)",
                [(tenant, doc_id, old_id) for old_id in doc.supersedes],
            )
            if doc.chunks is not None:
                leaves = self._write_chunks(conn, tenant, doc_id, doc)
                try:
                    write_chunk_graph(conn, self._db.dialect, tenant,
                                      [(cid, titled(doc.title, text)) for cid, text in leaves],
                                      self._config.glossary)  # fmt: skip
                except (ValueError, KeyError, OverflowError) as exc:
                    # Extraction is meant never to fail; if a text still finds a way, that
                    # document alone is refused (its transaction rolls back), not the feed.
                    raise InputError(
                        f"document {doc.external_id!r}: its entities could not be read "
                        f"({type(exc).__name__}: {exc}); report this text to govrag"
                    ) from exc
            append_outbox(conn, self._db.dialect, tenant, doc_id)
            if rights_changed:
                bump_epoch(conn, tenant)
            return "added" if row is None else "updated"

    def _by_doc(self, statement: str) -> str:
        """``statement`` restricted to one document of a tenant (params: tenant, doc id)."""
        # SQLite: probe the doc_id-leading index, not a tenant-wide one.
        return self._db.dialect.sql(statement + " WHERE {plus}tenant_id = ? AND doc_id = ?")

    def _write_chunks(
        self, conn: Conn, tenant: str, doc_id: int, doc: DocumentWrite
    ) -> list[tuple[int, str]]:
        """Write the document's chunks (and vectors); its indexed ones' ids and texts."""
        assert doc.chunks is not None
        leaves: list[tuple[int, str]] = []
        indexed = [c for c in doc.chunks if c.indexed]
        if doc.vectors is not None:
            if doc.vectors.shape[0] != len(indexed):
                raise StoreError(
                    f"document {doc.external_id!r}: {doc.vectors.shape[0]} vectors for "
                    f"{len(indexed)} indexed chunks"
                )
            self._check_space(conn, tenant, doc.embedder or "?", int(doc.vectors.shape[1]))
        vec_i = 0
        for chunk in doc.chunks:
            chunk_id = conn.execute(
                "INSERT INTO chunks(tenant_id, doc_id, ordinal, parent_ordinal, indexed, "
                "token_count, text) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING chunk_id",
                (
                    tenant,
                    doc_id,
                    chunk.ordinal,
                    chunk.parent,
                    chunk.indexed,
                    chunk.token_count,
                    chunk.text,
                ),
            ).fetchone()[0]
            if chunk.indexed:
                leaves.append((int(chunk_id), chunk.text))
            if chunk.indexed and doc.vectors is not None:
                conn.execute(
                    "INSERT INTO chunk_vectors(chunk_id, tenant_id, embedding) VALUES (?, ?, ?)",
                    (chunk_id, tenant, vector_param(self._db.dialect, doc.vectors[vec_i])),
                )
                vec_i += 1
        return leaves

    def _check_space(self, conn: Conn, tenant: str, embedder: str, dim: int) -> None:
        row = conn.execute(
            "SELECT embedder, dim FROM vector_spaces WHERE tenant_id = ?", (tenant,)
        ).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO vector_spaces(tenant_id, embedder, dim) VALUES (?, ?, ?)",
                (tenant, embedder, dim),
            )
        elif (row[0], row[1]) != (embedder, dim):
            raise ConfigError(
                f"tenant {tenant!r} holds vectors of embedder {row[0]!r} ({row[1]} dims), but "
                f"this deployment embeds with {embedder!r} ({dim} dims); set "
                f"{embedder_setting(row[0], row[1])} in govrag.toml, or ingest into a new "
                "deployment"
            )

    def delete_document(
        self, tenant: str, source_system: str, external_id: str, *, writer: str | None = None
    ) -> bool:
        """Delete a document with its chunks, vectors, ACL and metadata rows; one another
        configured source wrote is refused for ``writer``
        (:class:`~govrag.errors.SourceConflict`)."""
        with self._db.tx(tenant) as conn:
            if writer is not None:
                claim(conn, "documents", "external_id", (tenant, source_system, external_id),
                      writer, kind="document", delete=True)  # fmt: skip
            row = conn.execute(
                "SELECT doc_id FROM documents WHERE tenant_id = ? AND source_system = ? "
                "AND external_id = ?",
                (tenant, source_system, external_id),
            ).fetchone()
            if row is None:
                return False
            conn.execute(self._by_doc("DELETE FROM documents"), (tenant, row[0]))
            append_outbox(conn, self._db.dialect, tenant, int(row[0]))
            bump_epoch(conn, tenant)
            return True

    def document_writer(self, tenant: str, source_system: str, external_id: str) -> str | None:
        """The configured source that owns a document (``None``: none does, or no such one)."""
        rows = self._db.q(
            tenant,
            "SELECT writer FROM documents WHERE tenant_id = ? AND source_system = ? "
            "AND external_id = ?",
            (tenant, source_system, external_id),
        )
        return None if not rows or rows[0][0] is None else str(rows[0][0])

    def rederive_graph(self, tenant: str) -> int:
        """Derive the tenant's entity rows anew from its chunks, with the current glossary
        (one transaction); returns the number of documents read."""
        with self._db.tx(tenant) as conn:
            for table in ("relations", "chunk_entities", "entities"):
                conn.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tenant,))
            rows = conn.execute(
                "SELECT d.doc_id, d.title, c.chunk_id, c.text FROM documents d "
                "JOIN chunks c ON c.tenant_id = d.tenant_id AND c.doc_id = d.doc_id "
                "WHERE d.tenant_id = ? AND c.indexed = ? ORDER BY d.doc_id, c.chunk_id",
                (tenant, True),
            ).fetchall()
            by_doc: dict[int, list[tuple[int, str]]] = {}
            for doc_id, title, chunk_id, text in rows:
                by_doc.setdefault(int(doc_id), []).append((int(chunk_id), titled(title, text)))
            for leaves in by_doc.values():
                write_chunk_graph(conn, self._db.dialect, tenant, leaves, self._config.glossary)
        return len(by_doc)

    def drop_tenant(self, tenant: str) -> int:
        """Delete every row of a tenant (one transaction) and this process's indexes of it.

        Returns the number of documents removed. Another process's derived index may keep
        entries of the dropped documents until it rebuilds (it does so by itself when its
        index is ahead of the tenant's outbox, or on ``govrag index rebuild``); meanwhile the
        truth-store re-check of every search keeps them out of its results.
        """
        with self._db.tx(tenant) as conn:
            documents = int(
                conn.execute(
                    "SELECT COUNT(*) FROM documents WHERE tenant_id = ?", (tenant,)
                ).fetchone()[0]
            )
            for table in _TENANT_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tenant,))
            # The tenant row anchors its audit chain: it stays while the chain has events
            # (and then keeps counting ACL epochs, so caches never see an epoch again).
            audited = conn.execute(
                "SELECT 1 FROM audit_events WHERE tenant_id = ? LIMIT 1", (tenant,)
            ).fetchone()
            if audited:
                bump_epoch(conn, tenant)
            else:
                forget_tenant(conn, self._db.dialect, tenant)
        self._indexes.forget(tenant)
        return documents
