CREATE TABLE sessions (
    tenant_id           TEXT NOT NULL,
    session_id          TEXT NOT NULL,
    sub                 TEXT NOT NULL,
    route_id            TEXT NOT NULL,
    retrieval           TEXT NOT NULL,
    route_table_version TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);
