-- As SQLite migration 8: which configured source wrote each group and document (NULL: no
-- configured source owns the row; a source's next write claims it).
ALTER TABLE groups ADD COLUMN writer TEXT COLLATE "C";
ALTER TABLE documents ADD COLUMN writer TEXT COLLATE "C";
