//! hookline's durable queue. One trait, [`Store`], that every backend implements and one
//! conformance suite (`tests/conformance.rs`) that every backend passes, so the dispatcher and
//! the API never know which database they run on.
//!
//! The trait is shaped by the invariants: `publish` commits an event with all its deliveries in
//! one transaction; `claim_due` leases due deliveries straight from the due-time index and never
//! past a subscriber's in-flight cap; `complete` is fenced by the lease, so a worker that lost
//! its lease changes nothing; every transition persists `run_at`, the attempt count and the
//! window atomically. Nothing here reads a clock: `now` is always an argument.

mod claim;
mod migrations;
mod model;
mod paging;
mod postgres;
pub mod repeats;
mod rules;
mod sql;
mod sqlite;
mod stats;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "testing")]
pub use testing::open;

use std::sync::Arc;

use async_trait::async_trait;
use hookline_policy::{Shown, UnixMs};

pub(crate) use claim::*;
pub use migrations::{AppliedMigration, SchemaStatus, Version};
pub use model::*;
pub(crate) use paging::*;
pub use postgres::PostgresStore;
pub(crate) use rules::*;
pub use rules::{
    check_rate, check_replay, DEAD_LETTERS_METRIC, MAX_RATE_PER_SECOND, MAX_REPLAY,
    MIN_RATE_PER_SECOND, NO_POLICY,
};
pub(crate) use sql::*;
pub use sqlite::page_cache::{install as install_sqlite_page_cache, PageCacheNotInstalled};
pub use sqlite::SqliteStore;
pub(crate) use stats::*;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the store is shut down")]
    Closed,
    /// A publish would fan out to more deliveries than admission allows now: nothing stored.
    #[error(
        "the event fans out to {deliveries} deliveries, more than the {room} admission allows now"
    )]
    OverCapacity { deliveries: u64, room: u64 },
    /// The database's storage is full (SQLite's `SQLITE_FULL`, PostgreSQL's `disk_full`):
    /// nothing of the write was stored, and the same write may go through once room is made.
    #[error("the database's storage is full: {0}")]
    StorageFull(String),
    #[error("storage failure: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether the store itself failed to commit (a full disk, a failing database), rather
    /// than refusing what the caller asked: what makes a process unhealthy.
    pub fn is_storage_failure(&self) -> bool {
        matches!(self, StoreError::StorageFull(_) | StoreError::Backend(_))
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Completions under way beside a claim ([`Store::complete_and_claim`]): their results once
/// committed.
pub type Completing =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<CompletionResult>>> + Send>>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Commits a one-row write. A store can answer reads while refusing writes (a read-only
    /// file or replica, a full disk, a lock held elsewhere); only a commit shows that it can
    /// take events.
    async fn heartbeat(&self, now: UnixMs) -> Result<()>;

    /// Why work the store does on its own keeps failing, if it does (SQLite: its WAL
    /// checkpoints, which a full disk stops while small commits still go through): a store
    /// in that state is not healthy whatever a heartbeat says.
    fn maintenance_failure(&self) -> Option<String> {
        None
    }

    /// Fires when another process may have made deliveries due (a publish, a resume, a
    /// replay), for backends that several processes share. `None` for single-process backends,
    /// whose own API wakes the dispatcher directly.
    fn wakeups(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Fires when another process may have started or changed a rollout, for backends that
    /// several processes share (`None`: this process's own API makes every change).
    fn policy_changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    async fn create_subscriber(&self, new: NewSubscriber, now: UnixMs) -> Result<Subscriber>;
    async fn get_subscriber(&self, id: &str) -> Result<Subscriber>;
    /// Those of `ids` that are revoked (or unknown to the store: gone all the same), for
    /// whatever a process keeps per subscriber (its metric series) to follow the live ones,
    /// wherever the revocation was made.
    async fn gone_among(&self, ids: Vec<String>) -> Result<Vec<String>>;
    async fn list_subscribers(
        &self,
        filter: SubscriberFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Subscriber>>;
    /// A paused subscriber's deliveries wait without spending attempts; resuming releases them.
    async fn update_subscriber(
        &self,
        id: &str,
        patch: SubscriberPatch,
        now: UnixMs,
    ) -> Result<Subscriber>;
    /// Replaces the signing secret. Until `grace_until` every request is signed with both the
    /// new and the previous secret, so the subscriber can switch without dropping a webhook.
    async fn rotate_secret(
        &self,
        id: &str,
        secret: String,
        grace_until: UnixMs,
        now: UnixMs,
    ) -> Result<Subscriber>;
    /// Final: the subscriber is never sent to again and its pending deliveries die with
    /// `subscription_revoked`.
    async fn revoke_subscriber(&self, id: &str, now: UnixMs) -> Result<Subscriber>;

    /// Commits the event and one delivery per matching, non-revoked subscriber, all at once.
    async fn publish(&self, event: NewEvent, now: UnixMs) -> Result<PublishOutcome>;
    async fn get_event(&self, id: &str) -> Result<Event>;

    /// Leases up to `limit` due deliveries, oldest due first, counting each as an attempt.
    async fn claim_due(&self, request: ClaimRequest) -> Result<Vec<ClaimedDelivery>>;
    /// Leases deliveries whose lease ran out (their worker was lost) so the caller can record
    /// the lost attempt and let the policy decide what follows.
    async fn rescue_expired(
        &self,
        now: UnixMs,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<ClaimedDelivery>>;
    /// Applies completions in one transaction; each is fenced by its lease.
    async fn complete(
        &self,
        completions: Vec<Completion>,
        now: UnixMs,
    ) -> Result<Vec<CompletionResult>>;
    /// [`Store::complete`] (at `claim.now`) and [`Store::claim_due`] together. Each result
    /// stands on its own: completions that failed are the caller's to retry, and what the claim
    /// leased is the caller's to send whatever became of them (a claim that fails does not undo
    /// the completions). The claim's deliveries never wait for the completions to commit: the
    /// completions come back as a future ([`Completing`]), since a large batch of them (2,000
    /// attempts timing out together) takes long enough to hold up a healthy subscriber's first
    /// attempt. SQLite commits both at once (one writer job: one commit, not two; the claim
    /// sees the completions, so the slots they free at a subscriber's cap are claimed again at
    /// once; nothing is claimed when the job fails), and its future is ready. PostgreSQL runs
    /// the claim beside the completions, in transactions of their own (completions never hold
    /// subscriber rows while waiting for the claim's lock: holding it through them cost two
    /// workers 10-20%); the slots the completions free are the caller's next claim's.
    async fn complete_and_claim(
        &self,
        completions: Vec<Completion>,
        claim: ClaimRequest,
    ) -> (Completing, Result<Vec<ClaimedDelivery>>);
    /// The earliest `run_at` among deliveries waiting to be claimed, the earliest lease expiry
    /// among deliveries in flight, and the earliest end of a waiting delivery's window
    /// (`window_ms` long): when an idle worker next has something to do.
    async fn next_wakeup(&self, window_ms: i64) -> Result<Option<UnixMs>>;
    /// Ends, as `window_expired` and without an attempt, up to `sweep.limit` deliveries not in
    /// flight (scheduled, due, held for a paused subscriber, deferred by a breaker, waiting for
    /// a rate limit or a slot) whose window has ended, recording what each was waiting on.
    /// Reads the window index only. Answers how many died.
    async fn expire_windows(&self, sweep: WindowSweep) -> Result<u64>;
    /// Depths by state and the oldest waiting deliveries (`caps`: what the dispatcher's claims
    /// hold subscribers and hosts to, and `held_back`: the subscribers the dispatcher gives no
    /// slot now, so a delivery held back by either is not counted ready). It counts every row,
    /// so callers run it on an interval, never per scrape.
    async fn queue_stats(
        &self,
        now: UnixMs,
        caps: InFlightCaps,
        held_back: &[String],
    ) -> Result<QueueStats>;

    async fn get_delivery(&self, id: &str) -> Result<Delivery>;
    async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Delivery>>;
    async fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<DeadLetter>>;

    /// Dead letters by reason and subscriber (those that died at or after `since`), largest
    /// groups first, at most `limit` groups. It counts every dead letter since `since`: for an
    /// operator's look, not a hot path.
    async fn dead_letter_groups(&self, since: UnixMs, limit: u32) -> Result<Vec<DeadLetterGroup>>;
    /// How many dead letters that died at or after `since` are still dead, by reason (through
    /// an index on the time of death: cheap for a recent `since`).
    async fn dead_letters_by_reason(
        &self,
        since: UnixMs,
    ) -> Result<Vec<(hookline_policy::DeadReason, u64)>>;

    /// Moves up to `limit` dead letters matching the filter back to the queue, with a fresh
    /// budget and window, released at most `per_second`, and records the audit, atomically.
    /// Subscribers that are revoked are never selected.
    async fn replay(&self, request: ReplayRequest, now: UnixMs) -> Result<Replay>;
    /// The ids `replay` would select for this request now, in its order; changes nothing.
    async fn preview_replay(&self, request: ReplayRequest) -> Result<Vec<String>>;
    async fn get_replay(&self, id: &str) -> Result<Replay>;
    async fn list_replays(
        &self,
        order: ListOrder,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Replay>>;

    /// Stores a new named policy; one by that name exists already: `Conflict`. Policies never
    /// change once stored.
    async fn create_policy(&self, policy: StoredPolicy) -> Result<StoredPolicy>;
    async fn get_policy(&self, name: &str) -> Result<StoredPolicy>;
    /// In the order they were created.
    async fn list_policies(&self, limit: u32, cursor: Option<String>)
        -> Result<Page<StoredPolicy>>;

    /// Starts a rollout; while another runs: `Conflict`.
    async fn start_rollout(&self, rollout: Rollout) -> Result<Rollout>;
    async fn get_rollout(&self, id: &str) -> Result<Rollout>;
    /// In the order they started.
    async fn list_rollouts(&self, limit: u32, cursor: Option<String>) -> Result<Page<Rollout>>;
    /// Changes a running rollout; one that ended: `Conflict`.
    async fn change_rollout(&self, id: &str, change: RolloutChange, now: UnixMs)
        -> Result<Rollout>;
    /// The policy in force for everyone and the rollout running: what every decision reads.
    async fn policies_in_force(&self) -> Result<PoliciesInForce>;
    /// What became of the deliveries whose first attempt `query.policy` decided in its range.
    async fn cohort_report(&self, query: CohortQuery) -> Result<CohortReport>;

    /// Deliveries not ended yet, and of them those due at `now`. It counts rows (through
    /// partial indexes), so callers run it on an interval.
    async fn backlog(&self, now: UnixMs) -> Result<Backlog>;
    /// The backlog's deliveries that wait for a later time (a retry, an open breaker) or for a
    /// rate limit, grouped: what a projected drain adds to the work. It reads the rows that
    /// wait, so callers run it on an interval, beside `backlog`.
    async fn backlog_waits(&self, now: UnixMs) -> Result<BacklogWaits>;
    /// Replaces `owner`'s meter (a process's last minute) as of `at`.
    async fn record_meter(&self, owner: &str, at: UnixMs, reading: MeterReading) -> Result<()>;
    /// The sum of the meters recorded at or after `since`: every process still measuring.
    async fn meter_totals(&self, since: UnixMs) -> Result<MeterReading>;
    /// Replaces the estimate of what the process has shown it can do, as of `at`: what a
    /// restart starts from.
    async fn record_shown(&self, at: UnixMs, shown: Shown) -> Result<()>;
    /// The estimate last recorded; `None` on a fresh install.
    async fn shown(&self) -> Result<Option<Shown>>;
    /// The attempts started at or after `since`, at most `limit` of them (the most recent):
    /// what `hookline capacity --from-history` models its load on. It reads the attempts
    /// table without an index on time, so it is for a command run by hand, not a loop.
    async fn attempt_history(&self, since: UnixMs, limit: u32) -> Result<AttemptHistory>;

    /// Deletes up to `batch` delivered deliveries last changed before `before`, with their
    /// attempt history, and answers how many. Deliveries a replay audit names are kept. Small
    /// batches keep each transaction short so workers are never blocked for long.
    async fn prune_delivered(&self, before: UnixMs, batch: u32) -> Result<u64>;
}

/// How to open a store, beyond its URL.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// PostgreSQL connections this process keeps (SQLite has one writer and pools readers).
    pub pool_size: usize,
    /// Whether this process serves the store (publishes, claims): a SQLite file is then locked
    /// for it, under every name it has, and refused while another process serves it.
    /// Maintenance beside a serving process (`migrate`, `prune`, `backup`) opens without.
    pub serving: bool,
}

/// Which backend a database URL names.
enum Backend<'a> {
    /// The embedded default: a file path.
    Sqlite(&'a str),
    Postgres(&'a str),
}

/// Whether a database URL names the PostgreSQL backend: what it opens, and what the settings
/// whose defaults depend on the backend follow.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

fn backend(url: &str) -> Result<Backend<'_>> {
    if is_postgres_url(url) {
        return Ok(Backend::Postgres(url));
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err(StoreError::Invalid(
                "database: sqlite:// needs a file path, e.g. sqlite://hookline.db".into(),
            ));
        }
        return Ok(Backend::Sqlite(path));
    }
    Err(StoreError::Invalid(format!(
        "database: unsupported URL {url:?}; expected sqlite://PATH or postgres://..."
    )))
}

/// Opens the backend a database URL names: `sqlite://PATH` (the embedded default) or
/// `postgres://...` / `postgresql://...` (the scale-out backend), running its migrations.
pub async fn open_with(url: &str, options: &OpenOptions) -> Result<Arc<dyn Store>> {
    Ok(match backend(url)? {
        Backend::Postgres(url) => Arc::new(PostgresStore::open(url, options.pool_size).await?),
        Backend::Sqlite(path) => Arc::new(SqliteStore::open(path, options).await?),
    })
}

/// Opens the store a database URL names only if one is there: a SQLite file, or a PostgreSQL
/// database (or schema) with hookline's migrations applied; then as `open_with`. For commands
/// that work on an existing store (`prune`): a mistyped URL must be refused, not answered
/// from an empty store created on the spot. Only `serve` and `migrate` create a store.
pub async fn open_existing(url: &str, options: &OpenOptions) -> Result<Arc<dyn Store>> {
    if schema_status(url).await?.version == 0 {
        return Err(StoreError::Invalid(
            "database: no hookline store there (hookline migrate or serve creates one); \
             nothing was changed"
                .into(),
        ));
    }
    open_with(url, options).await
}

/// The schema of the database a URL names, as this binary sees it: its version, the oldest
/// hookline that can run on it, what this binary would apply. Changes nothing.
pub async fn schema_status(url: &str) -> Result<SchemaStatus> {
    match backend(url)? {
        Backend::Postgres(url) => PostgresStore::schema_status(url).await,
        Backend::Sqlite(path) => {
            let path = path.to_owned();
            blocking(move || sqlite::schema_status(&path)).await
        }
    }
}

/// Where `hookline backup` and `restore` send PostgreSQL users.
const POSTGRES_BACKUPS: &str = "hookline backup and restore copy the embedded SQLite store; \
    for PostgreSQL use pg_dump / pg_restore or base backups with WAL archiving \
    (docs/RUNBOOK.md, \"Backing up and restoring\")";

/// Takes a consistent copy of the SQLite store at `url` into the new file `to`, while hookline
/// may be serving from it.
pub async fn backup(url: &str, to: std::path::PathBuf) -> Result<BackupSummary> {
    match backend(url)? {
        Backend::Postgres(_) => Err(StoreError::Invalid(POSTGRES_BACKUPS.into())),
        Backend::Sqlite(path) => {
            let path = path.to_owned();
            blocking(move || sqlite::backup(&path, &to)).await
        }
    }
}

/// Replaces the SQLite store at `url` with the backup `from`, refusing while anything has the
/// store open (a hookline serving from it).
pub async fn restore(from: std::path::PathBuf, url: &str) -> Result<BackupSummary> {
    match backend(url)? {
        Backend::Postgres(_) => Err(StoreError::Invalid(POSTGRES_BACKUPS.into())),
        Backend::Sqlite(path) => {
            let path = path.to_owned();
            blocking(move || sqlite::restore(&from, &path)).await
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Backend(e.to_string()))?
}
