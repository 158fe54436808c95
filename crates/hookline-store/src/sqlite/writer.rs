//! Group commit. SQLite allows one writer at a time, so one thread owns the write connection and
//! runs every write job that is waiting in one transaction: a burst of publishes, claims and
//! completions costs one commit (one fsync) instead of one each; a job that asks to go
//! [`Turn::Ahead`] (a large publish) gets a commit of its own before the others waiting with
//! it, so that its caller does not also wait for theirs. A job that fails (a publish
//! refused for want of room, say) leaves the others in the batch intact, and no caller hears
//! "done" before the commit that holds its change has succeeded.
//!
//! A batch first runs without savepoints: a savepoint makes SQLite copy every page a job
//! touches into the statement journal, for every job, though jobs almost never fail after
//! writing (SQLite's change count moved, or the job says so: `failed_after_writing`); a
//! savepoint around every job, even with the sub-journal in memory, cost a measurable share of
//! the whole process's deliveries per CPU-second (the bench's `sustained`). When a job does
//! fail after writing, the batch is rolled back and run again from the start, each job in a
//! savepoint of its own (`Undo`): so every job must be able to run twice. What makes that
//! hold: a job's closure is `Fn` (it cannot change what it captured), and what the writer keeps
//! in memory beside the rows changes only through the transitions of [`WriterState`], which
//! log every change until the commit and undo them with the rollback; the subscriber rows kept
//! for claims are forgotten with it. Test builds recount those figures from the tables after
//! every batch (`check_figures`).

mod state;

use std::sync::{mpsc, Arc};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::serve_lock::ServeLock;
use super::subscriber_cache::SubscriberCache;
use super::tenants::TenantWalk;
use crate::{Result, StoreError};
pub(super) use state::WriterState;

/// State only the writer thread touches.
pub(super) struct Writer {
    pub conn: Connection,
    /// The subscriber rows claims read, kept between claims.
    pub subscribers: SubscriberCache,
    /// The figures kept beside the rows, changed through its transitions.
    pub state: WriterState,
    /// What a claim's walk over the tenants keeps between claims.
    pub tenants: TenantWalk,
    undo: Undo,
    /// The error that ended this batch's transaction (SQLite rolls back on some, a full disk
    /// among them): what the batch's other jobs and its commit answer, so that every caller
    /// learns the disk is full, not only the one whose write met it.
    ended_by: Option<StoreError>,
}

/// How the changes of a job that fails are undone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Undo {
    /// They are not: a job that fails after writing spoils the batch (`Spoiled`). A job that
    /// fails before writing spoils nothing.
    RunAgain,
    /// A first run that a job spoiled: it is rolled back, to run again with `Savepoints`.
    Spoiled,
    /// Each job (and each part of one run by `undoable`) in a savepoint of its own.
    Savepoints,
}

/// A job of a batch: run (twice, when its first run is in a batch that is run again), then
/// answered once the batch's commit has answered.
trait Job: Send {
    /// Runs the job against the writer, or records why the transaction could not even begin.
    fn run(&mut self, writer: Result<&mut Writer>);
    fn answer(self: Box<Self>, commit: Result<()>);
}

struct Pending<F, T> {
    write: F,
    outcome: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Job for Pending<F, T>
where
    F: Fn(&mut Writer) -> Result<T> + Send,
    T: Send,
{
    fn run(&mut self, writer: Result<&mut Writer>) {
        let write = &self.write;
        self.outcome = Some(writer.and_then(|w| w.undoable(write)));
    }

    fn answer(self: Box<Self>, commit: Result<()>) {
        let outcome = self
            .outcome
            .unwrap_or_else(|| Err(StoreError::backend("the write job never ran")));
        // A job that failed says why; one that ran says whether its batch committed.
        let _ = self
            .reply
            .send(outcome.and_then(|done| commit.map(|()| done)));
    }
}

/// `write` as a job of a batch, whose outcome goes to `reply` once the batch's commit has
/// answered.
fn job<T: Send + 'static>(
    write: impl Fn(&mut Writer) -> Result<T> + Send + 'static,
    reply: oneshot::Sender<Result<T>>,
) -> Box<dyn Job> {
    Box::new(Pending {
        write,
        outcome: None,
        reply,
    })
}

