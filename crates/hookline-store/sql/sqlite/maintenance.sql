-- The file itself: the heartbeat, checkpoints, backups.

-- name: HEARTBEAT
-- The write /healthz commits to prove the store takes writes.
INSERT INTO hookline_heartbeat (id, beat_at) VALUES (1, ?1)
ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at;

-- name: CHECKPOINT_PASSIVE
-- Never blocks the writer or readers; copies what it can.
PRAGMA wal_checkpoint(PASSIVE);

-- name: CHECKPOINT_TRUNCATE
-- Waits for the writer briefly, then empties the WAL.
PRAGMA wal_checkpoint(TRUNCATE);

-- name: HOOKLINE_TABLES
-- How many of hookline's main tables a file has: 3 in a hookline database.
SELECT count(*) FROM sqlite_master WHERE type = 'table'
AND name IN ('events', 'deliveries', 'subscribers');

-- name: STATE_TOTALS
SELECT state, count(*) FROM deliveries GROUP BY state;

-- name: EVENT_TOTAL
SELECT count(*) FROM events;

-- name: BACKUP_INTO
VACUUM INTO ?1;

-- name: QUICK_CHECK
PRAGMA quick_check;
