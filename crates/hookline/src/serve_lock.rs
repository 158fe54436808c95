//! One serving process per SQLite file. The SQLite writer keeps counts in memory that only its
//! own writes move (deliveries in flight and waiting, per subscriber): a second process serving
//! the same file would double every subscriber's in-flight cap, and each process's counts would
//! miss the other's rows. So an app (`app::start`: `serve`, and the in-process apps of tests and
//! `capacity --measure`) takes a lock file beside the database (`<file>-serve.lock`, holding its
//! pid) for as long as it runs; the kernel lets it go when the process ends, however it ends.
//! The path is resolved first (a symlink to the database locks its target's lock file). The
//! commands that open the database beside a serving process (`migrate`, `prune`, `backup`) take
//! no lock. A `flock` on a network file system may not reach other machines: SQLite is not
//! safe there anyway.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Held while this process serves a SQLite database.
pub struct ServeLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeLockError {
    #[error(
        "another hookline process (pid {pid}, as recorded in {lock}) serves the SQLite database \
         {database}: one process serves a SQLite file at a time. Stop it and wait for it to exit \
         (SIGTERM lets its attempts finish), or use PostgreSQL to run several processes"
    )]
    Held {
        database: String,
        lock: String,
        pid: String,
    },
    #[error("cannot take the lock file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl ServeLock {
    /// Takes the lock of the SQLite database `database_url` names; `None` for PostgreSQL, which
    /// any number of processes serve.
    pub fn take(database_url: &str) -> Result<Option<Self>, ServeLockError> {
        // An empty path is the store's to refuse, with its own message.
        let Some(database) = database_url
            .strip_prefix("sqlite://")
            .filter(|path| !path.is_empty())
        else {
            return Ok(None);
        };
        let mut path = resolved(Path::new(database)).into_os_string();
        path.push("-serve.lock");
        let path = PathBuf::from(path).display().to_string();
        let io = |source| ServeLockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = match pid.trim() {
                    "" => "unknown".to_owned(),
                    pid => pid.to_owned(),
                };
                return Err(ServeLockError::Held {
                    database: database.to_owned(),
                    lock: path,
                    pid,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Some(ServeLock { _file: file }))
    }
}

/// The database's own path when it is a symlink, so every name of one file takes one lock;
/// as given when it does not exist yet (its directory is the store's to report).
fn resolved(database: &Path) -> PathBuf {
    std::fs::canonicalize(database).unwrap_or_else(|_| database.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_file_is_served_by_one_process_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("hookline.db").display());
        let first = ServeLock::take(&url)
            .unwrap()
            .expect("SQLite takes the lock");
        // A second take opens the file anew: the kernel refuses it as it would another process.
        let refused = ServeLock::take(&url).err().expect("the lock is held");
        let message = refused.to_string();
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        assert!(message.contains("hookline.db"), "{message}");
        drop(first);
        assert!(ServeLock::take(&url).unwrap().is_some(), "free once let go");
        assert!(ServeLock::take("postgres://postgres@127.0.0.1/test")
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_symlink_to_the_database_takes_the_same_lock() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hookline.db");
        std::fs::write(&file, b"").unwrap();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let _held = ServeLock::take(&format!("sqlite://{}", file.display())).unwrap();
        let through_link = ServeLock::take(&format!("sqlite://{}", link.display()));
        assert!(
            matches!(through_link, Err(ServeLockError::Held { .. })),
            "the same file under another name"
        );
    }
}
