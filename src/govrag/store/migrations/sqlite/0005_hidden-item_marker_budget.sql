CREATE TABLE marker_budget (
    tenant_id    TEXT NOT NULL,
    email        TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    shown        INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, email, window_start)
);
