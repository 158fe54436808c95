-- Events: reads, and a publish with its fan-out.

-- name: EVENT
SELECT id, type, payload, payload_version, accepted_at, deliveries, published_by, tenant_id,
       ordering_key, traceparent
FROM events WHERE id = ?1;

-- name: EVENT_STATE_COUNTS
SELECT state, count(*) FROM deliveries WHERE event_id = ?1 GROUP BY state;

-- name: EARLIER_PAYLOADS
-- The versions of an event below its latest, ascending.
SELECT version, payload FROM event_payloads WHERE event_id = ?1 ORDER BY version;

-- name: PUBLISHED
-- An event published before under the same id, as a publish answers it again.
SELECT type, payload, payload_version, deliveries, coalesce(unversioned, 0), published_by,
       tenant_id, ordering_key
FROM events WHERE id = ?1;

-- name: FANNED_OUT_TO
-- The subscribers an event for tenant ?3 (NULL: none) fans out to, those listing any of the
-- patterns in the JSON array ?2 (`type_patterns::patterns_matching` of its type), and whether each
-- is pinned below every version it has (?1, the oldest): its delivery is dead at once. With ?4
-- (a test event), subscriber ?4 alone, whatever its event types. The same subscribers as
-- FAN_OUT's.
SELECT s.id, coalesce(s.payload_version < ?1, FALSE)
FROM subscribers s
WHERE s.status != 'revoked'
  AND s.tenant_id IS ?3
  AND (s.id = ?4
       OR (?4 IS NULL
           AND (s.event_types = '[]'
                OR EXISTS (SELECT 1 FROM json_each(s.event_types)
                           WHERE value IN (SELECT value FROM json_each(?2))))));

-- name: FAN_OUT
-- A delivery of event ?1 (?2 the patterns matching its type), published at ?3, to each
-- subscriber FANNED_OUT_TO reads (?4 the latest version, ?5 every version as a JSON array, ?6
-- the oldest, ?7 the dead reason and ?8 the error of an unversioned delivery, ?9 its tenant,
-- ?11 its ordering key: HOLD_BEHIND_IN_ORDER then holds those behind an earlier one). Its
-- payload version is the highest at or below the subscriber's pin (the latest when unpinned); a
-- subscriber pinned below every version gets a delivery that is dead at once. A paused
-- subscriber's deliveries are held from the start (so that an older release, whose claims read
-- the status without a lock, finds them held and its resume releases them). Each names its
-- tenant, for the claims' fair share.
--
-- `OR FAIL`, so that SQLite keeps no statement journal for it: a statement that writes many
-- rows and may abort halfway (a `NOT NULL` or unique constraint under the default `ABORT`, a
-- function call) has SQLite copy the original of every page it changes that existed before
-- it, which for a large fan-out meant most pages of `deliveries_subscriber`, into a temporary
-- file first (half the time of a 2,000-row fan-out). Without it, a statement stopped halfway
-- keeps the rows it made, counted as changes after a conflict, not always after another
-- error; the caller spoils the batch on any error (`Writer::failed_after_writing`), which then
-- runs again with a savepoint per job and undoes them. A test keeps the statement free of
-- what would bring the journal back.
-- With ?10 (a test event): subscriber ?10 alone, whatever its event types.
INSERT OR FAIL INTO deliveries
    (id, event_id, subscriber_id, state, held, first_seen, window_start, run_at, updated_at,
     payload_version, dead_reason, dead_at, dead_error, tenant_id, ordering_key)
