"""Writes of the truth store, the same SQL on every backend: identities, groups, documents.

Each call is one transaction. Every change to a document appends an index-outbox row in the
same transaction, and every change to rights (or to trust scores, which rank) bumps the
tenant's ACL epoch.
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.errors import ConfigError, IdentityConflict, StoreError
from govrag.store.clock import now_iso
from govrag.store.dialect import Conn
from govrag.store.records import (
    EVERYONE,
    DocumentWrite,
    StoredHashes,
)
from govrag.store.sql_base import SQLBase, json_list


class SQLWrites(SQLBase):
    """The harvester's side of the store."""

    def _ensure_source(self, conn: Conn, tenant: str, source_system: str) -> None:
        conn.execute(
            "INSERT INTO source_systems(tenant_id, source_system) VALUES (?, ?) "
            "ON CONFLICT DO NOTHING",
            (tenant, source_system),
        )

    # -- identities and groups -------------------------------------------------------------
    def put_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        previous_email: str | None = None,
    ) -> bool:
        """Bind an email to a source-system account. Returns whether anything changed.

        An account has at most one owner (a unique index, so concurrent claims cannot race
        past it): binding an account that another email owns raises
        :class:`~govrag.errors.IdentityConflict` and changes nothing, so a placeholder or
        hostile claim never captures a real user's rights. ``previous_email`` rebinds the
        account after an email change, atomically and only if ``previous_email`` owns it
        now (compare and set); otherwise :class:`~govrag.errors.IdentityConflict`.
        Re-sending a binding that already holds (with or without ``previous_email``) is a
        no-op. A change bumps the ACL epoch.
        """
        email = email.casefold()
        previous = None if previous_email is None else previous_email.casefold()
        try:
            with self._tx(tenant) as conn:
                self._ensure_tenant(conn, tenant)
                if previous is None or previous == email:
                    try:
                        cur = conn.execute(
                            "INSERT INTO identities(tenant_id, email, source_system, account_id) "
                            "VALUES (?, ?, ?, ?) "
                            "ON CONFLICT (tenant_id, email, source_system, account_id) DO NOTHING",
                            (tenant, email, source_system, account_id),
                        )
                    except self._unique_violation as exc:
                        # Another email owns the account. (PostgreSQL has aborted the
                        # transaction: the owner is read after it, for the message.)
                        raise _Owned() from exc
                else:
                    cur = conn.execute(
                        "UPDATE identities SET email = ? WHERE tenant_id = ? "
                        "AND source_system = ? AND account_id = ? AND email = ?",
                        (email, tenant, source_system, account_id, previous),
                    )
                    if cur.rowcount == 0:
                        owner = _account_owner(conn, tenant, source_system, account_id)
                        if owner != email:
                            raise IdentityConflict.refused(
                                email, source_system, account_id, owner, previous
                            )
                changed = cur.rowcount > 0
                if changed:
                    self._ensure_source(conn, tenant, source_system)
                    self._bump_epoch(conn, tenant)
                return changed
        except _Owned as owned:
            with self._tx(tenant, read=True) as conn:
                owner = _account_owner(conn, tenant, source_system, account_id)
            raise IdentityConflict.refused(
                email, source_system, account_id, owner, None
            ) from owned.__cause__

    def account_owner(self, tenant: str, source_system: str, account_id: str) -> str | None:
        """The email bound to a source-system account, if any."""
        with self._tx(tenant, read=True) as conn:
            return _account_owner(conn, tenant, source_system, account_id)

    def remove_identity(self, tenant: str, email: str, source_system: str, account_id: str) -> bool:
        """Unbind an email from a source-system account; the next search no longer grants
        the account's rights to it. Returns whether a binding was removed (then the ACL
        epoch is bumped)."""
        with self._tx(tenant) as conn:
            cur = conn.execute(
                "DELETE FROM identities WHERE tenant_id = ? AND email = ? "
                "AND source_system = ? AND account_id = ?",
                (tenant, email.casefold(), source_system, account_id),
            )
            removed = cur.rowcount > 0
            if removed:
                self._bump_epoch(conn, tenant)
            return removed

    def put_group(
        self, tenant: str, source_system: str, group_id: str, members: Sequence[str]
    ) -> bool:
        """Replace a group's direct members. Returns whether the membership changed."""
        wanted = set(members)
        with self._tx(tenant) as conn:
            self._ensure_tenant(conn, tenant)
            self._ensure_source(conn, tenant, source_system)
            conn.execute(
                "INSERT INTO groups(tenant_id, source_system, group_id) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (tenant, source_system, group_id),
            )
            have = {
                r[0]
                for r in conn.execute(
                    "SELECT member_id FROM group_members WHERE tenant_id = ? AND "
                    "source_system = ? AND group_id = ?",
                    (tenant, source_system, group_id),
                ).fetchall()
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

    # -- documents -------------------------------------------------------------------------
    def stored_hashes(
        self, tenant: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], StoredHashes]:
        """Hashes of already-stored documents, keyed by (source system, external id)."""
        out: dict[tuple[str, str], StoredHashes] = {}
        for start in range(0, len(keys), 400):
            batch = keys[start : start + 400]
            rows = self._q(
                tenant,
                # The key list drives (pinned join): one unique-index probe per key, never a
                # scan of the tenant's documents (which SQLite picks without statistics).
                self.dialect.sql(
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
        """Write one document atomically. Returns ``added``, ``updated`` or ``unchanged``."""
        with self._tx(tenant) as conn:
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
            )
            if row is None:
                cur = conn.execute(
                    "INSERT INTO documents(corpus_id, title, author_account, classification, "
                    "authority_tier, updated_at, metadata, content_hash, record_hash, "
                    "ingested_at, tenant_id, source_system, external_id) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING doc_id",
                    (*values, tenant, doc.source_system, doc.external_id),
                )
                doc_id = int(cur.fetchone()[0])
                rights_changed = True
                old_acl: set[tuple[str, str]] = set()
            else:
                doc_id = int(row[0])
                conn.execute(
                    "UPDATE documents SET corpus_id = ?, title = ?, author_account = ?, "
                    "classification = ?, authority_tier = ?, updated_at = ?, metadata = ?, "
                    "content_hash = ?, record_hash = ?, ingested_at = ? "
                    "WHERE tenant_id = ? AND doc_id = ?",
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
            if doc.chunks is not None:
                self._write_chunks(conn, tenant, doc_id, doc)
            self._append_outbox(conn, tenant, doc_id)
            if rights_changed:
                self._bump_epoch(conn, tenant)
            return "added" if row is None else "updated"

    def _by_doc(self, statement: str) -> str:
        """``statement`` restricted to one document of a tenant (params: tenant, doc id)."""
        # SQLite: probe the doc_id-leading index, not a tenant-wide one.
        return self.dialect.sql(statement + " WHERE {plus}tenant_id = ? AND doc_id = ?")

    def _write_chunks(self, conn: Conn, tenant: str, doc_id: int, doc: DocumentWrite) -> None:
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
            if chunk.indexed and doc.vectors is not None:
                conn.execute(
                    "INSERT INTO chunk_vectors(chunk_id, tenant_id, embedding) VALUES (?, ?, ?)",
                    (chunk_id, tenant, self._vector_param(doc.vectors[vec_i])),
                )
                vec_i += 1

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
                f"this deployment embeds with {embedder!r} ({dim} dims); set [embedder] name = "
                f"{row[0]!r} in govrag.toml, or ingest into a new deployment"
            )

    def delete_document(self, tenant: str, source_system: str, external_id: str) -> bool:
        """Delete a document with its chunks, vectors, ACL and metadata rows."""
        with self._tx(tenant) as conn:
            row = conn.execute(
                "SELECT doc_id FROM documents WHERE tenant_id = ? AND source_system = ? "
                "AND external_id = ?",
                (tenant, source_system, external_id),
            ).fetchone()
            if row is None:
                return False
            conn.execute(self._by_doc("DELETE FROM documents"), (tenant, row[0]))
            self._append_outbox(conn, tenant, int(row[0]))
            self._bump_epoch(conn, tenant)
            return True

    def drop_tenant(self, tenant: str) -> int:
        """Delete every row of a tenant (one transaction) and this process's indexes of it.

        Returns the number of documents removed. Another process's derived index may keep
        entries of the dropped documents until it rebuilds (it does so by itself when its
        index is ahead of the tenant's outbox, or on ``govrag index rebuild``); meanwhile the
        truth-store re-check of every search keeps them out of its results.
        """
        with self._tx(tenant) as conn:
            documents = int(
                conn.execute(
                    "SELECT COUNT(*) FROM documents WHERE tenant_id = ?", (tenant,)
                ).fetchone()[0]
            )
            for table in self._tenant_tables:
                conn.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tenant,))
            # The tenant row anchors its audit chain: it stays while the chain has events
            # (and then keeps counting ACL epochs, so caches never see an epoch again).
            audited = conn.execute(
                "SELECT 1 FROM audit_events WHERE tenant_id = ? LIMIT 1", (tenant,)
            ).fetchone()
            if audited:
                self._bump_epoch(conn, tenant)
            else:
                self._forget_tenant(conn, tenant)
        self._forget_derived(tenant)
        return documents


class _Owned(Exception):
    """Internal: an identity insert hit the one-owner index (the driver error is its cause)."""


def _account_owner(conn: Conn, tenant: str, source_system: str, account_id: str) -> str | None:
    row = conn.execute(
        "SELECT email FROM identities WHERE tenant_id = ? AND source_system = ? AND account_id = ?",
        (tenant, source_system, account_id),
    ).fetchone()
    return None if row is None else str(row[0])
