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

/// A migration's SQL file in each backend's directory, `migrations/<backend>/<file>`.
macro_rules! migration_file {
    ($backend:literal, $file:expr) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/migrations/",
            $backend,
            "/",
            $file
        ))
    };
}

/// One migration of the 0.1.0 baseline, in each backend's SQL.
#[derive(Debug)]
pub(crate) struct Baseline {
    /// The stem of its files: `migrations/<backend>/<file>.sql`.
    pub file: &'static str,
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

macro_rules! baseline {
    ($file:literal) => {
        Baseline {
            file: $file,
            sqlite: migration_file!("sqlite", concat!($file, ".sql")),
            postgres: migration_file!("postgres", concat!($file, ".sql")),
        }
    };
}

/// The 0.1.0 baseline: numbered 1 to 8 (`PRAGMA user_version` on SQLite, `hookline_migrations`
/// on PostgreSQL). Never edited, never appended to.
pub(crate) const LEGACY: &[Baseline] = &[
    baseline!("0001_baseline"),
    baseline!("0002_events_published_by"),
    baseline!("0003_previous_secret"),
    baseline!("0004_response_body"),
    baseline!("0005_deliveries_retrying"),
    baseline!("0006_circuit_breaker"),
    baseline!("0007_in_flight_cap_and_rate_limit"),
    baseline!("0008_subscribers_rate_limited"),
];

/// One schema change after the 0.1.0 baseline, in each backend's SQL.
#[derive(Debug)]
pub(crate) struct Migration {
    /// 9, 10, ...
    pub number: u32,
    /// The stem of its files: `migrations/<backend>/<file>.sql`, and on PostgreSQL
    /// `<file>.index.sql` for an index built after the transaction.
    pub file: &'static str,
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

/// A manifest entry: number, file stem, the oldest hookline that runs on the result, what it
/// does, and the name of the index PostgreSQL builds after it (from `<file>.index.sql`), if any.
macro_rules! migration {
    ($number:literal, $file:literal, $min_binary:expr, $description:literal) => {
        migration!(@ $number, $file, $min_binary, $description, None)
    };
    ($number:literal, $file:literal, $min_binary:expr, $description:literal, index $index:literal) => {
        migration!(@ $number, $file, $min_binary, $description,
            Some(($index, migration_file!("postgres", concat!($file, ".index.sql")))))
    };
    (@ $number:literal, $file:literal, $min_binary:expr, $description:literal, $index:expr) => {
        Migration {
            number: $number,
            file: $file,
            min_binary: $min_binary,
            description: $description,
            sqlite: migration_file!("sqlite", concat!($file, ".sql")),
            postgres: migration_file!("postgres", concat!($file, ".sql")),
            postgres_index: $index,
        }
    };
}

/// The manifest: every migration after the baseline, in order.
pub(crate) const LATER: &[Migration] = &[
    migration!(
        9,
        "0009_payload_versions",
        BASELINE,
        "payload versions per subscriber"
    ),
    migration!(
        10,
        "0010_lost_attempts",
        BASELINE,
        "lost attempts are marked, not counted as subscriber failures"
    ),
    migration!(
        11,
        "0011_window_sweep",
        BASELINE,
        "delivery windows end for deliveries that wait (window sweep)",
        index "deliveries_window"
    ),
    migration!(
        12,
        "0012_heartbeat",
        BASELINE,
        "a heartbeat row /healthz commits to prove the store takes writes"
    ),
    migration!(
        13,
        "0013_subscriber_headers",
        BASELINE,
        "per-subscriber headers sent with every attempt"
    ),
    migration!(14, "0014_policies", BASELINE, "named retry policies"),
    migration!(
        15,
        "0015_attempt_policy",
        BASELINE,
        "each attempt records the policy that decided after it"
    ),
    migration!(
        16,
        "0016_rollouts",
        BASELINE,
        "policy rollouts, one running at a time, and first attempts by policy",
        index "attempts_first"
    ),
    migration!(
        17,
        "0017_capacity_meters",
        BASELINE,
        "each process's capacity meter, summed for admission"
    ),
    migration!(
        18,
        "0018_deliveries_dead_at",
        BASELINE,
        "dead letters by the time they died, for the recent inflow",
        index "deliveries_dead_at"
    ),
    migration!(
        19,
        "0019_deliveries_dead_reason_at",
        BASELINE,
        "dead letters of one reason in the order they died, for its pages and replays",
        index "deliveries_dead_reason_at"
    ),
    migration!(
        20,
        "0020_subscriber_origin",
        BASELINE,
        "each subscriber's origin, for the cap per destination host",
        index "subscribers_origin"
    ),
    migration!(
        21,
        "0021_breaker_allowance",
        BASELINE,
        "slow start after a breaker closes: each subscriber's allowance in flight"
    ),
    migration!(
        22,
        "0022_capacity_shown",
        BASELINE,
        "what the process has shown it can do: answered attempts, and the estimate"
    ),
    migration!(
        23,
        "0023_tenants",
        BASELINE,
        "tenants: subscribers, events and replays that belong to one, quotas, portal sessions",
        index "subscribers_tenant"
    ),
    migration!(
        24,
        "0024_events_accepted",
        BASELINE,
        "events newest first, for the event search",
        index "events_accepted"
    ),
    migration!(
        25,
        "0025_deliveries_tenant",
        BASELINE,
        "each delivery's tenant, and its due rows by tenant, for the fair share of slots",
        index "deliveries_tenant_due"
    ),
    migration!(
        26,
        "0026_ordering_keys",
        BASELINE,
        "ordering keys: each event's and delivery's, and the deliveries of a key on their way",
        index "deliveries_ordering"
    ),
    migration!(
        27,
        "0027_resends",
        BASELINE,
        "resends: new deliveries of published events to one subscriber, and their audit",
        index "deliveries_event_subscriber"
    ),
    migration!(
        28,
        "0028_event_types",
        BASELINE,
        "the event type catalog: descriptions, payload schemas by version, deprecation"
    ),
    migration!(
        29,
        "0029_subscriber_health",
        BASELINE,
        "subscriber health: failing since, why paused or revoked, what operators were told",
        index "subscribers_health"
    ),
    migration!(
        30,
        "0030_event_traceparent",
        BASELINE,
        "each event's traceparent, so its attempts' spans continue the publish's trace"
    ),
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
            file: "",
            min_binary: BASELINE,
            description: "nine",
            sqlite: "",
            postgres: "",
            postgres_index: None,
        },
        Migration {
            number: 10,
            file: "",
            min_binary: BASELINE,
            description: "ten",
            sqlite: "",
            postgres: "",
            postgres_index: None,
        },
    ];

