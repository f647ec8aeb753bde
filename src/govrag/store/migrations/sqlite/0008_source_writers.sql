-- Which configured source ([sources.<name>]) wrote each group, document and identity binding:
-- a source changes or deletes only rows it wrote (or rows no configured source owns: NULL, which
-- every row written before this migration is, and which a source's next write claims).
ALTER TABLE groups ADD COLUMN writer TEXT;
ALTER TABLE documents ADD COLUMN writer TEXT;
ALTER TABLE identities ADD COLUMN writer TEXT;
