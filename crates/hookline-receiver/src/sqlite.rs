//! Seen ids in the receiver's own SQLite database, recorded in the same transaction as the
//! handler's side effect.
//!
//! A claim opens `BEGIN IMMEDIATE` on a connection of its own: it holds the database's write
//! lock until it commits or is dropped, so a duplicate's claim (in this process or another)
//! waits for it, then finds the id recorded. The handler writes its side effect through
//! [`SqliteClaim::connection`], inside that transaction; [`Claim::commit`] inserts the seen row
//! and commits both, or neither. SQLite has one writer at a time, so handlers that take long
//! hold up the next delivery: keep the work inside a claim to the database writes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};

use crate::dedup::{checked_id, Claim, Claimed, DedupStore, Outcome, StoreError};
use crate::SEEN_TABLE;

/// How long a claim waits for another's write lock before failing (then the sender retries).
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

struct Pool {
    path: PathBuf,
    /// Connections with no transaction open, for the next claims.
    idle: Mutex<Vec<Connection>>,
}

impl Pool {
    fn take(&self) -> Result<Connection, rusqlite::Error> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match idle {
            Some(conn) => Ok(conn),
            None => open(&self.path),
        }
    }

    fn give_back(&self, conn: Connection) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
    }
}

fn open(path: &Path) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // WAL lets readers read while a claim is open; FULL makes a commit durable once it returns.
    conn.pragma_update(None, "journal_mode", "wal")?;
    conn.pragma_update(None, "synchronous", "full")?;
    Ok(conn)
}

/// Seen ids in the table [`SEEN_TABLE`] of a SQLite file: the receiver's own database, where
/// its side effects are written too.
#[derive(Clone)]
pub struct SqliteStore(Arc<Pool>);

impl SqliteStore {
    /// Opens (creating it if need be) the database at `path` and the seen table in it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_owned();
        let conn = open(&path)?;
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {SEEN_TABLE} (
                 id TEXT PRIMARY KEY,
                 status INTEGER NOT NULL,
                 body TEXT NOT NULL,
                 seen_at INTEGER NOT NULL DEFAULT (unixepoch())
             )"
        ))?;
        Ok(SqliteStore(Arc::new(Pool {
            path,
            idle: Mutex::new(vec![conn]),
        })))
    }
}

/// Runs a blocking database step off the async runtime's threads: a claim may wait seconds
/// for another's write lock.
async fn blocking<T: Send + 'static>(
    step: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(step)
        .await
        .map_err(|e| StoreError::Worker(e.to_string()))?
}

impl DedupStore for SqliteStore {
    type Claim = SqliteClaim;

    async fn claim(&self, id: &str) -> Result<Claimed<SqliteClaim>, StoreError> {
        let id = checked_id(id)?.to_owned();
        let pool = self.0.clone();
        blocking(move || {
            let conn = pool.take()?;
            conn.execute_batch("BEGIN IMMEDIATE")?;
            let claim = SqliteClaim {
                pool: pool.clone(),
                conn: Some(conn),
                id,
            };
            let recorded = claim
                .connection()
                .query_row(
                    &format!("SELECT status, body FROM {SEEN_TABLE} WHERE id = ?1"),
                    [&claim.id],
                    |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
                )
                .optional()?;
            match recorded {
                // Dropping the claim rolls back the (empty) transaction.
                Some((status, body)) => Ok(Claimed::Duplicate(Outcome::stored(status, body)?)),
                None => Ok(Claimed::New(claim)),
            }
        })
        .await
    }
}

/// An open claim: a connection inside `BEGIN IMMEDIATE`. Dropped without a commit, the
/// transaction is rolled back, side effect and all.
pub struct SqliteClaim {
    pool: Arc<Pool>,
    /// Taken by the commit.
    conn: Option<Connection>,
    id: String,
}

impl SqliteClaim {
    /// The connection inside the claim's transaction: write the side effect through it, and it
    /// commits with the seen row. (Do not commit or roll back through it.)
    pub fn connection(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a claim holds its connection until it ends")
    }
}

impl std::fmt::Debug for SqliteClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteClaim")
            .field("id", &Some(&self.id))
            .finish_non_exhaustive()
    }
}

impl Claim for SqliteClaim {
    async fn commit(mut self, outcome: Outcome) -> Result<Outcome, StoreError> {
        let conn = self
            .conn
            .take()
            .expect("a claim holds its connection until it ends");
        let (pool, id) = (self.pool.clone(), std::mem::take(&mut self.id));
        blocking(move || {
            let recorded = conn
                .execute(
                    &format!("INSERT INTO {SEEN_TABLE} (id, status, body) VALUES (?1, ?2, ?3)"),
                    rusqlite::params![id, outcome.status(), outcome.body()],
                )
                .and_then(|_| conn.execute_batch("COMMIT"));
            match recorded {
                Ok(()) => {
                    pool.give_back(conn);
                    Ok(outcome)
                }
                Err(e) => {
                    end_transaction(&pool, conn);
                    Err(e.into())
                }
            }
        })
        .await
    }
}

/// Rolls back whatever is open on `conn` and keeps it for the next claim; a connection that
/// cannot roll back is closed instead (SQLite rolls back what it leaves).
fn end_transaction(pool: &Pool, conn: Connection) {
    if conn.is_autocommit() || conn.execute_batch("ROLLBACK").is_ok() {
        pool.give_back(conn);
    }
}

impl Drop for SqliteClaim {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            end_transaction(&self.pool, conn);
        }
    }
}
