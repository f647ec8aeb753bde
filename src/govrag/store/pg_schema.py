"""PostgreSQL schema of the truth store: versioned migrations, Citus-ready, tenant RLS.

The tables mirror ``schema.py`` (SQLite) so both backends hold the same truth. Differences
that matter for scale-out:

- Every primary key, unique constraint and foreign key includes ``tenant_id``, the
  distribution column under Citus, so every table can be distributed by tenant and every
  join stays on one shard.
- Row-level security is enabled *and forced* on every tenant table: a session sees only the
  rows of the tenant named in the transaction-local setting ``govrag.tenant``; with no setting
  it sees nothing. Forced RLS applies to the table owner too; only superusers and roles with
  BYPASSRLS skip it, so the application role must be neither.
- Vectors use pgvector's ``vector`` type (dimension per tenant, recorded in ``vector_spaces``);
  an HNSW index per dimension in use is created on open (``ensure_vector_index``).
- The index outbox is numbered per tenant from ``tenants.outbox_seq``, incremented under the
  tenant row's lock, so entries become visible in sequence order: a reader that has applied
  up to N never misses an N-1 committed later (which a shared sequence would allow).
- ``tenant_directory`` lists tenant ids and nothing else; it is the one table outside the
  tenant policies, so an operator's "every tenant" commands can enumerate them. The audit
  log's tenants are listed under a read-only policy of their own (migration 7), so events
  whose tenant is in no directory are found too.
- Text columns use the "C" collation: comparisons and ordering are by code point, as in
  SQLite, so filters and listings agree across backends.

Requires the ``postgres`` extra (psycopg 3) and pgvector >= 0.8 on the server.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from govrag.errors import StoreError
from govrag.store.schema import check_not_newer, now_iso

if TYPE_CHECKING:
    import psycopg

#: Oldest pgvector with ``hnsw.iterative_scan`` (filtered HNSW scans that do not lose rows).
MIN_PGVECTOR = (0, 8, 0)
TENANT_SETTING = "govrag.tenant"
#: The transaction setting the ``reader_acl`` policy on vectors reads (migration 6).
READER_SETTING = "govrag.reader"
#: The token every vector row holds; ``govrag.reader`` unset means this one (every row).
ALL_READERS = "\x1e"
#: The transaction setting under which audit events of every tenant are readable (migration
#: 7): ``govrag audit verify`` lists every tenant holding events, one whose tenant row is gone
#: included, which the tenant policy alone would hide.
AUDIT_DIRECTORY_SETTING = "govrag.audit_directory"

#: Tables holding tenant data in migration 2 (frozen: a released migration never changes).
_V2_TENANT_TABLES = (
    "tenants", "corpora", "source_systems", "identities", "groups", "group_members",
    "documents", "chunks", "chunk_vectors", "vector_spaces", "doc_acl", "doc_meta",
    "entities", "chunk_entities", "relations", "access_counter", "index_outbox", "incidents",
)  # fmt: skip
#: Tables holding tenant data; each has the forced tenant isolation policy.
TENANT_TABLES = (*_V2_TENANT_TABLES, "audit_events", "sessions", "marker_budget")

_CORE = """
CREATE TABLE tenant_directory (
    tenant_id   TEXT COLLATE "C" PRIMARY KEY
);
CREATE TABLE tenants (
    tenant_id   TEXT COLLATE "C" PRIMARY KEY,
    acl_epoch   BIGINT NOT NULL DEFAULT 0,
    outbox_seq  BIGINT NOT NULL DEFAULT 0,
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE corpora (
    tenant_id   TEXT COLLATE "C" NOT NULL REFERENCES tenants(tenant_id),
    corpus_id   TEXT COLLATE "C" NOT NULL,
    description TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, corpus_id)
);
CREATE TABLE source_systems (
    tenant_id     TEXT COLLATE "C" NOT NULL REFERENCES tenants(tenant_id),
    source_system TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, source_system)
);
CREATE TABLE identities (
    tenant_id     TEXT COLLATE "C" NOT NULL REFERENCES tenants(tenant_id),
    email         TEXT COLLATE "C" NOT NULL,
    source_system TEXT COLLATE "C" NOT NULL,
    account_id    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, email, source_system, account_id)
);
CREATE INDEX identities_by_account ON identities(tenant_id, source_system, account_id);
CREATE TABLE groups (
    tenant_id     TEXT COLLATE "C" NOT NULL REFERENCES tenants(tenant_id),
    source_system TEXT COLLATE "C" NOT NULL,
    group_id      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, source_system, group_id)
);
CREATE TABLE group_members (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    source_system TEXT COLLATE "C" NOT NULL,
    group_id      TEXT COLLATE "C" NOT NULL,
    member_id     TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, source_system, group_id, member_id)
);
CREATE INDEX group_members_by_member ON group_members(tenant_id, source_system, member_id);
CREATE TABLE documents (
    tenant_id       TEXT COLLATE "C" NOT NULL REFERENCES tenants(tenant_id),
    doc_id          BIGINT GENERATED ALWAYS AS IDENTITY,
    source_system   TEXT COLLATE "C" NOT NULL,
    external_id     TEXT COLLATE "C" NOT NULL,
    corpus_id       TEXT COLLATE "C" NOT NULL,
    title           TEXT COLLATE "C" NOT NULL DEFAULT '',
    author_account  TEXT COLLATE "C",
    classification  SMALLINT NOT NULL,
    authority_tier  SMALLINT NOT NULL DEFAULT 3,
    updated_at      TEXT COLLATE "C",
    metadata        JSONB NOT NULL DEFAULT '{}',
    content_hash    TEXT COLLATE "C" NOT NULL,
    record_hash     TEXT COLLATE "C" NOT NULL,
    trust_score     DOUBLE PRECISION NOT NULL DEFAULT 0.5,
    ingested_at     TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, doc_id),
    UNIQUE (tenant_id, source_system, external_id)
);
CREATE INDEX documents_by_corpus ON documents(tenant_id, corpus_id);
CREATE INDEX documents_by_class ON documents(tenant_id, classification);
CREATE TABLE chunks (
    tenant_id      TEXT COLLATE "C" NOT NULL,
    chunk_id       BIGINT GENERATED ALWAYS AS IDENTITY,
    doc_id         BIGINT NOT NULL,
    ordinal        INTEGER NOT NULL,
    parent_ordinal INTEGER,
    indexed        BOOLEAN NOT NULL,
    token_count    INTEGER NOT NULL,
    text           TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, chunk_id),
    UNIQUE (tenant_id, doc_id, ordinal),
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents(tenant_id, doc_id) ON DELETE CASCADE
);
CREATE TABLE chunk_vectors (
    tenant_id TEXT COLLATE "C" NOT NULL,
    chunk_id  BIGINT NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (tenant_id, chunk_id),
    FOREIGN KEY (tenant_id, chunk_id) REFERENCES chunks(tenant_id, chunk_id) ON DELETE CASCADE
);
CREATE TABLE vector_spaces (
    tenant_id TEXT COLLATE "C" PRIMARY KEY REFERENCES tenants(tenant_id),
    embedder  TEXT COLLATE "C" NOT NULL,
    dim       INTEGER NOT NULL
);
CREATE TABLE doc_acl (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    doc_id        BIGINT NOT NULL,
    source_system TEXT COLLATE "C" NOT NULL,
    principal_id  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, doc_id, source_system, principal_id),
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents(tenant_id, doc_id) ON DELETE CASCADE
);
CREATE INDEX doc_acl_by_principal ON doc_acl(tenant_id, source_system, principal_id);
CREATE TABLE doc_meta (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    doc_id     BIGINT NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    value_text TEXT COLLATE "C",
    value_num  DOUBLE PRECISION,
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents(tenant_id, doc_id) ON DELETE CASCADE
);
CREATE INDEX doc_meta_text ON doc_meta(tenant_id, key, value_text);
CREATE INDEX doc_meta_num ON doc_meta(tenant_id, key, value_num);
CREATE INDEX doc_meta_doc ON doc_meta(tenant_id, doc_id);
CREATE TABLE entities (
    tenant_id TEXT COLLATE "C" NOT NULL,
    entity_id BIGINT GENERATED ALWAYS AS IDENTITY,
    kind      TEXT COLLATE "C" NOT NULL,
    name      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, entity_id),
    UNIQUE (tenant_id, kind, name)
);
CREATE TABLE chunk_entities (
    tenant_id TEXT COLLATE "C" NOT NULL,
    chunk_id  BIGINT NOT NULL,
    entity_id BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, chunk_id, entity_id),
    FOREIGN KEY (tenant_id, chunk_id) REFERENCES chunks(tenant_id, chunk_id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, entity_id) REFERENCES entities(tenant_id, entity_id)
);
CREATE INDEX chunk_entities_by_entity ON chunk_entities(tenant_id, entity_id);
CREATE TABLE relations (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    src_entity BIGINT NOT NULL,
    dst_entity BIGINT NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL,
    chunk_id   BIGINT,
    FOREIGN KEY (tenant_id, src_entity) REFERENCES entities(tenant_id, entity_id),
    FOREIGN KEY (tenant_id, dst_entity) REFERENCES entities(tenant_id, entity_id),
    FOREIGN KEY (tenant_id, chunk_id) REFERENCES chunks(tenant_id, chunk_id) ON DELETE CASCADE
);
CREATE INDEX relations_by_chunk ON relations(tenant_id, chunk_id);
CREATE TABLE access_counter (
    tenant_id        TEXT COLLATE "C" NOT NULL,
    entity_kind      TEXT COLLATE "C" NOT NULL,
    entity_id        TEXT COLLATE "C" NOT NULL,
    hits             BIGINT NOT NULL DEFAULT 0,
    last_accessed_at TEXT COLLATE "C",
    PRIMARY KEY (tenant_id, entity_kind, entity_id)
);
CREATE TABLE index_outbox (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,
    doc_id     BIGINT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
CREATE TABLE incidents (
    tenant_id   TEXT COLLATE "C" NOT NULL,
    incident_id BIGINT GENERATED ALWAYS AS IDENTITY,
    kind        TEXT COLLATE "C" NOT NULL,
    detail      JSONB NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, incident_id)
)
"""


def _rls(tables: tuple[str, ...]) -> str:
    statements = []
    for table in tables:
        statements += [
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
            # current_setting(..., true) is NULL when unset, so a session without a tenant
            # matches no row and can insert none.
            f"CREATE POLICY tenant_isolation ON {table} "
            f"USING (tenant_id = current_setting('{TENANT_SETTING}', true)) "
            f"WITH CHECK (tenant_id = current_setting('{TENANT_SETTING}', true))",
        ]
    return ";\n".join(statements)


#: Migration 6: what the access predicate reads, on the vector row itself. A vector search
#: then filters each candidate (HNSW walk) or finds the readable vectors (exact path, a GIN
#: bitmap scan read in physical order) without probing chunks, documents and ACL rows per
#: row: at 1M chunks those three probes per readable vector were the whole cost of the
#: exact path. Triggers keep the copies equal to the truth (``doc_acl`` and ``documents``) on
#: every write path: a vector is filled when inserted (its document's ACL rows are written
#: first); an ACL change is applied at commit (deferred, so a delete-and-reinsert of a
#: document's ACL updates each vector once, and only if its tokens changed); a document moved
#: to another corpus or classification updates its vectors at once. Tokens are
#: ``principal_token``'s (``source_system`` + U+001F + ``principal_id``; ``*`` for everyone),
#: plus U+001E on every row (:data:`ALL_READERS`).
#:
#: The reader policy: under forced row-level security PostgreSQL evaluates a query's own
#: conditions only after the tenant policy unless their operators are leakproof, and array
#: overlap is not, so the app role's ``acl && tokens`` could never use the GIN index (a
#: sequential scan of every vector of the tenant). A policy's condition has no such limit;
#: the restrictive ``reader_acl`` policy reads the caller's tokens from the transaction
#: setting ``govrag.reader`` (U+001E-separated), so the exact path's scan is driven by the
#: index. Unset, it is U+001E, which every row holds: writes, triggers and unrestricted
#: rankings see every row of the tenant, as before. It narrows what a statement sees and
#: is not a boundary against the application role (which sets it); the query states the
#: same predicate, and the tenant policy stays the isolation boundary.
#:
#: Existing rows are backfilled with row-level security lifted for this transaction (forced
#: RLS applies to the owner too); the HNSW indexes are dropped first, since rewriting every
#: row would insert each vector into the graph again, and are rebuilt on the next open
#: (``ensure_vector_index``): on a large store that open takes as long as an index build.
_V6_VECTOR_ACCESS = r"""
CREATE FUNCTION govrag_acl_tokens(t TEXT, d BIGINT) RETURNS TEXT[] LANGUAGE sql STABLE AS $$
    SELECT array_prepend(chr(30), COALESCE(array_agg(
               CASE WHEN principal_id = '*' THEN '*'
               ELSE source_system || chr(31) || principal_id END
               ORDER BY source_system, principal_id), '{}'))
    FROM doc_acl WHERE tenant_id = t AND doc_id = d
