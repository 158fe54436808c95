CREATE TABLE rollouts (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    policy          TEXT NOT NULL,
    baseline        TEXT NOT NULL,
    basis_points    INTEGER NOT NULL,
    subscriber_ids  TEXT NOT NULL,   -- JSON array
    abort_terminal_rate_increase REAL,
    abort_min_deliveries INTEGER,
    state           TEXT NOT NULL,
    reason          TEXT,
    started_at      INTEGER NOT NULL,
    ended_at        INTEGER,
    created_by      TEXT
);
CREATE UNIQUE INDEX rollouts_running ON rollouts (state) WHERE state = 'running';
CREATE INDEX attempts_first ON attempts (policy, started_at) WHERE ordinal = 1;
