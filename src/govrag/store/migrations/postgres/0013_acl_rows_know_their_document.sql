-- What picks the vector path counts only what the caller may read. The vector leg takes the
-- exact path when the readable vectors can be few, which a cheap bound decides first: an
-- index-only count of the caller's ACL rows, stopped past the threshold. It counted rows of
-- documents above the caller's clearance or outside the requested corpora too, so such
-- documents could move a caller to the HNSW walk (README, residual channels). Each ACL row
-- now carries its document's classification and corpus, and the bound's index holds them,
-- so the count stays index-only and counts only ACL rows of documents the caller could read.
--
-- Triggers keep the copies equal to the documents: an ACL row is filled when written, and
-- a document moved to another corpus or classification updates its ACL rows (with its
-- vector rows, migration 6). The copies pick a path, never decide access: both paths apply
-- the whole access predicate to every vector row.
ALTER TABLE doc_acl ADD COLUMN classification SMALLINT,
    ADD COLUMN corpus_id TEXT COLLATE "C";
CREATE FUNCTION govrag_acl_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT d.classification, d.corpus_id INTO NEW.classification, NEW.corpus_id
        FROM documents d WHERE d.tenant_id = NEW.tenant_id AND d.doc_id = NEW.doc_id;
    RETURN NEW;
END $$;
CREATE TRIGGER doc_acl_fill BEFORE INSERT OR UPDATE OF tenant_id, doc_id ON doc_acl
    FOR EACH ROW EXECUTE FUNCTION govrag_acl_fill();
CREATE OR REPLACE FUNCTION govrag_document_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE chunk_vectors SET corpus_id = NEW.corpus_id, classification = NEW.classification
        WHERE tenant_id = NEW.tenant_id AND doc_id = NEW.doc_id;
    UPDATE doc_acl SET corpus_id = NEW.corpus_id, classification = NEW.classification
        WHERE tenant_id = NEW.tenant_id AND doc_id = NEW.doc_id;
    RETURN NULL;
END $$;
-- The vectors' ACL tokens change only with the principals: a copy's update is no reason.
DROP TRIGGER doc_acl_sync ON doc_acl;
CREATE CONSTRAINT TRIGGER doc_acl_sync
    AFTER INSERT OR DELETE OR UPDATE OF tenant_id, doc_id, source_system, principal_id
    ON doc_acl DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION govrag_acl_sync();
ALTER TABLE doc_acl NO FORCE ROW LEVEL SECURITY;
ALTER TABLE documents NO FORCE ROW LEVEL SECURITY;
UPDATE doc_acl a SET classification = d.classification, corpus_id = d.corpus_id
    FROM documents d WHERE d.tenant_id = a.tenant_id AND d.doc_id = a.doc_id;
ALTER TABLE doc_acl FORCE ROW LEVEL SECURITY;
ALTER TABLE documents FORCE ROW LEVEL SECURITY;
CREATE INDEX doc_acl_by_reader
    ON doc_acl(tenant_id, source_system, principal_id, classification, corpus_id);
DROP INDEX doc_acl_by_principal;
