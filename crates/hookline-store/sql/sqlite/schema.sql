-- The records of the migrations (crate::migrations): the 0.1.0 baseline in `user_version`,
-- later migrations in `hookline_schema`.

-- name: RECORDS_TABLE
CREATE TABLE IF NOT EXISTS hookline_schema (
    number      INTEGER PRIMARY KEY,
    min_binary  TEXT NOT NULL,
    description TEXT NOT NULL,
    applied_by  TEXT NOT NULL,
    applied_at  INTEGER NOT NULL
);

-- name: LEGACY_VERSION
PRAGMA user_version;

-- name: HAS_RECORDS
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'hookline_schema';

-- name: APPLIED_MIGRATIONS
SELECT number, min_binary, description, applied_by FROM hookline_schema ORDER BY number;

-- name: RECORD_MIGRATION
INSERT INTO hookline_schema (number, min_binary, description, applied_by, applied_at)
VALUES (?1, ?2, ?3, ?4, CAST(unixepoch('subsec') * 1000 AS INTEGER));

-- name: MISSING_ORIGINS
-- Subscribers written without an origin: by a release before the column, or by an older
-- binary run on this schema since (a rollback).
SELECT id, url FROM subscribers WHERE origin IS NULL;

-- name: SET_ORIGIN
UPDATE subscribers SET origin = ?2 WHERE id = ?1;
