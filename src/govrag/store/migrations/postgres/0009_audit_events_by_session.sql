-- As SQLite migration 6: replay finds a session's ``route_pinned`` event by index.
CREATE INDEX audit_events_by_session ON audit_events(tenant_id, session_id, seq);