/// Most jobs taken from the queue at once (those ahead and the rest, each in its own commit):
/// bounds how long the first caller waits.
const MAX_JOBS_PER_COMMIT: usize = 512;

/// When a job's changes are committed, relative to the other jobs waiting with it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Turn {
    /// With the others, in the order they came.
    InOrder,
    /// In a commit of its own before the others (with any other job waiting `Ahead`): a
    /// publish so large that sharing its commit with the dispatcher's claims and completions
    /// would keep its caller waiting for them too.
    Ahead,
}

struct Queued {
    turn: Turn,
    job: Box<dyn Job>,
}

#[derive(Clone)]
pub(super) struct WriterHandle {
    jobs: mpsc::Sender<Queued>,
}

impl WriterHandle {
    /// Starts the writer thread on `conn`; a serving store's lock goes with it, let go once the
    /// thread has closed the connection.
    pub fn spawn(conn: Connection, serving: Option<Arc<ServeLock>>) -> Result<Self> {
        let writer = Writer::new(conn)?;
        let (jobs, rx) = mpsc::channel::<Queued>();
        std::thread::Builder::new()
            .name("hookline-sqlite-writer".into())
            .spawn(move || {
                run(writer, rx);
                drop(serving);
            })
            .map_err(|e| StoreError::caused_by("cannot start the writer thread", e))?;
        Ok(Self { jobs })
    }

    /// Runs `write` in the next group transaction and answers once that transaction is
    /// committed. `write` may run twice (see the module's comment): it must leave its
    /// captures as it found them (`Fn` keeps it from changing them, short of interior
    /// mutability).
    pub async fn write<T: Send + 'static>(
        &self,
        write: impl Fn(&mut Writer) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.write_in(Turn::InOrder, write).await
    }

    /// [`write`](Self::write), committed in `turn`.
    pub async fn write_in<T: Send + 'static>(
        &self,
        turn: Turn,
        write: impl Fn(&mut Writer) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Queued {
                turn,
                job: job(write, tx),
            })
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

impl Writer {
    fn new(mut conn: Connection) -> Result<Self> {
        Ok(Writer {
            subscribers: SubscriberCache::watch(&mut conn)?,
            state: WriterState::load(&conn)?,
            tenants: TenantWalk::load(&conn)?,
            conn,
            undo: Undo::Savepoints,
            ended_by: None,
        })
    }

    /// Undoes in memory what a failed job changed there: the figures it moved, the
    /// subscribers it read (it may have changed them).
    fn undo_since(&mut self, mark: state::Mark) {
        self.state.roll_back_to(mark);
        self.subscribers.forget();
    }

    /// Runs `f` so that, if it fails, what it changed is undone and the rest of the batch (or
    /// of the job it is part of: this nests) stands; in a first run (`Undo::RunAgain`), by
    /// running the batch again. Only inside the batch's transaction: once an error has ended
    /// it (a full disk, an I/O error), a savepoint would begin a transaction of its own and
    /// commit outside the batch, so nothing runs.
    pub fn undoable<T>(&mut self, f: impl FnOnce(&mut Writer) -> Result<T>) -> Result<T> {
        if self.conn.is_autocommit() {
            return Err(self.ended("an earlier error ended this batch's transaction"));
        }
        let mark = self.state.mark();
        if self.undo != Undo::Savepoints {
            let changes = self.conn.total_changes();
            let result = f(self);
            self.note_ending(&result);
            if result.is_err() {
                // A statement that fails undoes itself and counts no change (one without a
                // statement journal may not: its job says so, `failed_after_writing`): when
                // none counted, the rows are as before and only memory needs undoing.
                if self.undo == Undo::RunAgain && self.conn.total_changes() == changes {
                    self.undo_since(mark);
                } else {
                    self.undo = Undo::Spoiled;
                }
            }
            return result;
        }
        self.conn.execute_batch("SAVEPOINT job")?;
        // A release that fails leaves the savepoint open: undone like a failed job's.
        let result = f(self).and_then(|done| {
            // A part of `f` that failed and that `f` answers with (`complete_and_claim`'s
            // claim) may have ended the whole transaction, this savepoint with it (a full
            // disk): then `f` fails as that error did, not as a savepoint that is gone.
            if self.conn.is_autocommit() {
                return Err(self.ended("an error ended this batch's transaction"));
            }
            self.conn.execute_batch("RELEASE job")?;
            Ok(done)
        });
        self.note_ending(&result);
        if result.is_err() {
            // When the error ended the whole transaction the savepoint went with it; the
            // job's own error says what happened.
            if let Err(e) = self.conn.execute_batch("ROLLBACK TO job; RELEASE job") {
                tracing::warn!(error = %e, "rolling back a failed job");
                // Its changes would otherwise commit with the batch: end the batch instead.
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
            }
            self.undo_since(mark);
        }
        result
    }

