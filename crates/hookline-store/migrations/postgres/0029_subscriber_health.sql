-- Subscriber health: how long each has been failing (the run of failed attempts since its last
-- success), why it is paused or revoked, and what its operators were last told of it
-- (`told`: NULL while nothing is to be told, else 'failing', 'disabled' or 'revoked'; `told_at`:
-- when that condition began, which names the notice), so that each change is told once,
-- whichever process sees it. Subscribers revoked before this
-- migration were never told of and are not now. `subscribers_health` (`.index.sql`) holds the
-- rows that have something to watch: those failing or told of, and the revoked not yet told of.
ALTER TABLE subscribers ADD COLUMN failing_since BIGINT;
ALTER TABLE subscribers ADD COLUMN failed_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE subscribers ADD COLUMN status_reason TEXT;
ALTER TABLE subscribers ADD COLUMN told TEXT;
ALTER TABLE subscribers ADD COLUMN told_at BIGINT;
UPDATE subscribers SET told = 'revoked', told_at = updated_at WHERE status = 'revoked';
-- When a replay was seen to have ended (every delivery it released delivered or dead again):
-- told as `replay.finished` once. Replays made before this migration are not told of.
ALTER TABLE replays ADD COLUMN finished_at BIGINT;
UPDATE replays SET finished_at = created_at;
