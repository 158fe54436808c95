//! PostgreSQL migrations: versioned, each applied once in its own transaction, serialized across
//! every process that starts at the same moment by a transaction-scoped advisory lock.

use tokio_postgres::Client;

use crate::{Result, StoreError};

const MIGRATIONS: &[&str] = &[
    r#"
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
"#,
    // 2: who published each event (API token name), so a publish-scoped token reads only its own.
    "ALTER TABLE events ADD COLUMN published_by TEXT;",
    // 3: secret rotation: the previous secret stays valid for a grace period.
    "ALTER TABLE subscribers ADD COLUMN previous_secret TEXT;
     ALTER TABLE subscribers ADD COLUMN previous_secret_until BIGINT;",
    // 4: the start of each answer, kept with its attempt.
    "ALTER TABLE attempts ADD COLUMN response_body TEXT;",
    // 5: the oldest delivery waiting for a retry, for its gauge, without a scan. Only rows
    // that failed at least once are in it, so first attempts pay nothing.
    "CREATE INDEX deliveries_retrying ON deliveries (first_seen)
         WHERE state = 'scheduled' AND attempts > 0;",
    // 6: the circuit breaker of each subscriber.
    "ALTER TABLE subscribers ADD COLUMN breaker_failures INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE subscribers ADD COLUMN breaker_open_until BIGINT;
     ALTER TABLE subscribers ADD COLUMN breaker_cool_down_ms BIGINT NOT NULL DEFAULT 0;",
    // 7: per-subscriber in-flight cap and rate limit (with the limiter's next admission).
    "ALTER TABLE subscribers ADD COLUMN max_in_flight INTEGER;
     ALTER TABLE subscribers ADD COLUMN rate_limit_per_second DOUBLE PRECISION;
     ALTER TABLE subscribers ADD COLUMN rate_next_at BIGINT;",
    // 8: claims leave rate-limited subscribers out of their scan; only those have a limiter time.
    "CREATE INDEX subscribers_rate_limited ON subscribers (rate_next_at)
         WHERE rate_next_at IS NOT NULL;",
];

pub(super) async fn migrate(client: &mut Client) -> Result<()> {
    let tx = client.transaction().await?;
    // Every process starting at once queues here; the first applies, the rest find it done.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.hookline.migrate'))",
        &[],
    )
    .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS hookline_migrations (
             version     INT PRIMARY KEY,
             applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let current: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM hookline_migrations",
            &[],
        )
        .await?
        .get(0);
    let known = MIGRATIONS.len() as i32;
    if current > known {
        return Err(StoreError::Invalid(format!(
            "database schema version {current} is newer than this hookline knows ({known}); \
             upgrade hookline"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO hookline_migrations (version) VALUES ($1)",
            &[&(i as i32 + 1)],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