    /// Why the batch's transaction is over, as `what` says, keeping the kind of the error that
    /// ended it when that is a full disk.
    fn ended(&self, what: &str) -> StoreError {
        match &self.ended_by {
            Some(StoreError::StorageFull(e)) => StoreError::StorageFull(e.clone().during(what)),
            _ => StoreError::backend(what),
        }
    }

    /// The job failing now may have left rows that SQLite did not count as changes (a
    /// statement without a statement journal, stopped by an error other than a conflict):
    /// in a first run, its batch is run again with savepoints, as after any write.
    pub fn failed_after_writing(&mut self) {
        if self.undo == Undo::RunAgain {
            self.undo = Undo::Spoiled;
        }
    }

    /// Keeps the first error that ended the batch's transaction.
    fn note_ending<T>(&mut self, result: &Result<T>) {
        if let (Err(e), None, true) = (result, &self.ended_by, self.conn.is_autocommit()) {
            self.ended_by = Some(e.clone());
        }
    }

    /// The batch's transaction committed: what its jobs counted stands.
    fn committed(&mut self) {
        self.state.committed();
    }

    /// The batch's transaction was rolled back: so is what its jobs changed in memory.
    fn rolled_back(&mut self) {
        self.state.rolled_back();
        self.subscribers.forget();
    }

    /// Once recounting is on (test builds): recounts every figure kept in memory from the
    /// tables, and at the first difference records it for the database's path and stops the
    /// writer, so that a write path that moved rows without its transition, or an undo that
    /// missed a change, fails the test that made it (`testing::sqlite_figure_differences`).
    #[cfg(any(test, feature = "testing"))]
    fn check_figures(&self) {
        use std::sync::atomic::Ordering;
        if !RECOUNTING.load(Ordering::Relaxed) {
            return;
        }
        let differences = self
            .state
            .differences(&self.conn)
            .and_then(|mut found| {
                found.extend(self.subscribers.differences(&self.conn)?);
                Ok(found)
            })
            .unwrap_or_else(|e| vec![format!("cannot recount: {e}")]);
        if differences.is_empty() {
            return;
        }
        let path = self.conn.path().unwrap_or_default().to_owned();
        let differences = differences.join("; ");
        FIGURE_DIFFERENCES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((path.clone(), differences.clone()));
        panic!(
            "the SQLite writer of {path:?} keeps figures the rows do not bear out: {differences}"
        );
    }
}

/// Whether writers recount their figures after every batch (`Writer::check_figures`): always in
/// this crate's unit tests, elsewhere once `testing::recount_sqlite_figures` has turned it on.
#[cfg(any(test, feature = "testing"))]
pub(crate) static RECOUNTING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(cfg!(test));

/// The differences recounts found, with the path of their database.
#[cfg(any(test, feature = "testing"))]
pub(crate) static FIGURE_DIFFERENCES: std::sync::Mutex<Vec<(String, String)>> =
    std::sync::Mutex::new(Vec::new());

fn run(mut writer: Writer, jobs: mpsc::Receiver<Queued>) {
    while let Ok(first) = jobs.recv() {
        let mut waiting = vec![first];
        while waiting.len() < MAX_JOBS_PER_COMMIT {
            match jobs.try_recv() {
                Ok(job) => waiting.push(job),
                Err(_) => break,
            }
        }
        let (ahead, in_order): (Vec<_>, Vec<_>) =
            waiting.into_iter().partition(|q| q.turn == Turn::Ahead);
        for batch in [ahead, in_order] {
            if !batch.is_empty() {
                run_batch(&mut writer, batch.into_iter().map(|q| q.job).collect());
            }
        }
    }
}

