-- The queue's gauges, read on a refresh. Each count reads the index the test of their plans
-- names (`periodic_reads_use_the_index_meant_for_them`), so a large backlog of delayed
-- deliveries costs a refresh little.

-- name: STATE_COUNTS
-- Deliveries scheduled, in flight, delivered and dead: one statement (one snapshot), each
-- count from the entries of the state's partial index rather than the table's rows. Literals,
-- not parameters: only a literal lets SQLite pick a partial index.
SELECT (SELECT count(*) FROM deliveries WHERE state = 'scheduled'),
       (SELECT count(*) FROM deliveries WHERE state = 'in_flight'),
       (SELECT count(*) FROM deliveries WHERE state = 'delivered'),
       (SELECT count(*) FROM deliveries WHERE state = 'dead');

-- name: IN_FLIGHT_BY_ORIGIN
-- IN_FLIGHT_PER_SUBSCRIBER with each subscriber's origin (and URL, for a row an older binary
-- wrote without one).
SELECT f.*, s.origin, s.url
FROM (SELECT subscriber_id, count(*)
      FROM deliveries INDEXED BY deliveries_lease WHERE state = 'in_flight' GROUP BY 1) f
JOIN subscribers s ON s.id = f.subscriber_id;

-- name: DUE_GROUPS
-- Per subscriber with deliveries due at ?1: the oldest due, the oldest due first attempt, and
-- what may hold it back. Through the due index: only the rows due now, not every row of every
-- subscriber.
SELECT d.subscriber_id, min(d.run_at), min(CASE WHEN d.attempts = 0 THEN d.run_at END),
       s.breaker_open_until, s.rate_next_at, s.max_in_flight, s.breaker_allowance,
       s.origin, s.url
FROM deliveries d INDEXED BY deliveries_due JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'scheduled' AND d.held = 0 AND d.run_at <= ?1
GROUP BY d.subscriber_id;

-- name: OLDEST_PAUSED
-- The oldest delivery held by a paused subscriber: from the paused subscribers (`CROSS JOIN`
-- keeps them the outer loop) to their rows, so it costs nothing while nobody is paused and
-- what their rows cost when someone is; joined the other way SQLite reads every scheduled row
-- of every subscriber for `held`.
SELECT min(d.run_at)
FROM subscribers s CROSS JOIN deliveries d ON d.subscriber_id = s.id
WHERE s.status = 'paused' AND d.state = 'scheduled' AND d.held = 1;

-- name: OLDEST_RETRYING
SELECT min(first_seen) FROM deliveries WHERE state = 'scheduled' AND attempts > 0;

-- name: OPEN_BREAKERS
SELECT id FROM subscribers WHERE breaker_open_until IS NOT NULL ORDER BY id;

-- name: BEHIND_OPEN_BREAKERS
-- How many deliveries wait (scheduled, due or deferred) for subscribers whose breaker is open
-- or half-open, and the earliest `first_seen` among them. From those subscribers to their
-- rows: `CROSS JOIN` keeps the subscribers the outer loop, so it reads no delivery while no
-- breaker is open.
SELECT count(*), min(d.first_seen)
FROM subscribers s CROSS JOIN deliveries d ON d.subscriber_id = s.id
WHERE s.breaker_open_until IS NOT NULL AND d.state = 'scheduled';

-- name: OLDEST_ORDERED
-- The oldest delivery waiting behind an earlier one of its ordering key, through
-- `deliveries_ordering` (the keyed rows on their way, nothing else).
SELECT min(run_at) FROM deliveries INDEXED BY deliveries_ordering
WHERE ordering_key IS NOT NULL AND state IN ('scheduled', 'in_flight')
  AND waiting_on = 'ordering';
