-- Claims, leases and completions: what workers do to deliveries on their way, from any number
-- of processes. A due row's columns are read in the order `due_row` reads them (a `DueRow`).

-- name: LOCK_OUT_CLAIMS
-- The claims' lock for the rest of the transaction: one claim at a time per schema, and nothing
-- else that locks a subscriber and then its waiting rows while a claim runs.
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.hookline.claim'));

-- name: IN_FLIGHT_LIMITS
-- In flight per subscriber across every process (a short list: at most the slots of all
-- workers), with what limits each, its tenant, and how many of them process $1 leased (a
-- tenant's share is of that process's slots).
SELECT f.subscriber_id, f.n, s.max_in_flight, s.breaker_open_until, s.origin, s.url,
       s.breaker_allowance, s.tenant_id, f.mine
FROM (SELECT subscriber_id, count(*) AS n, count(*) FILTER (WHERE lease_owner = $1) AS mine
      FROM deliveries WHERE state = 'in_flight' GROUP BY 1) f
JOIN subscribers s ON s.id = f.subscriber_id;

-- name: TENANTS_WAITING
-- At most $2 tenants after $1 with deliveries waiting (due or not), in id order, and when the
-- earliest of each comes due: a skip-scan of `deliveries_tenant_due`, one seek per tenant,
-- however many rows each has.
WITH RECURSIVE walk (tenant_id, run_at, n) AS (
    (SELECT tenant_id, run_at, 1 FROM deliveries
     WHERE state = 'scheduled' AND NOT held AND tenant_id > $1
     ORDER BY tenant_id, run_at LIMIT 1)
    UNION ALL
    SELECT next.tenant_id, next.run_at, walk.n + 1
    FROM walk CROSS JOIN LATERAL (
        SELECT tenant_id, run_at FROM deliveries
        WHERE state = 'scheduled' AND NOT held AND tenant_id > walk.tenant_id
        ORDER BY tenant_id, run_at LIMIT 1) next
    WHERE walk.n < $2)
SELECT tenant_id, run_at FROM walk;

-- name: IN_FLIGHT
-- In flight per subscriber and its origin (and URL, for a row an older binary wrote without
-- one), across every process.
SELECT f.subscriber_id, f.n, s.origin, s.url
FROM (SELECT subscriber_id, count(*) AS n FROM deliveries
      WHERE state = 'in_flight' GROUP BY 1) f
JOIN subscribers s ON s.id = f.subscriber_id;

-- name: DUE
-- At most $2 rows due at $1 in due order, locked, with their subscribers, but those of the
-- subscribers $3, retries only when $4, windows that started after $5, none of the keys $6
-- and none of the subscribers on the origins $7.
--
-- The due rows are picked in a subquery of their own: with the join in the same query, the
-- planner may (on some statistics) walk a whole index of the table to merge-join by subscriber,
-- hundreds of milliseconds with a large delayed backlog. The LIMIT in the subquery keeps the
-- claim on the head of `deliveries_due` whatever the estimates. Origins at their cap are left
-- out by origin, not as a list of their subscribers' ids: with 2,000 subscribers behind one
-- full host, `<> ALL` over 2,000 ids was a linear search per due row once PostgreSQL switched
-- to its generic plan, 0.4 to 2.5 s per claim with 10,000 of that host's rows due.
SELECT d.seq, d.subscriber_id, s.status, s.breaker_open_until, s.max_in_flight,
       s.rate_limit_per_second, s.rate_next_at, d.attempts, s.origin, s.url,
       s.breaker_allowance
FROM (SELECT seq, subscriber_id, attempts, run_at FROM deliveries
      WHERE state = 'scheduled' AND NOT held AND run_at <= $1
        AND subscriber_id <> ALL ($3) AND (attempts = 0 OR $4) AND window_start > $5
        AND seq <> ALL ($6)
        AND NOT EXISTS (SELECT 1 FROM subscribers o
                        WHERE o.id = subscriber_id AND o.origin = ANY ($7))
      ORDER BY run_at LIMIT $2
      FOR UPDATE SKIP LOCKED) d
JOIN subscribers s ON s.id = d.subscriber_id
ORDER BY d.run_at, d.seq;