/// Runs `batch` in one transaction, without savepoints unless a job spoils that, and answers
/// each job once the commit has answered.
fn run_batch(writer: &mut Writer, mut batch: Vec<Box<dyn Job>>) {
    let commit = match run_all(writer, &mut batch, Undo::RunAgain) {
        Ran::Ended(commit) => commit,
        Ran::Spoiled => match run_all(writer, &mut batch, Undo::Savepoints) {
            Ran::Ended(commit) => commit,
            Ran::Spoiled => unreachable!("savepoints undo a failed job alone"),
        },
    };
    #[cfg(any(test, feature = "testing"))]
    writer.check_figures();
    for job in batch {
        job.answer(commit.clone());
    }
}

/// How one run of a batch ended.
enum Ran {
    /// Committed, or failed to (every job's changes are then rolled back).
    Ended(Result<()>),
    /// A job failed after writing, without a savepoint: rolled back, to run again.
    Spoiled,
}

fn begin(writer: &mut Writer) -> Result<()> {
    let began = writer.conn.execute_batch("BEGIN IMMEDIATE");
    if began.is_err() && !writer.conn.is_autocommit() {
        // A transaction left open by a rollback that failed would refuse every later batch:
        // end it, let what the writer keeps in memory follow the rows again, and begin anew.
        writer.conn.execute_batch("ROLLBACK")?;
        writer.rolled_back();
        writer.conn.execute_batch("BEGIN IMMEDIATE")?;
        return Ok(());
    }
    Ok(began?)
}

