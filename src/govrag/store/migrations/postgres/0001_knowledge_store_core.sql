-- The tables mirror the SQLite schema so both backends hold the same truth. Every primary
-- key, unique constraint and foreign key includes tenant_id, the distribution column under
-- Citus, so every table can be distributed by tenant and every join stays on one shard.
-- Text columns use the "C" collation: comparisons and ordering are by code point, as in
-- SQLite, so filters and listings agree across backends. tenant_directory lists tenant ids
-- and nothing else: the one table outside the tenant policies.
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
);
