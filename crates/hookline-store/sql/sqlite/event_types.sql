-- The event type catalog. A type's columns are read in `EventType`'s order after the key.

-- name: EVENT_TYPE
SELECT seq, name, description, schemas, deprecated, revision, created_at, updated_at, created_by
FROM event_types WHERE name = ?1;

-- name: EVENT_TYPES
-- Types after key ?1, at most ?2.
SELECT seq, name, description, schemas, deprecated, revision, created_at, updated_at, created_by
FROM event_types WHERE seq > ?1 ORDER BY seq LIMIT ?2;

-- name: INSERT_EVENT_TYPE
-- A new type, made only while the catalog holds fewer than ?7 (no row: it is full).
INSERT INTO event_types (name, description, schemas, deprecated, revision, created_at,
                         updated_at, created_by)
SELECT ?1, ?2, ?3, ?4, 1, ?5, ?5, ?6
WHERE (SELECT count(*) FROM event_types) < ?7;

-- name: UPDATE_EVENT_TYPE
-- Type ?1's change, fenced by the revision it was read at (?5; no row: another write came
-- first).
UPDATE event_types SET description = ?2, schemas = ?3, deprecated = ?4, revision = ?5 + 1,
                       updated_at = ?6
WHERE name = ?1 AND revision = ?5;

-- name: EVENT_TYPES_REVISION
SELECT COALESCE(sum(revision), 0) FROM event_types;
