-- Claims, leases and completions: what the writer does to deliveries on their way. A due
-- row's columns are read in the order `due_row` reads them (a `DueRow`).

-- name: DUE
-- Due rows at ?1 in due order, but those of the subscribers in the JSON array ?2, retries
-- only when ?3, windows that started after ?4, and none of the keys in the JSON array ?5.
SELECT seq, id, event_id, subscriber_id, attempts, first_seen, window_start, run_at,
       payload_version, updated_at
FROM deliveries
WHERE state = 'scheduled' AND held = 0 AND run_at <= ?1
  AND subscriber_id NOT IN (SELECT value FROM json_each(?2))
  AND (attempts = 0 OR ?3) AND window_start > ?4
  AND seq NOT IN (SELECT value FROM json_each(?5))
ORDER BY run_at;

-- name: NEXT_TENANT_WAITING
-- The first tenant after ?1 with deliveries waiting (due or not), and when its earliest comes
-- due: one seek of `deliveries_tenant_due`. Repeated from the tenant it answers, it walks the
-- tenants one step each, however many rows each has (a skip-scan).
SELECT tenant_id, run_at FROM deliveries INDEXED BY deliveries_tenant_due
WHERE state = 'scheduled' AND held = 0 AND tenant_id > ?1
ORDER BY tenant_id, run_at LIMIT 1;

-- name: DUE_OF_TENANT
-- DUE (?1 to ?5 as there) for the rows of tenant ?6 only, through its part of
-- `deliveries_tenant_due`: its rows are not behind anybody else's.
SELECT seq, id, event_id, subscriber_id, attempts, first_seen, window_start, run_at,
       payload_version, updated_at
FROM deliveries INDEXED BY deliveries_tenant_due
WHERE tenant_id = ?6 AND state = 'scheduled' AND held = 0 AND run_at <= ?1
  AND subscriber_id NOT IN (SELECT value FROM json_each(?2))
  AND (attempts = 0 OR ?3) AND window_start > ?4
  AND seq NOT IN (SELECT value FROM json_each(?5))
ORDER BY run_at;

-- name: HOLD
-- A due row of a paused subscriber waits, out of the due index, for its resume.
UPDATE deliveries SET held = 1 WHERE seq = ?1;

-- name: KILL_DUE
-- A due row of a revoked subscriber dies (?2: the reason).
UPDATE deliveries SET state = 'dead', dead_reason = ?2, dead_at = ?3, updated_at = ?3
WHERE seq = ?1
RETURNING subscriber_id;

-- name: DEFER
UPDATE deliveries SET run_at = ?2 WHERE seq = ?1;

-- name: LEASE
UPDATE deliveries SET state = 'in_flight', attempts = attempts + 1,
    lease_token = ?2, lease_expires = ?3, updated_at = ?4, dead_error = NULL,
    waiting_on = NULL
WHERE seq = ?1;

-- name: EXPIRED_LEASES
-- Deliveries whose lease expired by ?1, the oldest first, at most ?2.
SELECT seq, id, event_id, subscriber_id, attempts, first_seen, window_start, run_at,
       payload_version, updated_at
FROM deliveries
WHERE state = 'in_flight' AND lease_expires <= ?1
ORDER BY lease_expires LIMIT ?2;

-- name: RENEW_LEASE
-- A rescue's new lease: the attempt and its start stay as they were.
UPDATE deliveries SET lease_token = ?2, lease_expires = ?3 WHERE seq = ?1;

-- name: LEASE_HOLDER
-- The lease fence: the subscriber of delivery ?1 while it is in flight under lease ?2, and its
-- ordering key.
SELECT subscriber_id, ordering_key FROM deliveries
WHERE seq = ?1 AND state = 'in_flight' AND lease_token = ?2;

-- name: RELEASE_NEXT_IN_ORDER
-- After a delivery of subscriber ?1's ordering key ?2 ended: the first of that key waiting
-- behind it goes due (held still if its subscriber is paused, for the resume), unless another
-- of that key is on its way (a replayed one). Through `deliveries_ordering`: a key's rows on
-- their way, a few.
UPDATE deliveries SET waiting_on = NULL,
    held = coalesce((SELECT status = 'paused' FROM subscribers WHERE id = ?1), 0)
