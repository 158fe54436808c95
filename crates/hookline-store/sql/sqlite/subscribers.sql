-- Subscribers: reads, changes, and the claims' view of their limits. A subscriber's columns
-- are read in the order `subscriber_row` reads them.

-- name: SUBSCRIBER
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason
FROM subscribers WHERE id = ?1;

-- name: SUBSCRIBER_PAGE
-- A page of subscribers after key ?1 whose lower-cased id or URL is `LIKE` ?2 (NULL: all), the
-- URL whole when ?3, else up to its query (query values may be credentials), at most ?4 rows,
-- of tenant ?5 (NULL: every tenant's and none).
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason
FROM subscribers
WHERE seq > ?1
  AND (CAST(?2 AS TEXT) IS NULL
       OR lower(id) LIKE ?2 ESCAPE '\'
       OR lower(CASE WHEN ?3 THEN url ELSE substr(url, 1, instr(url || '?', '?') - 1) END)
          LIKE ?2 ESCAPE '\')
  AND (CAST(?5 AS TEXT) IS NULL OR tenant_id = ?5)
ORDER BY seq LIMIT ?4;

-- name: GONE_AMONG
-- Those of the ids in the JSON array ?1 revoked or not in the table.
SELECT asked.value FROM json_each(?1) AS asked
LEFT JOIN subscribers s ON s.id = asked.value
WHERE s.id IS NULL OR s.status = 'revoked';

-- name: CREATE_SUBSCRIBER
INSERT INTO subscribers (id, url, event_types, secret, status, created_at, updated_at,
                         max_in_flight, rate_limit_per_second, payload_version, headers, origin,
                         tenant_id)
VALUES (?1, ?2, ?3, ?4, 'active', ?5, ?5, ?6, ?7, ?8, ?9, ?10, ?11);

-- name: UPDATE_SUBSCRIBER
UPDATE subscribers SET url = ?2, event_types = ?3, status = ?4, updated_at = ?5,
    max_in_flight = ?6, rate_limit_per_second = ?7, payload_version = ?8, headers = ?9,
    origin = ?10, status_reason = ?11, failing_since = ?12, failed_attempts = ?13
WHERE id = ?1;

-- name: RELEASE_HELD
-- Claims set `held` on deliveries of a paused subscriber; resuming puts them back in the due
-- index, at the run_at they always kept. Those behind an earlier delivery of their ordering
-- key stay held for it.
UPDATE deliveries SET held = 0
WHERE subscriber_id = ?1 AND state = 'scheduled' AND held = 1 AND waiting_on IS NOT 'ordering';

-- name: ROTATE_SECRET
UPDATE subscribers SET secret = ?2, previous_secret = ?3, previous_secret_until = ?4,
    updated_at = ?5
WHERE id = ?1;

-- name: REVOKE_SUBSCRIBER
-- ?3: why (`StatusReason`).
UPDATE subscribers SET status = 'revoked', status_reason = ?3, updated_at = ?2
WHERE id = ?1 AND status != 'revoked';

-- name: KILL_WAITING
-- A revoked subscriber's waiting deliveries die (?2: the reason).
UPDATE deliveries SET state = 'dead', dead_reason = ?2, dead_at = ?3, held = 0, updated_at = ?3
WHERE subscriber_id = ?1 AND state = 'scheduled';

-- name: SUBSCRIBERS_ON
-- The subscribers on the origins in the JSON array ?1 (through `subscribers_origin`).
SELECT id FROM subscribers WHERE origin IN (SELECT value FROM json_each(?1));

-- name: RATE_LIMITED
-- Subscribers whose rate limiter admits nobody at ?1.
SELECT id FROM subscribers WHERE rate_next_at > ?1;

-- name: SET_RATE_NEXT_AT
UPDATE subscribers SET rate_next_at = ?2 WHERE id = ?1;

-- name: END_SLOW_START
-- A slow start that reached the cap ?2 is over.
UPDATE subscribers SET breaker_allowance = NULL WHERE id = ?1 AND breaker_allowance >= ?2;

-- name: SET_BREAKER
-- The breaker and the failing streak an attempt's outcome changed.
UPDATE subscribers SET breaker_failures = ?2, breaker_open_until = ?3,
    breaker_cool_down_ms = ?4, breaker_allowance = ?5, failing_since = ?6, failed_attempts = ?7
WHERE id = ?1;