$$;
CREATE FUNCTION govrag_reader_tokens() RETURNS TEXT[] LANGUAGE sql STABLE AS $$
    SELECT COALESCE(string_to_array(NULLIF(current_setting('govrag.reader', true), ''), chr(30)),
                    ARRAY[chr(30)])
$$;
DO $$
DECLARE r RECORD;
BEGIN
    FOR r IN SELECT indexname FROM pg_indexes
             WHERE tablename = 'chunk_vectors' AND indexname LIKE 'chunk\_vectors\_hnsw\_%'
    LOOP
        EXECUTE format('DROP INDEX %I', r.indexname);
    END LOOP;
END $$;
ALTER TABLE chunk_vectors ADD COLUMN doc_id BIGINT,
    ADD COLUMN corpus_id TEXT COLLATE "C",
    ADD COLUMN classification SMALLINT,
    ADD COLUMN acl TEXT[] COLLATE "C";
ALTER TABLE chunk_vectors NO FORCE ROW LEVEL SECURITY;
ALTER TABLE chunks NO FORCE ROW LEVEL SECURITY;
ALTER TABLE documents NO FORCE ROW LEVEL SECURITY;
ALTER TABLE doc_acl NO FORCE ROW LEVEL SECURITY;
UPDATE chunk_vectors v SET doc_id = c.doc_id, corpus_id = d.corpus_id,
        classification = d.classification, acl = array_prepend(chr(30), COALESCE(a.acl, '{}'))
    FROM chunks c
    JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id
    LEFT JOIN (
        SELECT tenant_id, doc_id,
               array_agg(CASE WHEN principal_id = '*' THEN '*'
                         ELSE source_system || chr(31) || principal_id END
                         ORDER BY source_system, principal_id) AS acl
        FROM doc_acl GROUP BY tenant_id, doc_id
    ) a ON a.tenant_id = c.tenant_id AND a.doc_id = c.doc_id
    WHERE c.tenant_id = v.tenant_id AND c.chunk_id = v.chunk_id;
