-- As SQLite migration 9: document times in the store's UTC format, and which versions a
-- document replaces (rows of the replacing document, under the tenant's row-level security).
ALTER TABLE documents ADD COLUMN effective_at TEXT COLLATE "C",
    ADD COLUMN updated_utc TEXT COLLATE "C";
ALTER TABLE documents NO FORCE ROW LEVEL SECURITY;
UPDATE documents SET updated_utc = to_char(updated_at::timestamptz AT TIME ZONE 'UTC',
        'YYYY-MM-DD"T"HH24:MI:SS".000000Z"')
    WHERE updated_at IS NOT NULL;
UPDATE documents SET effective_at = updated_utc;
ALTER TABLE documents FORCE ROW LEVEL SECURITY;
CREATE INDEX documents_by_effective ON documents(tenant_id, effective_at);
CREATE TABLE doc_supersedes (
    tenant_id   TEXT COLLATE "C" NOT NULL,
    doc_id      BIGINT NOT NULL,
    external_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, doc_id, external_id),
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents(tenant_id, doc_id) ON DELETE CASCADE
);
CREATE INDEX doc_supersedes_by_target ON doc_supersedes(tenant_id, external_id);
ALTER TABLE doc_supersedes ENABLE ROW LEVEL SECURITY;
ALTER TABLE doc_supersedes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON doc_supersedes
    USING (tenant_id = current_setting('govrag.tenant', true))
    WITH CHECK (tenant_id = current_setting('govrag.tenant', true));
-- The graph leg follows relations from an entity, either way (graph.py).
CREATE INDEX relations_by_source ON relations(tenant_id, src_entity);
CREATE INDEX relations_by_target ON relations(tenant_id, dst_entity);