-- name: DUE_OF_TENANTS
-- What DUE reads, for each tenant $7[i] apart and at most $8[i] of its rows, through its own
-- part of `deliveries_tenant_due` (its rows are not behind anybody else's), in the order of $7
-- and then in due order, each with its tenant's place in $7: due at $1, locked, with their
-- subscribers, but those of the subscribers $2, retries only when $3, windows that started
-- after $4, none of the keys $5 and none of the subscribers on the origins $6.
--
-- Each tenant's rows are read in due order from the head of its range and stop at its limit:
-- with the origins left out as DUE leaves them out (`NOT EXISTS`), the generic plan read every
-- due row of each tenant (a bitmap scan, then a sort), so a tenant with 20,000 due rows cost
-- each claim all of them; as a `NOT IN` it is one hashed list, built once per statement (not
-- at all when $6 is empty). Subscribers are joined once, after every tenant's rows are read.
WITH due AS MATERIALIZED (
    SELECT t.place, x.seq, x.subscriber_id, x.attempts, x.run_at
    FROM UNNEST($7::text[], $8::int8[]) WITH ORDINALITY AS t(tenant_id, n, place)
    CROSS JOIN LATERAL (
        SELECT seq, subscriber_id, attempts, run_at FROM deliveries
        WHERE tenant_id = t.tenant_id AND state = 'scheduled' AND NOT held AND run_at <= $1
          AND subscriber_id <> ALL ($2) AND (attempts = 0 OR $3) AND window_start > $4
          AND seq <> ALL ($5)
          AND (cardinality($6::text[]) = 0
               OR subscriber_id NOT IN (SELECT id FROM subscribers WHERE origin = ANY ($6)))
        ORDER BY run_at LIMIT t.n
        FOR UPDATE SKIP LOCKED) x)
SELECT d.seq, d.subscriber_id, s.status, s.breaker_open_until, s.max_in_flight,
       s.rate_limit_per_second, s.rate_next_at, d.attempts, s.origin, s.url,
       s.breaker_allowance, d.place
FROM due d JOIN subscribers s ON s.id = d.subscriber_id
ORDER BY d.place, d.run_at, d.seq;

-- name: DEFER
-- Due rows $1 wait until their times in $2.
UPDATE deliveries d SET run_at = x.until
FROM UNNEST($1::int8[], $2::int8[]) AS x(seq, until)
WHERE d.seq = x.seq AND d.state = 'scheduled';

-- name: LOCK_DUE_SUBSCRIBERS
-- The subscribers of the due rows $1, share-locked, which orders a claim after any resume or
-- revocation in progress (they lock the subscriber's row). One locked by a change in progress
-- is skipped, not waited for (the claim holds its delivery rows, which that change may be
-- waiting for): its rows stay due and the next claim sees the outcome.
SELECT id FROM subscribers WHERE id IN (SELECT subscriber_id FROM deliveries
                                        WHERE seq = ANY ($1))
ORDER BY id FOR SHARE SKIP LOCKED;

-- name: HOLD_PAUSED
-- Due rows $1 of the paused subscribers among $2 wait, out of the due index, for the resume.
UPDATE deliveries d SET held = TRUE FROM subscribers s
WHERE d.seq = ANY ($1) AND s.id = d.subscriber_id AND s.id = ANY ($2)
  AND s.status = 'paused';

-- name: KILL_REVOKED
-- Due rows $1 of the revoked subscribers among $4 die ($2: the reason).
UPDATE deliveries d SET state = 'dead', dead_reason = $2, dead_at = $3, updated_at = $3
FROM subscribers s
WHERE d.seq = ANY ($1) AND s.id = d.subscriber_id AND s.id = ANY ($4)
  AND s.status = 'revoked';

-- name: LEASE
-- Rows $1 leased to $3 under lease $2 until $4; each returns the attempts spent before.
UPDATE deliveries SET state = 'in_flight', attempts = attempts + 1,
    lease_token = $2, lease_owner = $3, lease_expires = $4, updated_at = $5,
    dead_error = NULL, waiting_on = NULL
WHERE seq = ANY ($1)
RETURNING seq, id || coalesce(':resend-' || resend, ''), event_id, subscriber_id, attempts - 1,
          first_seen, window_start, run_at, payload_version, updated_at;

-- name: RESCUE_EXPIRED
-- At most $2 deliveries whose lease expired by $1, leased again to $4 under lease $3 until $5
-- (the attempt and its start stay as they were). The state and expiry are checked again
-- inside the UPDATE, so a completion that committed in between is never overwritten. The rows
-- are picked once, in a materialized CTE: as an `IN (SELECT ... LIMIT ... SKIP LOCKED)` the
-- planner may run the pick more than once and lease more than the limit (seen under a clock
-- racing the leases).
WITH picked AS MATERIALIZED (
    SELECT seq AS picked FROM deliveries
    WHERE state = 'in_flight' AND lease_expires <= $1
    ORDER BY lease_expires LIMIT $2
    FOR UPDATE SKIP LOCKED)
UPDATE deliveries SET lease_token = $3, lease_owner = $4, lease_expires = $5
FROM picked
WHERE seq = picked AND state = 'in_flight' AND lease_expires <= $1
RETURNING seq, id || coalesce(':resend-' || resend, ''), event_id, subscriber_id, attempts,
          first_seen, window_start, run_at, payload_version, updated_at;

-- name: COMPLETE
-- A batch of completions in one statement, fenced row by row by the lease: deliveries $1
-- under leases $2 end in state $3 at $4 (reason $5), or in $6 at $7 (reason $8) when their
-- subscriber is revoked by now, at $9. Returns each one applied, its subscriber, its dead
-- reason, whether the subscriber's breaker is not closed-and-clean, and whether its failing
-- streak still counts (fewer than $10 failed attempts: a failure changes it).
WITH c AS (
    SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::text[], $4::int8[], $5::text[],
                         $6::text[], $7::int8[], $8::text[])
        AS c(seq, lease, state, run_at, reason, r_state, r_run_at, r_reason)
), t AS (
    SELECT c.seq, c.lease,
           CASE WHEN s.status = 'revoked' THEN c.r_state ELSE c.state END AS state,
           CASE WHEN s.status = 'revoked' THEN c.r_run_at ELSE c.run_at END AS run_at,
           CASE WHEN s.status = 'revoked' THEN c.r_reason ELSE c.reason END AS reason,
           (s.breaker_failures > 0 OR s.breaker_open_until IS NOT NULL
            OR s.breaker_allowance IS NOT NULL OR s.failing_since IS NOT NULL) AS breaker_dirty,
           s.failed_attempts < $10::int4 AS streak_counting
    FROM c JOIN deliveries d ON d.seq = c.seq JOIN subscribers s ON s.id = d.subscriber_id
)
UPDATE deliveries d SET
    state = t.state, run_at = t.run_at, dead_reason = t.reason,
    dead_at = CASE WHEN t.reason IS NOT NULL THEN $9::int8 END,
    lease_token = NULL, lease_owner = NULL, lease_expires = NULL, updated_at = $9
FROM t
WHERE d.seq = t.seq AND d.state = 'in_flight' AND d.lease_token = t.lease
RETURNING d.seq, d.subscriber_id, d.dead_reason, t.breaker_dirty, d.state, d.ordering_key,
          t.streak_counting;

-- name: RELEASE_NEXT_IN_ORDER
-- After deliveries of the subscribers $1 with the ordering keys $2 (pairwise) ended: for each
-- pair, the first of that key waiting behind them goes due (held still if its subscriber is
-- paused, for the resume), unless another of that key is on its way (a replayed one). Under
-- the keys' locks (LOCK_ORDERING_KEYS). A waiting row locked by another transaction is being
-- killed (a window's end, a revocation): skipped, and the next one released, as that
-- transaction's own release would.
WITH next AS (
    SELECT w.seq
    FROM (SELECT DISTINCT * FROM UNNEST($1::text[], $2::text[]) AS p(subscriber_id, key)) p
    CROSS JOIN LATERAL (
        SELECT seq FROM deliveries
        WHERE subscriber_id = p.subscriber_id AND ordering_key = p.key
          AND state IN ('scheduled', 'in_flight') AND waiting_on = 'ordering'
        ORDER BY seq LIMIT 1
        FOR UPDATE SKIP LOCKED) w
    WHERE NOT EXISTS (
        SELECT 1 FROM deliveries a
        WHERE a.subscriber_id = p.subscriber_id AND a.ordering_key = p.key
          AND a.state IN ('scheduled', 'in_flight')
          AND a.waiting_on IS DISTINCT FROM 'ordering'))
UPDATE deliveries d SET waiting_on = NULL, held = (s.status = 'paused')
FROM next, subscribers s
WHERE d.seq = next.seq AND s.id = d.subscriber_id;

-- name: INSERT_ATTEMPTS
-- Attempt records, one array per column.
INSERT INTO attempts
    (delivery_seq, ordinal, started_at, duration_ms, outcome, status, error, response_body,
     lost, policy)
SELECT * FROM UNNEST($1::int8[], $2::int4[], $3::int8[], $4::int8[], $5::text[],
                     $6::int4[], $7::text[], $8::text[], $9::bool[], $10::text[]);

-- name: ORPHANED_IN_ORDER
-- At most $1 lines (subscriber, ordering key) whose first delivery on its way waits on
-- `ordering` with nothing ahead of it: an ending that released nothing left it so (a publish
-- that read the line before a revocation committed and inserted behind what it killed; an older
-- release serving the schema). The window sweep hands them to RELEASE_NEXT_IN_ORDER.
SELECT d.subscriber_id, d.ordering_key FROM deliveries d
WHERE d.ordering_key IS NOT NULL AND d.state IN ('scheduled', 'in_flight')
  AND d.waiting_on = 'ordering'
  AND NOT EXISTS (SELECT 1 FROM deliveries o
                  WHERE o.subscriber_id = d.subscriber_id AND o.ordering_key = d.ordering_key
                    AND o.state IN ('scheduled', 'in_flight') AND o.seq < d.seq)
LIMIT $1;

-- name: EXPIRING_WINDOWS
-- At most $2 waiting deliveries whose window started by $1, the oldest first, locked, with what
-- may hold each back at $3 (for what it was waiting on). Rows a claim is taking are locked by
-- it and skipped: they are in flight, and their attempt's outcome decides.
SELECT d.seq, d.held, d.run_at, s.breaker_open_until, s.rate_next_at, s.max_in_flight,
       d.subscriber_id, s.breaker_allowance, s.origin, s.url,
       s.rate_limit_per_second IS NOT NULL AND EXISTS (
           SELECT 1 FROM deliveries o
           WHERE o.subscriber_id = d.subscriber_id AND o.state = 'scheduled'
             AND o.run_at <= $3
             AND (o.run_at < d.run_at OR (o.run_at = d.run_at AND o.seq < d.seq))),
       d.waiting_on IS NOT DISTINCT FROM 'ordering', d.ordering_key
FROM (SELECT seq, subscriber_id, held, run_at, waiting_on, ordering_key FROM deliveries
      WHERE state = 'scheduled' AND window_start <= $1
      ORDER BY window_start LIMIT $2
      FOR UPDATE SKIP LOCKED) d
JOIN subscribers s ON s.id = d.subscriber_id;

-- name: EXPIRE_WINDOWS
-- Deliveries $1 die of their window ($3), each waiting on its cause in $2; answers each one's
-- subscriber.
UPDATE deliveries d SET state = 'dead', dead_reason = $3, dead_at = $4, updated_at = $4,
    held = FALSE, run_at = NULL, waiting_on = x.waiting
FROM UNNEST($1::int8[], $2::text[]) AS x(seq, waiting)
WHERE d.seq = x.seq
RETURNING d.subscriber_id;

-- name: PRUNE_DELIVERED
-- At most $2 deliveries delivered before $1 that no replay or resend names, deleted. Picked
-- once (see RESCUE_EXPIRED).
WITH picked AS MATERIALIZED (
    SELECT d.seq AS picked FROM deliveries d
    WHERE d.state = 'delivered' AND d.updated_at < $1
      AND NOT EXISTS (SELECT 1 FROM replay_items ri WHERE ri.delivery_seq = d.seq)
      AND NOT EXISTS (SELECT 1 FROM resend_items ri WHERE ri.delivery_seq = d.seq)
    LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM deliveries USING picked WHERE seq = picked
RETURNING seq;

-- name: PRUNE_ATTEMPTS
DELETE FROM attempts WHERE delivery_seq = ANY ($1);
