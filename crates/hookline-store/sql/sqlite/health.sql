-- Subscriber health (`health.rs`): the rows with something to watch are read through
-- `subscribers_health`, whose predicate each statement repeats so that SQLite may use it.

-- name: AUTO_DISABLE
-- Active subscribers but ?3 failing (?4 failed attempts or more in a row, or the breaker open)
-- since ?1 or earlier, with no delivery delivered since (a release before the streak was kept
-- on successes may have left one): paused by hookline (?2: now).
UPDATE subscribers SET status = 'paused', status_reason = 'auto_disabled', updated_at = ?2
WHERE id IN (
    SELECT id FROM subscribers INDEXED BY subscribers_health
    WHERE ((status <> 'revoked' AND (failing_since IS NOT NULL OR told IS NOT NULL))
           OR (status = 'revoked' AND told IS NOT 'revoked'))
      AND status = 'active' AND failing_since <= ?1 AND id <> ?3
      AND (failed_attempts >= ?4 OR breaker_open_until IS NOT NULL)
      AND NOT EXISTS (
          SELECT 1 FROM deliveries d INDEXED BY deliveries_subscriber
          WHERE d.subscriber_id = subscribers.id AND d.state = 'delivered'
            AND d.updated_at > subscribers.failing_since))
RETURNING id;

-- name: WATCHED_SUBSCRIBERS
-- The subscribers with something to watch after id ?1 (NULL: from the first), at most ?2, with
-- what was told of them.
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason,
       told, told_at
FROM subscribers INDEXED BY subscribers_health
WHERE ((status <> 'revoked' AND (failing_since IS NOT NULL OR told IS NOT NULL))
       OR (status = 'revoked' AND told IS NOT 'revoked'))
  AND (CAST(?1 AS TEXT) IS NULL OR id > ?1)
ORDER BY id LIMIT ?2;

-- name: SET_TOLD
-- What subscriber ?1's operators were told (?2, begun at ?3), if it is still ?4.
UPDATE subscribers SET told = ?2, told_at = ?3 WHERE id = ?1 AND told IS ?4;

-- name: FINISHED_REPLAYS
-- Replays made at or after ?1 not yet recorded finished whose deliveries have all ended
-- (delivered or dead; one a later replay took again ends with it), oldest first, at most ?2.
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays r
WHERE finished_at IS NULL AND created_at >= ?1
  AND NOT EXISTS (
      SELECT 1 FROM replay_items i JOIN deliveries d ON d.seq = i.delivery_seq
      WHERE i.replay_seq = r.seq AND d.state IN ('scheduled', 'in_flight'))
ORDER BY seq LIMIT ?2;

-- name: SET_REPLAY_FINISHED
UPDATE replays SET finished_at = ?2 WHERE id = ?1 AND finished_at IS NULL;

-- name: DEAD_LETTER_INFLOW
-- DEAD_LETTERS_BY_REASON of every subscriber but ?2.
SELECT dead_reason, count(*)
FROM deliveries INDEXED BY deliveries_dead_at WHERE state = 'dead' AND dead_at >= ?1
  AND subscriber_id <> ?2
GROUP BY dead_reason ORDER BY dead_reason;
