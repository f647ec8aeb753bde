CREATE TABLE marker_budget (
    tenant_id    TEXT COLLATE "C" NOT NULL,
    email        TEXT COLLATE "C" NOT NULL,
    window_start BIGINT NOT NULL,
    shown        BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, email, window_start)
)
;
ALTER TABLE marker_budget ENABLE ROW LEVEL SECURITY;
ALTER TABLE marker_budget FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON marker_budget USING (tenant_id = current_setting('govrag.tenant', true)) WITH CHECK (tenant_id = current_setting('govrag.tenant', true));
