-- Migration 12's owner functions, hardened after an attack review (before any release):
-- - the search path is pinned to pg_catalog, public and pg_temp last, and catalog and table
--   names are qualified: with pg_temp searched first, the application role's temporary view
--   named pg_class ran its own function as the schema owner;
-- - an index's existence is looked up in public only: a temporary table of the index's name
--   in any session denied a tenant its graph;
-- - index names take 128 bits of sha256 of the tenant id (64 bits of md5 could be made to
--   collide by whoever picks tenant ids); existing indexes are renamed;
-- - builds take one advisory lock in turn: two new tenants' first ingests each held SHARE on
--   chunk_vectors and then wanted ROW EXCLUSIVE, a deadlock;
-- - the trigger fires on INSERT only: UPDATE OF dim made the owner build an index per
--   dimension the application role named.
-- A new tenant's first embedded document still builds its (empty) index inside its ingest
-- transaction: other tenants' vector writes wait for that transaction (docs/scaling.md).
ALTER TABLE vector_spaces NO FORCE ROW LEVEL SECURITY;
DO $$
DECLARE r RECORD; old TEXT; new TEXT;
BEGIN
    FOR r IN SELECT tenant_id, dim FROM vector_spaces LOOP
        old := 'chunk_vectors_hnsw_' || r.dim || '_' || substr(md5(r.tenant_id), 1, 16);
        new := 'chunk_vectors_hnsw_' || r.dim || '_'
               || substr(encode(sha256(convert_to(r.tenant_id, 'UTF8')), 'hex'), 1, 32);
        IF to_regclass(format('public.%I', old)) IS NOT NULL THEN
            EXECUTE format('ALTER INDEX public.%I RENAME TO %I', old, new);
        END IF;
    END LOOP;
END $$;
ALTER TABLE vector_spaces FORCE ROW LEVEL SECURITY;
CREATE OR REPLACE FUNCTION govrag_vector_index_name(t TEXT, dim INTEGER) RETURNS TEXT
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT 'chunk_vectors_hnsw_' || dim || '_'
           || substr(encode(sha256(convert_to(t, 'UTF8')), 'hex'), 1, 32)
$$;
CREATE OR REPLACE FUNCTION govrag_ensure_tenant_vector_index(t TEXT, dim INTEGER) RETURNS BOOLEAN
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    name TEXT := public.govrag_vector_index_name(t, dim);
    ext TEXT;
BEGIN
    IF t IS NULL OR dim IS NULL OR dim < 1 OR dim > 16000 THEN
        RAISE EXCEPTION 'no vector index for tenant % and dimension % (1 to 16000)', t, dim;
    END IF;
    -- One build at a time, until the building transaction ends.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('govrag.vector_index'));
    IF pg_catalog.to_regclass(pg_catalog.format('public.%I', name)) IS NOT NULL THEN
        RETURN FALSE;
    END IF;
    SELECT n.nspname INTO ext FROM pg_catalog.pg_extension e
        JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector';
    EXECUTE pg_catalog.format(
        'CREATE INDEX %I ON public.chunk_vectors USING hnsw ((embedding::%I.vector(%s)) '
        '%I.vector_ip_ops) WHERE tenant_id = %L AND %I.vector_dims(embedding) = %s',
        name, ext, dim, ext, t, ext, dim);
    RETURN TRUE;
END $$;
REVOKE ALL ON FUNCTION govrag_ensure_tenant_vector_index(TEXT, INTEGER) FROM PUBLIC;
CREATE OR REPLACE FUNCTION govrag_vector_space_index() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM public.govrag_ensure_tenant_vector_index(NEW.tenant_id, NEW.dim);
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION govrag_vector_space_index() FROM PUBLIC;
DROP TRIGGER vector_space_index ON vector_spaces;
CREATE TRIGGER vector_space_index AFTER INSERT ON vector_spaces
    FOR EACH ROW EXECUTE FUNCTION govrag_vector_space_index();
