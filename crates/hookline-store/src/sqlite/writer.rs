//! Group commit. SQLite allows one writer at a time, so one thread owns the write connection and
//! runs every write job that is waiting in one transaction: a burst of publishes, claims and
//! completions costs one commit (one fsync) instead of one each. Each job runs inside its own
//! savepoint, so a job that fails (a duplicate id, say) leaves the others in the batch intact.
//! No caller hears "done" before the commit that holds its change has succeeded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use rusqlite::hooks::Action;
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::reads;
use crate::{Result, StoreError, Subscriber};

/// State only the writer thread touches.
pub(super) struct Writer {
    pub conn: Connection,
    /// Deliveries in flight per subscriber. The write connection is the only writer of the
    /// file, so this count is exact; it is rebuilt from the table at start and after a failed
    /// commit, and counts rows leased by a previous process until they are rescued.
    pub in_flight: HashMap<String, u32>,
    pub subscribers: SubscriberCache,
}

/// Subscribers as claims last read them. A claim reads the subscriber of every due row it
/// considers; in a steady run those rows do not change, and reading them again on every claim
/// was a fifth of the claim's time. Every change to the `subscribers` table through the write
/// connection (the only writer of the file, as for `in_flight`) is seen by SQLite's update hook
/// and forgets them all, as does every rollback: a row read between a change and its rollback
/// would otherwise outlive it.
pub(super) struct SubscriberCache {
    changed: Arc<AtomicBool>,
    rows: HashMap<String, Arc<Subscriber>>,
}

/// Beyond this many the cache starts over: its memory stays bounded however many subscribers
/// there are, and a claim costs at worst what it did without it.
const CACHED_SUBSCRIBERS: usize = 4_096;

impl SubscriberCache {
    fn watch(conn: &Connection) -> Self {
        let changed = Arc::new(AtomicBool::new(false));
        let seen = changed.clone();
        conn.update_hook(Some(move |_: Action, _: &str, table: &str, _: i64| {
            if table == "subscribers" {
                seen.store(true, Ordering::Relaxed);
            }
        }));
        Self {
            changed,
            rows: HashMap::new(),
        }
    }

    pub fn get(&mut self, c: &Connection, id: &str) -> Result<Arc<Subscriber>> {
        // The hook runs on this thread, inside the statement that made the change.
        if self.changed.swap(false, Ordering::Relaxed) || self.rows.len() >= CACHED_SUBSCRIBERS {
            self.rows.clear();
        }
        if let Some(found) = self.rows.get(id) {
            return Ok(found.clone());
        }
        let found = Arc::new(reads::subscriber(c, id)?);
        self.rows.insert(id.to_owned(), found.clone());
        Ok(found)
    }

    fn forget(&mut self) {
        self.rows.clear();
    }
}

type Reply = Box<dyn FnOnce(Result<()>) + Send>;
/// A job runs against the writer, or is told why the transaction could not even begin.
type Job = Box<dyn FnOnce(Result<&mut Writer>) -> Reply + Send>;

/// Largest batch of jobs per transaction: bounds how long one commit holds the first caller.
const MAX_JOBS_PER_COMMIT: usize = 512;

#[derive(Clone)]
pub(super) struct WriterHandle {
    jobs: mpsc::Sender<Job>,
}

impl WriterHandle {
    pub fn spawn(conn: Connection) -> Result<Self> {
        let mut writer = Writer {
            subscribers: SubscriberCache::watch(&conn),
            conn,
            in_flight: HashMap::new(),
        };
        writer.reload_in_flight()?;
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("hookline-sqlite-writer".into())
            .spawn(move || run(writer, rx))
            .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(Self { jobs })
    }

    /// Runs `f` in the next group transaction and answers once that transaction is committed.
    pub async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Writer) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |w: Result<&mut Writer>| {
            let result = w.and_then(|w| w.in_savepoint(f));
            Box::new(move |commit: Result<()>| {
                let _ = tx.send(commit.and(result));
            })
        });
        self.jobs.send(job).map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

impl Writer {
    /// After a rollback: what the writer keeps in memory follows the rows as they are now.
    fn reload_after_rollback(&mut self) -> Result<()> {
        self.subscribers.forget();
        self.reload_in_flight()
    }

