-- The temporal strategy and time filters. effective_at: when a document's version is in effect
-- from (the source's effective_at, else its updated_at); updated_utc: its updated_at. Both in
-- the store's UTC format, so times written with different offsets compare as instants.
-- Backfilled from updated_at (SQLite's date functions read its offset); sub-second digits of
-- a backfilled time are dropped (a version's time is never that fine).
ALTER TABLE documents ADD COLUMN effective_at TEXT;
ALTER TABLE documents ADD COLUMN updated_utc TEXT;
UPDATE documents SET updated_utc = strftime('%Y-%m-%dT%H:%M:%S.000000Z', updated_at)
    WHERE updated_at IS NOT NULL;
UPDATE documents SET effective_at = updated_utc;
CREATE INDEX documents_by_effective ON documents(tenant_id, effective_at);
-- Which versions (external ids of the same source system) a document replaces. Rows belong to
-- the replacing document: they go with it, and a caller who may not read it is never affected.
CREATE TABLE doc_supersedes (
    tenant_id   TEXT NOT NULL,
    doc_id      INTEGER NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    external_id TEXT NOT NULL,
    PRIMARY KEY (doc_id, external_id)
);
CREATE INDEX doc_supersedes_by_target ON doc_supersedes(tenant_id, external_id);
-- The graph leg follows relations from an entity, either way (graph.py).
CREATE INDEX relations_by_source ON relations(tenant_id, src_entity);
CREATE INDEX relations_by_target ON relations(tenant_id, dst_entity);
