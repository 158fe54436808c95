//! PostgreSQL migrations, applied in one transaction and serialized across every process that
//! starts at the same moment by a transaction-scoped advisory lock. The 0.1.0 baseline is
//! recorded in `hookline_migrations` (which 0.1.0 reads); later ones in `hookline_schema`, by the
//! rules in `crate::migrations`.
//!
//! No migration may hold a long lock on a busy table: columns are added nullable and without
//! a default (a catalog change), tables are new, and an index on an existing table is built
//! `CONCURRENTLY` (outside the transaction; none so far). `lock_timeout` makes a migration that
//! queues behind a long query fail and say so instead of stalling every writer behind it.

use tokio_postgres::Client;

use crate::migrations::{
    self, AppliedMigration, Migration, SchemaRecords, SchemaStatus, Version, LATER,
};
use crate::{Result, StoreError};

/// The 0.1.0 baseline: numbered 1 to 8 in `hookline_migrations`. Never edited, never appended to.
const LEGACY: &[&str] = &[
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

const RECORD_TABLES: &str = "
    CREATE TABLE IF NOT EXISTS hookline_migrations (
        version     INT PRIMARY KEY,
        applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE TABLE IF NOT EXISTS hookline_schema (
        number      INT PRIMARY KEY,
        min_binary  TEXT NOT NULL,
        description TEXT NOT NULL,
        applied_by  TEXT NOT NULL,
        applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
    )";

async fn records(c: &impl tokio_postgres::GenericClient) -> Result<SchemaRecords> {
    let exists = |table: &str| format!("SELECT to_regclass('{table}') IS NOT NULL");
    let has = |row: tokio_postgres::Row| row.get::<_, bool>(0);
    let legacy = if has(c.query_one(&exists("hookline_migrations"), &[]).await?) {
        let v: i32 = c
            .query_one(
                "SELECT coalesce(max(version), 0) FROM hookline_migrations",
                &[],
            )
            .await?
            .get(0);
        v as u32
    } else {
        0
    };
    let mut applied = Vec::new();
    if has(c.query_one(&exists("hookline_schema"), &[]).await?) {
        for r in c
            .query(
                "SELECT number, min_binary, description, applied_by FROM hookline_schema
                 ORDER BY number",
                &[],
            )
            .await?
        {
            applied.push(AppliedMigration {
                number: r.get::<_, i32>(0) as u32,
                min_binary: r.get::<_, String>(1).parse().map_err(StoreError::Invalid)?,
                description: r.get(2),
                applied_by: r.get(3),
            });
        }
    }
    Ok(SchemaRecords { legacy, applied })
}

pub(super) async fn migrate(client: &mut Client) -> Result<()> {
    // A migration that queued behind a long query (lock_timeout) or deadlocked with a worker
    // changed nothing: try again a few times before giving up.
    let mut tries = 0;
    loop {
        match apply(client, LATER).await {
            Err(e) if tries < 3 && matches!(e.sqlstate(), Some("55P03" | "40P01")) => {
                tries += 1;
                tracing::warn!(error = %e, tries, "migration could not take its locks; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            other => {
                other?;
                return backfill_origins(client).await;
            }
        }
    }
}

/// Fills in the origin of subscribers written without one: by a release before the column,
/// or by an older binary run on this schema since (a rollback, or a rolling upgrade). The
/// origin is the `url` crate's reading of the URL (`rules::origin`), which SQL cannot repeat.
async fn backfill_origins(client: &mut Client) -> Result<()> {
    let missing = client
        .query("SELECT id, url FROM subscribers WHERE origin IS NULL", &[])
        .await?;
    let (ids, origins): (Vec<String>, Vec<String>) = missing
        .iter()
        .map(|r| (r.get::<_, String>(0), crate::origin(r.get(1))))
        .unzip();
    if !ids.is_empty() {
        client
            .execute(
                "UPDATE subscribers s SET origin = x.origin
                 FROM UNNEST($1::text[], $2::text[]) AS x(id, origin)
                 WHERE s.id = x.id AND s.origin IS NULL",
                &[&ids, &origins],
            )
            .await?;
    }
    Ok(())
}

/// Applies what `known` has and the database lacks, after checking that this binary may run
/// on the schema at all.
pub(super) async fn apply(client: &mut Client, known: &[Migration]) -> Result<()> {
    let tx = client.transaction().await?;
    // Every process starting at once queues here; the first applies, the rest find it done.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.hookline.migrate'))",
        &[],
    )
    .await?;
    tx.batch_execute("SET LOCAL lock_timeout = '5s'").await?;
    tx.batch_execute(RECORD_TABLES).await?;
    let records = records(&tx).await?;
    let pending = migrations::plan(&records, known, Version::current())?;
    for (i, sql) in LEGACY.iter().enumerate().skip(records.legacy as usize) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO hookline_migrations (version) VALUES ($1)",
            &[&(i as i32 + 1)],
        )
        .await?;
    }
    let mut legacy = records.legacy.max(LEGACY.len() as u32);
    for m in pending {
        tx.batch_execute(m.postgres).await?;
        tx.execute(
            "INSERT INTO hookline_schema (number, min_binary, description, applied_by)
             VALUES ($1, $2, $3, $4)",
            &[
                &(m.number as i32),
                &m.min_binary.to_string(),
                &m.description,
                &Version::current().to_string(),
            ],
        )
        .await?;
        let next = migrations::legacy_after(legacy, m);
        if next > legacy {
            tx.execute(
                "INSERT INTO hookline_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&(next as i32)],
            )
            .await?;
            legacy = next;
        }
    }
    tx.commit().await?;
    build_indexes(client, known).await
}

