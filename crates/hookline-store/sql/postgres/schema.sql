-- The records of the migrations (crate::migrations): the 0.1.0 baseline in
-- `hookline_migrations`, later migrations in `hookline_schema`.

-- name: MIGRATION_LOCK
-- Every process starting at once queues here; the first applies, the rest find it done.
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.hookline.migrate'));

-- name: MIGRATION_LOCK_TIMEOUT
SET LOCAL lock_timeout = '5s';

-- name: LEGACY_TABLE
CREATE TABLE IF NOT EXISTS hookline_migrations (
    version     INT PRIMARY KEY,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: RECORDS_TABLE
CREATE TABLE IF NOT EXISTS hookline_schema (
    number      INT PRIMARY KEY,
    min_binary  TEXT NOT NULL,
    description TEXT NOT NULL,
    applied_by  TEXT NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: TABLE_EXISTS
SELECT to_regclass($1) IS NOT NULL;

-- name: LEGACY_VERSION
SELECT coalesce(max(version), 0) FROM hookline_migrations;

-- name: APPLIED_MIGRATIONS
SELECT number, min_binary, description, applied_by FROM hookline_schema ORDER BY number;

-- name: RECORD_LEGACY
INSERT INTO hookline_migrations (version) VALUES ($1);

-- name: CLOSE_LEGACY
-- The old number raised past what 0.1.0 accepts (kept if another migration raised it already).
INSERT INTO hookline_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING;

-- name: RECORD_MIGRATION
INSERT INTO hookline_schema (number, min_binary, description, applied_by)
VALUES ($1, $2, $3, $4);

-- name: MISSING_ORIGINS
-- Subscribers written without an origin: by a release before the column, or by an older
-- binary run on this schema since (a rollback, or a rolling upgrade).
SELECT id, url FROM subscribers WHERE origin IS NULL;

-- name: SET_ORIGINS
UPDATE subscribers s SET origin = x.origin
FROM UNNEST($1::text[], $2::text[]) AS x(id, origin)
WHERE s.id = x.id AND s.origin IS NULL;

-- name: INDEX_VALIDITY
-- Whether the index named $1 is valid; NULL when there is none.
SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1));

-- name: TRY_INDEX_LOCK
-- One process builds indexes at a time; the others only try, so that they hold no snapshot the
-- build would wait for.
SELECT pg_try_advisory_lock(hashtext(current_schema() || '.hookline.index'));

-- name: INDEX_UNLOCK
SELECT pg_advisory_unlock(hashtext(current_schema() || '.hookline.index'));

-- name: CURRENT_SCHEMA
SELECT current_schema();
