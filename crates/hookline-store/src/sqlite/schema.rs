//! SQLite migrations. The 0.1.0 baseline is recorded in `PRAGMA user_version` (which 0.1.0
//! reads); later ones in `hookline_schema`, by the rules in `crate::migrations`.

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use crate::migrations::{
    self, AppliedMigration, Migration, SchemaRecords, SchemaStatus, Version, LATER,
};
use crate::Result;

/// The 0.1.0 baseline: numbered 1 to 8 by `user_version`. Never edited, never appended to.
const LEGACY: &[&str] = &[
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

const RECORDS_TABLE: &str = "CREATE TABLE IF NOT EXISTS hookline_schema (
    number      INTEGER PRIMARY KEY,
    min_binary  TEXT NOT NULL,
    description TEXT NOT NULL,
    applied_by  TEXT NOT NULL,
    applied_at  INTEGER NOT NULL
)";

fn records(c: &Connection) -> Result<SchemaRecords> {
    let legacy: u32 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let has_table = c
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'hookline_schema'",
            [],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    let mut applied = Vec::new();
    if has_table {
        let mut stmt = c.prepare(
            "SELECT number, min_binary, description, applied_by FROM hookline_schema ORDER BY number",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let min_binary: String = r.get(1)?;
            applied.push(AppliedMigration {
                number: r.get(0)?,
                min_binary: min_binary
                    .parse::<Version>()
                    .map_err(crate::StoreError::Invalid)?,
                description: r.get(2)?,
                applied_by: r.get(3)?,
            });
        }
    }
    Ok(SchemaRecords { legacy, applied })
}

pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    apply(conn, LATER)?;
    backfill_origins(conn)
}

/// Fills in the origin of subscribers written without one: by a release before the column,
/// or by an older binary run on this schema since (a rollback). The origin is the `url`
/// crate's reading of the URL (`rules::origin`), which SQL cannot repeat.
fn backfill_origins(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let missing = tx
        .prepare("SELECT id, url FROM subscribers WHERE origin IS NULL")?
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (id, url) in missing {
        tx.execute(
            "UPDATE subscribers SET origin = ?2 WHERE id = ?1",
            params![id, crate::origin(&url)],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Applies what `known` has and the database lacks, in one exclusive transaction, after
/// checking that this binary may run on the schema at all.
pub(super) fn apply(conn: &mut Connection, known: &[Migration]) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
    let records = records(&tx)?;
    let pending = migrations::plan(&records, known, Version::current())?;
    for (i, sql) in LEGACY.iter().enumerate().skip(records.legacy as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
    }
    tx.execute_batch(RECORDS_TABLE)?;
    let mut legacy = records.legacy.max(LEGACY.len() as u32);
    for m in pending {
        tx.execute_batch(m.sqlite)?;
        tx.execute(
            "INSERT INTO hookline_schema (number, min_binary, description, applied_by, applied_at)
             VALUES (?1, ?2, ?3, ?4, CAST(unixepoch('subsec') * 1000 AS INTEGER))",
            params![
                m.number,
                m.min_binary.to_string(),
                m.description,
                Version::current().to_string()
            ],
        )?;
        legacy = migrations::legacy_after(legacy, m);
    }
    tx.pragma_update(None, "user_version", legacy)?;
    tx.commit()?;
    Ok(())
}

/// The schema of the database at `path` as this binary sees it, without changing anything.
pub(crate) fn status(path: &str) -> Result<SchemaStatus> {
    if !std::path::Path::new(path).is_file() {
        return Err(crate::StoreError::Invalid(format!(
            "database: no SQLite file at {path:?} (hookline migrate or serve creates it)"
        )));
    }
    let conn =
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| {
            crate::StoreError::Invalid(format!("database: cannot open SQLite file {path:?}: {e}"))
        })?;
    status_of(&conn)
}

pub(super) fn status_of(conn: &Connection) -> Result<SchemaStatus> {
    Ok(migrations::status(records(conn)?, LATER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_is_0_1_0s() {
        assert_eq!(LEGACY.len() as u32, migrations::LEGACY_MIGRATIONS);
    }

    #[test]
    fn the_number_0_1_0_reads_stays_at_8_and_a_contracting_fixture_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn).unwrap();
        let legacy: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(legacy, 8, "0.1.0 must still be able to start");
        let s = status(path.to_str().unwrap()).unwrap();
        assert!(s.pending.is_empty() && s.compatible.is_ok(), "{s:?}");
        assert_eq!(s.version, LATER.last().unwrap().number);

        // A release from the future drops a column older ones read.
        let future = Migration {
            number: 99,
            min_binary: "99.0.0".parse().unwrap(),
            description: "drop deliveries.dead_error",
            sqlite: "ALTER TABLE deliveries DROP COLUMN dead_error;",
            postgres: "",
            postgres_index: None,
        };
        let mut with_future: Vec<Migration> = LATER.iter().map(|m| Migration { ..*m }).collect();
        with_future.push(future);
        // Applied through the real runner (as that release would), it is recorded with its
        // minimum and closes the door to 0.1.0 too.
        apply(&mut conn, &with_future).unwrap();
        let legacy: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(legacy, migrations::LEGACY_CLOSED);
        drop(conn);
        let mut conn = Connection::open(&path).unwrap();
        let e = migrate(&mut conn).unwrap_err().to_string();
        assert!(e.contains("needs hookline 99.0.0 or later"), "{e}");
        assert!(
            e.contains(&format!("this is hookline {}", Version::current())),
            "{e}"
        );
        let s = status(path.to_str().unwrap()).unwrap();
        assert_eq!(s.min_binary.to_string(), "99.0.0");
        assert!(s.compatible.is_err());
    }
}
