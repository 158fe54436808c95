//! Group commit. SQLite allows one writer at a time, so one thread owns the write connection and
//! runs every write job that is waiting in one transaction: a burst of publishes, claims and
//! completions costs one commit (one fsync) instead of one each. Each job runs inside its own
//! savepoint, so a job that fails (a duplicate id, say) leaves the others in the batch intact.
//! No caller hears "done" before the commit that holds its change has succeeded.

use std::collections::HashMap;
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::scheduled::ScheduledCounts;
use super::subscriber_cache::SubscriberCache;
use crate::{Result, StoreError};

/// State only the writer thread touches.
pub(super) struct Writer {
    pub conn: Connection,
    /// Deliveries in flight per subscriber. The write connection is the only writer of the
    /// file, so this count is exact; it is rebuilt from the table at start and after a failed
    /// commit, and counts rows leased by a previous process until they are rescued.
    pub in_flight: HashMap<String, u32>,
    /// The subscriber rows claims read, kept between claims.
    pub subscribers: SubscriberCache,
    /// Deliveries waiting per subscriber, so that a claim can tell when its scan would find
    /// nothing.
    pub scheduled: ScheduledCounts,
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
            scheduled: ScheduledCounts::load(&conn)?,
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
        self.jobs.send(job(f, tx)).map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

/// `f` as a job of a batch, whose outcome goes to `tx` once the batch's commit has answered.
fn job<T: Send + 'static>(
    f: impl FnOnce(&mut Writer) -> Result<T> + Send + 'static,
    tx: oneshot::Sender<Result<T>>,
) -> Job {
    Box::new(move |w: Result<&mut Writer>| {
        let result = w.and_then(|w| w.in_savepoint(f));
        // A job that failed says why; one that ran says whether its batch committed.
        Box::new(move |commit: Result<()>| {
            let _ = tx.send(result.and_then(|done| commit.map(|()| done)));
        })
    })
}

impl Writer {
    /// After a rollback: what the writer keeps in memory follows the rows as they are now
    /// (the waiting counts are undone from their own log instead: recounting reads every
    /// waiting row).
    fn reload_after_rollback(&mut self) -> Result<()> {
        self.subscribers.forget();
        self.reload_in_flight()
    }

    fn reload_in_flight(&mut self) -> Result<()> {
        let mut stmt = self.conn.prepare(super::reads::IN_FLIGHT_PER_SUBSCRIBER)?;
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
    /// of the job it is part of: savepoints nest) stands. Only inside the batch's transaction:
    /// once an error has ended it (a full disk, an I/O error), a savepoint would begin a
    /// transaction of its own and commit outside the batch, so nothing runs.
    pub fn in_savepoint<T>(&mut self, f: impl FnOnce(&mut Writer) -> Result<T>) -> Result<T> {
        if self.conn.is_autocommit() {
            return Err(StoreError::Backend(
                "an earlier error ended this batch's transaction".into(),
            ));
        }
        self.conn.execute_batch("SAVEPOINT job")?;
        let mark = self.scheduled.mark();
        let result = f(self);
        if result.is_ok() {
            self.conn.execute_batch("RELEASE job")?;
        } else {
            // When the error ended the whole transaction the savepoint went with it; the
            // job's own error says what happened.
            if let Err(e) = self.conn.execute_batch("ROLLBACK TO job; RELEASE job") {
                tracing::warn!(error = %e, "rolling back a failed job");
                // Its changes would otherwise commit with the batch: end the batch instead.
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
            }
            self.scheduled.roll_back_to(mark);
            // It may have counted slots taken or freed, or read subscribers it changed.
            if let Err(e) = self.reload_after_rollback() {
                tracing::error!(error = %e, "cannot rebuild in-flight counts after a failed job");
            }
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
    let commit = if writer.conn.is_autocommit() {
        tracing::error!("an error ended a write batch's transaction: nothing in it was committed");
        Err(StoreError::Backend(
            "an error ended this batch's transaction: nothing in it was committed".into(),
        ))
    } else {
        writer
            .conn
            .execute_batch("COMMIT")
            .map_err(StoreError::from)
    };
    if commit.is_err() && !writer.conn.is_autocommit() {
        let _ = writer.conn.execute_batch("ROLLBACK");
    }
    if commit.is_ok() {
        writer.scheduled.committed();
    } else {
        writer.scheduled.rolled_back();
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
        add_subscriber(&conn, "a").unwrap();
        Writer {
            subscribers: SubscriberCache::watch(&conn),
            scheduled: ScheduledCounts::load(&conn).unwrap(),
            conn,
            in_flight: HashMap::new(),
        }
    }

    fn add_subscriber(c: &Connection, id: &str) -> rusqlite::Result<usize> {
        c.execute(
            "INSERT INTO subscribers (id, url, event_types, secret, status, created_at, updated_at)
             VALUES (?1, 'https://one.example/hook', '[]', 'whsec_c2VjcmV0', 'active', 0, 0)",
            [id],
        )
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
        w.conn.execute_batch("BEGIN").unwrap();
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

        // The same when the error ended the whole transaction, and the rollback of the
        // savepoint fails too: the job's own error comes back.
        w.in_flight.insert("a".into(), 7);
        let failed = w.in_savepoint(|w| {
            set_url(w, "https://four.example/hook");
            assert_eq!(url(w), "https://four.example/hook");
            w.conn.execute_batch("ROLLBACK").unwrap();
            Err::<(), _>(StoreError::Invalid("the disk is full".into()))
        });
        assert!(matches!(failed, Err(StoreError::Invalid(m)) if m == "the disk is full"));
        assert_eq!(url(&mut w), "https://one.example/hook", "as committed");
        assert!(w.in_flight.is_empty(), "counted from the rows again");
    }

    #[test]
    fn jobs_after_an_error_that_ended_the_transaction_do_not_run() {
        let mut w = writer();
        let (first_tx, mut first) = oneshot::channel();
        let (second_tx, mut second) = oneshot::channel();
        let batch = vec![
            // Stands in for a full disk or an I/O error, after which SQLite has rolled back
            // the whole transaction.
            job(
                |w: &mut Writer| Ok(w.conn.execute_batch("ROLLBACK")?),
                first_tx,
            ),
            job(
                |w: &mut Writer| Ok(add_subscriber(&w.conn, "b")?),
                second_tx,
            ),
        ];
        assert!(run_batch(&mut w, batch).is_err());
        assert!(first.try_recv().unwrap().is_err());
        assert!(matches!(
            second.try_recv().unwrap(),
            Err(StoreError::Backend(m)) if m.contains("ended this batch's transaction")
        ));
        let b: i64 = w
            .conn
            .query_row("SELECT count(*) FROM subscribers WHERE id = 'b'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(b, 0, "the job after the error committed on its own");
    }
}
