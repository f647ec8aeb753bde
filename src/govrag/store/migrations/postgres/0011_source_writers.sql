-- As SQLite migration 8: which configured source wrote each group, document and identity
-- binding (NULL: no configured source owns the row; a source's next write claims it).
ALTER TABLE groups ADD COLUMN writer TEXT COLLATE "C";
ALTER TABLE documents ADD COLUMN writer TEXT COLLATE "C";
ALTER TABLE identities ADD COLUMN writer TEXT COLLATE "C";