SELECT ?1 || ':' || s.id, ?1, s.id,
    CASE WHEN s.payload_version < ?6 THEN 'dead' ELSE 'scheduled' END,
    CASE WHEN s.payload_version < ?6 THEN FALSE ELSE s.status = 'paused' END,
    ?3, ?3,
    CASE WHEN s.payload_version < ?6 THEN NULL ELSE CAST(?3 AS BIGINT) END,
    ?3,
    CASE WHEN s.payload_version IS NULL OR s.payload_version >= ?4 THEN ?4
         WHEN s.payload_version < ?6 THEN NULL
         ELSE (SELECT max(v) FROM (SELECT value AS v FROM json_each(?5))
               WHERE v <= s.payload_version) END,
    CASE WHEN s.payload_version < ?6 THEN ?7 END,
    CASE WHEN s.payload_version < ?6 THEN CAST(?3 AS BIGINT) END,
    CASE WHEN s.payload_version < ?6 THEN ?8 || s.payload_version END,
    s.tenant_id, ?11
FROM subscribers s
WHERE s.status != 'revoked'
  AND s.tenant_id IS ?9
  AND (s.id = ?10
       OR (?10 IS NULL
           AND (s.event_types = '[]'
                OR EXISTS (SELECT 1 FROM json_each(s.event_types)
                           WHERE value IN (SELECT value FROM json_each(?2))))))
ORDER BY s.seq;

-- name: HOLD_BEHIND_IN_ORDER
-- The deliveries event ?1 (of ordering key ?2) just fanned out that are behind an earlier
-- delivery of that key to the same subscriber, still on its way: held, waiting on `ordering`
-- until it ends. Its own statement, run for keyed events only, so that the fan-out costs an
-- event without a key nothing more (and its insert reads no `deliveries`, which would have
-- SQLite copy its whole result to a temporary table first).
UPDATE deliveries SET held = 1, waiting_on = 'ordering'
WHERE event_id = ?1 AND state = 'scheduled'
  AND EXISTS (SELECT 1 FROM deliveries o INDEXED BY deliveries_ordering
              WHERE o.subscriber_id = deliveries.subscriber_id AND o.ordering_key = ?2
                AND o.state IN ('scheduled', 'in_flight') AND o.seq < deliveries.seq);

-- name: INSERT_EVENT
INSERT INTO events (id, type, payload, payload_version, accepted_at, deliveries, published_by,
                    unversioned, tenant_id, ordering_key, traceparent)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11);

-- name: INSERT_EARLIER_PAYLOAD
INSERT INTO event_payloads (event_id, version, payload) VALUES (?1, ?2, ?3);

-- name: EVENT_BODY
-- Event ?1 with its payload of version ?2: earlier versions live in event_payloads, the latest
-- (and a row's missing version) in events.
SELECT e.id, e.type, coalesce(p.payload, e.payload), coalesce(p.version, e.payload_version),
       e.accepted_at, e.traceparent
FROM events e
LEFT JOIN event_payloads p ON p.event_id = e.id AND p.version = ?2
WHERE e.id = ?1;

-- name: EVENT_PAGE
-- Events newest first, before (accepted_at, id) (?1, ?2), at most ?8: of type ?3, types
-- starting with ?4, tenant ?5, accepted at or after ?6 and before ?7, each filter dropped by its
-- NULL. Through `events_accepted`, walked backwards; the filters apply to the rows it walks.
-- No payloads: a page of them could be hundreds of megabytes.
SELECT accepted_at, id, type, payload_version, deliveries, tenant_id
FROM events INDEXED BY events_accepted
WHERE (accepted_at, id) < (?1, ?2)
  AND (CAST(?3 AS TEXT) IS NULL OR type = ?3)
  AND (CAST(?4 AS TEXT) IS NULL OR substr(type, 1, length(?4)) = ?4)
  AND (CAST(?5 AS TEXT) IS NULL OR tenant_id = ?5)
  AND accepted_at >= ?6 AND accepted_at < ?7
ORDER BY accepted_at DESC, id DESC LIMIT ?8;

-- name: EVENTS_STATE_COUNTS
-- The deliveries of the events in the JSON array ?1, by event and state (`deliveries_event`).
SELECT event_id, state, count(*) FROM deliveries
WHERE event_id IN (SELECT value FROM json_each(?1))
GROUP BY event_id, state;
