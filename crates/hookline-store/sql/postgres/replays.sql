-- Replays: releasing dead letters, and the audit of each replay. A replay's columns are read
-- in the order `replay_row` reads them.

-- name: INSERT_REPLAY
INSERT INTO replays (id, created_at, reason, subscriber_id, limit_n, per_second, requested_by,
                     selected, tenant_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq;

-- name: RELEASE_REPLAYED
-- Deliveries $1 scheduled again at their times in $2, each to send its version in $4. Pacing
-- is persisted as each delivery's run_at, so a restart keeps it. A replayed delivery leaves its
-- ordering key's line (its event keeps the key): an operator's repair, sent when released,
-- neither held behind that key's deliveries nor holding them.
UPDATE deliveries d SET state = 'scheduled', held = FALSE, attempts = 0,
    window_start = r.release, run_at = r.release, dead_reason = NULL, dead_at = NULL,
    dead_error = NULL, waiting_on = NULL, payload_version = r.version, updated_at = $3,
    ordering_key = NULL
FROM UNNEST($1::int8[], $2::int8[], $4::int8[]) AS r(seq, release, version)
WHERE d.seq = r.seq;

-- name: DIE_AGAIN_UNVERSIONED
-- Deliveries $1 still with no version for their subscriber's pin (in $2): each dies again at
-- once, on the record.
UPDATE deliveries d SET dead_reason = $3, dead_at = $4, updated_at = $4,
    dead_error = $5 || r.pin, payload_version = NULL
FROM UNNEST($1::int8[], $2::int8[]) AS r(seq, pin)
WHERE d.seq = r.seq;

-- name: INSERT_REPLAY_ITEMS
INSERT INTO replay_items (replay_seq, delivery_seq) SELECT $1, UNNEST($2::int8[]);

-- name: REPLAY
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays WHERE id = $1;

-- name: REPLAYS
-- Replays after key $1, at most $2 (of tenant $3, if not NULL).
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays WHERE seq > $1 AND (CAST($3 AS TEXT) IS NULL OR tenant_id = $3)
ORDER BY seq LIMIT $2;

-- name: REPLAYS_NEWEST_FIRST
-- Replays before key $1, at most $2 (of tenant $3, if not NULL).
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays WHERE seq < $1 AND (CAST($3 AS TEXT) IS NULL OR tenant_id = $3)
ORDER BY seq DESC LIMIT $2;

-- name: REPLAYED_DELIVERIES
SELECT d.id || coalesce(':resend-' || d.resend, '')
FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.replay_seq = $1 ORDER BY d.seq;

-- name: REPLAY_OUTCOMES
-- Delivered and dead among replay $1's deliveries. A replay's audit counts the outcome of a
-- delivery it released only while it is that delivery's latest replay: a later replay of the
-- same delivery counts it instead.
SELECT count(*) FILTER (WHERE d.state = 'delivered'), count(*) FILTER (WHERE d.state = 'dead')
FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.replay_seq = $1
  AND NOT EXISTS (SELECT 1 FROM replay_items later
                  WHERE later.delivery_seq = ri.delivery_seq AND later.replay_seq > ri.replay_seq);