ALTER TABLE chunk_vectors FORCE ROW LEVEL SECURITY;
ALTER TABLE chunks FORCE ROW LEVEL SECURITY;
ALTER TABLE documents FORCE ROW LEVEL SECURITY;
ALTER TABLE doc_acl FORCE ROW LEVEL SECURITY;
ALTER TABLE chunk_vectors ALTER COLUMN doc_id SET NOT NULL,
    ALTER COLUMN corpus_id SET NOT NULL,
    ALTER COLUMN classification SET NOT NULL,
    ALTER COLUMN acl SET NOT NULL;
CREATE INDEX chunk_vectors_by_doc ON chunk_vectors(tenant_id, doc_id);
CREATE INDEX chunk_vectors_by_acl ON chunk_vectors USING gin (acl);
CREATE POLICY reader_acl ON chunk_vectors AS RESTRICTIVE FOR SELECT
    USING (acl && govrag_reader_tokens());
CREATE FUNCTION govrag_vector_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT c.doc_id, d.corpus_id, d.classification
        INTO NEW.doc_id, NEW.corpus_id, NEW.classification
        FROM chunks c JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id
        WHERE c.tenant_id = NEW.tenant_id AND c.chunk_id = NEW.chunk_id;
    NEW.acl := govrag_acl_tokens(NEW.tenant_id, NEW.doc_id);
    RETURN NEW;
