-- Capacity: the backlog, and every process's meter, summed.

-- name: BACKLOG
-- Deliveries scheduled, in flight, scheduled and not held, and due at $1, each counted through
-- a partial index.
SELECT (SELECT count(*) FROM deliveries WHERE state = 'scheduled'),
       (SELECT count(*) FROM deliveries WHERE state = 'in_flight'),
       (SELECT count(*) FROM deliveries WHERE state = 'scheduled' AND NOT held),
       (SELECT count(*) FROM deliveries
        WHERE state = 'scheduled' AND NOT held AND run_at <= $1);

-- name: BACKLOG_DEFERRED
-- Groups of the backlog that wait for a later time than $1, as (cause, after ms, deliveries):
-- cause 1 is an open breaker (rows a claim deferred to its half-open time, a millisecond
-- apart, and retries behind it: each waits for the later of the two), 0 a scheduled `run_at`
-- only. Times are rounded up to a second within a minute, ten seconds within ten minutes and a
-- minute beyond, so a day's backlog is at most ~1,500 groups. Rows of subscribers whose
-- breaker is open but that no claim has deferred yet are due: they are found from the
-- subscribers with an open breaker, through each one's rows (written as SQLite's statement
-- is, whose planner needs the CROSS JOIN and the unary `+`; PostgreSQL plans both as usual).
SELECT CAST(cause AS BIGINT),
       CASE WHEN wait <= 60000 THEN (wait + 999) / 1000 * 1000
            WHEN wait <= 600000 THEN (wait + 9999) / 10000 * 10000
            ELSE (wait + 59999) / 60000 * 60000 END AS after_ms,
       count(*)
FROM (SELECT CASE WHEN s.breaker_open_until > $1 THEN 1 ELSE 0 END AS cause,
             CASE WHEN s.breaker_open_until > d.run_at THEN s.breaker_open_until
                  ELSE d.run_at END - $1 AS wait
      FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
      WHERE d.state = 'scheduled' AND NOT d.held AND d.run_at > $1
      UNION ALL
      SELECT 1, s.breaker_open_until - $1
      FROM subscribers s CROSS JOIN deliveries d
      WHERE d.subscriber_id = s.id AND s.breaker_open_until > $1
        AND d.state = 'scheduled' AND NOT d.held AND +d.run_at <= $1) w
GROUP BY 1, 2;

-- name: BACKLOG_RATE_LIMITED
-- The backlog of subscribers with a rate limit at $1: how many deliveries, and the longest any
-- such subscriber needs to work through its own at its rate, in ms from then.
SELECT CAST(COALESCE(sum(n), 0) AS BIGINT),
       CAST(COALESCE(max(wait + n * 1000.0 / rate), 0) AS BIGINT)
FROM (SELECT count(*) AS n, s.rate_limit_per_second AS rate,
             CASE WHEN s.rate_next_at > $1 THEN s.rate_next_at - $1 ELSE 0 END AS wait
      FROM subscribers s CROSS JOIN deliveries d
      WHERE d.subscriber_id = s.id AND s.rate_limit_per_second > 0
        AND d.state IN ('scheduled', 'in_flight') AND NOT d.held
      GROUP BY s.id, s.rate_limit_per_second, s.rate_next_at) r;

-- name: ATTEMPT_HISTORY
-- The attempts started at or after $1, the most recent $2: duration, outcome, whether
-- answered.
SELECT duration_ms, outcome, status IS NOT NULL FROM attempts
WHERE started_at >= $1 ORDER BY started_at DESC LIMIT $2;

-- name: RECORD_METER
-- One process's meter, replaced (parameters in `MeterReading`'s order after owner and time).
INSERT INTO capacity_meters
    (owner, measured_at, new_attempts, retry_attempts, failed_attempts, busy_slot_samples,
     slot_samples, answered_attempts, held_slot_samples)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (owner) DO UPDATE SET measured_at = excluded.measured_at,
    new_attempts = excluded.new_attempts, retry_attempts = excluded.retry_attempts,
    failed_attempts = excluded.failed_attempts,
    busy_slot_samples = excluded.busy_slot_samples, slot_samples = excluded.slot_samples,
    answered_attempts = excluded.answered_attempts,
    held_slot_samples = excluded.held_slot_samples;

-- name: FORGET_METERS
-- Meters of processes gone for a day.
DELETE FROM capacity_meters WHERE measured_at < $1;

-- name: METER_TOTALS
-- The sum of the meters recorded since $1.
SELECT CAST(COALESCE(sum(new_attempts), 0) AS BIGINT),
       CAST(COALESCE(sum(retry_attempts), 0) AS BIGINT),
       CAST(COALESCE(sum(failed_attempts), 0) AS BIGINT),
       CAST(COALESCE(sum(busy_slot_samples), 0) AS BIGINT),
       CAST(COALESCE(sum(slot_samples), 0) AS BIGINT),
       CAST(COALESCE(sum(answered_attempts), 0) AS BIGINT),
       CAST(COALESCE(sum(held_slot_samples), 0) AS BIGINT)
FROM capacity_meters WHERE measured_at >= $1;

-- name: RECORD_SHOWN
-- The estimate of what the process has shown it can do, replaced ($1 the rate, $2 its
-- evidence, $3 when). Several processes record it, each from its own copy read at its start: a
-- lower figure that is only a lower bound (`at_least`) never replaces a higher one another
-- process recorded; a saturated measurement, which is what the processes can do now, always
-- does.
INSERT INTO capacity_shown (id, per_s, evidence, measured_at)
VALUES (1, $1, $2, $3)
ON CONFLICT (id) DO UPDATE SET per_s = excluded.per_s, evidence = excluded.evidence,
    measured_at = excluded.measured_at
WHERE excluded.evidence = 'saturated' OR excluded.per_s > capacity_shown.per_s;

-- name: SHOWN
-- The estimate, if one was ever recorded.
SELECT per_s, evidence FROM capacity_shown WHERE id = 1;
