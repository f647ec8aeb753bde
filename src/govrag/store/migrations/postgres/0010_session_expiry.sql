-- As SQLite migration 7: a session ends when the token that opened it expires.
ALTER TABLE sessions ADD COLUMN expires_at TEXT COLLATE "C";
