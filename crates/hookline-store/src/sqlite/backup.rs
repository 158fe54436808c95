//! Backups of the embedded store: `VACUUM INTO` takes a consistent copy from a read
//! transaction, so it runs beside a serving hookline; a restore copies a backup in with
//! SQLite's backup API while holding the destination exclusively, so it cannot overwrite a
//! store that anything has open.

use std::path::Path;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::{queries, schema};
use crate::migrations::Version;
use crate::{BackupSummary, DeliveryState, Result, StateCounts, StoreError};

fn invalid(message: String) -> StoreError {
    StoreError::Invalid(message)
}

/// Opens an existing hookline database read-only, refusing files that are not one.
fn open_existing(path: &Path, what: &str) -> Result<Connection> {
    if !path.is_file() {
        return Err(invalid(format!("{what} {} does not exist", path.display())));
    }
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| invalid(format!("{what} {}: {e}", path.display())))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let is_hookline = conn
        .query_row(queries::HOOKLINE_TABLES, [], |r| r.get::<_, i64>(0))
        .map_err(|e| {
            invalid(format!(
                "{what} {} is not a SQLite database: {e}",
                path.display()
            ))
        })?;
    if is_hookline != 3 {
        return Err(invalid(format!(
            "{what} {} is not a hookline database",
            path.display()
        )));
    }
    Ok(conn)
}

fn summary(c: &Connection, path: &Path) -> Result<BackupSummary> {
    let mut counts = StateCounts::default();
    let mut stmt = c.prepare(queries::STATE_TOTALS)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let state: String = r.get(0)?;
        if let Some(state) = DeliveryState::parse(&state) {
            counts.add(state, r.get(1)?);
        }
    }
    Ok(BackupSummary {
        bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        schema_version: schema::status_of(c)?.version,
        events: c.query_row(queries::EVENT_TOTAL, [], |r| r.get(0))?,
        counts,
    })
}

pub(crate) fn backup(path: &str, to: &Path) -> Result<BackupSummary> {
    if to.exists() {
        return Err(invalid(format!(
            "{} already exists; a backup never overwrites a file",
            to.display()
        )));
    }
    let target = to
        .to_str()
        .ok_or_else(|| invalid(format!("{} is not a UTF-8 path", to.display())))?;
    let conn = open_existing(Path::new(path), "database")?;
    conn.execute(queries::BACKUP_INTO, [target])
        .map_err(|e| invalid(format!("cannot write the backup to {}: {e}", to.display())))?;
    // VACUUM INTO does not sync what it wrote: a backup must survive a power cut too.
    let synced = std::fs::File::open(to)
        .and_then(|f| f.sync_all())
        .and_then(|()| {
            let dir = to.parent().filter(|d| !d.as_os_str().is_empty());
            std::fs::File::open(dir.unwrap_or(Path::new("."))).and_then(|d| d.sync_all())
        });
    synced.map_err(|e| invalid(format!("cannot sync the backup {}: {e}", to.display())))?;
    summary(&open_existing(to, "backup")?, to)
}

pub(crate) fn restore(from: &Path, path: &str) -> Result<BackupSummary> {
    let source = open_existing(from, "backup")?;
    let check: String = source.query_row(queries::QUICK_CHECK, [], |r| r.get(0))?;
    if check != "ok" {
        return Err(invalid(format!(
            "backup {} is damaged ({check}); nothing was restored",
            from.display()
        )));
    }
    let status = schema::status_of(&source)?;
    if let Err(why) = status.compatible {
        return Err(invalid(format!(
            "backup {} cannot be served by this hookline ({}): {why}",
            from.display(),
            Version::current()
        )));
    }
    drop(source);
    // Only a hookline store (or nothing) is replaced: a mistyped path must not overwrite
    // another program's database.
    let existing = Path::new(path);
    if existing.is_file() && std::fs::metadata(existing).map(|m| m.len()).unwrap_or(0) > 0 {
        open_existing(existing, "database")?;
    }
    let mut target =
        Connection::open(path).map_err(|e| invalid(format!("database {path:?}: {e}")))?;
    // Exclusive locking makes the first read take the file for this connection alone; any
    // other connection (a serving hookline keeps its own open) makes that fail at once.
    target.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    let taken =
        target.execute_batch("BEGIN EXCLUSIVE; SELECT count(*) FROM sqlite_master; COMMIT;");
    if let Err(rusqlite::Error::SqliteFailure(e, _)) = &taken {
        if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) {
            return Err(StoreError::Conflict(format!(
                "database {path:?} is in use (is hookline running on it?); stop it, then restore"
            )));
        }
    }
    taken?;
    target
        .restore(
            rusqlite::MAIN_DB,
            from,
            None::<fn(rusqlite::backup::Progress)>,
        )
        .map_err(|e| invalid(format!("restoring {} into {path:?}: {e}", from.display())))?;
    summary(&target, Path::new(path))
}
