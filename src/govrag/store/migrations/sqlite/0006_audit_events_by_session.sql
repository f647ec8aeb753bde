-- Replay finds the event that pinned a request's session (``route_pinned``, written by the
-- request that opened it) without reading the tenant's whole log.
CREATE INDEX audit_events_by_session ON audit_events(tenant_id, session_id, seq);
