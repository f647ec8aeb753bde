-- Fail-closed: an account bound to more than one email is ambiguous, so every binding
-- of it is removed (it grants nobody anything until the source re-sends its owner),
-- each removal is recorded as an incident, and the tenant's ACL epoch is bumped so no
-- cache keeps serving the rights. Then a unique index keeps one owner per account
-- (same name as the index it replaces: the dialect's INDEXED BY hint names it).
CREATE TEMP TABLE ambiguous_identities AS
    SELECT tenant_id, email, source_system, account_id FROM identities i
    WHERE EXISTS (SELECT 1 FROM identities o WHERE o.tenant_id = i.tenant_id
                  AND o.source_system = i.source_system
                  AND o.account_id = i.account_id AND o.email <> i.email);
INSERT INTO incidents(tenant_id, kind, detail, created_at)
    SELECT tenant_id, 'ambiguous_identity_removed',
           json_object('email', email, 'source_system', source_system,
                       'account_id', account_id),
           strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
    FROM ambiguous_identities ORDER BY tenant_id, source_system, account_id, email;
UPDATE tenants SET acl_epoch = acl_epoch + 1
    WHERE tenant_id IN (SELECT tenant_id FROM ambiguous_identities);
DELETE FROM identities WHERE EXISTS (
    SELECT 1 FROM ambiguous_identities a WHERE a.tenant_id = identities.tenant_id
    AND a.source_system = identities.source_system
    AND a.account_id = identities.account_id);
DROP TABLE temp.ambiguous_identities;
DROP INDEX identities_by_account;
CREATE UNIQUE INDEX identities_by_account
    ON identities(tenant_id, source_system, account_id);