/// Builds the indexes applied migrations add to existing tables, `CONCURRENTLY` (writes go
/// on meanwhile), unless they are there and valid. One process builds at a time; the others
/// wait until it is done, without holding a snapshot the build would have to wait for (they
/// only try the lock). A build interrupted by a crash leaves an invalid index: it is dropped
/// and built again.
async fn build_indexes(client: &Client, known: &[Migration]) -> Result<()> {
    const LOCK: &str = "hashtext(current_schema() || '.hookline.index')";
    let validity = async |name: &str| -> Result<Option<bool>> {
        Ok(client
            .query_one(
                "SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1))",
                &[&name],
            )
            .await?
            .get(0))
    };
    for (name, sql) in known.iter().filter_map(|m| m.postgres_index) {
        let mut waited = false;
        loop {
            if validity(name).await? == Some(true) {
                break;
            }
            let locked: bool = client
                .query_one(&format!("SELECT pg_try_advisory_lock({LOCK})"), &[])
                .await?
                .get(0);
            if !locked {
                if !waited {
                    tracing::info!(
                        index = name,
                        "waiting for another process to build an index"
                    );
                    waited = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
            tracing::info!(index = name, "building an index concurrently");
            let built = async {
                // Read again under the lock: another process may have just finished it.
                let state = validity(name).await?;
                if state == Some(true) {
                    return Ok(());
                }
                if state == Some(false) {
                    client
                        .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                        .await?;
                }
                client.batch_execute(sql).await?;
                Ok::<(), StoreError>(())
            }
            .await;
            client
                .execute(&format!("SELECT pg_advisory_unlock({LOCK})"), &[])
                .await?;
            built?;
        }
    }
    Ok(())
}

/// The schema as this binary sees it, without changing anything.
pub(super) async fn status(client: &Client) -> Result<SchemaStatus> {
    Ok(migrations::status(records(client).await?, LATER))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_baseline_is_0_1_0s() {
        assert_eq!(
            super::LEGACY.len() as u32,
            super::migrations::LEGACY_MIGRATIONS
        );
    }
}
