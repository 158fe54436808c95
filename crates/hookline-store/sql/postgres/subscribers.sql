-- Subscribers: reads, changes, and the claims' view of their limits. A subscriber's columns
-- are read in the order `subscriber_row` reads them.

-- name: SUBSCRIBER
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason
FROM subscribers WHERE id = $1;

-- name: SUBSCRIBER_FOR_UPDATE
-- SUBSCRIBER, its row locked for the rest of the transaction, so two concurrent updates
-- cannot both act on the state they read.
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason
FROM subscribers WHERE id = $1 FOR UPDATE;

-- name: SUBSCRIBERS_BY_ID
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason
FROM subscribers WHERE id = ANY ($1);

-- name: SUBSCRIBER_PAGE
-- A page of subscribers after key $1 whose lower-cased id or URL is `LIKE` $2 (NULL: all), the
-- URL whole when $3, else up to its query (query values may be credentials), at most $4 rows,
-- of tenant $5 (NULL: every tenant's and none).
SELECT seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret,
       previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms,
       max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin,
       breaker_allowance, tenant_id, failing_since, failed_attempts, status_reason
FROM subscribers
WHERE seq > $1
  AND (CAST($2 AS TEXT) IS NULL
       OR lower(id) LIKE $2 ESCAPE '\'
       OR lower(CASE WHEN $3 THEN url ELSE split_part(url, '?', 1) END) LIKE $2 ESCAPE '\')
  AND (CAST($5 AS TEXT) IS NULL OR tenant_id = $5)
ORDER BY seq LIMIT $4;

-- name: GONE_AMONG
-- Those of the ids $1 revoked or not in the table.
SELECT asked FROM UNNEST($1::text[]) AS asked
LEFT JOIN subscribers s ON s.id = asked
WHERE s.id IS NULL OR s.status = 'revoked';

-- name: CREATE_SUBSCRIBER
INSERT INTO subscribers (id, url, event_types, secret, status, created_at, updated_at,
                         max_in_flight, rate_limit_per_second, payload_version, headers, origin,
                         tenant_id)
VALUES ($1, $2, $3, $4, 'active', $5, $5, $6, $7, $8, $9, $10, $11);

-- name: UPDATE_SUBSCRIBER
UPDATE subscribers SET url = $2, event_types = $3, status = $4, updated_at = $5,
    max_in_flight = $6, rate_limit_per_second = $7, payload_version = $8, headers = $9,
    origin = $10, status_reason = $11, failing_since = $12, failed_attempts = $13
WHERE id = $1;

-- name: RELEASE_HELD
-- A resumed subscriber's held deliveries go back in the due index, at the run_at they kept.
-- Those behind an earlier delivery of their ordering key stay held for it.
UPDATE deliveries SET held = FALSE
WHERE subscriber_id = $1 AND state = 'scheduled' AND held
  AND waiting_on IS DISTINCT FROM 'ordering';

-- name: ROTATE_SECRET
UPDATE subscribers SET secret = $2, previous_secret = $3, previous_secret_until = $4,
    updated_at = $5
WHERE id = $1;

-- name: REVOKE_SUBSCRIBER
-- $3: why (`StatusReason`).
UPDATE subscribers SET status = 'revoked', status_reason = $3, updated_at = $2
WHERE id = $1 AND status <> 'revoked';

-- name: KILL_WAITING
-- A revoked subscriber's waiting deliveries die ($2: the reason).
UPDATE deliveries SET state = 'dead', dead_reason = $2, dead_at = $3, held = FALSE,
    updated_at = $3
WHERE subscriber_id = $1 AND state = 'scheduled';

-- name: RATE_LIMITED
-- Subscribers whose rate limiter admits nobody at $1.
SELECT id FROM subscribers WHERE rate_next_at > $1;

-- name: LOCK_SUBSCRIBERS
-- Locked in id order, as completions lock the subscribers whose breakers they change: a claim
-- and completions beside it never wait on each other's subscriber rows in a cycle.
SELECT 1 FROM subscribers WHERE id = ANY ($1) ORDER BY id FOR UPDATE;

-- name: SET_RATE_NEXT_AT
-- Each subscriber of $1 admits its next delivery at its time in $2.
UPDATE subscribers s SET rate_next_at = x.next
FROM UNNEST($1::text[], $2::int8[]) AS x(id, next) WHERE s.id = x.id;

-- name: END_SLOW_STARTS
-- The slow starts of the subscribers $1 that reached their cap in $2 are over.
UPDATE subscribers s SET breaker_allowance = NULL
FROM UNNEST($1::text[], $2::int4[]) AS x(id, cap)
WHERE s.id = x.id AND s.breaker_allowance >= x.cap;

-- name: BREAKERS_FOR_UPDATE
-- The breakers of the subscribers $1, locked in id order (see LOCK_SUBSCRIBERS), so concurrent
-- batches from other processes serialize per subscriber.
SELECT id, breaker_failures, breaker_open_until, breaker_cool_down_ms, breaker_allowance,
       failing_since, failed_attempts
FROM subscribers WHERE id = ANY ($1) ORDER BY id FOR UPDATE;

-- name: SET_BREAKERS
-- The breakers and failing streaks a batch's outcomes changed.
UPDATE subscribers s SET breaker_failures = x.failures, breaker_open_until = x.until,
    breaker_cool_down_ms = x.cool, breaker_allowance = x.allowance,
    failing_since = x.failing_since, failed_attempts = x.failed
FROM UNNEST($1::text[], $2::int4[], $3::int8[], $4::int8[], $5::int4[], $6::int8[], $7::int4[])
    AS x(id, failures, until, cool, allowance, failing_since, failed)
WHERE s.id = x.id;
