-- The event type catalog. A type's columns are read in `EventType`'s order after the key.

-- name: EVENT_TYPE
SELECT seq, name, description, schemas, deprecated, revision, created_at, updated_at, created_by
FROM event_types WHERE name = $1;

-- name: EVENT_TYPE_FOR_UPDATE
-- Type $1, its row locked until the transaction ends.
SELECT seq, name, description, schemas, deprecated, revision, created_at, updated_at, created_by
FROM event_types WHERE name = $1 FOR UPDATE;

-- name: EVENT_TYPES
-- Types after key $1, at most $2.
SELECT seq, name, description, schemas, deprecated, revision, created_at, updated_at, created_by
FROM event_types WHERE seq > $1 ORDER BY seq LIMIT $2;

-- name: INSERT_EVENT_TYPE
-- A new type, made only while the catalog holds fewer than $7 (no row: it is full).
INSERT INTO event_types (name, description, schemas, deprecated, revision, created_at,
                         updated_at, created_by)
SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::BOOLEAN, 1, $5::BIGINT, $5::BIGINT, $6::TEXT
WHERE (SELECT count(*) FROM event_types) < $7::BIGINT;

-- name: UPDATE_EVENT_TYPE
-- Type $1's change, read under its row lock (EVENT_TYPE_FOR_UPDATE) at revision $5.
UPDATE event_types SET description = $2, schemas = $3, deprecated = $4, revision = $5 + 1,
                       updated_at = $6
WHERE name = $1 AND revision = $5;

-- name: EVENT_TYPES_REVISION
SELECT COALESCE(sum(revision), 0)::BIGINT FROM event_types;
