CREATE TABLE subscribers (
    seq          BIGSERIAL PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    url          TEXT NOT NULL,
    event_types  TEXT[] NOT NULL,          -- empty matches every type
    secret       TEXT NOT NULL,
    status       TEXT NOT NULL,            -- active | paused | revoked
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);

CREATE TABLE events (
    id               TEXT PRIMARY KEY,
    type             TEXT NOT NULL,
    payload          TEXT NOT NULL,        -- canonical JSON, stored once per event
    payload_version  BIGINT NOT NULL,
    accepted_at      BIGINT NOT NULL,
    deliveries       BIGINT NOT NULL
);

-- One narrow row per event x subscriber.
CREATE TABLE deliveries (
    seq            BIGSERIAL PRIMARY KEY,
    event_id       TEXT NOT NULL,
    subscriber_id  TEXT NOT NULL,
    -- The webhook-id. Derived, and not indexed: every update rewrites every index entry of a
    -- row, so lookups by id go through (event_id, subscriber_id) instead.
    id             TEXT NOT NULL GENERATED ALWAYS AS (event_id || ':' || subscriber_id) STORED,
    state          TEXT NOT NULL,           -- scheduled | in_flight | delivered | dead
    held           BOOLEAN NOT NULL DEFAULT FALSE,  -- true while its subscriber is paused
    attempts       INT NOT NULL DEFAULT 0,
    first_seen     BIGINT NOT NULL,
    window_start   BIGINT NOT NULL,
    run_at         BIGINT,
    lease_token    BIGINT,
    lease_owner    TEXT,
    lease_expires  BIGINT,
    dead_reason    TEXT,
    dead_at        BIGINT,
    updated_at     BIGINT NOT NULL,
    UNIQUE (event_id, subscriber_id)
);
-- Claims read this and nothing else: due rows are at its head, future rows are never visited.
CREATE INDEX deliveries_due ON deliveries (run_at) WHERE state = 'scheduled' AND NOT held;
CREATE INDEX deliveries_lease ON deliveries (lease_expires) WHERE state = 'in_flight';
-- The per-subscriber in-flight cap counts through this.
CREATE INDEX deliveries_in_flight ON deliveries (subscriber_id) WHERE state = 'in_flight';
CREATE INDEX deliveries_dead ON deliveries (dead_reason, subscriber_id) WHERE state = 'dead';
CREATE INDEX deliveries_delivered ON deliveries (updated_at) WHERE state = 'delivered';
CREATE INDEX deliveries_subscriber ON deliveries (subscriber_id);

-- Append-only history of every attempt.
CREATE TABLE attempts (
    seq           BIGSERIAL PRIMARY KEY,
    delivery_seq  BIGINT NOT NULL,
    ordinal       INT NOT NULL,
    started_at    BIGINT NOT NULL,
    duration_ms   BIGINT NOT NULL,
    outcome       TEXT NOT NULL,
    status        INT,
    error         TEXT
);
CREATE INDEX attempts_delivery ON attempts (delivery_seq);

-- The audit of every replay.
CREATE TABLE replays (
    seq            BIGSERIAL PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    created_at     BIGINT NOT NULL,
    reason         TEXT NOT NULL,
    subscriber_id  TEXT,
    limit_n        BIGINT NOT NULL,
    per_second     DOUBLE PRECISION,
    requested_by   TEXT,
    selected       BIGINT NOT NULL
);
CREATE TABLE replay_items (
    replay_seq    BIGINT NOT NULL,
    delivery_seq  BIGINT NOT NULL,
    PRIMARY KEY (replay_seq, delivery_seq)
);
CREATE INDEX replay_items_delivery ON replay_items (delivery_seq);
