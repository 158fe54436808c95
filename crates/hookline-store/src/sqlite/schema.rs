//! SQLite migrations. The 0.1.0 baseline is recorded in `PRAGMA user_version` (which 0.1.0
//! reads); later ones in `hookline_schema`, by the rules in `crate::migrations`.

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::queries;
use crate::migrations::{
    self, AppliedMigration, Migration, SchemaRecords, SchemaStatus, Version, LATER, LEGACY,
};
use crate::Result;

fn records(c: &Connection) -> Result<SchemaRecords> {
    let legacy: u32 = c.query_row(queries::LEGACY_VERSION, [], |r| r.get(0))?;
    let has_table = c
        .query_row(queries::HAS_RECORDS, [], |_| Ok(()))
        .optional()?
        .is_some();
    let mut applied = Vec::new();
    if has_table {
        let mut stmt = c.prepare(queries::APPLIED_MIGRATIONS)?;
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
/// crate's reading of the URL ([`crate::Origin::of_url`]), which SQL cannot repeat.
fn backfill_origins(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let missing = tx
        .prepare(queries::MISSING_ORIGINS)?
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (id, url) in missing {
        tx.execute(
            queries::SET_ORIGIN,
            params![id, crate::Origin::of_url(&url).as_str()],
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
    for (i, baseline) in LEGACY.iter().enumerate().skip(records.legacy as usize) {
        tracing::info!(migration = baseline.file, "applying a migration");
        tx.execute_batch(baseline.sqlite)?;
        tx.pragma_update(None, "user_version", i + 1)?;
    }
    tx.execute_batch(queries::RECORDS_TABLE)?;
    let mut legacy = records.legacy.max(crate::migrations::LEGACY_MIGRATIONS);
    for m in pending {
        tracing::info!(migration = m.file, "applying a migration");
        tx.execute_batch(m.sqlite)?;
        tx.execute(
            queries::RECORD_MIGRATION,
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
    fn the_number_0_1_0_reads_stays_at_8_and_a_contracting_fixture_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn).unwrap();
        let legacy: u32 = conn
            .query_row(queries::LEGACY_VERSION, [], |r| r.get(0))
            .unwrap();
        assert_eq!(legacy, 8, "0.1.0 must still be able to start");
        let s = status(path.to_str().unwrap()).unwrap();
        assert!(s.pending.is_empty() && s.compatible.is_ok(), "{s:?}");
        assert_eq!(s.version, LATER.last().unwrap().number);

        // A release from the future drops a column older ones read.
        let future = Migration {
            number: 99,
            file: "0099_drop_dead_error",
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
            .query_row(queries::LEGACY_VERSION, [], |r| r.get(0))
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
