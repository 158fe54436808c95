CREATE TABLE rollouts (
    seq             BIGSERIAL PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    policy          TEXT NOT NULL,
    baseline        TEXT NOT NULL,
    basis_points    INTEGER NOT NULL,
    subscriber_ids  TEXT NOT NULL, -- JSON array
    abort_terminal_rate_increase DOUBLE PRECISION,
    abort_min_deliveries BIGINT,
    state           TEXT NOT NULL,
    reason          TEXT,
    started_at      BIGINT NOT NULL,
    ended_at        BIGINT,
    created_by      TEXT
);
CREATE UNIQUE INDEX rollouts_running ON rollouts (state)
    WHERE state = 'running';
