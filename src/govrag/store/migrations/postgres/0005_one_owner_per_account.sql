-- Fail-closed, as SQLite migration 4: every binding of an account bound to more than
-- one email is removed (an ambiguous account grants nobody anything), recorded as an
-- incident, and the tenant's ACL epoch is bumped. Then a unique index keeps one owner
-- per account. The cleanup must see every tenant's rows: forced row-level security
-- applies to the schema owner too, so it is lifted for this transaction only (the
-- ALTERs hold their tables' exclusive locks until commit, so no session sees it off).
ALTER TABLE identities NO FORCE ROW LEVEL SECURITY;
ALTER TABLE incidents NO FORCE ROW LEVEL SECURITY;
ALTER TABLE tenants NO FORCE ROW LEVEL SECURITY;
CREATE TEMP TABLE ambiguous_identities ON COMMIT DROP AS
    SELECT tenant_id, email, source_system, account_id FROM identities i
    WHERE EXISTS (SELECT 1 FROM identities o WHERE o.tenant_id = i.tenant_id
                  AND o.source_system = i.source_system
                  AND o.account_id = i.account_id AND o.email <> i.email);
INSERT INTO incidents(tenant_id, kind, detail, created_at)
    SELECT tenant_id, 'ambiguous_identity_removed',
           jsonb_build_object('email', email, 'source_system', source_system,
                              'account_id', account_id),
           to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    FROM ambiguous_identities ORDER BY tenant_id, source_system, account_id, email;
UPDATE tenants SET acl_epoch = acl_epoch + 1
    WHERE tenant_id IN (SELECT tenant_id FROM ambiguous_identities);
DELETE FROM identities USING ambiguous_identities a
    WHERE a.tenant_id = identities.tenant_id AND a.source_system = identities.source_system
    AND a.account_id = identities.account_id;
ALTER TABLE identities FORCE ROW LEVEL SECURITY;
ALTER TABLE incidents FORCE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
DROP INDEX identities_by_account;
CREATE UNIQUE INDEX identities_by_account ON identities(tenant_id, source_system, account_id);
