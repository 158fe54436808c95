//! Which hookline may run on which schema: expand, then contract.
//!
//! A rollback must find yesterday's delayed rows readable, so within a release line the schema
//! only grows (new tables, nullable columns, indexes) and every migration records the oldest
//! hookline that can still run on the schema it produces. A binary starts on a newer schema
//! when its own version is at least that, and refuses otherwise, naming both versions.
//!
//! hookline 0.1.0 knows only "refuse a schema numbered above 8" (`PRAGMA user_version` on
//! SQLite, `hookline_migrations` on PostgreSQL). That number stays at 8 while every change is
//! one 0.1.0 can run on; later migrations are recorded in `hookline_schema` instead. A
//! migration 0.1.0 cannot run on raises the old number to [`LEGACY_CLOSED`], so 0.1.0 refuses.
//! The backends only run the SQL and keep the records; every decision is made here.

use std::fmt;
use std::str::FromStr;

use crate::{Result, StoreError};

/// A hookline release: `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    /// The hookline this is.
    pub fn current() -> Version {
        env!("CARGO_PKG_VERSION")
            .parse()
            .expect("the package version is major.minor.patch")
    }
}

impl FromStr for Version {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let parts: Vec<&str> = s.trim_start_matches('v').split('.').collect();
        let number = |p: &str| p.parse::<u32>().ok();
        match parts.as_slice() {
            [major, minor, patch] => match (number(major), number(minor), number(patch)) {
                (Some(major), Some(minor), Some(patch)) => Ok(Version {
                    major,
                    minor,
                    patch,
                }),
                _ => Err(format!("{s:?} is not a version (major.minor.patch)")),
            },
            _ => Err(format!("{s:?} is not a version (major.minor.patch)")),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The schema number hookline 0.1.0 knows: its eight migrations.
pub const LEGACY_MIGRATIONS: u32 = 8;
/// The old number once a migration 0.1.0 cannot run on is applied: above 8, so 0.1.0 refuses.
pub const LEGACY_CLOSED: u32 = LEGACY_MIGRATIONS + 1;
/// The release whose schema the legacy migrations produce.
pub const BASELINE: Version = Version {
    major: 0,
    minor: 1,
    patch: 0,
};

/// One schema change after the 0.1.0 baseline, in each backend's SQL.
#[derive(Debug)]
pub(crate) struct Migration {
    /// 9, 10, ...
    pub number: u32,
    /// The oldest hookline that can run on the schema this migration produces. An additive
    /// change keeps it at the baseline; dropping, renaming or retyping something an older
    /// release reads raises it to the release that stopped reading it.
    pub min_binary: Version,
    pub description: &'static str,
    pub sqlite: &'static str,
    /// Run in one transaction with a short `lock_timeout`: only catalog changes (nullable
    /// columns without defaults, new tables), never a table rewrite or a locking index build.
    pub postgres: &'static str,
    /// An index on an existing table: `(name, CREATE INDEX CONCURRENTLY IF NOT EXISTS ...)`,
    /// built after the transaction without blocking writes (and rebuilt by the next start if
    /// a build was interrupted).
    pub postgres_index: Option<(&'static str, &'static str)>,
}

/// Every migration after the baseline, in order.
pub(crate) const LATER: &[Migration] = &[
    Migration {
        number: 9,
        min_binary: BASELINE,
        description: "payload versions per subscriber",
        sqlite: "CREATE TABLE event_payloads (
                     event_id  TEXT NOT NULL,
                     version   INTEGER NOT NULL,
                     payload   TEXT NOT NULL,   -- canonical JSON of a version below the latest
                     PRIMARY KEY (event_id, version)
                 ) WITHOUT ROWID;
                 ALTER TABLE events ADD COLUMN unversioned INTEGER;
                 ALTER TABLE subscribers ADD COLUMN payload_version INTEGER;
                 ALTER TABLE deliveries ADD COLUMN payload_version INTEGER;
                 ALTER TABLE deliveries ADD COLUMN dead_error TEXT;",
        postgres_index: None,
        postgres: "CREATE TABLE event_payloads (
                       event_id  TEXT NOT NULL,
                       version   BIGINT NOT NULL,
                       payload   TEXT NOT NULL, -- canonical JSON of a version below the latest
                       PRIMARY KEY (event_id, version)
                   );
                   ALTER TABLE events ADD COLUMN unversioned BIGINT;
                   ALTER TABLE subscribers ADD COLUMN payload_version BIGINT;
                   ALTER TABLE deliveries ADD COLUMN payload_version BIGINT;
                   ALTER TABLE deliveries ADD COLUMN dead_error TEXT;",
    },
    Migration {
        number: 10,
        min_binary: BASELINE,
        description: "lost attempts are marked, not counted as subscriber failures",
        sqlite: "ALTER TABLE attempts ADD COLUMN lost BOOLEAN;",
        postgres: "ALTER TABLE attempts ADD COLUMN lost BOOLEAN;",
        postgres_index: None,
    },
    Migration {
        number: 11,
        min_binary: BASELINE,
        description: "delivery windows end for deliveries that wait (window sweep)",
        sqlite: "ALTER TABLE deliveries ADD COLUMN waiting_on TEXT;
                 CREATE INDEX deliveries_window ON deliveries (window_start)
                     WHERE state = 'scheduled';",
        postgres: "ALTER TABLE deliveries ADD COLUMN waiting_on TEXT;",
        postgres_index: Some((
            "deliveries_window",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_window ON deliveries (window_start)
                 WHERE state = 'scheduled'",
        )),
    },
    Migration {
        number: 12,
        min_binary: BASELINE,
        description: "a heartbeat row /healthz commits to prove the store takes writes",
        sqlite: "CREATE TABLE hookline_heartbeat (
                     id       INTEGER PRIMARY KEY CHECK (id = 1),
                     beat_at  INTEGER NOT NULL
                 );",
        postgres: "CREATE TABLE hookline_heartbeat (
                       id       INTEGER PRIMARY KEY CHECK (id = 1),
                       beat_at  BIGINT NOT NULL
                   );",
        postgres_index: None,
    },
    Migration {
        number: 13,
        min_binary: BASELINE,
        description: "per-subscriber headers sent with every attempt",
        sqlite:
            "ALTER TABLE subscribers ADD COLUMN headers TEXT; -- JSON object, kept like a secret",
        postgres:
            "ALTER TABLE subscribers ADD COLUMN headers TEXT; -- JSON object, kept like a secret",
        postgres_index: None,
    },
    Migration {
        number: 14,
        min_binary: BASELINE,
        description: "named retry policies",
        sqlite: "CREATE TABLE policies (
                     seq         INTEGER PRIMARY KEY AUTOINCREMENT,
                     name        TEXT NOT NULL UNIQUE,
                     definition  TEXT NOT NULL,   -- the JSON the API accepted
                     created_at  INTEGER NOT NULL,
                     created_by  TEXT
                 );",
        postgres: "CREATE TABLE policies (
                       seq         BIGSERIAL PRIMARY KEY,
                       name        TEXT NOT NULL UNIQUE,
                       definition  TEXT NOT NULL, -- the JSON the API accepted
                       created_at  BIGINT NOT NULL,
                       created_by  TEXT
                   );",
        postgres_index: None,
    },
    Migration {
        number: 15,
        min_binary: BASELINE,
        description: "each attempt records the policy that decided after it",
        sqlite: "ALTER TABLE attempts ADD COLUMN policy TEXT;",
        postgres: "ALTER TABLE attempts ADD COLUMN policy TEXT;",
        postgres_index: None,
    },
    Migration {
        number: 16,
        min_binary: BASELINE,
        description: "policy rollouts, one running at a time, and first attempts by policy",
        sqlite: "CREATE TABLE rollouts (
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
                 CREATE INDEX attempts_first ON attempts (policy, started_at) WHERE ordinal = 1;",
        postgres: "CREATE TABLE rollouts (
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
                       WHERE state = 'running';",
        postgres_index: Some((
            "attempts_first",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS attempts_first ON attempts (policy, started_at)
                 WHERE ordinal = 1",
        )),
    },
    Migration {
        number: 17,
        min_binary: BASELINE,
        description: "each process's capacity meter, summed for admission",
        sqlite: "CREATE TABLE capacity_meters (
                     owner              TEXT PRIMARY KEY,
                     measured_at        INTEGER NOT NULL,
                     new_attempts       INTEGER NOT NULL,
                     retry_attempts     INTEGER NOT NULL,
                     failed_attempts    INTEGER NOT NULL,
                     busy_slot_samples  INTEGER NOT NULL,
                     slot_samples       INTEGER NOT NULL
                 );",
        postgres: "CREATE TABLE capacity_meters (
                       owner              TEXT PRIMARY KEY,
                       measured_at        BIGINT NOT NULL,
                       new_attempts       BIGINT NOT NULL,
                       retry_attempts     BIGINT NOT NULL,
                       failed_attempts    BIGINT NOT NULL,
                       busy_slot_samples  BIGINT NOT NULL,
                       slot_samples       BIGINT NOT NULL
                   );",
        postgres_index: None,
    },
    Migration {
        number: 18,
        min_binary: BASELINE,
        description: "dead letters by the time they died, for the recent inflow",
        sqlite: "CREATE INDEX deliveries_dead_at ON deliveries (dead_at) WHERE state = 'dead';",
        postgres: "",
        postgres_index: Some((
            "deliveries_dead_at",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_dead_at ON deliveries (dead_at)
                 WHERE state = 'dead'",
        )),
    },
    Migration {
        number: 19,
        min_binary: BASELINE,
        description: "dead letters of one reason in the order they died, for its pages and replays",
        sqlite: "CREATE INDEX deliveries_dead_reason_at ON deliveries (dead_reason, dead_at)
                     WHERE state = 'dead';",
        postgres: "",
        postgres_index: Some((
            "deliveries_dead_reason_at",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_dead_reason_at
                 ON deliveries (dead_reason, dead_at, seq) WHERE state = 'dead'",
        )),
    },
    Migration {
        number: 20,
        min_binary: BASELINE,
        description: "each subscriber's origin, for the cap per destination host",
        // Filled in by the binary (`rules::origin`, the `url` crate's reading of the URL), at
        // every start for rows an older binary wrote: SQL has no URL parser to agree with it.
        sqlite: "ALTER TABLE subscribers ADD COLUMN origin TEXT;
                 CREATE INDEX subscribers_origin ON subscribers (origin);",
        postgres: "ALTER TABLE subscribers ADD COLUMN origin TEXT;",
        postgres_index: Some((
            "subscribers_origin",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS subscribers_origin ON subscribers (origin)",
        )),
    },
    Migration {
        number: 21,
        min_binary: BASELINE,
        description: "slow start after a breaker closes: each subscriber's allowance in flight",
        // NULL: not ramping. An older binary neither reads nor writes it: it closes a breaker
        // to the full cap, as it always did, and an allowance it leaves behind is ended by the
        // next claim that finds it at the cap, or started over by the next close.
        sqlite: "ALTER TABLE subscribers ADD COLUMN breaker_allowance INTEGER;",
        postgres: "ALTER TABLE subscribers ADD COLUMN breaker_allowance INTEGER;",
        postgres_index: None,
    },
    Migration {
        number: 22,
        min_binary: BASELINE,
        description: "what the process has shown it can do: answered attempts, and the estimate",
        // NULL in a meter an older binary records: it reads as nothing answered, which never
        // lowers the estimate (only a saturated window does).
        sqlite: "ALTER TABLE capacity_meters ADD COLUMN answered_attempts INTEGER;
                 ALTER TABLE capacity_meters ADD COLUMN held_slot_samples INTEGER;
                 CREATE TABLE capacity_shown (
                     id           INTEGER PRIMARY KEY CHECK (id = 1),
                     per_s        REAL NOT NULL,
                     evidence     TEXT NOT NULL,
                     measured_at  INTEGER NOT NULL
                 );",
        postgres: "ALTER TABLE capacity_meters ADD COLUMN answered_attempts BIGINT;
                   ALTER TABLE capacity_meters ADD COLUMN held_slot_samples BIGINT;
                   CREATE TABLE capacity_shown (
                       id           INTEGER PRIMARY KEY CHECK (id = 1),
                       per_s        DOUBLE PRECISION NOT NULL,
                       evidence     TEXT NOT NULL,
                       measured_at  BIGINT NOT NULL
                   );",
        postgres_index: None,
    },
];

