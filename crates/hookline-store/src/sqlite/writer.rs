//! Group commit. SQLite allows one writer at a time, so one thread owns the write connection and
//! runs every write job that is waiting in one transaction: a burst of publishes, claims and
//! completions costs one commit (one fsync) instead of one each. Each job runs inside its own
//! savepoint, so a job that fails (a duplicate id, say) leaves the others in the batch intact.
//! No caller hears "done" before the commit that holds its change has succeeded.

use std::collections::HashMap;
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::{Result, StoreError};

/// State only the writer thread touches.
pub(super) struct Writer {
    pub conn: Connection,
    /// Deliveries in flight per subscriber. The write connection is the only writer of the
    /// file, so this count is exact; it is rebuilt from the table at start and after a failed
    /// commit, and counts rows leased by a previous process until they are rescued.
    pub in_flight: HashMap<String, u32>,
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
            // It may have counted slots taken or freed before it failed: the counts follow
            // the rows, as they are now.
            self.reload_in_flight()?;
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
            // The in-memory counts followed jobs whose changes were just rolled back.
            if let Err(e) = writer.reload_in_flight() {
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
