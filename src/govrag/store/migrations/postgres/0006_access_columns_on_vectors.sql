-- What the access predicate reads, on the vector row itself. A vector search then filters
-- each candidate (HNSW walk) or finds the readable vectors (exact path, a GIN bitmap scan
-- read in physical order) without probing chunks, documents and ACL rows per row: at 1M
-- chunks those three probes per readable vector were the whole cost of the exact path.
-- Triggers keep the copies equal to the truth (doc_acl and documents) on every write path:
-- a vector is filled when inserted (its document's ACL rows are written first); an ACL
-- change is applied at commit (deferred, so a delete-and-reinsert of a document's ACL
-- updates each vector once, and only if its tokens changed); a document moved to another
-- corpus or classification updates its vectors at once. Tokens are principal_token's
-- (source_system + U+001F + principal_id, or * for everyone), plus U+001E on every row.
--
-- The reader policy: under forced row-level security PostgreSQL evaluates a query's own
-- conditions only after the tenant policy unless their operators are leakproof, and array
-- overlap is not, so the app role's "acl && tokens" could never use the GIN index. A
-- policy's condition has no such limit: the restrictive reader_acl policy reads the
-- caller's tokens from the transaction setting govrag.reader (U+001E-separated), so the
-- exact path's scan is driven by the index. Unset, it is U+001E, which every row holds:
-- writes, triggers and unrestricted rankings see every row of the tenant. It narrows what
-- a statement sees and is not a boundary against the application role (which sets it);
-- the query states the same predicate, and the tenant policy stays the isolation boundary.
--
-- Existing rows are backfilled with row-level security lifted for this transaction (forced
-- RLS applies to the owner too). The HNSW indexes are dropped first, since rewriting every
-- row would insert each vector into the graph again, and are rebuilt on the next open
-- (ensure_vector_index): on a large store that open takes as long as an index build.
CREATE FUNCTION govrag_acl_tokens(t TEXT, d BIGINT) RETURNS TEXT[] LANGUAGE sql STABLE AS $$
    SELECT array_prepend(chr(30), COALESCE(array_agg(
               CASE WHEN principal_id = '*' THEN '*'
               ELSE source_system || chr(31) || principal_id END
               ORDER BY source_system, principal_id), '{}'))
    FROM doc_acl WHERE tenant_id = t AND doc_id = d
$$;
CREATE FUNCTION govrag_reader_tokens() RETURNS TEXT[] LANGUAGE sql STABLE AS $$
    SELECT COALESCE(string_to_array(NULLIF(current_setting('govrag.reader', true), ''), chr(30)),
                    ARRAY[chr(30)])
$$;
DO $$
DECLARE r RECORD;
BEGIN
    FOR r IN SELECT indexname FROM pg_indexes
             WHERE tablename = 'chunk_vectors' AND indexname LIKE 'chunk\_vectors\_hnsw\_%'
    LOOP
        EXECUTE format('DROP INDEX %I', r.indexname);
    END LOOP;
END $$;
ALTER TABLE chunk_vectors ADD COLUMN doc_id BIGINT,
    ADD COLUMN corpus_id TEXT COLLATE "C",
    ADD COLUMN classification SMALLINT,
    ADD COLUMN acl TEXT[] COLLATE "C";
ALTER TABLE chunk_vectors NO FORCE ROW LEVEL SECURITY;
ALTER TABLE chunks NO FORCE ROW LEVEL SECURITY;
ALTER TABLE documents NO FORCE ROW LEVEL SECURITY;
ALTER TABLE doc_acl NO FORCE ROW LEVEL SECURITY;
UPDATE chunk_vectors v SET doc_id = c.doc_id, corpus_id = d.corpus_id,
        classification = d.classification, acl = array_prepend(chr(30), COALESCE(a.acl, '{}'))
    FROM chunks c
    JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id
    LEFT JOIN (
        SELECT tenant_id, doc_id,
               array_agg(CASE WHEN principal_id = '*' THEN '*'
                         ELSE source_system || chr(31) || principal_id END
                         ORDER BY source_system, principal_id) AS acl
        FROM doc_acl GROUP BY tenant_id, doc_id
    ) a ON a.tenant_id = c.tenant_id AND a.doc_id = c.doc_id
    WHERE c.tenant_id = v.tenant_id AND c.chunk_id = v.chunk_id;
ALTER TABLE chunk_vectors FORCE ROW LEVEL SECURITY;
ALTER TABLE chunks FORCE ROW LEVEL SECURITY;
ALTER TABLE documents FORCE ROW LEVEL SECURITY;
ALTER TABLE doc_acl FORCE ROW LEVEL SECURITY;
ALTER TABLE chunk_vectors ALTER COLUMN doc_id SET NOT NULL,
    ALTER COLUMN corpus_id SET NOT NULL,
    ALTER COLUMN classification SET NOT NULL,
    ALTER COLUMN acl SET NOT NULL;
CREATE INDEX chunk_vectors_by_doc ON chunk_vectors(tenant_id, doc_id);
CREATE INDEX chunk_vectors_by_acl ON chunk_vectors USING gin (acl);
CREATE POLICY reader_acl ON chunk_vectors AS RESTRICTIVE FOR SELECT
    USING (acl && govrag_reader_tokens());
CREATE FUNCTION govrag_vector_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT c.doc_id, d.corpus_id, d.classification
        INTO NEW.doc_id, NEW.corpus_id, NEW.classification
        FROM chunks c JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id
        WHERE c.tenant_id = NEW.tenant_id AND c.chunk_id = NEW.chunk_id;
    NEW.acl := govrag_acl_tokens(NEW.tenant_id, NEW.doc_id);
    RETURN NEW;
END $$;
CREATE TRIGGER chunk_vectors_fill BEFORE INSERT OR UPDATE OF chunk_id ON chunk_vectors
    FOR EACH ROW EXECUTE FUNCTION govrag_vector_fill();
CREATE FUNCTION govrag_acl_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE t TEXT; d BIGINT; tokens TEXT[];
BEGIN
    IF TG_OP = 'DELETE' THEN t := OLD.tenant_id; d := OLD.doc_id;
    ELSE t := NEW.tenant_id; d := NEW.doc_id; END IF;
    tokens := govrag_acl_tokens(t, d);
    UPDATE chunk_vectors SET acl = tokens
        WHERE tenant_id = t AND doc_id = d AND acl IS DISTINCT FROM tokens;
    IF TG_OP = 'UPDATE' AND (OLD.tenant_id, OLD.doc_id) IS DISTINCT FROM (t, d) THEN
        tokens := govrag_acl_tokens(OLD.tenant_id, OLD.doc_id);
        UPDATE chunk_vectors SET acl = tokens
            WHERE tenant_id = OLD.tenant_id AND doc_id = OLD.doc_id
            AND acl IS DISTINCT FROM tokens;
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER doc_acl_sync AFTER INSERT OR UPDATE OR DELETE ON doc_acl
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION govrag_acl_sync();
CREATE FUNCTION govrag_document_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE chunk_vectors SET corpus_id = NEW.corpus_id, classification = NEW.classification
        WHERE tenant_id = NEW.tenant_id AND doc_id = NEW.doc_id;
    RETURN NULL;
END $$;
CREATE TRIGGER documents_sync AFTER UPDATE OF corpus_id, classification ON documents
    FOR EACH ROW WHEN (OLD.corpus_id IS DISTINCT FROM NEW.corpus_id
                       OR OLD.classification IS DISTINCT FROM NEW.classification)
    EXECUTE FUNCTION govrag_document_sync();
