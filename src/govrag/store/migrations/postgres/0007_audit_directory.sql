-- Read-only and only inside a transaction that sets govrag.audit_directory (the store does
-- so to list the tenants of the audit log); writes still need the tenant policy. The
-- application role can name any tenant in govrag.tenant anyway, so this widens nothing it
-- could not read before; it only lets a tenant it does not know be found.
CREATE POLICY audit_directory ON audit_events FOR SELECT USING (current_setting('govrag.audit_directory', true) = 'on');