WHERE seq = (SELECT seq FROM deliveries INDEXED BY deliveries_ordering
             WHERE subscriber_id = ?1 AND ordering_key = ?2
               AND state IN ('scheduled', 'in_flight') AND waiting_on = 'ordering'
             ORDER BY seq LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM deliveries INDEXED BY deliveries_ordering
                  WHERE subscriber_id = ?1 AND ordering_key = ?2
                    AND state IN ('scheduled', 'in_flight')
                    AND waiting_on IS NOT 'ordering');

-- name: END_ATTEMPT
-- A delivery after its attempt: scheduled again, delivered or dead (reason ?4).
UPDATE deliveries SET state = ?2, run_at = ?3, dead_reason = ?4,
    dead_at = CASE WHEN ?4 IS NULL THEN NULL ELSE ?5 END,
    lease_token = NULL, lease_expires = NULL, updated_at = ?5
WHERE seq = ?1;

-- name: INSERT_ATTEMPT
INSERT INTO attempts
    (delivery_seq, ordinal, started_at, duration_ms, outcome, status, error, response_body,
     lost, policy)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10);

-- name: WAITING
-- The subscriber of every waiting delivery, through `deliveries_window` (waiting rows only).
SELECT subscriber_id FROM deliveries INDEXED BY deliveries_window WHERE state = 'scheduled';

-- name: IN_FLIGHT_PER_SUBSCRIBER
-- Deliveries in flight per subscriber, read through the lease index (in-flight rows only).
-- Without `INDEXED BY`, SQLite (which has no statistics here) walks `deliveries_subscriber`
-- over every row of the table to spare itself a sort, on the writer's thread at every claim
-- and window sweep (`writes::busy`), and in every refresh of the gauges.
SELECT subscriber_id, count(*)
FROM deliveries INDEXED BY deliveries_lease WHERE state = 'in_flight' GROUP BY 1;

-- name: ORPHANED_IN_ORDER
-- At most ?1 lines (subscriber, ordering key) whose first delivery on its way waits on
-- `ordering` with nothing ahead of it: an ending that released nothing left it so (an older
-- release serving the file). The window sweep hands them to RELEASE_NEXT_IN_ORDER.
SELECT d.subscriber_id, d.ordering_key FROM deliveries d INDEXED BY deliveries_ordering
WHERE d.ordering_key IS NOT NULL AND d.state IN ('scheduled', 'in_flight')
  AND d.waiting_on = 'ordering'
  AND NOT EXISTS (SELECT 1 FROM deliveries o INDEXED BY deliveries_ordering
                  WHERE o.subscriber_id = d.subscriber_id AND o.ordering_key = d.ordering_key
                    AND o.state IN ('scheduled', 'in_flight') AND o.seq < d.seq)
LIMIT ?1;

-- name: EXPIRING_WINDOWS
-- Waiting deliveries whose window started by ?1, the oldest first, at most ?2, with what may
-- hold each back at ?3 (for what it was waiting on).
SELECT d.seq, d.subscriber_id, d.held, d.run_at, s.breaker_open_until, s.rate_next_at,
       s.max_in_flight, s.breaker_allowance, s.origin, s.url,
       s.rate_limit_per_second IS NOT NULL AND EXISTS (
           SELECT 1 FROM deliveries o
           WHERE o.subscriber_id = d.subscriber_id AND o.state = 'scheduled'
             AND o.run_at <= ?3
             AND (o.run_at < d.run_at OR (o.run_at = d.run_at AND o.seq < d.seq))),
       d.waiting_on IS 'ordering', d.ordering_key
FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'scheduled' AND d.window_start <= ?1
ORDER BY d.window_start LIMIT ?2;

-- name: EXPIRE_WINDOW
UPDATE deliveries SET state = 'dead', dead_reason = ?2, dead_at = ?3, updated_at = ?3,
    held = 0, run_at = NULL, waiting_on = ?4
WHERE seq = ?1;

-- name: PRUNABLE
-- Deliveries delivered before ?1 that no replay or resend names, at most ?2.
SELECT d.seq FROM deliveries d
WHERE d.state = 'delivered' AND d.updated_at < ?1
  AND NOT EXISTS (SELECT 1 FROM replay_items ri WHERE ri.delivery_seq = d.seq)
  AND NOT EXISTS (SELECT 1 FROM resend_items ri WHERE ri.delivery_seq = d.seq)
LIMIT ?2;

-- name: PRUNE_ATTEMPTS
DELETE FROM attempts WHERE delivery_seq = ?1;

-- name: PRUNE_DELIVERY
DELETE FROM deliveries WHERE seq = ?1;
