-- Subscriber health (`health.rs`): the rows with something to watch are read through
-- `subscribers_health`, whose predicate each statement repeats so that the planner may use it.

-- name: AUTO_DISABLE
-- Active subscribers but $3 failing since $1 or earlier: paused by hookline ($2: now).
UPDATE subscribers SET status = 'paused', status_reason = 'auto_disabled', updated_at = $2
WHERE ((status <> 'revoked' AND (failing_since IS NOT NULL OR told IS NOT NULL))
       OR (status = 'revoked' AND told IS DISTINCT FROM 'revoked'))
  AND status = 'active' AND failing_since <= $1 AND id <> $3
RETURNING id;

-- name: WATCHED_SUBSCRIBERS
-- The subscribers with something to watch after id $1 (NULL: from the first), at most $2, with
-- what was told of them.
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason,
       told, told_at
FROM subscribers
WHERE ((status <> 'revoked' AND (failing_since IS NOT NULL OR told IS NOT NULL))
       OR (status = 'revoked' AND told IS DISTINCT FROM 'revoked'))
  AND (CAST($1 AS TEXT) IS NULL OR id > $1)
ORDER BY id LIMIT $2;

-- name: SET_TOLD
-- What subscriber $1's operators were told ($2, begun at $3), if it is still $4.
UPDATE subscribers SET told = $2, told_at = $3
WHERE id = $1 AND told IS NOT DISTINCT FROM CAST($4 AS TEXT);

-- name: UNFINISHED_REPLAYS
-- Replays made at or after $1 not yet seen to finish, oldest first, at most $2.
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays WHERE finished_at IS NULL AND created_at >= $1 ORDER BY seq LIMIT $2;

-- name: SET_REPLAY_FINISHED
UPDATE replays SET finished_at = $2 WHERE id = $1 AND finished_at IS NULL;

-- name: DEAD_LETTER_INFLOW
-- DEAD_LETTERS_BY_REASON of every subscriber but $2.
SELECT dead_reason, count(*)
FROM deliveries WHERE state = 'dead' AND dead_at >= $1 AND subscriber_id <> $2
GROUP BY dead_reason ORDER BY dead_reason;
