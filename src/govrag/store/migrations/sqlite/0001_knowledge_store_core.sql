-- Every table carries tenant_id and every query is tenant-scoped, so the same shape can be
-- distributed by tenant on PostgreSQL. Derived search indexes are rebuilt from these tables.
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
