//! SQLite migrations, applied in order and recorded in `PRAGMA user_version`.

use rusqlite::Connection;

use crate::{Result, StoreError};

const MIGRATIONS: &[&str] = &[
    r#"
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
     ALTER TABLE subscribers ADD COLUMN rate_limit_per_second REAL;
     ALTER TABLE subscribers ADD COLUMN rate_next_at BIGINT;",
    // 8: claims leave rate-limited subscribers out of their scan; only those have a limiter time.
    "CREATE INDEX subscribers_rate_limited ON subscribers (rate_next_at)
         WHERE rate_next_at IS NOT NULL;",
];

pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
    let current: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > MIGRATIONS.len() {
        return Err(StoreError::Invalid(format!(
            "database schema version {current} is newer than this hookline knows ({}); \
             upgrade hookline",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
    }
    tx.commit()?;
    Ok(())
}
