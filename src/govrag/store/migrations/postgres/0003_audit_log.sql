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
;
ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON audit_events USING (tenant_id = current_setting('govrag.tenant', true)) WITH CHECK (tenant_id = current_setting('govrag.tenant', true));
