-- Dead letters: the lists, their recent inflow, and what a replay selects. A dead letter's
-- columns are read in the order `dead_letters` reads them, the payload version as DELIVERY's.
--
-- Each shows its subscriber's tenant, and keeps to one tenant's when asked (the tenant's
-- subscribers, read once into the filter: the index walked stays the other filters').
--
-- Lists and replays go oldest dead first, then by key: listing N and replaying N selects the
-- same N. The state is a literal, so that the planner can use an index on dead rows.

-- name: DEAD_LETTERS_OF_REASON_AND_SUBSCRIBER
-- Dead letters of reason $1 and subscriber $2 past (dead_at, key) ($3, $4), at most $5.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, e.type,
       d.subscriber_id,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       d.dead_reason, d.dead_at, d.dead_error, d.waiting_on,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.state = 'dead' AND d.dead_reason = $1 AND d.subscriber_id = $2
  AND (d.dead_at, d.seq) > ($3, $4)
  AND (CAST($6 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $6))
ORDER BY d.dead_at, d.seq LIMIT $5;

-- name: DEAD_LETTERS_OF_REASON
-- Dead letters of reason $1 past (dead_at, key) ($2, $3), at most $4.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, e.type,
       d.subscriber_id,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       d.dead_reason, d.dead_at, d.dead_error, d.waiting_on,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.state = 'dead' AND d.dead_reason = $1 AND (d.dead_at, d.seq) > ($2, $3)
  AND (CAST($5 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $5))
ORDER BY d.dead_at, d.seq LIMIT $4;

-- name: DEAD_LETTERS_OF_SUBSCRIBER
-- Dead letters of subscriber $1 past (dead_at, key) ($2, $3), at most $4.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, e.type,
       d.subscriber_id,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       d.dead_reason, d.dead_at, d.dead_error, d.waiting_on,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.state = 'dead' AND d.subscriber_id = $1 AND (d.dead_at, d.seq) > ($2, $3)
  AND (CAST($5 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $5))
ORDER BY d.dead_at, d.seq LIMIT $4;

-- name: DEAD_LETTERS
-- Every dead letter past (dead_at, key) ($1, $2), at most $3.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), d.event_id, e.type,
       d.subscriber_id,
       CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
            WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
            ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END,
       d.dead_reason, d.dead_at, d.dead_error, d.waiting_on,
       (SELECT s.tenant_id FROM subscribers s WHERE s.id = d.subscriber_id)
FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.state = 'dead' AND (d.dead_at, d.seq) > ($1, $2)
  AND (CAST($4 AS TEXT) IS NULL
       OR d.subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $4))
ORDER BY d.dead_at, d.seq LIMIT $3;

-- name: DEAD_LETTER_GROUPS
-- Dead letters by reason and subscriber since $1 (of tenant $3, if not NULL), largest groups
-- first, at most $2 groups,
-- each with its subscriber's status (a revoked one's cannot be replayed).
SELECT d.dead_reason, d.subscriber_id, count(*), min(d.dead_at), max(d.dead_at), s.status
FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'dead' AND d.dead_at >= $1
  AND (CAST($3 AS TEXT) IS NULL OR s.tenant_id = $3)
GROUP BY d.dead_reason, d.subscriber_id, s.status
ORDER BY count(*) DESC, d.dead_reason, d.subscriber_id LIMIT $2;

-- name: DEAD_LETTERS_BY_REASON
-- Dead letters by reason that died since $1 (and are still dead; of tenant $2, if not NULL),
-- through the index on
-- `dead_at`: the recent inflow, cheap enough to read per request.
SELECT dead_reason, count(*)
FROM deliveries WHERE state = 'dead' AND dead_at >= $1
  AND (CAST($2 AS TEXT) IS NULL
       OR subscriber_id IN (SELECT id FROM subscribers WHERE tenant_id = $2))
GROUP BY dead_reason ORDER BY dead_reason;

-- name: REPLAY_SELECTION
-- The dead letters a replay of reason $1 selects, at most $3 ($2: NULL, the subscriber a
-- replay may name; $4: the tenant it keeps to, if not NULL): `seq, id`, the subscriber's pin
-- and the version the replay would send, chosen again by the pin at replay time (the highest
-- at or below it; NULL: none).
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), s.payload_version,
       (SELECT max(v) FROM (
            SELECT e.payload_version AS v FROM events e WHERE e.id = d.event_id
            UNION ALL SELECT p.version FROM event_payloads p WHERE p.event_id = d.event_id)
            AS versions
        WHERE s.payload_version IS NULL OR v <= s.payload_version)
FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'dead' AND d.dead_reason = $1 AND CAST($2 AS TEXT) IS NULL
  AND s.status != 'revoked'
  AND (CAST($4 AS TEXT) IS NULL OR s.tenant_id = $4)
ORDER BY d.dead_at, d.seq LIMIT $3;

-- name: REPLAY_SELECTION_OF_SUBSCRIBER
-- REPLAY_SELECTION of subscriber $2's dead letters: compared only when a replay names one, as
-- an `OR` of the two cases would keep a generic plan from seeking on the subscriber column.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), s.payload_version,
       (SELECT max(v) FROM (
            SELECT e.payload_version AS v FROM events e WHERE e.id = d.event_id
            UNION ALL SELECT p.version FROM event_payloads p WHERE p.event_id = d.event_id)
            AS versions
        WHERE s.payload_version IS NULL OR v <= s.payload_version)
FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'dead' AND d.dead_reason = $1 AND d.subscriber_id = $2
  AND s.status != 'revoked'
  AND (CAST($4 AS TEXT) IS NULL OR s.tenant_id = $4)
ORDER BY d.dead_at, d.seq LIMIT $3;

-- name: REPLAY_SELECTION_FOR_UPDATE
-- REPLAY_SELECTION, the dead letters locked for the replay that releases them.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), s.payload_version,
       (SELECT max(v) FROM (
            SELECT e.payload_version AS v FROM events e WHERE e.id = d.event_id
            UNION ALL SELECT p.version FROM event_payloads p WHERE p.event_id = d.event_id)
            AS versions
        WHERE s.payload_version IS NULL OR v <= s.payload_version)
FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'dead' AND d.dead_reason = $1 AND CAST($2 AS TEXT) IS NULL
  AND s.status != 'revoked'
  AND (CAST($4 AS TEXT) IS NULL OR s.tenant_id = $4)
ORDER BY d.dead_at, d.seq LIMIT $3
FOR UPDATE OF d;

-- name: REPLAY_SELECTION_OF_SUBSCRIBER_FOR_UPDATE
-- REPLAY_SELECTION_OF_SUBSCRIBER, the dead letters locked for the replay that releases them.
SELECT d.seq, d.id || coalesce(':resend-' || d.resend, ''), s.payload_version,
       (SELECT max(v) FROM (
            SELECT e.payload_version AS v FROM events e WHERE e.id = d.event_id
            UNION ALL SELECT p.version FROM event_payloads p WHERE p.event_id = d.event_id)
            AS versions
        WHERE s.payload_version IS NULL OR v <= s.payload_version)
FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.state = 'dead' AND d.dead_reason = $1 AND d.subscriber_id = $2
  AND s.status != 'revoked'
  AND (CAST($4 AS TEXT) IS NULL OR s.tenant_id = $4)
ORDER BY d.dead_at, d.seq LIMIT $3
FOR UPDATE OF d;