END $$;
CREATE TRIGGER chunk_vectors_fill BEFORE INSERT OR UPDATE OF chunk_id ON chunk_vectors
    FOR EACH ROW EXECUTE FUNCTION govrag_vector_fill();
CREATE FUNCTION govrag_acl_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE t TEXT; d BIGINT; tokens TEXT[];
BEGIN
    IF TG_OP = 'DELETE' THEN t := OLD.tenant_id; d := OLD.doc_id;
    ELSE t := NEW.tenant_id; d := NEW.doc_id; END IF;
    tokens := govrag_acl_tokens(t, d);
    UPDATE chunk_vectors SET acl = tokens
        WHERE tenant_id = t AND doc_id = d AND acl IS DISTINCT FROM tokens;
    IF TG_OP = 'UPDATE' AND (OLD.tenant_id, OLD.doc_id) IS DISTINCT FROM (t, d) THEN
        tokens := govrag_acl_tokens(OLD.tenant_id, OLD.doc_id);
        UPDATE chunk_vectors SET acl = tokens
            WHERE tenant_id = OLD.tenant_id AND doc_id = OLD.doc_id
            AND acl IS DISTINCT FROM tokens;
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER doc_acl_sync AFTER INSERT OR UPDATE OR DELETE ON doc_acl
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION govrag_acl_sync();
CREATE FUNCTION govrag_document_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE chunk_vectors SET corpus_id = NEW.corpus_id, classification = NEW.classification
        WHERE tenant_id = NEW.tenant_id AND doc_id = NEW.doc_id;
    RETURN NULL;
