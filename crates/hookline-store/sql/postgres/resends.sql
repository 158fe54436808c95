-- Resends: new deliveries of published events to one subscriber, and the audit of each. A
-- resend's columns are read in the order `resend_row` reads them.

-- name: RESEND_CANDIDATES
-- Events of tenant $3 (NULL: none) accepted at or after $4 and before $5, after (accepted_at,
-- id) ($1, $2), oldest first, at most $6, through `events_accepted`: a page of a resend's walk
-- (`resends.rs`, which matches the types). Each with the payload version a subscriber pinned
-- at $7 (NULL: unpinned) is sent, as a fan-out chooses it: the highest at or below the pin
-- (NULL: none).
SELECT e.accepted_at, e.id, e.type,
       CASE WHEN CAST($7 AS BIGINT) IS NULL OR e.payload_version <= $7 THEN e.payload_version
            ELSE (SELECT max(p.version) FROM event_payloads p
                  WHERE p.event_id = e.id AND p.version <= $7) END
FROM events e
WHERE (e.accepted_at, e.id) > ($1, $2)
  AND e.accepted_at >= $4 AND e.accepted_at < $5
  AND e.tenant_id IS NOT DISTINCT FROM $3
ORDER BY e.accepted_at, e.id LIMIT $6;

-- name: RESENDS_SO_FAR
-- The highest resend number of each of the events $1 to subscriber $2 so far (0: none),
-- through `deliveries_event_subscriber`.
SELECT w.event_id, coalesce(max(d.resend), 0)
FROM UNNEST($1::text[]) AS w(event_id)
LEFT JOIN deliveries d ON d.event_id = w.event_id AND d.subscriber_id = $2
GROUP BY w.event_id;

-- name: INSERT_RESENT
-- A delivery of each of the events $1 to subscriber $2 (resend number in $8), made at $4 and
-- released at its time in $6 (its window starts then: pacing is persisted as its run_at, so a
-- restart keeps it), sending its version in $7; held ($3) while the subscriber is paused, as a
-- fan-out's are; each names the tenant $5, for the claims' fair share. Each is listed under
-- resend $9.
WITH made AS (
    INSERT INTO deliveries
        (event_id, subscriber_id, state, held, first_seen, window_start, run_at, updated_at,
         payload_version, tenant_id, resend)
    SELECT w.event_id, $2, 'scheduled', $3, $4, w.release, w.release, $4, w.version, $5,
           w.resend
    FROM UNNEST($1::text[], $6::int8[], $7::int8[], $8::int4[])
        AS w(event_id, release, version, resend)
    RETURNING seq)
INSERT INTO resend_items (resend_seq, delivery_seq) SELECT $9, seq FROM made;

-- name: INSERT_RESEND
INSERT INTO resends (id, tenant_id, created_at, subscriber_id, since, until, event_types,
                     limit_n, per_second, requested_by, selected)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING seq;

-- name: RESEND
SELECT seq, id, tenant_id, created_at, subscriber_id, since, until, event_types, limit_n,
       per_second, requested_by, selected
FROM resends WHERE id = $1;

-- name: RESENDS
-- Resends after key $1, at most $2 (of tenant $3 and subscriber $4, each if not NULL).
SELECT seq, id, tenant_id, created_at, subscriber_id, since, until, event_types, limit_n,
       per_second, requested_by, selected
FROM resends
WHERE seq > $1 AND (CAST($3 AS TEXT) IS NULL OR tenant_id = $3)
  AND (CAST($4 AS TEXT) IS NULL OR subscriber_id = $4)
ORDER BY seq LIMIT $2;

-- name: RESENDS_NEWEST_FIRST
-- Resends before key $1, at most $2 (of tenant $3 and subscriber $4, each if not NULL).
SELECT seq, id, tenant_id, created_at, subscriber_id, since, until, event_types, limit_n,
       per_second, requested_by, selected
FROM resends
WHERE seq < $1 AND (CAST($3 AS TEXT) IS NULL OR tenant_id = $3)
  AND (CAST($4 AS TEXT) IS NULL OR subscriber_id = $4)
ORDER BY seq DESC LIMIT $2;

-- name: RESENT_DELIVERIES
SELECT d.id || coalesce(':resend-' || d.resend, '')
FROM resend_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.resend_seq = $1 ORDER BY d.seq;

-- name: RESEND_OUTCOMES
-- Delivered and dead among resend $1's deliveries.
SELECT count(*) FILTER (WHERE d.state = 'delivered'), count(*) FILTER (WHERE d.state = 'dead')
FROM resend_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.resend_seq = $1;
