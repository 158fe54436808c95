-- Events: reads, and a publish with its fan-out.

-- name: EVENT
SELECT id, type, payload, payload_version, accepted_at, deliveries, published_by, tenant_id,
       ordering_key, traceparent
FROM events WHERE id = $1;

-- name: EVENT_STATE_COUNTS
SELECT state, count(*) FROM deliveries WHERE event_id = $1 GROUP BY state;

-- name: EARLIER_PAYLOADS
-- The versions of an event below its latest, ascending.
SELECT version, payload FROM event_payloads WHERE event_id = $1 ORDER BY version;

-- name: INSERT_EVENT
-- A concurrent publish of the same id waits here for the other transaction to finish.
INSERT INTO events (id, type, payload, payload_version, accepted_at, deliveries, published_by,
                    tenant_id, ordering_key, traceparent)
VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING;

-- name: PUBLISHED
-- An event published before under the same id, as a publish answers it again.
SELECT type, payload, payload_version, deliveries, coalesce(unversioned, 0), published_by,
       tenant_id, ordering_key
FROM events WHERE id = $1;

-- name: LOCK_ORDERING_KEYS
-- The ordering keys $1 locked for the rest of the transaction, in one order (no two
-- transactions wait for each other's): a publish of a key and the endings of its deliveries
-- take them in turn, so that a publish that sees an earlier delivery on its way has its new
-- one released when that ends. Each transaction takes them after every row lock it needs and
-- then waits for nothing else: a cycle through them cannot form. Two 32-bit keys (the schema's
-- class of ordering locks, the key's hash): a key space apart from the one 64-bit keys of the
-- claims' and migrations' locks, which a key's hash could otherwise land on.
SELECT pg_advisory_xact_lock(k.class, k.lock)
FROM (SELECT DISTINCT hashtext(current_schema() || '.hookline.order') AS class,
             hashtext(key) AS lock
      FROM UNNEST($1::text[]) AS key ORDER BY 2) k;

-- name: SHARE_LOCK_PAUSED
-- The paused subscribers an event for tenant $2 (NULL: none) fans out to (with $3, a
-- test event's: subscriber $3 alone, whatever its event types; else those listing any of the
-- patterns $1, `type_patterns::patterns_matching` of its type), share-locked: a resume in
-- progress either committed (and the publish sees the subscriber active) or waits for the
-- publish, then releases what it held.
SELECT 1 FROM subscribers
WHERE status = 'paused' AND tenant_id IS NOT DISTINCT FROM $2
  AND (id = $3
       OR ($3 IS NULL AND (cardinality(event_types) = 0 OR event_types && $1::text[])))
ORDER BY id FOR SHARE;

-- name: FAN_OUT
-- (With $10, a test event, to subscriber $10 alone, whatever its event types.)
-- A delivery of event $1, published at $3, to every subscriber listing any of the patterns $2
-- (`type_patterns::patterns_matching` of its type) that is not revoked and of tenant $9 (NULL:
-- none) ($4 the latest version, $5 every version, $6 the oldest, $7 the dead reason and $8
-- the error of an unversioned delivery), and how many it made and how many are dead at once.
-- Its payload version is the highest at or below the subscriber's pin (the latest when
-- unpinned); a subscriber pinned below every version gets a delivery that is dead at once. A
-- paused subscriber's deliveries are held from the start (so that an older release, whose
-- claims read the status without a lock, finds them held and its resume releases them). Each
-- names its tenant, for the claims' fair share, and its ordering key $11 (HOLD_BEHIND_IN_ORDER
-- then holds those behind an earlier one).
WITH fanned AS (
    INSERT INTO deliveries
        (event_id, subscriber_id, state, held, first_seen, window_start, run_at, updated_at,
         payload_version, dead_reason, dead_at, dead_error, tenant_id, ordering_key)
    SELECT $1, s.id,
        CASE WHEN s.payload_version < $6 THEN 'dead' ELSE 'scheduled' END,
        CASE WHEN s.payload_version < $6 THEN FALSE ELSE s.status = 'paused' END,
        $3, $3,
        CASE WHEN s.payload_version < $6 THEN NULL ELSE CAST($3 AS BIGINT) END,
        $3,
        CASE WHEN s.payload_version IS NULL OR s.payload_version >= $4 THEN $4
             WHEN s.payload_version < $6 THEN NULL
             ELSE (SELECT max(v) FROM unnest($5::int8[]) AS v
                   WHERE v <= s.payload_version) END,
        CASE WHEN s.payload_version < $6 THEN $7 END,
        CASE WHEN s.payload_version < $6 THEN CAST($3 AS BIGINT) END,
        CASE WHEN s.payload_version < $6 THEN $8 || s.payload_version END,
        s.tenant_id, $11
    FROM subscribers s
    WHERE s.status <> 'revoked'
      AND s.tenant_id IS NOT DISTINCT FROM $9
      AND (s.id = $10
           OR ($10 IS NULL
               AND (cardinality(s.event_types) = 0 OR s.event_types && $2::text[])))
    ORDER BY s.seq
    RETURNING state)
