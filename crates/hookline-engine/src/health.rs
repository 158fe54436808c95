//! What `/healthz` reports: whether the store commits a write and whether the dispatcher is
//! still running. A store can answer reads while refusing writes (a read-only file or replica,
//! a full disk, a lock held elsewhere), so only a commit shows that publishing would work.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use hookline_store::{Store, StoreError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::clock::Clock;

/// A heartbeat answers for this long; probes and load balancers polling every second cost one
/// small commit a second at most.
const FRESH: Duration = Duration::from_secs(1);
/// A heartbeat that has not committed by then makes the store `degraded` (it keeps running,
/// and its outcome is reported when it ends). It waits behind the writes queued before it, so
/// this is well above a busy store's commit time: a store this slow is failing its publishers.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// After a commit fails, the store is reported degraded for this long: a full disk lets the
/// small heartbeat commit through while publishes fail, so the heartbeat alone would say `ok`.
/// Once commits stop failing (room was made), health is `ok` again this long after the last
/// failure.
const DEGRADED_AFTER_FAILED_COMMIT: Duration = Duration::from_secs(10);

/// The latest commit of real work (a publish, a claim, completions) that the store failed,
/// shared by the API and the dispatcher, which meet them, and `/healthz`, which reports them.
#[derive(Default)]
pub struct FailedCommits(Mutex<Option<(Instant, String)>>);

impl FailedCommits {
    /// Records `e` when it is the store failing (a full disk, a broken database), not a refusal
    /// of what was asked (not found, a conflict, admission).
    pub fn record(&self, e: &StoreError) {
        if e.is_storage_failure() {
            *self.0.lock().unwrap() = Some((Instant::now(), e.to_string()));
        }
    }

    /// The failure, while it is recent enough to report.
    fn recent(&self) -> Option<String> {
        let last = self.0.lock().unwrap();
        let (at, error) = last.as_ref()?;
        let ago = at.elapsed();
        (ago < DEGRADED_AFTER_FAILED_COMMIT)
            .then(|| format!("a commit failed {} s ago: {error}", ago.as_secs()))
    }
}

/// Alive while the dispatcher's loop is: the loop holds the only strong reference.
pub struct Liveness(pub(crate) Weak<()>);

impl Liveness {
    fn running(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// What is wrong, if anything.
pub struct Report {
    /// `Err` says why the store cannot commit.
    pub store: Result<(), String>,
    /// `None` in a process that runs no dispatcher (`--role api`).
    pub dispatcher_running: Option<bool>,
}

impl Report {
    pub fn healthy(&self) -> bool {
        self.store.is_ok() && self.dispatcher_running != Some(false)
    }
}

pub struct Health {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    dispatcher: Option<Liveness>,
    failed_commits: Arc<FailedCommits>,
    probe: tokio::sync::Mutex<Probe>,
}

#[derive(Default)]
struct Probe {
    /// When the last heartbeat ended, and what it said.
    last: Option<(Instant, Result<(), String>)>,
    /// A heartbeat still running, and since when.
    running: Option<(Instant, JoinHandle<Result<(), String>>)>,
}

impl Health {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        dispatcher: Option<Liveness>,
        failed_commits: Arc<FailedCommits>,
    ) -> Self {
        Self {
            store,
            clock,
            dispatcher,
            failed_commits,
            probe: Default::default(),
        }
    }

    /// Where the API records the commits it saw fail.
    pub fn failed_commits(&self) -> &FailedCommits {
        &self.failed_commits
    }

    pub async fn check(&self) -> Report {
        let store = match (
            self.failed_commits.recent(),
            self.store.maintenance_failure(),
        ) {
            (Some(failed), _) | (None, Some(failed)) => Err(failed),
            (None, None) => self.store_commits().await,
        };
        Report {
            store,
            dispatcher_running: self.dispatcher.as_ref().map(Liveness::running),
        }
    }

    /// One heartbeat at a time, shared by every caller; a stuck one is reported, not waited on
    /// again.
    async fn store_commits(&self) -> Result<(), String> {
        let mut probe = self.probe.lock().await;
        if let (Some((at, result)), None) = (&probe.last, &probe.running) {
            if at.elapsed() < FRESH {
                return result.clone();
            }
        }
        let (started, heartbeat) = probe.running.get_or_insert_with(|| {
            let store = self.store.clone();
            let now = self.clock.now_ms();
            let heartbeat = async move { store.heartbeat(now).await.map_err(|e| e.to_string()) };
            (Instant::now(), tokio::spawn(heartbeat))
        });
        let left = COMMIT_TIMEOUT.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, heartbeat).await {
            Err(_) => Err(format!(
                "a write has not committed in {} s",
                started.elapsed().as_secs()
            )),
            Ok(ended) => {
                let result = ended.unwrap_or_else(|e| Err(format!("the heartbeat failed: {e}")));
                probe.running = None;
                probe.last = Some((Instant::now(), result.clone()));
                result
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[tokio::test]
    async fn a_stopped_dispatcher_is_degraded_and_an_api_process_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        let store = hookline_store::open(&url).await.unwrap();
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_800_000_000_000));
        let alive = Arc::new(());
        let running = Liveness(Arc::downgrade(&alive));
        let health = Health::new(
            store.clone(),
            clock.clone(),
            Some(running),
            Default::default(),
        );
        assert!(health.check().await.healthy());
        drop(alive);
        let report = health.check().await;
        assert_eq!(
            (report.store, report.dispatcher_running),
            (Ok(()), Some(false))
        );
        let api_only = Health::new(store, clock, None, Default::default())
            .check()
            .await;
        assert!(api_only.healthy() && api_only.dispatcher_running.is_none());
    }
}