END $$;
CREATE TRIGGER documents_sync AFTER UPDATE OF corpus_id, classification ON documents
    FOR EACH ROW WHEN (OLD.corpus_id IS DISTINCT FROM NEW.corpus_id
                       OR OLD.classification IS DISTINCT FROM NEW.classification)
    EXECUTE FUNCTION govrag_document_sync()
"""


# (version, name, SQL). Append only: a released migration never changes.
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "knowledge store core", _CORE),
    (2, "tenant row-level security", _rls(_V2_TENANT_TABLES)),
    (
        3,
        "audit log",
        """
ALTER TABLE tenants ADD COLUMN audit_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN audit_head TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE TABLE audit_events (
    tenant_id   TEXT COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL,
    event_id    TEXT COLLATE "C" NOT NULL,
    request_id  TEXT COLLATE "C" NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL,
    kind        TEXT COLLATE "C" NOT NULL,
    payload     TEXT NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL,
    prev_hash   TEXT COLLATE "C" NOT NULL,
    hash        TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, seq),
    UNIQUE (tenant_id, event_id)
);
CREATE INDEX audit_events_by_request ON audit_events(tenant_id, request_id);
"""
        + ";\n"
        + _rls(("audit_events",)),
    ),
    (
        4,
        "sessions",
        """