fn run_all(writer: &mut Writer, batch: &mut [Box<dyn Job>], undo: Undo) -> Ran {
    writer.undo = undo;
    writer.ended_by = None;
    if let Err(e) = begin(writer) {
        for job in batch.iter_mut() {
            job.run(Err(e.clone()));
        }
        return Ran::Ended(Err(e));
    }
    for job in batch.iter_mut() {
        job.run(Ok(writer));
        if writer.undo == Undo::Spoiled {
            if !writer.conn.is_autocommit() {
                let _ = writer.conn.execute_batch("ROLLBACK");
            }
            writer.rolled_back();
            return Ran::Spoiled;
        }
    }
    let commit = if writer.conn.is_autocommit() {
        tracing::error!("an error ended a write batch's transaction: nothing in it was committed");
        Err(writer.ended("an error ended this batch's transaction: nothing in it was committed"))
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
        writer.committed();
    } else {
        writer.rolled_back();
    }
    Ran::Ended(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer() -> Writer {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        add_subscriber(&conn, "a").unwrap();
        Writer::new(conn).unwrap()
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
        let failed = w.undoable(|w| {
            set_url(w, "https://three.example/hook");
            assert_eq!(url(w), "https://three.example/hook");
            Err::<(), _>(StoreError::Invalid("the job fails".into()))
        });
        assert!(failed.is_err());
        assert_eq!(url(&mut w), "https://two.example/hook");

        // The same when the error ended the whole transaction, and the rollback of the
        // savepoint fails too: the job's own error comes back, and its figures are undone.
        let failed = w.undoable(|w| {
            w.state.fanned_out("a");
            w.state.claimed("a");
            set_url(w, "https://four.example/hook");
            assert_eq!(url(w), "https://four.example/hook");
            w.conn.execute_batch("ROLLBACK").unwrap();
            Err::<(), _>(StoreError::Invalid("the disk is full".into()))
        });
        assert!(matches!(failed, Err(StoreError::Invalid(m)) if m == "the disk is full"));
        assert_eq!(url(&mut w), "https://one.example/hook", "as committed");
        assert!(w.state.scheduled().all_left_out(|_| false));
    }

    /// Found by the simulation (`hookline-sim`, seed 9 with 200 steps): `complete_and_claim`'s
    /// job keeps its claim's error as its answer; a full disk during the claim ended the whole
    /// transaction, and the job failed as "no such savepoint: job", a backend failure, where
    /// it was a full disk.
    #[test]
    fn a_job_whose_part_ended_the_transaction_fails_as_that_part_did() {
        let mut w = writer();
        w.conn.execute_batch("BEGIN").unwrap();
        let job = w.undoable(|w| {
            let claim = w.undoable(|w| {
                w.conn.execute_batch("ROLLBACK").unwrap();
                Err::<(), _>(StoreError::StorageFull(crate::BackendError::new(
                    "database or disk is full",
                )))
            });
            assert!(matches!(claim, Err(StoreError::StorageFull(_))));
            Ok(())
        });
        assert!(
            matches!(job, Err(StoreError::StorageFull(_))),
            "a full disk, not {job:?}"
        );
    }

    /// Counts what reaches the dead-letter counter.
    #[derive(Default)]
    struct DeadLetters(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl DeadLetters {
        fn counted(&self) -> u64 {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl metrics::Recorder for DeadLetters {
        fn describe_counter(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_gauge(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_histogram(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn register_counter(
            &self,
            key: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            if key.name() == crate::DEAD_LETTERS_METRIC {
                metrics::Counter::from_arc(self.0.clone())
            } else {
                metrics::Counter::noop()
            }
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    fn subscribers(w: &Writer) -> Vec<String> {
        w.conn
            .prepare("SELECT id FROM subscribers ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    fn failing(why: &str) -> Result<()> {
        Err(StoreError::Invalid(why.into()))
    }

    #[test]
    fn a_job_that_fails_after_writing_is_undone_alone_by_running_its_batch_again() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::Arc;

        let mut w = writer();
        let runs = Arc::new(AtomicUsize::new(0));
        let counting = |id: &'static str| {
            let runs = runs.clone();
            move |w: &mut Writer| {
                runs.fetch_add(1, SeqCst);
                add_subscriber(&w.conn, id)?;
                w.state.dead_on_arrival(3);
                Ok(())
            }
        };
        let (replies, mut answers): (Vec<_>, Vec<_>) = (0..4).map(|_| oneshot::channel()).unzip();
        let mut replies = replies.into_iter();
        let batch = vec![
            job(counting("b"), replies.next().unwrap()),
            // Fails after writing (as a claim that fails in a complete-and-claim can).
            job(
                |w: &mut Writer| {
                    add_subscriber(&w.conn, "c")?;
                    w.state.dead_on_arrival(5);
                    failing("refused after writing")
                },
                replies.next().unwrap(),
            ),
            job(
                |_: &mut Writer| failing("refused before writing"),
                replies.next().unwrap(),
            ),
            job(
                |w: &mut Writer| Ok(add_subscriber(&w.conn, "d").map(drop)?),
                replies.next().unwrap(),
            ),
        ];
        let dead = DeadLetters::default();
        metrics::with_local_recorder(&dead, || run_batch(&mut w, batch));
        assert_eq!(runs.load(SeqCst), 2, "the batch ran again, with savepoints");
        let answered: Vec<bool> = answers
            .iter_mut()
            .map(|a| a.try_recv().unwrap().is_ok())
            .collect();
        assert_eq!(answered, [true, false, false, true]);
        assert_eq!(
            subscribers(&w),
            ["a", "b", "d"],
            "the refused job's row is undone"
        );
        assert_eq!(
            dead.counted(),
            3,
            "counted once, and not for the job undone"
        );

        // A failure that wrote nothing spoils nothing: each job runs once.
        runs.store(0, SeqCst);
        let (first, mut first_answer) = oneshot::channel();
        let (second, mut second_answer) = oneshot::channel();
        let batch = vec![
            job(counting("e"), first),
            job(|_: &mut Writer| failing("refused before writing"), second),
        ];
        metrics::with_local_recorder(&dead, || run_batch(&mut w, batch));
        assert_eq!(runs.load(SeqCst), 1);
        assert!(first_answer.try_recv().unwrap().is_ok());
        assert!(second_answer.try_recv().unwrap().is_err());
        assert_eq!(subscribers(&w), ["a", "b", "d", "e"]);
        assert_eq!(dead.counted(), 6);
    }

    /// Runs a batch of a write (adding subscriber `added`) and the publish of event "e1" to
    /// every subscriber, which fails: answers the publish's error and how often the batch ran,
    /// once the write is kept and nothing of "e1" is (neither its rows nor its counts).
    fn publish_after_a_write(w: &mut Writer, added: &str) -> (Result<()>, usize) {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::Arc;

        let runs = Arc::new(AtomicUsize::new(0));
        let (added_reply, mut add_answer) = oneshot::channel();
        let (published, mut publish_answer) = oneshot::channel();
        let batch = vec![
            job(
                {
                    let (runs, added) = (runs.clone(), added.to_owned());
                    move |w: &mut Writer| {
                        runs.fetch_add(1, SeqCst);
                        Ok(add_subscriber(&w.conn, &added).map(drop)?)
                    }
                },
                added_reply,
            ),
            job(
                |w: &mut Writer| {
                    let event = crate::NewEvent::single("e1", "t", "{}", 1);
                    super::super::writes::publish(w, &event, 0).map(drop)
                },
                published,
            ),
        ];
        run_batch(w, batch);
        assert!(add_answer.try_recv().unwrap().is_ok());
        let refused = publish_answer.try_recv().unwrap();
        let count = |sql: &str| -> i64 { w.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            count("SELECT count(*) FROM deliveries WHERE event_id = 'e1'"),
            0
        );
        assert_eq!(count("SELECT count(*) FROM events WHERE id = 'e1'"), 0);
        assert!(
            w.state.scheduled().all_left_out(|_| false),
            "nothing is counted waiting for the undone event"
        );
        (refused, runs.load(SeqCst))
    }

    /// A fan-out that fails halfway keeps the rows it inserted (`OR FAIL`, no statement
    /// journal): after a conflict, after an error SQLite may not count as a change (a
    /// trigger's failing function stands in for the file failing: without the publish's
    /// `failed_after_writing` that case runs once), and after an insert that wrote fewer rows
    /// than the count before it, the batch runs again with savepoints and the publish is
    /// undone alone.
    #[test]
    fn a_fan_out_that_fails_halfway_is_undone_by_running_its_batch_again() {
        let cases = [
            // "a" comes first; the id of "e1"'s delivery to "b" is taken.
            (
                "INSERT INTO deliveries (id, event_id, subscriber_id, state, first_seen,
                                         window_start, updated_at)
                 VALUES ('e1:b', 'other', 'b', 'delivered', 0, 0, 0)",
                "UNIQUE constraint failed: deliveries.id",
            ),
            (
                "CREATE TEMP TRIGGER stop_at_b AFTER INSERT ON deliveries
                 WHEN NEW.subscriber_id = 'b' BEGIN SELECT json('stopped at b'); END",
                "malformed JSON",
            ),
            // A row the count saw and the insert skipped: the counts claims trust would be
            // wrong, so the insert is refused.
            (
                "CREATE TEMP TRIGGER skip_b BEFORE INSERT ON deliveries
                 WHEN NEW.subscriber_id = 'b' BEGIN SELECT RAISE(IGNORE); END",
                "wrote 2 deliveries, counted 3",
            ),
        ];
        for (stop_at_b, message) in cases {
            let mut w = writer();
            add_subscriber(&w.conn, "b").unwrap();
            w.conn.execute_batch(stop_at_b).unwrap();
            let (refused, runs) = publish_after_a_write(&mut w, "c");
            assert!(
                matches!(&refused, Err(e @ StoreError::Backend(_)) if e.to_string().contains(message)),
                "{refused:?}"
            );
            assert_eq!(runs, 2, "the first run was spoiled: {message}");
            assert_eq!(subscribers(&w), ["a", "b", "c"]);
        }
    }

    /// A subscriber row SQLite cannot read (event types that are not JSON, after a readable
    /// one) stops the fan-out's count, before anything is written: the publish fails alone,
    /// in the batch's first run.
    #[test]
    fn an_unreadable_subscriber_fails_the_publish_before_writing() {
        let mut w = writer();
        add_subscriber(&w.conn, "b").unwrap();
        w.conn
            .execute_batch("UPDATE subscribers SET event_types = '{' WHERE id = 'b'")
            .unwrap();
        let (refused, runs) = publish_after_a_write(&mut w, "c");
        assert!(
            matches!(&refused, Err(e @ StoreError::Backend(_)) if e.to_string().contains("malformed JSON")),
            "{refused:?}"
        );
        assert_eq!(runs, 1, "nothing was written to undo");
        assert_eq!(subscribers(&w), ["a", "b", "c"]);
    }

    /// The fan-out stays without a statement journal: nothing in it may abort the statement
    /// (a constraint checked with `ABORT`), call a function, or check a foreign key, each of
    /// which makes SQLite keep one.
    #[test]
    fn the_fan_out_statement_needs_no_statement_journal() {
        let w = writer();
        let sql = format!("EXPLAIN {}", super::super::queries::FAN_OUT);
        let mut stmt = w.conn.prepare(&sql).unwrap();
        // EXPLAIN lists the program; its parameters stay unbound.
        let mut rows = stmt.raw_query();
        let mut ops: Vec<(String, i64)> = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            ops.push((r.get(1).unwrap(), r.get(3).unwrap()));
        }
        assert!(ops.iter().any(|(op, _)| op == "Insert"), "{ops:?}");
        const OE_ABORT: i64 = 2;
        for (op, p2) in &ops {
            let aborts = matches!(op.as_str(), "Halt" | "HaltIfNull") && *p2 == OE_ABORT;
            let journals = matches!(
                op.as_str(),
                "Function" | "PureFunc" | "FkCounter" | "FkIfZero"
            );
            assert!(
                !aborts && !journals,
                "{op} (p2 {p2}) brings back a statement journal"
            );
        }
    }

    #[test]
    fn a_job_that_fails_before_writing_takes_back_what_it_counted() {
        let mut w = writer();
        let (reply, mut answer) = oneshot::channel();
        let batch = vec![job(
            |w: &mut Writer| {
                w.state.fanned_out("a");
                w.state.fanned_out("a");
                w.state.dead_on_arrival(4);
                failing("refused before writing")
            },
            reply,
        )];
        let dead = DeadLetters::default();
        metrics::with_local_recorder(&dead, || run_batch(&mut w, batch));
        assert!(answer.try_recv().unwrap().is_err());
        assert!(
            w.state.scheduled().all_left_out(|_| false),
            "no count left behind"
        );
        assert_eq!(dead.counted(), 0);
    }

    #[test]
    fn a_publish_that_does_not_fit_is_refused_before_writing() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::Arc;

        let mut w = writer();
        // Pinned below every version the events have (its deliveries die at once, taking no
        // room), pinned to a version they have, and not subscribed to their type.
        w.conn
            .execute_batch(
                "INSERT INTO subscribers (id, url, event_types, secret, status, created_at,
                                          updated_at, payload_version)
                 VALUES ('pinned-below', 'https://one.example/hook', '[]', 'whsec_c2VjcmV0',
                         'active', 0, 0, 1),
                        ('pinned', 'https://two.example/hook', '[]', 'whsec_c2VjcmV0',
                         'active', 0, 0, 2),
                        ('elsewhere', 'https://three.example/hook', '[\"invoice.paid\"]',
                         'whsec_c2VjcmV0', 'active', 0, 0, NULL);",
            )
            .unwrap();
        let publishing = |id: &str, room: u64| {
            let mut event = crate::NewEvent::single(id, "shipment.out_for_delivery", "{}", 2);
            event.admit_at_most = Some(room);
            move |w: &mut Writer| super::super::writes::publish(w, &event, 0)
        };
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let (first, mut first_answer) = oneshot::channel();
        let (refused, mut refused_answer) = oneshot::channel();
        let (fits, mut fits_answer) = oneshot::channel();
        let batch = vec![
            job(
                move |_: &mut Writer| {
                    counted.fetch_add(1, SeqCst);
                    Ok(())
                },
                first,
            ),
            job(publishing("evt-refused", 1), refused),
            job(publishing("evt-fits", 2), fits),
        ];
        run_batch(&mut w, batch);
        assert_eq!(runs.load(SeqCst), 1, "the batch ran once");
        assert!(first_answer.try_recv().unwrap().is_ok());
        assert!(matches!(
            refused_answer.try_recv().unwrap(),
            Err(StoreError::OverCapacity {
                deliveries: 2,
                room: 1
            })
        ));
        assert!(
            fits_answer.try_recv().unwrap().is_ok(),
            "the one pinned below takes no room, the other type's subscriber none"
        );
        let events: i64 = w
            .conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(events, 1);
    }

    #[test]
    fn a_transaction_left_open_by_a_failed_rollback_does_not_refuse_the_next_batch() {
        let mut w = writer();
        // As a rollback that failed leaves it: open, with rows and counts of its own.
        w.conn.execute_batch("BEGIN").unwrap();
        add_subscriber(&w.conn, "left-open").unwrap();
        w.conn
            .execute_batch(
                "INSERT INTO deliveries (id, event_id, subscriber_id, state, first_seen,
                                         window_start, updated_at)
                 VALUES ('e1:a', 'e1', 'a', 'scheduled', 0, 0, 0)",
            )
            .unwrap();
        w.state.fanned_out("a");
        let (reply, mut answer) = oneshot::channel();
        run_batch(
            &mut w,
            vec![job(
                |w: &mut Writer| Ok(add_subscriber(&w.conn, "b").map(drop)?),
                reply,
            )],
        );
        assert!(answer.try_recv().unwrap().is_ok());
        assert_eq!(
            subscribers(&w),
            ["a", "b"],
            "the open transaction was rolled back"
        );
        assert!(
            w.state.scheduled().all_left_out(|_| false),
            "its count is undone with it"
        );
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
        run_batch(&mut w, batch);
        assert!(first.try_recv().unwrap().is_err());
        assert!(matches!(
            second.try_recv().unwrap(),
            Err(e @ StoreError::Backend(_)) if e.to_string().contains("ended this batch's transaction")
        ));
        let b: i64 = w
            .conn
            .query_row("SELECT count(*) FROM subscribers WHERE id = 'b'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(b, 0, "the job after the error committed on its own");
    }

    /// A job queued `Ahead` is committed and answered before the jobs that were waiting with
    /// it, even those queued before it, run at all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_ahead_is_answered_before_the_jobs_waiting_with_it_run() {
        use std::future::Future;
        use std::sync::mpsc::channel;
        use std::time::Duration;

        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        let handle = WriterHandle::spawn(conn, None).unwrap();
        let bound = Duration::from_secs(10);
        // Polled once, a write has sent its job; it is awaited later.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut queue = |f: std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>| {
            let mut f = f;
            assert!(f.as_mut().poll(&mut cx).is_pending());
            f
        };

        // A first job holds the writer until the others are queued behind it.
        let (started, first_started) = channel();
        let (release_first, first_released) = channel::<()>();
        let first = queue(Box::pin(handle.write(move |_| {
            let _ = started.send(());
            first_released
                .recv_timeout(Duration::from_secs(10))
                .map_err(|_| StoreError::backend("never released"))
        })));
        first_started.recv_timeout(bound).unwrap();

        let (ahead_answered, heard) = channel::<()>();
        let in_order = queue(Box::pin(handle.write(move |w| {
            w.conn
                .execute_batch("CREATE TABLE IF NOT EXISTS turns (job TEXT)")?;
            w.conn
                .execute("INSERT INTO turns VALUES ('in order')", [])?;
            heard
                .recv_timeout(Duration::from_secs(10))
                .map_err(|_| StoreError::backend("ran before the job ahead was answered"))
        })));
        let ahead = queue(Box::pin(handle.write_in(Turn::Ahead, |w| {
            w.conn
                .execute_batch("CREATE TABLE IF NOT EXISTS turns (job TEXT)")?;
            w.conn.execute("INSERT INTO turns VALUES ('ahead')", [])?;
            Ok(())
        })));
        release_first.send(()).unwrap();
        first.await.unwrap();

        tokio::time::timeout(bound, ahead)
            .await
            .expect("the job ahead was answered while the job before it waited")
            .unwrap();
        ahead_answered.send(()).unwrap();
        in_order.await.unwrap();
        let order = handle
            .write(|w| {
                let mut stmt = w.conn.prepare("SELECT job FROM turns ORDER BY rowid")?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
            .unwrap();
        assert_eq!(order, ["ahead", "in order"]);
    }
}
