CREATE TABLE subscribers (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    url          TEXT NOT NULL,
    event_types  TEXT NOT NULL,            -- JSON array; [] matches every type
    secret       TEXT NOT NULL,
    status       TEXT NOT NULL,            -- active | paused | revoked
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);

CREATE TABLE events (
    id               TEXT PRIMARY KEY,
    type             TEXT NOT NULL,
    payload          TEXT NOT NULL,        -- canonical JSON, stored once per event
    payload_version  INTEGER NOT NULL,
    accepted_at      INTEGER NOT NULL,
    deliveries       INTEGER NOT NULL
);

-- One narrow row per event x subscriber.
CREATE TABLE deliveries (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,    -- <event id>:<subscriber id> = webhook-id
    event_id       TEXT NOT NULL,
    subscriber_id  TEXT NOT NULL,
    state          TEXT NOT NULL,           -- scheduled | in_flight | delivered | dead
    held           INTEGER NOT NULL DEFAULT 0,  -- 1 while its subscriber is paused
    attempts       INTEGER NOT NULL DEFAULT 0,
    first_seen     INTEGER NOT NULL,
    window_start   INTEGER NOT NULL,
    run_at         INTEGER,
    lease_token    INTEGER,
    lease_expires  INTEGER,
    dead_reason    TEXT,
    dead_at        INTEGER,
    updated_at     INTEGER NOT NULL
);
-- Claims read this and nothing else: due rows are at its head, future rows are never visited.
CREATE INDEX deliveries_due ON deliveries (run_at) WHERE state = 'scheduled' AND held = 0;
CREATE INDEX deliveries_lease ON deliveries (lease_expires) WHERE state = 'in_flight';
CREATE INDEX deliveries_dead ON deliveries (dead_reason, subscriber_id) WHERE state = 'dead';
CREATE INDEX deliveries_delivered ON deliveries (updated_at) WHERE state = 'delivered';
CREATE INDEX deliveries_event ON deliveries (event_id);
-- Not on state: a transition should touch as few indexes as possible.
CREATE INDEX deliveries_subscriber ON deliveries (subscriber_id);

-- Append-only history of every attempt.
CREATE TABLE attempts (
    delivery_seq  INTEGER NOT NULL,
    ordinal       INTEGER NOT NULL,
    started_at    INTEGER NOT NULL,
    duration_ms   INTEGER NOT NULL,
    outcome       TEXT NOT NULL,
    status        INTEGER,
    error         TEXT
);
CREATE INDEX attempts_delivery ON attempts (delivery_seq);

-- The audit of every replay.
CREATE TABLE replays (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    created_at     INTEGER NOT NULL,
    reason         TEXT NOT NULL,
    subscriber_id  TEXT,
    limit_n        INTEGER NOT NULL,
    per_second     REAL,
    requested_by   TEXT,
    selected       INTEGER NOT NULL
);
CREATE TABLE replay_items (
    replay_seq    INTEGER NOT NULL,
    delivery_seq  INTEGER NOT NULL,
    PRIMARY KEY (replay_seq, delivery_seq)
) WITHOUT ROWID;
CREATE INDEX replay_items_delivery ON replay_items (delivery_seq);
