//! One serving process per SQLite file. The SQLite writer keeps in memory what only its own
//! writes move (deliveries waiting per subscriber, the subscriber rows claims read): a second
//! process serving the same file would change rows behind them, so that claims skip waiting
//! rows and decide on a subscriber's old status and breaker. Worse, two names of one file (a
//! hard link) have a WAL each, and two processes writing through both corrupt it.
//!
//! So a serving store (`OpenOptions::serving`: `serve`, and the in-process apps of tests and
//! `capacity --measure`) takes an exclusive `flock` on the database file itself before it opens
//! any connection, and holds it until its last connection is closed: the lock belongs to the
//! file, not to a name, so a hard link or a symlink to it meets the same lock. The kernel lets
//! it go when the process ends, however it ends. The commands that open the database beside a
//! serving process (`migrate`, `prune`, `backup`) take none.
//!
//! SQLite locks the same file with POSIX (`fcntl`) locks, which `flock` does not touch; but
//! closing *any* descriptor of a file drops every POSIX lock the process holds on it. So the
//! descriptor stays open while any of the store's connections is (`SqliteStore` shares it with
//! the writer, the checkpointer and the readers, each letting go after its connection), and a
//! refused open closes its descriptor only when no store of this process serves the file.
//!
//! A `flock` on a network file system may not reach other machines: SQLite is not safe there
//! anyway.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::StoreError;

/// A file's identity, whatever its name: device and inode.
type Identity = (u64, u64);

/// The files stores of this process serve, with how many of their locks are not yet dropped. A
/// store being closed lets its lock go once its last connection is closed, a moment after it is
/// dropped: a new store on the same file in this process (a restart in tests) waits that moment
/// rather than seeing another process. Counted, not a set: a lock that closed its file is still
/// listed until it leaves, and a new file may meanwhile get the freed inode and a lock of its
/// own, which the leaving one must not take off the list.
static SERVED: Mutex<BTreeMap<Identity, usize>> = Mutex::new(BTreeMap::new());

/// How long an open waits for this process to let a file go.
const CLOSING_PATIENCE: Duration = Duration::from_secs(5);

/// Held while this process serves a SQLite database.
pub(crate) struct ServeLock {
    /// `None` only while dropping: closed before the file leaves `SERVED`.
    file: Option<File>,
    identity: Identity,
}

impl ServeLock {
    /// Takes the lock of the SQLite file at `path` (created when missing, as SQLite would).
    pub(crate) fn take(path: &str) -> Result<Self, StoreError> {
        Self::take_within(path, CLOSING_PATIENCE)
    }

    fn take_within(path: &str, patience: Duration) -> Result<Self, StoreError> {
        let io = |e: std::io::Error| {
            StoreError::Invalid(format!(
                "database: cannot lock SQLite file {path:?} for serving: {e}"
            ))
        };
        let since = Instant::now();
        // Waited for before any descriptor of the file is opened: see the module's doc.
        if let Ok(meta) = std::fs::metadata(path) {
            let identity = (meta.dev(), meta.ino());
            while SERVED.lock().unwrap().contains_key(&identity) {
                if since.elapsed() >= patience {
                    return Err(held(path, Some(std::process::id())));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        let identity = (meta.dev(), meta.ino());
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    // Held under this process's own id (or let go before it could be read): by
                    // a child it is starting, which shares its open files until it runs its own
                    // program, when it closes them. Another process is refused at once.
                    let pid = holder(identity);
                    let ours = pid.is_none_or(|pid| pid == std::process::id());
                    if !ours || since.elapsed() >= patience {
                        return Err(held(path, pid));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        *SERVED.lock().unwrap().entry(identity).or_default() += 1;
        Ok(ServeLock {
            file: Some(file),
            identity,
        })
    }
}

impl Drop for ServeLock {
    fn drop(&mut self) {
        drop(self.file.take());
        let mut served = SERVED.lock().unwrap();
        if let Some(locks) = served.get_mut(&self.identity) {
            *locks -= 1;
            if *locks == 0 {
                served.remove(&self.identity);
            }
        }
    }
}

fn held(path: &str, pid: Option<u32>) -> StoreError {
    let pid = pid.map_or_else(|| "unknown".to_owned(), |pid| pid.to_string());
    StoreError::Invalid(format!(
        "another hookline process (pid {pid}) serves the SQLite database {path:?} (this file, \
         under this name or another: a hard link or a symlink is the same file): one process \
         serves a SQLite file at a time. Stop it and wait for it to exit (SIGTERM lets its \
         attempts finish), or use PostgreSQL to run several processes"
    ))
}

/// The process holding the `flock` on a file, from `/proc/locks` (Linux), for the message.
fn holder((dev, ino): Identity) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // glibc's encoding of a device number, as the kernel prints it: `MAJOR:MINOR:INODE`, the
    // first two in hex.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let file = format!("{major:02x}:{minor:02x}:{ino}");
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF`
        (fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&file.as_str()))
            .then(|| fields.get(4)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(path: &std::path::Path) -> String {
        match ServeLock::take_within(path.to_str().unwrap(), Duration::ZERO) {
            Err(StoreError::Invalid(message)) => message,
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("{} was locked twice", path.display()),
        }
    }

    #[test]
    fn every_name_of_a_served_file_is_refused_until_it_is_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hookline.db");
        let served = ServeLock::take(file.to_str().unwrap()).unwrap();
        let hard_link = dir.path().join("hard.db");
        std::fs::hard_link(&file, &hard_link).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let symlink = elsewhere.path().join("symlink.db");
        std::os::unix::fs::symlink(&file, &symlink).unwrap();
        for name in [&file, &hard_link, &symlink] {
            let message = refused(name);
            assert!(
                message.contains(&format!("pid {}", std::process::id())),
                "{message}"
            );
            assert!(message.contains("hard link"), "{message}");
        }
        drop(served);
        let again = ServeLock::take(hard_link.to_str().unwrap()).unwrap();
        assert!(refused(&symlink).contains("another hookline process"));
        drop(again);
    }

    /// A lock this process holds through another open file description (a child being
    /// started holds the parent's until it runs its own program) is waited for.
    #[test]
    fn a_lock_of_this_process_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hookline.db");
        let inherited = File::create(&file).unwrap();
        inherited.lock().unwrap();
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(inherited);
        });
        let taken = ServeLock::take(file.to_str().unwrap());
        letting_go.join().unwrap();
        assert!(taken.is_ok(), "{:?}", taken.err());
    }

    /// A lock that closed its file and has yet to leave the list, whose inode a new file got
    /// meanwhile, takes only itself off the list.
    #[test]
    fn a_leaving_lock_leaves_a_new_one_on_the_same_inode_listed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hookline.db");
        let new = ServeLock::take(file.to_str().unwrap()).unwrap();
        let leaving = ServeLock {
            file: None,
            identity: new.identity,
        };
        *SERVED.lock().unwrap().get_mut(&new.identity).unwrap() += 1;
        drop(leaving);
        assert!(SERVED.lock().unwrap().contains_key(&new.identity));
        let identity = new.identity;
        drop(new);
        assert!(!SERVED.lock().unwrap().contains_key(&identity));
    }

    /// The process holding the lock is named from `/proc/locks` (here this one, through
    /// another open file description, as the kernel treats another process's: refused once
    /// the patience, none here, is spent).
    #[test]
    fn a_lock_held_elsewhere_is_refused_naming_its_process() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hookline.db");
        let elsewhere = File::create(&file).unwrap();
        elsewhere.lock().unwrap();
        let message = refused(&file);
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
    }
}
