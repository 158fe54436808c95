-- The database itself: the heartbeat.

-- name: HEARTBEAT
-- The write /healthz commits to prove the store takes writes.
INSERT INTO hookline_heartbeat (id, beat_at) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at;