/// A migration as the database records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    pub number: u32,
    pub min_binary: Version,
    pub description: String,
    /// The hookline version that applied it.
    pub applied_by: String,
}

/// What `hookline migrate --status` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaStatus {
    /// The highest migration applied (0 for an empty database).
    pub version: u32,
    /// The oldest hookline that can run on this schema.
    pub min_binary: Version,
    /// Migrations after the baseline that are applied, in order.
    pub applied: Vec<AppliedMigration>,
    /// Migrations this binary knows and would apply: `(number, description)`.
    pub pending: Vec<(u32, String)>,
    /// Whether this binary may run on the schema as it is (after applying `pending`).
    pub compatible: Result<(), String>,
}

/// What a backend reads before migrating: the old number and the later records.
pub(crate) struct SchemaRecords {
    pub legacy: u32,
    pub applied: Vec<AppliedMigration>,
}

/// What to do with a schema: the migrations to apply, or why this binary must not run on it.
pub(crate) fn plan<'m>(
    records: &SchemaRecords,
    known: &'m [Migration],
    binary: Version,
) -> Result<Vec<&'m Migration>> {
    if records.legacy > LEGACY_CLOSED {
        return Err(StoreError::Invalid(format!(
            "database schema version {} is newer than this hookline knows; upgrade hookline \
             (this is {binary})",
            records.legacy
        )));
    }
    let needed = records
        .applied
        .iter()
        .map(|m| m.min_binary)
        .max()
        .unwrap_or(BASELINE);
    if needed > binary {
        let newest = records.applied.iter().map(|m| m.number).max().unwrap_or(0);
        return Err(StoreError::Invalid(format!(
            "database schema version {newest} needs hookline {needed} or later; this is hookline \
             {binary}. Run hookline {needed} or later on this database, or restore the backup \
             taken before the upgrade (docs/RUNBOOK.md, \"Rolling back a release\")"
        )));
    }
    Ok(known
        .iter()
        .filter(|m| !records.applied.iter().any(|a| a.number == m.number))
        .collect())
}

