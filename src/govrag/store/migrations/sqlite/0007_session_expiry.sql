-- A session ends when the token that opened it expires (NULL: a caller without a token).
ALTER TABLE sessions ADD COLUMN expires_at TEXT;
