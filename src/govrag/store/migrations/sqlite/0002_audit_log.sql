-- The audit log: hash-chained per tenant (tenants.audit_seq, tenants.audit_head), append-only
-- by trigger.
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
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