    fn reload_in_flight(&mut self) -> Result<()> {
        let mut stmt = self.conn.prepare(
            "SELECT subscriber_id, count(*) FROM deliveries WHERE state = 'in_flight' GROUP BY 1",
        )?;
        let counts = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?)))?
            .collect::<rusqlite::Result<HashMap<_, _>>>()?;
        drop(stmt);
        self.in_flight = counts;
        Ok(())
    }

    pub fn release_slot(&mut self, subscriber_id: &str) {
        if let Some(n) = self.in_flight.get_mut(subscriber_id) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(subscriber_id);
            }
        }
    }

    /// Runs `f` so that, if it fails, what it changed is undone and the rest of the batch (or
    /// of the job it is part of: savepoints nest) stands.
    pub fn in_savepoint<T>(&mut self, f: impl FnOnce(&mut Writer) -> Result<T>) -> Result<T> {
        self.conn.execute_batch("SAVEPOINT job")?;
        let result = f(self);
        if result.is_ok() {
            self.conn.execute_batch("RELEASE job")?;
        } else {
            self.conn.execute_batch("ROLLBACK TO job; RELEASE job")?;
            // It may have counted slots taken or freed, or read subscribers it changed, before
            // it failed.
            self.reload_after_rollback()?;
        }
        result
    }
}

fn run(mut writer: Writer, jobs: mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_JOBS_PER_COMMIT {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let commit = run_batch(&mut writer, batch);
        if commit.is_err() {
            // The in-memory state followed jobs whose changes were just rolled back.
            if let Err(e) = writer.reload_after_rollback() {
                tracing::error!(error = %e, "cannot rebuild in-flight counts after a failed commit");
            }
        }
    }
}

fn run_batch(writer: &mut Writer, batch: Vec<Job>) -> Result<()> {
    if let Err(e) = writer.conn.execute_batch("BEGIN IMMEDIATE") {
        let e = StoreError::from(e);
        for job in batch {
            job(Err(e.clone()))(Err(e.clone()));
        }
        return Err(e);
    }
    let replies: Vec<Reply> = batch.into_iter().map(|job| job(Ok(writer))).collect();
    let commit = writer
        .conn
        .execute_batch("COMMIT")
        .map_err(StoreError::from);
    if commit.is_err() {
        let _ = writer.conn.execute_batch("ROLLBACK");
    }
    for reply in replies {
        reply(commit.clone());
    }
    commit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer() -> Writer {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        conn.execute(
            "INSERT INTO subscribers (id, url, event_types, secret, status, created_at, updated_at)
             VALUES ('a', 'https://one.example/hook', '[]', 'whsec_c2VjcmV0', 'active', 0, 0)",
            [],
        )
        .unwrap();
        Writer {
            subscribers: SubscriberCache::watch(&conn),
            conn,
            in_flight: HashMap::new(),
        }
    }

    fn url(w: &mut Writer) -> String {
        w.subscribers.get(&w.conn, "a").unwrap().url.clone()
    }

    fn set_url(w: &Writer, url: &str) {
        w.conn
            .execute("UPDATE subscribers SET url = ?1 WHERE id = 'a'", [url])
            .unwrap();
    }

    #[test]
    fn a_cached_subscriber_follows_every_change_and_every_rollback() {
        let mut w = writer();
        assert_eq!(url(&mut w), "https://one.example/hook");
        set_url(&w, "https://two.example/hook");
        assert_eq!(url(&mut w), "https://two.example/hook", "a change is seen");

        // A job changes the subscriber, reads it, and fails: its change is rolled back, and
        // so is what it read.
        let failed = w.in_savepoint(|w| {
            set_url(w, "https://three.example/hook");
            assert_eq!(url(w), "https://three.example/hook");
            Err::<(), _>(StoreError::Invalid("the job fails".into()))
        });
        assert!(failed.is_err());
        assert_eq!(url(&mut w), "https://two.example/hook");

        // An unknown subscriber is an error, not a cached absence.
        assert!(matches!(
            w.subscribers.get(&w.conn, "b"),
            Err(StoreError::NotFound(_))
        ));
    }
}