    #[test]
    fn later_migrations_are_numbered_after_the_baseline_and_no_newer_than_this_release() {
        for (m, number) in LATER.iter().zip(LEGACY_MIGRATIONS + 1..) {
            assert_eq!(m.number, number, "{}", m.description);
            assert!(m.min_binary <= Version::current(), "{}", m.description);
        }
    }

    /// Each file in `migrations/` is the manifest's, named by its number: none is left out of
    /// the manifest, and none is run under another number.
    #[test]
    fn the_manifest_names_every_migration_file_by_its_number() {
        assert_eq!(u32::try_from(LEGACY.len()), Ok(LEGACY_MIGRATIONS));
        let numbered = LEGACY
            .iter()
            .zip(1..)
            .map(|(b, number)| (number, b.file))
            .chain(LATER.iter().map(|m| (m.number, m.file)));
        let mut sqlite = Vec::new();
        let mut postgres = Vec::new();
        for (number, file) in numbered {
            assert!(
                file.starts_with(&format!("{number:04}_")),
                "{number}: {file}"
            );
            sqlite.push(format!("{file}.sql"));
            postgres.push(format!("{file}.sql"));
        }
        postgres.extend(
            LATER
                .iter()
                .filter(|m| m.postgres_index.is_some())
                .map(|m| format!("{}.index.sql", m.file)),
        );
        for (backend, mut listed) in [("sqlite", sqlite), ("postgres", postgres)] {
            let dir = format!("{}/migrations/{backend}", env!("CARGO_MANIFEST_DIR"));
            let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            on_disk.sort();
            listed.sort();
            assert_eq!(on_disk, listed, "{dir}");
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
            file: "",
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