CREATE TABLE sessions (
    tenant_id           TEXT COLLATE "C" NOT NULL,
    session_id          TEXT COLLATE "C" NOT NULL,
    sub                 TEXT COLLATE "C" NOT NULL,
    route_id            TEXT COLLATE "C" NOT NULL,
    retrieval           TEXT NOT NULL,
    route_table_version TEXT COLLATE "C" NOT NULL,
    created_at          TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
)
"""
        + ";\n"
        + _rls(("sessions",)),
    ),
    (
        5,
        "one owner per account",
        # Fail-closed, as SQLite migration 4: every binding of an account bound to more than
        # one email is removed (an ambiguous account grants nobody anything), recorded as an
        # incident, and the tenant's ACL epoch is bumped; then a unique index keeps one owner
        # per account. The cleanup must see every tenant's rows: forced row-level security
        # applies to the schema owner too, so it is lifted for this transaction only (the
        # ALTERs hold their tables' exclusive locks until commit, so no session sees it off).
        """
ALTER TABLE identities NO FORCE ROW LEVEL SECURITY;
ALTER TABLE incidents NO FORCE ROW LEVEL SECURITY;
ALTER TABLE tenants NO FORCE ROW LEVEL SECURITY;
CREATE TEMP TABLE ambiguous_identities ON COMMIT DROP AS
    SELECT tenant_id, email, source_system, account_id FROM identities i
    WHERE EXISTS (SELECT 1 FROM identities o WHERE o.tenant_id = i.tenant_id
                  AND o.source_system = i.source_system
                  AND o.account_id = i.account_id AND o.email <> i.email);
INSERT INTO incidents(tenant_id, kind, detail, created_at)
    SELECT tenant_id, 'ambiguous_identity_removed',
           jsonb_build_object('email', email, 'source_system', source_system,
                              'account_id', account_id),
           to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    FROM ambiguous_identities ORDER BY tenant_id, source_system, account_id, email;
UPDATE tenants SET acl_epoch = acl_epoch + 1
    WHERE tenant_id IN (SELECT tenant_id FROM ambiguous_identities);
DELETE FROM identities USING ambiguous_identities a
    WHERE a.tenant_id = identities.tenant_id AND a.source_system = identities.source_system
    AND a.account_id = identities.account_id;
ALTER TABLE identities FORCE ROW LEVEL SECURITY;
ALTER TABLE incidents FORCE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
DROP INDEX identities_by_account;
CREATE UNIQUE INDEX identities_by_account ON identities(tenant_id, source_system, account_id)
""",
    ),
    (6, "access columns on vectors", _V6_VECTOR_ACCESS),
    (
        7,
        "audit directory",
        # Read-only and only inside a transaction that sets the setting (the store does so
        # to list the tenants of the audit log); writes still need the tenant policy. The
        # application role can name any tenant in govrag.tenant anyway, so this widens
        # nothing it could not read before; it only lets a tenant it does not know be found.
        f"CREATE POLICY audit_directory ON audit_events FOR SELECT "
        f"USING (current_setting('{AUDIT_DIRECTORY_SETTING}', true) = 'on')",
    ),
    (
        8,
        "hidden-item marker budget",
        """
