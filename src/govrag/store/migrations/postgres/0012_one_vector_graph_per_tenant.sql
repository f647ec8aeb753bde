-- One HNSW graph per tenant and dimension, so a filtered walk meets only its own tenant's
-- vectors. With one graph per dimension, another tenant's vectors near a query took the
-- walk's hnsw.max_scan_tuples budget: a caller's results, and its truncated flag, depended
-- on what another tenant held (README, residual channels).
--
-- A tenant's index is a partial index (tenant_id = the tenant, vector_dims = the dimension)
-- created when its vector space is recorded, i.e. with its first embedded document, by a
-- trigger that runs as the schema owner: the application role owns nothing and could not
-- create it. It starts empty and grows with the tenant. The walk binds its tenant as a
-- planned constant (pg_vectors.py), which is how the planner matches the partial index.
--
-- Existing tenants get theirs here (on a large store this takes as long as an index
-- build), and the per-dimension indexes go.
CREATE FUNCTION govrag_vector_index_name(t TEXT, dim INTEGER) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'chunk_vectors_hnsw_' || dim || '_' || substr(md5(t), 1, 16)
$$;
CREATE FUNCTION govrag_ensure_tenant_vector_index(t TEXT, dim INTEGER) RETURNS BOOLEAN
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF dim IS NULL OR dim < 1 OR dim > 16000 THEN
        RAISE EXCEPTION 'vector dimension % is out of range (1 to 16000)', dim;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_class WHERE relname = govrag_vector_index_name(t, dim)) THEN
        RETURN FALSE;
    END IF;
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON chunk_vectors USING hnsw '
                   '((embedding::vector(%s)) vector_ip_ops) '
                   'WHERE tenant_id = %L AND vector_dims(embedding) = %s',
                   govrag_vector_index_name(t, dim), dim, t, dim);
    RETURN TRUE;
END $$;
REVOKE ALL ON FUNCTION govrag_ensure_tenant_vector_index(TEXT, INTEGER) FROM PUBLIC;
CREATE FUNCTION govrag_vector_space_index() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM govrag_ensure_tenant_vector_index(NEW.tenant_id, NEW.dim);
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION govrag_vector_space_index() FROM PUBLIC;
CREATE TRIGGER vector_space_index AFTER INSERT OR UPDATE OF dim ON vector_spaces
    FOR EACH ROW EXECUTE FUNCTION govrag_vector_space_index();
DO $$
DECLARE r RECORD;
BEGIN
    FOR r IN SELECT indexname FROM pg_indexes
             WHERE tablename = 'chunk_vectors' AND indexname ~ '^chunk_vectors_hnsw_[0-9]+$'
    LOOP
        EXECUTE format('DROP INDEX %I', r.indexname);
    END LOOP;
END $$;
ALTER TABLE vector_spaces NO FORCE ROW LEVEL SECURITY;
SELECT govrag_ensure_tenant_vector_index(tenant_id, dim) FROM vector_spaces;
ALTER TABLE vector_spaces FORCE ROW LEVEL SECURITY;
