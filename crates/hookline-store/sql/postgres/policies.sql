-- Named retry policies and their rollouts. A policy's columns are read in `StoredPolicy`'s
-- order after the key, a rollout's in `Rollout`'s.

-- name: POLICY
SELECT seq, name, definition, created_at, created_by FROM policies WHERE name = $1;

-- name: POLICIES
-- Policies after key $1, at most $2.
SELECT seq, name, definition, created_at, created_by FROM policies
WHERE seq > $1 ORDER BY seq LIMIT $2;

-- name: INSERT_POLICY
INSERT INTO policies (name, definition, created_at, created_by) VALUES ($1, $2, $3, $4);

-- name: ROLLOUT
SELECT seq, id, policy, baseline, basis_points, subscriber_ids, abort_terminal_rate_increase,
       abort_min_deliveries, state, reason, started_at, ended_at, created_by
FROM rollouts WHERE id = $1;

-- name: ROLLOUT_FOR_UPDATE
-- ROLLOUT, its row locked for the change the transaction makes.
SELECT seq, id, policy, baseline, basis_points, subscriber_ids, abort_terminal_rate_increase,
       abort_min_deliveries, state, reason, started_at, ended_at, created_by
FROM rollouts WHERE id = $1 FOR UPDATE;

-- name: RUNNING_ROLLOUT
SELECT seq, id, policy, baseline, basis_points, subscriber_ids, abort_terminal_rate_increase,
       abort_min_deliveries, state, reason, started_at, ended_at, created_by
FROM rollouts WHERE state = 'running';

-- name: ROLLOUTS
-- Rollouts after key $1, at most $2.
SELECT seq, id, policy, baseline, basis_points, subscriber_ids, abort_terminal_rate_increase,
       abort_min_deliveries, state, reason, started_at, ended_at, created_by
FROM rollouts WHERE seq > $1 ORDER BY seq LIMIT $2;

-- name: INSERT_ROLLOUT
INSERT INTO rollouts (id, policy, baseline, basis_points, subscriber_ids,
                      abort_terminal_rate_increase, abort_min_deliveries, state, reason,
                      started_at, ended_at, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: CHANGE_ROLLOUT
-- A rollout's changes ($1 the share, $2 the state, $3 the reason, $4 when it ended, $5 the
-- id), fenced: only a running one changes.
UPDATE rollouts SET basis_points = $1, state = $2, reason = $3, ended_at = $4
WHERE id = $5 AND state = 'running';

-- name: ROLLOUTS_ONE_AT_A_TIME
-- Starts and changes run one at a time per schema, so none decides on what another is changing
-- (a start reading the policy in force while a promotion commits).
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.hookline.rollouts'));

-- name: PROMOTED_POLICY
-- The policy in force for everyone: the candidate of the rollout promoted last (none: the
-- configuration's `default`).
SELECT policy FROM rollouts WHERE state = 'promoted' ORDER BY ended_at DESC, seq DESC LIMIT 1;

-- name: COHORT_TOTALS
-- A cohort's totals: deliveries, subscribers, delivered, dead, retry attempts, retried. The
-- deliveries a cohort covers (`firsts`, also in COHORT_DEAD and COHORT_LATENCY_AT): those with
-- a first attempt policy $1 decided, started in [$2, $3), read through the `attempts_first`
-- index. A replayed delivery (a new budget, so a new first attempt) counts once, with its
-- latest such first attempt.
WITH firsts AS (
    SELECT d.subscriber_id, d.state, d.dead_reason, d.attempts,
           (SELECT max(a.started_at + a.duration_ms) FROM attempts a
            WHERE a.delivery_seq = d.seq AND a.ordinal = 1 AND a.policy = $1
              AND a.started_at >= $2 AND a.started_at < $3) - d.first_seen AS latency
    FROM deliveries d
    WHERE d.seq IN (SELECT a.delivery_seq FROM attempts a
                    WHERE a.ordinal = 1 AND a.policy = $1 AND a.started_at >= $2
                      AND a.started_at < $3))
SELECT count(*), count(DISTINCT subscriber_id),
       CAST(COALESCE(sum(CASE WHEN state = 'delivered' THEN 1 ELSE 0 END), 0) AS BIGINT),
       CAST(COALESCE(sum(CASE WHEN state = 'dead' THEN 1 ELSE 0 END), 0) AS BIGINT),
       CAST(COALESCE(sum(CASE WHEN attempts > 1 THEN attempts - 1 ELSE 0 END), 0) AS BIGINT),
       CAST(COALESCE(sum(CASE WHEN attempts > 1 THEN 1 ELSE 0 END), 0) AS BIGINT)
FROM firsts;

-- name: COHORT_DEAD
-- A cohort's dead deliveries by reason.
WITH firsts AS (
    SELECT d.subscriber_id, d.state, d.dead_reason, d.attempts,
           (SELECT max(a.started_at + a.duration_ms) FROM attempts a
            WHERE a.delivery_seq = d.seq AND a.ordinal = 1 AND a.policy = $1
              AND a.started_at >= $2 AND a.started_at < $3) - d.first_seen AS latency
    FROM deliveries d
    WHERE d.seq IN (SELECT a.delivery_seq FROM attempts a
                    WHERE a.ordinal = 1 AND a.policy = $1 AND a.started_at >= $2
                      AND a.started_at < $3))
SELECT dead_reason, count(*) FROM firsts WHERE state = 'dead' GROUP BY dead_reason;

-- name: COHORT_LATENCY_AT
-- The latency at 0-based rank $4 in a cohort.
WITH firsts AS (
    SELECT d.subscriber_id, d.state, d.dead_reason, d.attempts,
           (SELECT max(a.started_at + a.duration_ms) FROM attempts a
            WHERE a.delivery_seq = d.seq AND a.ordinal = 1 AND a.policy = $1
              AND a.started_at >= $2 AND a.started_at < $3) - d.first_seen AS latency
    FROM deliveries d
    WHERE d.seq IN (SELECT a.delivery_seq FROM attempts a
                    WHERE a.ordinal = 1 AND a.policy = $1 AND a.started_at >= $2
                      AND a.started_at < $3))
SELECT latency FROM firsts ORDER BY latency LIMIT 1 OFFSET $4;
