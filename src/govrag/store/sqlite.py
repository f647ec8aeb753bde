"""The SQLite truth store (stdlib ``sqlite3``, WAL): the embedded default backend.

Writes go to SQL first, each document in one transaction together with an index-outbox row;
derived indexes (tantivy per tenant, an in-memory vector matrix per tenant) catch up from the
outbox before every search, so a revocation is visible to the very next search in any process.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from govrag.embed.base import Embedder
from govrag.errors import ConfigError, StoreError
from govrag.settings import SearchSettings
from govrag.store.analyzer import default_analyzer
from govrag.store.filters import filters_sql
from govrag.store.lexical import LexicalIndex
from govrag.store.records import (
    EVERYONE,
    AccessScope,
    DocumentWrite,
    IndexedChunk,
    IndexReport,
    StoredHashes,
    principal_token,
)
from govrag.store.schema import migrate, now_iso
from govrag.store.search import ChunkInfo, run_search
from govrag.store.vectors import VectorIndex
from govrag.types import MetadataFilter, Principal, SearchRequest, SearchResult

log = logging.getLogger("govrag.store")

# Email -> source accounts -> transitive groups, in one statement. Groups nest within one
# source system: a member id is an account or a group id of the group's own system.
_RESOLVE_SQL = """
WITH RECURSIVE reach(source_system, principal_id) AS (
    SELECT source_system, account_id FROM identities WHERE tenant_id = :tenant AND email = :email
    UNION
    SELECT m.source_system, m.group_id FROM group_members m
    JOIN reach r ON m.source_system = r.source_system AND m.member_id = r.principal_id
    WHERE m.tenant_id = :tenant
)
SELECT source_system, principal_id FROM reach
"""


class SQLiteStore:
    """Knowledge store on one SQLite file (or ``:memory:``)."""

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        index_dir: Path | None = None,
        embedder: Embedder | None = None,
        search: SearchSettings | None = None,
    ) -> None:
        self.path = str(path)
        self.index_dir = index_dir
        self.embedder = embedder
        self.search_settings = search or SearchSettings()
        self._lock = threading.RLock()
        self._lexical: dict[str, LexicalIndex] = {}
        self._vectors: dict[str, VectorIndex] = {}
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA busy_timeout=15000")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the SQLite store {self.path!r}: {exc}") from exc
        migrate(self._conn)
        # Repair on open: a crash between an SQL commit and the index write left outbox rows
        # the lexical index has not applied yet.
        for tenant in self.tenants():
            self.sync_indexes(tenant, vectors=False)

    # -- plumbing --------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute(f"BEGIN {mode}")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a transaction: {exc}") from exc
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._conn.execute("ROLLBACK")
                    raise StoreError(f"commit failed: {exc}") from exc

    def _q(self, sql: str, params: Sequence[object] | dict[str, object] = ()) -> list[tuple]:  # type: ignore[type-arg]
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"query failed: {exc}") from exc

    # -- tenants and catalogue -------------------------------------------------------------
    def tenants(self) -> list[str]:
        return [r[0] for r in self._q("SELECT tenant_id FROM tenants ORDER BY tenant_id")]

    def _ensure_tenant(self, conn: sqlite3.Connection, tenant: str) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO tenants(tenant_id, created_at) VALUES (?, ?)",
            (tenant, now_iso()),
        )

    def _bump_epoch(self, conn: sqlite3.Connection, tenant: str) -> None:
        conn.execute("UPDATE tenants SET acl_epoch = acl_epoch + 1 WHERE tenant_id = ?", (tenant,))

    def acl_epoch(self, tenant: str) -> int:
        rows = self._q("SELECT acl_epoch FROM tenants WHERE tenant_id = ?", (tenant,))
        return int(rows[0][0]) if rows else 0

    def is_empty(self, tenant: str) -> bool:
        return not self._q(
            "SELECT 1 FROM chunks WHERE tenant_id = ? AND indexed = 1 LIMIT 1", (tenant,)
        )

    def list_corpora(self, tenant: str) -> list[tuple[str, str]]:
        """(corpus id, description) of a tenant's corpora."""
        rows = self._q(
            "SELECT corpus_id, description FROM corpora WHERE tenant_id = ? ORDER BY corpus_id",
            (tenant,),
        )
        return [(r[0], r[1]) for r in rows]

    def describe_corpus(self, tenant: str, corpus: str, description: str) -> None:
        with self._tx() as conn:
            self._ensure_tenant(conn, tenant)
            conn.execute(
                "INSERT INTO corpora(tenant_id, corpus_id, description, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT(tenant_id, corpus_id) "
                "DO UPDATE SET description = excluded.description",
                (tenant, corpus, description, now_iso()),
            )

    # -- identities and groups -------------------------------------------------------------
    def put_identity(self, tenant: str, email: str, source_system: str, account_id: str) -> bool:
        """Map an email to a source-system account. Returns whether anything changed."""
        with self._tx() as conn:
            self._ensure_tenant(conn, tenant)
            cur = conn.execute(
                "INSERT OR IGNORE INTO identities(tenant_id, email, source_system, account_id) "
                "VALUES (?, ?, ?, ?)",
                (tenant, email.casefold(), source_system, account_id),
            )
            changed = cur.rowcount > 0
            if changed:
                self._ensure_source(conn, tenant, source_system)
                self._bump_epoch(conn, tenant)
            return changed

    def put_group(
        self, tenant: str, source_system: str, group_id: str, members: Sequence[str]
    ) -> bool:
        """Replace a group's direct members. Returns whether the membership changed."""
        wanted = set(members)
        with self._tx() as conn:
            self._ensure_tenant(conn, tenant)
            self._ensure_source(conn, tenant, source_system)
            conn.execute(
                "INSERT OR IGNORE INTO groups(tenant_id, source_system, group_id) VALUES (?, ?, ?)",
                (tenant, source_system, group_id),
            )
            have = {
                r[0]
                for r in conn.execute(
                    "SELECT member_id FROM group_members WHERE tenant_id = ? AND "
                    "source_system = ? AND group_id = ?",
                    (tenant, source_system, group_id),
                )
            }
            if have == wanted:
                return False
            conn.executemany(
                "DELETE FROM group_members WHERE tenant_id = ? AND source_system = ? "
                "AND group_id = ? AND member_id = ?",
                [(tenant, source_system, group_id, m) for m in have - wanted],
            )
            conn.executemany(
                "INSERT INTO group_members(tenant_id, source_system, group_id, member_id) "
                "VALUES (?, ?, ?, ?)",
                [(tenant, source_system, group_id, m) for m in wanted - have],
            )
            self._bump_epoch(conn, tenant)
            return True

    def _ensure_source(self, conn: sqlite3.Connection, tenant: str, source_system: str) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO source_systems(tenant_id, source_system) VALUES (?, ?)",
            (tenant, source_system),
        )

    def resolve_access(self, principal: Principal, corpora: Sequence[str]) -> AccessScope:
        """The caller's principal tokens (one SQL statement), ceiling and corpus scope."""
        rows = self._q(_RESOLVE_SQL, {"tenant": principal.tenant, "email": principal.email})
        tokens = {principal_token(ss, pid) for ss, pid in rows}
        if tokens:
            tokens.add(EVERYONE)  # "*" is everyone with an identity in the tenant
        return AccessScope(
            tenant=principal.tenant,
            tokens=frozenset(tokens),
            ceiling=int(principal.clearance),
            corpora=tuple(corpora),
        )

    # -- documents -------------------------------------------------------------------------
    def stored_hashes(
        self, tenant: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], StoredHashes]:
        """Hashes of already-stored documents, keyed by (source system, external id)."""
        out: dict[tuple[str, str], StoredHashes] = {}
        for start in range(0, len(keys), 400):
            batch = keys[start : start + 400]
            rows = self._q(
                "SELECT d.source_system, d.external_id, d.content_hash, d.record_hash "
                "FROM documents d JOIN json_each(?) j "
                "ON d.source_system = json_extract(j.value, '$[0]') "
                "AND d.external_id = json_extract(j.value, '$[1]') WHERE d.tenant_id = ?",
                (json.dumps([list(k) for k in batch]), tenant),
            )
            for ss, ext, th, rh in rows:
                out[(ss, ext)] = StoredHashes(text_hash=th, record_hash=rh)
        return out

    def put_document(self, tenant: str, doc: DocumentWrite) -> str:
        """Write one document atomically. Returns ``added``, ``updated`` or ``unchanged``."""
        with self._tx() as conn:
            self._ensure_tenant(conn, tenant)
            row = conn.execute(
                "SELECT doc_id, content_hash, record_hash, classification FROM documents "
                "WHERE tenant_id = ? AND source_system = ? AND external_id = ?",
                (tenant, doc.source_system, doc.external_id),
            ).fetchone()
            if row is not None and row[2] == doc.record_hash:
                return "unchanged"
            if doc.chunks is None and (row is None or row[1] != doc.text_hash):
                raise StoreError(
                    f"document {doc.external_id!r} changed content but arrived without chunks"
                )
            self._ensure_source(conn, tenant, doc.source_system)
            conn.execute(
                "INSERT OR IGNORE INTO corpora(tenant_id, corpus_id, created_at) VALUES (?, ?, ?)",
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
            )
            if row is None:
                cur = conn.execute(
                    "INSERT INTO documents(corpus_id, title, author_account, classification, "
                    "authority_tier, updated_at, metadata, content_hash, record_hash, "
                    "ingested_at, tenant_id, source_system, external_id) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*values, tenant, doc.source_system, doc.external_id),
                )
                doc_id = int(cur.lastrowid or 0)
                rights_changed = True
                old_acl: set[tuple[str, str]] = set()
            else:
                doc_id = int(row[0])
                conn.execute(
                    "UPDATE documents SET corpus_id = ?, title = ?, author_account = ?, "
                    "classification = ?, authority_tier = ?, updated_at = ?, metadata = ?, "
                    "content_hash = ?, record_hash = ?, ingested_at = ? WHERE doc_id = ?",
                    (*values, doc_id),
                )
                rights_changed = row[3] != doc.classification
                old_acl = {
                    (r[0], r[1])
                    for r in conn.execute(
                        "SELECT source_system, principal_id FROM doc_acl WHERE doc_id = ?",
                        (doc_id,),
                    )
                }
                conn.execute("DELETE FROM doc_meta WHERE doc_id = ?", (doc_id,))
                if doc.chunks is not None:
                    conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
            new_acl = {(EVERYONE if p == EVERYONE else doc.source_system, p) for p in doc.acl}
            if new_acl != old_acl:
                rights_changed = True
                conn.execute("DELETE FROM doc_acl WHERE doc_id = ?", (doc_id,))
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
            if doc.chunks is not None:
                self._write_chunks(conn, tenant, doc_id, doc)
            conn.execute(
                "INSERT INTO index_outbox(tenant_id, doc_id, created_at) VALUES (?, ?, ?)",
                (tenant, doc_id, now_iso()),
            )
            if rights_changed:
                self._bump_epoch(conn, tenant)
            return "added" if row is None else "updated"

    def _write_chunks(
        self, conn: sqlite3.Connection, tenant: str, doc_id: int, doc: DocumentWrite
    ) -> None:
        assert doc.chunks is not None
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
            cur = conn.execute(
                "INSERT INTO chunks(tenant_id, doc_id, ordinal, parent_ordinal, indexed, "
                "token_count, text) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant,
                    doc_id,
                    chunk.ordinal,
                    chunk.parent,
                    int(chunk.indexed),
                    chunk.token_count,
                    chunk.text,
                ),
            )
            if chunk.indexed and doc.vectors is not None:
                vec = np.ascontiguousarray(doc.vectors[vec_i], dtype=np.float32)
                conn.execute(
                    "INSERT INTO chunk_vectors(chunk_id, tenant_id, vector) VALUES (?, ?, ?)",
                    (cur.lastrowid, tenant, vec.tobytes()),
                )
                vec_i += 1

    def _check_space(self, conn: sqlite3.Connection, tenant: str, embedder: str, dim: int) -> None:
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
                f"this deployment embeds with {embedder!r} ({dim} dims); set [embedder] name = "
                f"{row[0]!r} in govrag.toml, or ingest into a new deployment"
            )

    def vector_space(self, tenant: str) -> tuple[str, int] | None:
        rows = self._q("SELECT embedder, dim FROM vector_spaces WHERE tenant_id = ?", (tenant,))
        return (rows[0][0], int(rows[0][1])) if rows else None

    def delete_document(self, tenant: str, source_system: str, external_id: str) -> bool:
        """Delete a document with its chunks, vectors, ACL and metadata rows."""
        with self._tx() as conn:
            row = conn.execute(
                "SELECT doc_id FROM documents WHERE tenant_id = ? AND source_system = ? "
                "AND external_id = ?",
                (tenant, source_system, external_id),
            ).fetchone()
            if row is None:
                return False
            conn.execute("DELETE FROM documents WHERE doc_id = ?", (row[0],))
            conn.execute(
                "INSERT INTO index_outbox(tenant_id, doc_id, created_at) VALUES (?, ?, ?)",
                (tenant, row[0], now_iso()),
            )
            self._bump_epoch(conn, tenant)
            return True

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
        sql = (
            "SELECT c.chunk_id, c.doc_id, c.text, d.corpus_id, d.classification, d.title"
            + (", v.vector" if vectors else ", NULL")
            + " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
            + (" JOIN chunk_vectors v ON v.chunk_id = c.chunk_id" if vectors else "")
            + " WHERE c.tenant_id = ? AND c.indexed = 1"
        )
        acl_sql = "SELECT doc_id, source_system, principal_id FROM doc_acl WHERE tenant_id = ?"
        if doc_ids is None:
            rows = conn.execute(sql, (tenant,)).fetchall()
            acl_rows = conn.execute(acl_sql, (tenant,)).fetchall()
        else:
            rows, acl_rows = [], []
            for start in range(0, len(doc_ids), 500):
                ids = json.dumps(list(doc_ids[start : start + 500]))
                rows += conn.execute(
                    sql + " AND c.doc_id IN (SELECT value FROM json_each(?))", (tenant, ids)
                ).fetchall()
                acl_rows += conn.execute(
                    acl_sql + " AND doc_id IN (SELECT value FROM json_each(?))", (tenant, ids)
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

    # -- search primitives (used by store.search.run_search) -------------------------------
    def lexical_leg(
        self,
        scope: AccessScope,
        terms: Sequence[str],
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        index, _ = self._lexical_index(scope.tenant)
        return index.search(
            terms,
            corpora=scope.corpora,
            acl_tokens=sorted(scope.tokens) if restricted else None,
            max_classification=scope.ceiling if restricted else None,
            doc_ids=doc_ids,
            limit=limit,
        )

    def vector_leg(
        self,
        scope: AccessScope,
        query: np.ndarray,
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        index = self._vectors.get(scope.tenant)
        if index is None:
            return []
        return index.search(
            query,
            corpora=scope.corpora,
            acl_tokens=sorted(scope.tokens) if restricted else None,
            max_classification=scope.ceiling if restricted else None,
            doc_ids=doc_ids,
            limit=limit,
        )

    def filtered_doc_ids(
        self, tenant: str, corpora: Sequence[str], filters: tuple[MetadataFilter, ...]
    ) -> list[int]:
        """The sql primitive: documents in ``corpora`` matching every metadata filter."""
        cond, params = filters_sql(filters, tenant)
        rows = self._q(
            "SELECT d.doc_id FROM documents d WHERE d.tenant_id = ? "
            "AND d.corpus_id IN (SELECT value FROM json_each(?))"
            + (f" AND {cond}" if cond else ""),
            (tenant, json.dumps(list(corpora)), *params),
        )
        return [r[0] for r in rows]

    def readable_chunks(self, scope: AccessScope, chunk_ids: Sequence[int]) -> set[int]:
        """Defence in depth: which of ``chunk_ids`` the truth store's ACL lets the caller read."""
        if not chunk_ids or not scope.tokens:
            return set()
        rows = self._q(
            # CROSS JOIN pins the join order: look up the few given ids by primary key instead
            # of scanning the tenant's chunks.
            "SELECT c.chunk_id FROM json_each(?) j CROSS JOIN chunks c ON c.chunk_id = j.value "
            "JOIN documents d ON d.doc_id = c.doc_id "
            "WHERE c.tenant_id = ? AND d.tenant_id = ? AND c.indexed = 1 "
            "AND d.classification <= ? AND d.corpus_id IN (SELECT value FROM json_each(?)) "
            "AND EXISTS (SELECT 1 FROM doc_acl a WHERE a.doc_id = d.doc_id AND "
            "  (CASE WHEN a.principal_id = '*' THEN '*' "
            "   ELSE a.source_system || char(31) || a.principal_id END) "
            "  IN (SELECT value FROM json_each(?)))",
            (
                json.dumps(list(chunk_ids)),
                scope.tenant,
                scope.tenant,
                scope.ceiling,
                json.dumps(list(scope.corpora)),
                json.dumps(sorted(scope.tokens)),
            ),
        )
        return {r[0] for r in rows}

    def chunk_info(self, tenant: str, chunk_ids: Sequence[int]) -> dict[int, ChunkInfo]:
        """Display fields of chunks, with the author's email for the hidden-item marker."""
        rows = self._q(
            "SELECT c.chunk_id, d.external_id, c.ordinal, d.corpus_id, d.source_system, c.text, "
            " (SELECT MIN(i.email) FROM identities i WHERE i.tenant_id = d.tenant_id "
            "  AND i.source_system = d.source_system AND i.account_id = d.author_account) "
            "FROM json_each(?) j CROSS JOIN chunks c ON c.chunk_id = j.value "
            "JOIN documents d ON d.doc_id = c.doc_id WHERE c.tenant_id = ?",
            (json.dumps(list(chunk_ids)), tenant),
        )
        return {
            r[0]: ChunkInfo(
                doc_id=r[1],
                ordinal=r[2],
                corpus=r[3],
                source_system=r[4],
                text=r[5],
                author_email=r[6],
            )
            for r in rows
        }

    def record_incident(self, tenant: str, kind: str, detail: dict[str, object]) -> None:
        log.warning("store incident %s in tenant %r: %s", kind, tenant, detail)
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO incidents(tenant_id, kind, detail, created_at) VALUES (?, ?, ?, ?)",
                (tenant, kind, json.dumps(detail, sort_keys=True), now_iso()),
            )

    def known_corpora(self, tenant: str) -> list[str]:
        return [c for c, _ in self.list_corpora(tenant)]

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        """Ranked candidates the principal may read, with the hidden-item marker."""
        # One connection and mutable in-memory indexes: searches are serialised per store.
        with self._lock:
            self.sync_indexes(principal.tenant, vectors=request.strategy != "keyword")
            return run_search(self, principal, request)


def _tenant_dir(tenant: str) -> str:
    import hashlib

    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in tenant)[:40]
    return f"{safe}-{hashlib.sha256(tenant.encode()).hexdigest()[:12]}"