CREATE TABLE marker_budget (
    tenant_id    TEXT COLLATE "C" NOT NULL,
    email        TEXT COLLATE "C" NOT NULL,
    window_start BIGINT NOT NULL,
    shown        BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, email, window_start)
)
"""
        + ";\n"
        + _rls(("marker_budget",)),
    ),
    (
        9,
        "audit events by session",
        # As SQLite migration 6: replay finds a session's ``route_pinned`` event by index.
        "CREATE INDEX audit_events_by_session ON audit_events(tenant_id, session_id, seq)",
    ),
]


def parse_version(text: str) -> tuple[int, ...]:
    """``'0.8.1'`` -> ``(0, 8, 1)``; pre-release suffixes are ignored."""
    parts = re.findall(r"\d+", text.split("-")[0])
    if not parts:
        raise StoreError(f"cannot read the pgvector version {text!r}")
    return tuple(int(p) for p in parts[:3])


def ensure_pgvector(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    """Create (if needed) and check the ``vector`` extension; a clear error when missing or old."""
    import psycopg

    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
    except psycopg.Error as exc:
        raise StoreError(
            f"the PostgreSQL server cannot provide pgvector ({exc.sqlstate}: "
            f"{str(exc).strip()}); install pgvector >= "
            f"{'.'.join(map(str, MIN_PGVECTOR))} on the server, or have an administrator run "
            "CREATE EXTENSION vector in this database"
        ) from exc
    version = parse_version(row[0] if row else "0")
    if version < MIN_PGVECTOR:
        raise StoreError(
            f"pgvector {'.'.join(map(str, version))} is too old; govrag needs >= "
            f"{'.'.join(map(str, MIN_PGVECTOR))} (iterative HNSW scans); upgrade it with "
            "ALTER EXTENSION vector UPDATE"
        )
    return version


def vector_index_name(dim: int) -> str:
    return f"chunk_vectors_hnsw_{int(dim)}"


def ensure_vector_index(conn: psycopg.Connection[Any], dim: int) -> bool:
    """Create the HNSW index for ``dim``-dimensional vectors if missing; True if created.

    One partial index per dimension in use (a tenant's vector space fixes its dimension);
    queries name the same expression and predicate, which is how the planner matches them.
    """
    import psycopg

    name = vector_index_name(dim)
    try:
        if conn.execute("SELECT 1 FROM pg_class WHERE relname = %s", (name,)).fetchone():
            return False
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON chunk_vectors USING hnsw "
            f"((embedding::vector({int(dim)})) vector_ip_ops) "
            f"WHERE vector_dims(embedding) = {int(dim)}"
        )
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot create the vector index {name} ({str(exc).strip()}); set [store] "
            "admin_url to the schema owner's URL, or have the owner run govrag once"
        ) from exc
    return True


def statements(ddl: str) -> list[str]:
    """``ddl`` split at its top-level semicolons; a ``$$``-quoted function body stays whole."""
    out: list[str] = []
    current = ""
    for i, part in enumerate(ddl.split("$$")):
        if i % 2:  # inside a dollar-quoted body
            current += f"$${part}$$"
            continue
        first, *rest = part.split(";")
        current += first
        for piece in rest:
            out.append(current)
            current = piece
    out.append(current)
    return [s.strip() for s in out if s.strip()]


def migrate(conn: psycopg.Connection[Any], *, app_role: str | None = None) -> int:
    """Apply pending migrations, each in its own transaction; returns the schema version.

    ``conn`` must be the schema owner's (autocommit) connection. ``app_role``, when given, is
    granted what the application needs and nothing more: it does not own the tables, so the
    forced tenant policies always apply to it.
    """
    import psycopg
    from psycopg import sql

    try:
        ensure_pgvector(conn)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        for version, name, ddl in MIGRATIONS:
            with conn.transaction():
                # Serialise concurrent migrators; re-check under the lock.
                conn.execute("LOCK TABLE schema_migrations IN EXCLUSIVE MODE")
                done = conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = %s", (version,)
                ).fetchone()
                if done:
                    continue
                for statement in statements(ddl):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations(version, name, applied_at) VALUES (%s, %s, %s)",
                    (version, name, now_iso()),
                )
        if app_role:
            role = sql.Identifier(app_role)
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(role))
            conn.execute(
                sql.SQL(
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}"
                ).format(role)
            )
            conn.execute(
                sql.SQL("REVOKE INSERT, UPDATE, DELETE ON schema_migrations FROM {}").format(role)
            )
            # Append-only for the application: it may add audit events, never change them.
            conn.execute(sql.SQL("REVOKE UPDATE, DELETE ON audit_events FROM {}").format(role))
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"could not migrate the PostgreSQL schema: {str(exc).strip()}") from exc
    return check_not_newer(int(row[0] or 0) if row else 0, MIGRATIONS)