/// The legacy number to write after applying `m`: unchanged while 0.1.0 can still run.
pub(crate) fn legacy_after(current: u32, m: &Migration) -> u32 {
    if m.min_binary > BASELINE {
        current.max(LEGACY_CLOSED)
    } else {
        current
    }
}

/// The status of a schema as this binary sees it.
pub(crate) fn status(records: SchemaRecords, known: &[Migration]) -> SchemaStatus {
    let binary = Version::current();
    let planned = plan(&records, known, binary);
    let mut pending: Vec<(u32, String)> = (records.legacy.min(LEGACY_MIGRATIONS)
        ..LEGACY_MIGRATIONS)
        .map(|n| (n + 1, "0.1.0 baseline".to_owned()))
        .collect();
    if let Ok(later) = &planned {
        pending.extend(later.iter().map(|m| (m.number, m.description.to_owned())));
    }
    let version = records
        .applied
        .iter()
        .map(|m| m.number)
        .max()
        .unwrap_or(records.legacy.min(LEGACY_MIGRATIONS));
    SchemaStatus {
        version,
        min_binary: records
            .applied
            .iter()
            .map(|m| m.min_binary)
            .max()
            .unwrap_or(BASELINE),
        applied: records.applied,
        pending,
        compatible: planned.map(|_| ()).map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    fn applied(number: u32, min_binary: &str) -> AppliedMigration {
        AppliedMigration {
            number,
            min_binary: v(min_binary),
            description: format!("m{number}"),
            applied_by: "0.2.0".into(),
        }
    }

    const KNOWN: &[Migration] = &[
        Migration {
            number: 9,
            min_binary: BASELINE,
            description: "nine",
            sqlite: "",
            postgres: "",
            postgres_index: None,
        },
        Migration {
            number: 10,
            min_binary: BASELINE,
            description: "ten",
            sqlite: "",
            postgres: "",
            postgres_index: None,
        },
    ];

    #[test]
    fn later_migrations_are_numbered_after_the_baseline_and_no_newer_than_this_release() {
        for (i, m) in LATER.iter().enumerate() {
            assert_eq!(
                m.number,
                LEGACY_MIGRATIONS + 1 + i as u32,
                "{}",
                m.description
            );
            assert!(m.min_binary <= Version::current(), "{}", m.description);
        }
    }

    #[test]
    fn versions_parse_compare_and_print() {
        assert!(v("0.10.0") > v("0.9.3"));
        assert!(v("1.0.0") > v("0.99.99"));
        assert_eq!(v("v0.1.0"), BASELINE);
        assert_eq!(v("0.2.1").to_string(), "0.2.1");
        assert!("0.1".parse::<Version>().is_err());
        assert!("a.b.c".parse::<Version>().is_err());
        assert!(Version::current() >= BASELINE);
    }

    #[test]
    fn a_fresh_or_older_schema_gets_what_it_lacks() {
        let records = SchemaRecords {
            legacy: 8,
            applied: vec![applied(9, "0.1.0")],
        };
        let planned = plan(&records, KNOWN, v("0.2.0")).unwrap();
        assert_eq!(planned.iter().map(|m| m.number).collect::<Vec<_>>(), [10]);
    }

    #[test]
    fn an_older_binary_runs_on_an_additive_newer_schema() {
        let records = SchemaRecords {
            legacy: 8,
            applied: vec![
                applied(9, "0.1.0"),
                applied(10, "0.1.0"),
                applied(11, "0.1.0"),
            ],
        };
        assert!(plan(&records, &KNOWN[..1], v("0.2.0")).unwrap().is_empty());
    }

    #[test]
    fn an_incompatible_schema_is_refused_naming_both_versions() {
        let records = SchemaRecords {
            legacy: LEGACY_CLOSED,
            applied: vec![applied(9, "0.1.0"), applied(12, "0.4.0")],
        };
        let e = plan(&records, KNOWN, v("0.3.2")).unwrap_err().to_string();
        assert!(e.contains("needs hookline 0.4.0 or later"), "{e}");
        assert!(e.contains("this is hookline 0.3.2"), "{e}");
        assert!(plan(&records, KNOWN, v("0.4.0")).is_ok());
        let future = SchemaRecords {
            legacy: LEGACY_CLOSED + 1,
            applied: vec![],
        };
        assert!(plan(&future, KNOWN, v("9.0.0")).is_err());
    }

    #[test]
    fn only_a_contracting_migration_closes_the_door_to_0_1_0() {
        assert_eq!(legacy_after(8, &KNOWN[0]), 8);
        let contract = Migration {
            number: 11,
            min_binary: v("0.3.0"),
            description: "drop a column 0.1.0 reads",
            sqlite: "",
            postgres: "",
            postgres_index: None,
        };
        assert_eq!(legacy_after(8, &contract), LEGACY_CLOSED);
        assert_eq!(legacy_after(LEGACY_CLOSED, &KNOWN[0]), LEGACY_CLOSED);
    }

    #[test]
    fn status_names_pending_and_the_oldest_compatible_binary() {
        let s = status(
            SchemaRecords {
                legacy: 8,
                applied: vec![applied(9, "0.1.0")],
            },
            KNOWN,
        );
        assert_eq!(s.version, 9);
        assert_eq!(s.min_binary, BASELINE);
        assert_eq!(s.pending, vec![(10, "ten".to_owned())]);
        assert!(s.compatible.is_ok());
        let empty = status(
            SchemaRecords {
                legacy: 0,
                applied: vec![],
            },
            KNOWN,
        );
        assert_eq!(empty.version, 0);
        assert_eq!(empty.pending.len(), 10);
    }
}
