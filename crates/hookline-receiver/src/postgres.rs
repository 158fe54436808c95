//! Seen ids in the receiver's own PostgreSQL database, recorded in the same transaction as the
//! handler's side effect.
//!
//! A claim takes a connection from the pool, begins a transaction and inserts the id (`ON
//! CONFLICT DO NOTHING`). The primary key makes a duplicate's insert, in any process, wait
//! until the first transaction ends: committed, the duplicate reads its outcome; rolled back,
//! the duplicate's insert goes through and it runs. The handler writes its side effect through
//! [`PostgresClaim::client`], inside the transaction; [`Claim::commit`] records the outcome and
//! commits both. A claim dropped without a commit closes its connection, which rolls the
//! transaction back (a connection is never returned to the pool inside a transaction).

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::dedup::{checked_id, Claim, Claimed, DedupStore, Outcome, StoreError};
use crate::SEEN_TABLE;

/// How long a copy of a delivery waits for another copy's claim of its id.
pub const LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Seen ids in the table [`SEEN_TABLE`] of the receiver's database.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
}

impl PostgresStore {
    /// A store on a pool of at most `pool_size` connections (without TLS) to the database at
    /// `url` (`postgres://user:pass@host/db`; `?options=-c%20search_path%3Dname` for a schema).
    /// Each open claim holds one connection until it ends.
    pub async fn connect(url: &str, pool_size: usize) -> Result<Self, StoreError> {
        let config: tokio_postgres::Config = url.parse()?;
        let recycling = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = Manager::from_config(config, NoTls, recycling);
        let pool = Pool::builder(manager).max_size(pool_size.max(1)).build()?;
        Self::open(pool).await
    }

    /// A store on `pool`'s database, creating the seen table if it is not there.
    pub async fn open(pool: Pool) -> Result<Self, StoreError> {
        let client = pool.get().await?;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {SEEN_TABLE} (
                     id text PRIMARY KEY,
                     status smallint,
                     body text,
                     seen_at timestamptz NOT NULL DEFAULT now()
                 )"
            ))
            .await?;
        Ok(PostgresStore { pool })
    }
}

impl DedupStore for PostgresStore {
    type Claim = PostgresClaim;

    async fn claim(&self, id: &str) -> Result<Claimed<PostgresClaim>, StoreError> {
        let id = checked_id(id)?;
        let client = self.pool.get().await?;
        let claim = PostgresClaim {
            client: Some(client),
            id: id.to_owned(),
        };
        // A copy waits for the first copy's claim to end (its insert of the same id), but not
        // for ever: a first copy whose handler hangs holds it, and the waiting copy is better
        // answered 503 (the sender retries) than left holding a connection.
        claim
            .client()
            .batch_execute(&format!(
                "BEGIN; SET LOCAL lock_timeout = '{}s'",
                LOCK_TIMEOUT.as_secs()
            ))
            .await?;
        let inserted = claim
            .client()
            .execute(
                &format!("INSERT INTO {SEEN_TABLE} (id) VALUES ($1) ON CONFLICT (id) DO NOTHING"),
                &[&id],
            )
            .await?;
        if inserted == 1 {
            return Ok(Claimed::New(claim));
        }
        // Committed by another claim (its insert is what ours waited for): a new statement
        // reads it under READ COMMITTED.
        let row = claim
            .client()
            .query_one(
                &format!("SELECT status, body FROM {SEEN_TABLE} WHERE id = $1"),
                &[&id],
            )
            .await?;
        let (status, body): (Option<i16>, Option<String>) = (row.get(0), row.get(1));
        claim.end("ROLLBACK").await?;
        Ok(Claimed::Duplicate(Outcome::stored(
            status.map_or(-1, i64::from),
            body.unwrap_or_default(),
        )?))
    }
}

/// An open claim: a pooled connection inside a transaction holding the id's row.
pub struct PostgresClaim {
    /// Taken when the transaction ends.
    client: Option<Object>,
    id: String,
}

impl PostgresClaim {
    /// The connection inside the claim's transaction: write the side effect through it, and it
    /// commits with the seen row. (Do not commit or roll back through it.)
    pub fn client(&self) -> &tokio_postgres::Client {
        self.client
            .as_ref()
            .expect("a claim holds its connection until it ends")
    }

    /// Ends the transaction with `statement` and returns the connection to the pool.
    async fn end(mut self, statement: &str) -> Result<(), StoreError> {
        self.client().batch_execute(statement).await?;
        drop(self.client.take()); // back to the pool, outside any transaction
        Ok(())
    }
}

impl std::fmt::Debug for PostgresClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresClaim")
            .field("id", &Some(&self.id))
            .finish_non_exhaustive()
    }
}

impl Claim for PostgresClaim {
    async fn commit(self, outcome: Outcome) -> Result<Outcome, StoreError> {
        self.client()
            .execute(
                &format!("UPDATE {SEEN_TABLE} SET status = $2, body = $3 WHERE id = $1"),
                &[
                    &self.id,
                    &i16::try_from(outcome.status()).unwrap_or(i16::MAX),
                    &outcome.body(),
                ],
            )
            .await?;
        self.end("COMMIT").await?;
        Ok(outcome)
    }
}

impl Drop for PostgresClaim {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Closing the connection rolls its transaction back; it never rejoins the pool.
            drop(Object::take(client));
        }
    }
}
