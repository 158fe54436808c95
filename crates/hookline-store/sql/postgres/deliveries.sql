-- Deliveries as the API reads them. A delivery's id is `id`, generated from its event and
-- subscriber, and for a resend's `:resend-<n>` after it (`0027_resends.sql`).
--
-- A delivery's columns are read in the order `delivery_row` reads them, the last the payload
-- version it sends (or sent): rows written before payload versions (NULL) send the event's
-- latest; a delivery that died for want of a version has none.
--
-- Each delivery shows its subscriber's tenant, and a list keeps to one tenant's when asked (the
-- tenant's subscribers, read once into the filter); the index walked stays the other filters'.
--
-- A list pages by key after a cursor, newest or oldest first. Its filters are optional, and a
-- filter that is not set must not keep the planner from the index of one that is (a generic
-- plan cannot drop it), so each list is written out per filter it walks an index by: an
-- event's deliveries (the unique index `deliveries_event_subscriber`), a subscriber's
-- (`deliveries_subscriber`), or all of them by key; the other filters apply to the rows it
-- walks, each dropped by its NULL.

-- name: DELIVERY
-- The delivery of event $1 to subscriber $2, resend $3 of it (0: the fan-out's), the parts of
-- its webhook-id: the id itself is not indexed (`deliveries_event_subscriber` is).
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, d.subscriber_id,
       d.state, d.attempts, d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at,
       d.dead_error, d.waiting_on,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d
WHERE d.event_id = $1 AND d.subscriber_id = $2 AND coalesce(d.resend, 0) = $3;

-- name: DELIVERY_ATTEMPTS
-- The attempts of the deliveries $1, each delivery's in the order they were recorded.
SELECT delivery_seq, ordinal, started_at, duration_ms, outcome, status, error, response_body,
       lost, policy
FROM attempts WHERE delivery_seq = ANY ($1) ORDER BY seq;

-- name: EVENT_DELIVERIES
-- Event $1's deliveries (subscriber $2 and state $3 if not NULL) after key $4, at most $5.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, d.subscriber_id,
       d.state, d.attempts, d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at,
       d.dead_error, d.waiting_on,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d
WHERE d.event_id = $1
  AND (CAST($2 AS TEXT) IS NULL OR d.subscriber_id = $2)
  AND (CAST($3 AS TEXT) IS NULL OR d.state = $3)
  AND d.seq > $4
  AND (CAST($6 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $6))
ORDER BY d.seq LIMIT $5;

-- name: EVENT_DELIVERIES_NEWEST_FIRST
-- EVENT_DELIVERIES, before key $4.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, d.subscriber_id,
       d.state, d.attempts, d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at,
       d.dead_error, d.waiting_on,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d
WHERE d.event_id = $1
  AND (CAST($2 AS TEXT) IS NULL OR d.subscriber_id = $2)
  AND (CAST($3 AS TEXT) IS NULL OR d.state = $3)
  AND d.seq < $4
  AND (CAST($6 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $6))
ORDER BY d.seq DESC LIMIT $5;

-- name: SUBSCRIBER_DELIVERIES
-- Subscriber $1's deliveries (in state $2 if not NULL) after key $3, at most $4.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, d.subscriber_id,
       d.state, d.attempts, d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at,
       d.dead_error, d.waiting_on,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d
WHERE d.subscriber_id = $1 AND (CAST($2 AS TEXT) IS NULL OR d.state = $2) AND d.seq > $3
  AND (CAST($5 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $5))
ORDER BY d.seq LIMIT $4;

-- name: SUBSCRIBER_DELIVERIES_NEWEST_FIRST
-- SUBSCRIBER_DELIVERIES, before key $3.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, d.subscriber_id,
       d.state, d.attempts, d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at,
       d.dead_error, d.waiting_on,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d
WHERE d.subscriber_id = $1 AND (CAST($2 AS TEXT) IS NULL OR d.state = $2) AND d.seq < $3
  AND (CAST($5 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $5))
ORDER BY d.seq DESC LIMIT $4;

-- name: DELIVERIES
-- Every delivery (in state $1 if not NULL) after key $2, at most $3.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, d.subscriber_id,
       d.state, d.attempts, d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at,
       d.dead_error, d.waiting_on,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d
WHERE (CAST($1 AS TEXT) IS NULL OR d.state = $1) AND d.seq > $2
  AND (CAST($4 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $4))
ORDER BY d.seq LIMIT $3;

-- name: DELIVERIES_NEWEST_FIRST
-- DELIVERIES, before key $2.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, d.subscriber_id,
       d.state, d.attempts, d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at,
       d.dead_error, d.waiting_on,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d
WHERE (CAST($1 AS TEXT) IS NULL OR d.state = $1) AND d.seq < $2
  AND (CAST($4 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $4))
ORDER BY d.seq DESC LIMIT $3;

-- name: NEXT_WAKEUP
-- The earliest due time, lease expiry and window start, each from its partial index.
SELECT (SELECT min(run_at) FROM deliveries WHERE state = 'scheduled' AND NOT held),
       (SELECT min(lease_expires) FROM deliveries WHERE state = 'in_flight'),
       (SELECT min(window_start) FROM deliveries WHERE state = 'scheduled');