SELECT count(*), count(*) FILTER (WHERE state = 'dead') FROM fanned;

-- name: HOLD_BEHIND_IN_ORDER
-- The deliveries event $1 (of ordering key $2) just fanned out that are behind an earlier
-- delivery of that key to the same subscriber, still on its way: held, waiting on `ordering`
-- until it ends. Under the key's lock (LOCK_ORDERING_KEYS), run for keyed events only, so that
-- the fan-out costs an event without a key nothing more.
UPDATE deliveries d SET held = TRUE, waiting_on = 'ordering'
WHERE d.event_id = $1 AND d.state = 'scheduled'
  AND EXISTS (SELECT 1 FROM deliveries o
              WHERE o.subscriber_id = d.subscriber_id AND o.ordering_key = $2
                AND o.state IN ('scheduled', 'in_flight') AND o.seq < d.seq);

-- name: COUNT_DELIVERIES
UPDATE events SET deliveries = $2, unversioned = $3 WHERE id = $1;

-- name: INSERT_EARLIER_PAYLOADS
INSERT INTO event_payloads (event_id, version, payload)
SELECT $1, v, p FROM UNNEST($2::int8[], $3::text[]) AS e(v, p);

-- name: EVENT_BODIES
-- The bodies of the events $1 in the versions $2: earlier versions live in event_payloads, the
-- latest (and a row's missing version) in events.
SELECT w.id, w.version, e.type, coalesce(p.payload, e.payload),
       coalesce(p.version, e.payload_version), e.accepted_at, e.traceparent
FROM UNNEST($1::text[], $2::int8[]) AS w(id, version)
JOIN events e ON e.id = w.id
LEFT JOIN event_payloads p ON p.event_id = w.id AND p.version = w.version;

-- name: NOTIFY
-- Wakes the processes listening on channel $1 (a publish, a resume, a replay).
SELECT pg_notify($1, '');

-- name: NOTIFY_WITH
-- Tells the processes listening on channel $1 about $2 (a rollout's change).
SELECT pg_notify($1, $2);

-- name: EVENT_PAGE
-- Events newest first, before (accepted_at, id) ($1, $2), at most $8: of type $3, types
-- starting with $4, tenant $5, accepted at or after $6 and before $7, each filter dropped by its
-- NULL. Through `events_accepted`, walked backwards; the filters apply to the rows it walks.
-- No payloads: a page of them could be hundreds of megabytes.
SELECT accepted_at, id, type, payload_version, deliveries, tenant_id FROM events
WHERE (accepted_at, id) < ($1, $2)
  AND (CAST($3 AS TEXT) IS NULL OR type = $3)
  AND (CAST($4 AS TEXT) IS NULL OR left(type, length($4)) = $4)
  AND (CAST($5 AS TEXT) IS NULL OR tenant_id = $5)
  AND accepted_at >= $6 AND accepted_at < $7
ORDER BY accepted_at DESC, id DESC LIMIT $8;

-- name: EVENTS_STATE_COUNTS
-- The deliveries of the events $1, by event and state.
SELECT event_id, state, count(*) FROM deliveries WHERE event_id = ANY ($1)
GROUP BY event_id, state;
