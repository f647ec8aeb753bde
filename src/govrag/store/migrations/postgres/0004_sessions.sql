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
;
ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON sessions USING (tenant_id = current_setting('govrag.tenant', true)) WITH CHECK (tenant_id = current_setting('govrag.tenant', true));
