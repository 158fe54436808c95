-- The queue's gauges, read on a refresh.

-- name: STATE_COUNTS
SELECT state, count(*) FROM deliveries GROUP BY state;

-- name: DUE_GROUPS
-- Per subscriber with deliveries due at $1: the oldest due, the oldest due first attempt, and
-- what may hold it back.
SELECT d.subscriber_id, min(d.run_at), min(CASE WHEN d.attempts = 0 THEN d.run_at END),
       min(s.breaker_open_until), min(s.rate_next_at), min(s.max_in_flight),
       min(s.breaker_allowance), min(s.origin), min(s.url)
FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'scheduled' AND NOT d.held AND d.run_at <= $1
GROUP BY d.subscriber_id;

-- name: OLDEST_WAITING
-- The oldest delivery held by a paused subscriber, the oldest first seen of a retry, and the
-- oldest delivery waiting behind an earlier one of its ordering key (`deliveries_ordering`:
-- the keyed rows on their way, nothing else).
SELECT (SELECT min(d.run_at) FROM subscribers s JOIN deliveries d ON d.subscriber_id = s.id
        WHERE s.status = 'paused' AND d.state = 'scheduled' AND d.held),
       (SELECT min(first_seen) FROM deliveries WHERE state = 'scheduled' AND attempts > 0),
       (SELECT min(run_at) FROM deliveries
        WHERE ordering_key IS NOT NULL AND state IN ('scheduled', 'in_flight')
          AND waiting_on = 'ordering');

-- name: OPEN_BREAKERS
SELECT id FROM subscribers WHERE breaker_open_until IS NOT NULL ORDER BY id;

-- name: BEHIND_OPEN_BREAKERS
-- How many deliveries wait (scheduled, due or deferred) for subscribers whose breaker is open
-- or half-open, and the earliest `first_seen` among them.
SELECT count(*), min(d.first_seen)
FROM subscribers s JOIN deliveries d ON d.subscriber_id = s.id
WHERE s.breaker_open_until IS NOT NULL AND d.state = 'scheduled';
