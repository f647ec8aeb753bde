"""SQLite schema of the truth store, as ordered, versioned migrations.

Every table carries ``tenant_id`` and every query is tenant-scoped, so the same shape can be
distributed by tenant on PostgreSQL. Derived search indexes are rebuilt from these tables.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from govrag.errors import StoreError

# (version, name, statements). Append only: a released migration never changes.
MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "knowledge store core",
        """
        CREATE TABLE tenants (
            tenant_id   TEXT PRIMARY KEY,
            acl_epoch   INTEGER NOT NULL DEFAULT 0,
            created_at  TEXT NOT NULL
        );
        CREATE TABLE corpora (
            tenant_id   TEXT NOT NULL REFERENCES tenants(tenant_id),
            corpus_id   TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            created_at  TEXT NOT NULL,
            PRIMARY KEY (tenant_id, corpus_id)
        );
        CREATE TABLE source_systems (
            tenant_id     TEXT NOT NULL REFERENCES tenants(tenant_id),
            source_system TEXT NOT NULL,
            PRIMARY KEY (tenant_id, source_system)
        );
        CREATE TABLE identities (
            tenant_id     TEXT NOT NULL REFERENCES tenants(tenant_id),
            email         TEXT NOT NULL,
            source_system TEXT NOT NULL,
            account_id    TEXT NOT NULL,
            PRIMARY KEY (tenant_id, email, source_system, account_id)
        );
        CREATE INDEX identities_by_account ON identities(tenant_id, source_system, account_id);
        CREATE TABLE groups (
            tenant_id     TEXT NOT NULL REFERENCES tenants(tenant_id),
            source_system TEXT NOT NULL,
            group_id      TEXT NOT NULL,
            PRIMARY KEY (tenant_id, source_system, group_id)
        );
        CREATE TABLE group_members (
            tenant_id     TEXT NOT NULL,
            source_system TEXT NOT NULL,
            group_id      TEXT NOT NULL,
            member_id     TEXT NOT NULL,
            PRIMARY KEY (tenant_id, source_system, group_id, member_id)
        );
        CREATE INDEX group_members_by_member
            ON group_members(tenant_id, source_system, member_id);
        CREATE TABLE documents (
            doc_id          INTEGER PRIMARY KEY,
            tenant_id       TEXT NOT NULL REFERENCES tenants(tenant_id),
            source_system   TEXT NOT NULL,
            external_id     TEXT NOT NULL,
            corpus_id       TEXT NOT NULL,
            title           TEXT NOT NULL DEFAULT '',
            author_account  TEXT,
            classification  INTEGER NOT NULL,
            authority_tier  INTEGER NOT NULL DEFAULT 3,
            updated_at      TEXT,
            metadata        TEXT NOT NULL DEFAULT '{}',
            content_hash    TEXT NOT NULL,
            record_hash     TEXT NOT NULL,
            trust_score     REAL NOT NULL DEFAULT 0.5,
            ingested_at     TEXT NOT NULL,
            UNIQUE (tenant_id, source_system, external_id)
        );
        CREATE INDEX documents_by_corpus ON documents(tenant_id, corpus_id);
        CREATE INDEX documents_by_class ON documents(tenant_id, classification);
        CREATE TABLE chunks (
            chunk_id       INTEGER PRIMARY KEY,
            tenant_id      TEXT NOT NULL,
            doc_id         INTEGER NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
            ordinal        INTEGER NOT NULL,
            parent_ordinal INTEGER,
            indexed        INTEGER NOT NULL,
            token_count    INTEGER NOT NULL,
            text           TEXT NOT NULL,
            UNIQUE (doc_id, ordinal)
        );
        CREATE INDEX chunks_by_tenant ON chunks(tenant_id, indexed);
        CREATE TABLE chunk_vectors (
            chunk_id  INTEGER PRIMARY KEY REFERENCES chunks(chunk_id) ON DELETE CASCADE,
            tenant_id TEXT NOT NULL,
            embedding BLOB NOT NULL
        );
        CREATE TABLE vector_spaces (
            tenant_id TEXT PRIMARY KEY REFERENCES tenants(tenant_id),
            embedder  TEXT NOT NULL,
            dim       INTEGER NOT NULL
        );
        CREATE TABLE doc_acl (
            tenant_id     TEXT NOT NULL,
            doc_id        INTEGER NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
            source_system TEXT NOT NULL,
            principal_id  TEXT NOT NULL,
            PRIMARY KEY (doc_id, source_system, principal_id)
        );
        CREATE INDEX doc_acl_by_principal ON doc_acl(tenant_id, source_system, principal_id);
        CREATE TABLE doc_meta (
            tenant_id  TEXT NOT NULL,
            doc_id     INTEGER NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
            key        TEXT NOT NULL,
            value_text TEXT,
            value_num  REAL
        );
        CREATE INDEX doc_meta_text ON doc_meta(tenant_id, key, value_text);
        CREATE INDEX doc_meta_num ON doc_meta(tenant_id, key, value_num);
        CREATE INDEX doc_meta_doc ON doc_meta(doc_id);
        CREATE TABLE entities (
            entity_id INTEGER PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            kind      TEXT NOT NULL,
            name      TEXT NOT NULL,
            UNIQUE (tenant_id, kind, name)
        );
        CREATE TABLE chunk_entities (
            tenant_id TEXT NOT NULL,
            chunk_id  INTEGER NOT NULL REFERENCES chunks(chunk_id) ON DELETE CASCADE,
            entity_id INTEGER NOT NULL REFERENCES entities(entity_id),
            PRIMARY KEY (chunk_id, entity_id)
        );
        CREATE TABLE relations (
            tenant_id  TEXT NOT NULL,
            src_entity INTEGER NOT NULL REFERENCES entities(entity_id),
            dst_entity INTEGER NOT NULL REFERENCES entities(entity_id),
            kind       TEXT NOT NULL,
            chunk_id   INTEGER REFERENCES chunks(chunk_id) ON DELETE CASCADE
        );
        CREATE INDEX relations_by_chunk ON relations(chunk_id);
        CREATE INDEX chunk_entities_by_entity ON chunk_entities(tenant_id, entity_id);
        CREATE TABLE access_counter (
            tenant_id        TEXT NOT NULL,
            entity_kind      TEXT NOT NULL,
            entity_id        TEXT NOT NULL,
            hits             INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT,
            PRIMARY KEY (tenant_id, entity_kind, entity_id)
        );
        CREATE TABLE index_outbox (
            seq        INTEGER PRIMARY KEY AUTOINCREMENT,
            tenant_id  TEXT NOT NULL,
            doc_id     INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX index_outbox_by_tenant ON index_outbox(tenant_id, seq);
        CREATE TABLE incidents (
            incident_id INTEGER PRIMARY KEY,
            tenant_id   TEXT NOT NULL,
            kind        TEXT NOT NULL,
            detail      TEXT NOT NULL,
            created_at  TEXT NOT NULL
        );
        """,
    ),
    (
        2,
        "audit log",
        """
        ALTER TABLE tenants ADD COLUMN audit_seq INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE tenants ADD COLUMN audit_head TEXT NOT NULL DEFAULT '';
        CREATE TABLE audit_events (
            tenant_id   TEXT NOT NULL,
            seq         INTEGER NOT NULL,
            event_id    TEXT NOT NULL,
            request_id  TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            kind        TEXT NOT NULL,
            payload     TEXT NOT NULL,
            created_at  TEXT NOT NULL,
            prev_hash   TEXT NOT NULL,
            hash        TEXT NOT NULL,
            PRIMARY KEY (tenant_id, seq)
        );
        CREATE UNIQUE INDEX audit_events_by_id ON audit_events(tenant_id, event_id);
        CREATE INDEX audit_events_by_request ON audit_events(tenant_id, request_id);
        CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END
        """,
    ),
    (
        3,
        "sessions",
        """
        CREATE TABLE sessions (
            tenant_id           TEXT NOT NULL,
            session_id          TEXT NOT NULL,
            sub                 TEXT NOT NULL,
            route_id            TEXT NOT NULL,
            retrieval           TEXT NOT NULL,
            route_table_version TEXT NOT NULL,
            created_at          TEXT NOT NULL,
            PRIMARY KEY (tenant_id, session_id)
        )
        """,
    ),
    (
        4,
        "one owner per account",
        # Fail-closed: an account bound to more than one email is ambiguous, so every binding
        # of it is removed (it grants nobody anything until the source re-sends its owner),
        # each removal is recorded as an incident, and the tenant's ACL epoch is bumped so no
        # cache keeps serving the rights. Then a unique index keeps one owner per account
        # (same name as the index it replaces: the dialect's INDEXED BY hint names it).
        """
        CREATE TEMP TABLE ambiguous_identities AS
            SELECT tenant_id, email, source_system, account_id FROM identities i
            WHERE EXISTS (SELECT 1 FROM identities o WHERE o.tenant_id = i.tenant_id
                          AND o.source_system = i.source_system
                          AND o.account_id = i.account_id AND o.email <> i.email);
        INSERT INTO incidents(tenant_id, kind, detail, created_at)
            SELECT tenant_id, 'ambiguous_identity_removed',
                   json_object('email', email, 'source_system', source_system,
                               'account_id', account_id),
                   strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            FROM ambiguous_identities ORDER BY tenant_id, source_system, account_id, email;
        UPDATE tenants SET acl_epoch = acl_epoch + 1
            WHERE tenant_id IN (SELECT tenant_id FROM ambiguous_identities);
        DELETE FROM identities WHERE EXISTS (
            SELECT 1 FROM ambiguous_identities a WHERE a.tenant_id = identities.tenant_id
            AND a.source_system = identities.source_system
            AND a.account_id = identities.account_id);
        DROP TABLE temp.ambiguous_identities;
        DROP INDEX identities_by_account;
        CREATE UNIQUE INDEX identities_by_account
            ON identities(tenant_id, source_system, account_id)
        """,
    ),
    (
        5,
        "hidden-item marker budget",
        """
        CREATE TABLE marker_budget (
            tenant_id    TEXT NOT NULL,
            email        TEXT NOT NULL,
            window_start INTEGER NOT NULL,
            shown        INTEGER NOT NULL,
            PRIMARY KEY (tenant_id, email, window_start)
        )
        """,
    ),
    (
        6,
        "audit events by session",
        # Replay finds the event that pinned a request's session (``route_pinned``, written
        # by the request that opened it) without reading the tenant's whole log.
        "CREATE INDEX audit_events_by_session ON audit_events(tenant_id, session_id, seq)",
    ),
]


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations, each in its own transaction. Returns the schema version."""
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        for version, name, sql in MIGRATIONS:
            if version in done:
                continue
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-check under the write lock: another process may have migrated meanwhile.
                if conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                ).fetchone():
                    conn.execute("ROLLBACK")
                    continue
                for statement in _split(sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, now_iso()),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        latest = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(f"could not migrate the SQLite schema: {exc}") from exc
    return check_not_newer(int(latest or 0), MIGRATIONS)


def check_not_newer(latest: int, migrations: list[tuple[int, str, str]]) -> int:
    """Refuse a database migrated by a newer govrag: its schema may mean what we cannot read."""
    known = max(v for v, _, _ in migrations)
    if latest > known:
        raise StoreError(
            f"the database schema is version {latest}, newer than this govrag knows ({known}); "
            "upgrade govrag"
        )
    return latest


def _split(sql: str) -> list[str]:
    """Statements of a migration; a trigger body's inner ``;`` does not end its statement."""
    out: list[str] = []
    buf = ""
    for piece in sql.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf.strip().removesuffix(";"))
            buf = ""
    if buf.strip(" \n;"):
        out.append(buf.strip().removesuffix(";"))
    return out
