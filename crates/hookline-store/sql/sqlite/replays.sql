-- Replays: releasing dead letters, and the audit of each replay. A replay's columns are read
-- in the order `replay_row` reads them.

-- name: INSERT_REPLAY
INSERT INTO replays (id, created_at, reason, subscriber_id, limit_n, per_second, requested_by,
                     selected, tenant_id)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9);

-- name: DIE_AGAIN_UNVERSIONED
-- Still no version for its subscriber's pin (?5): it dies again at once, on the record.
UPDATE deliveries SET dead_reason = ?2, dead_at = ?3, updated_at = ?3,
    dead_error = ?4 || ?5, payload_version = NULL
WHERE seq = ?1;

-- name: RELEASE_REPLAYED
-- Pacing is persisted as each delivery's run_at (?2), so a restart keeps it. A replayed
-- delivery leaves its ordering key's line (its event keeps the key): an operator's repair, sent
-- when released, neither held behind that key's deliveries nor holding them.
UPDATE deliveries SET state = 'scheduled', held = 0, attempts = 0,
    window_start = ?2, run_at = ?2, dead_reason = NULL, dead_at = NULL,
    dead_error = NULL, waiting_on = NULL, payload_version = ?4, updated_at = ?3,
    ordering_key = NULL
WHERE seq = ?1
RETURNING subscriber_id;

-- name: INSERT_REPLAY_ITEM
INSERT INTO replay_items (replay_seq, delivery_seq) VALUES (?1, ?2);

-- name: REPLAY
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays WHERE id = ?1;

-- name: REPLAYS
-- Replays after key ?1, at most ?2 (of tenant ?3, if not NULL).
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays WHERE seq > ?1 AND (CAST(?3 AS TEXT) IS NULL OR tenant_id = ?3)
ORDER BY seq LIMIT ?2;

-- name: REPLAYS_NEWEST_FIRST
-- Replays before key ?1, at most ?2 (of tenant ?3, if not NULL).
SELECT seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected,
       tenant_id
FROM replays WHERE seq < ?1 AND (CAST(?3 AS TEXT) IS NULL OR tenant_id = ?3)
ORDER BY seq DESC LIMIT ?2;

-- name: REPLAYED_DELIVERIES
SELECT d.id FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.replay_seq = ?1 ORDER BY d.seq;

-- name: REPLAY_OUTCOMES
-- Delivered and dead among replay ?1's deliveries. A replay's audit counts the outcome of a
-- delivery it released only while it is that delivery's latest replay: a later replay of the
-- same delivery counts it instead.
SELECT coalesce(sum(d.state = 'delivered'), 0), coalesce(sum(d.state = 'dead'), 0)
FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.replay_seq = ?1
  AND NOT EXISTS (SELECT 1 FROM replay_items later
                  WHERE later.delivery_seq = ri.delivery_seq AND later.replay_seq > ri.replay_seq);
