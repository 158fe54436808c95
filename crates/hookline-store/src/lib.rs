//! hookline's durable queue. One trait per role ([`Subscribers`], [`DeliveryQueue`],
//! [`DeadLetters`], [`Resends`], [`PolicyRecords`], [`CapacityRecords`], [`Liveness`];
//! [`Store`] is all of them) that every backend implements, and one conformance suite
//! (`tests/it/conformance/`) that every backend passes, so the dispatcher and the API never know which database they
//! run on. What differs between backends that a caller must know is [`Backend`].
//!
//! The traits are shaped by the invariants: `publish` commits an event with all its deliveries in
//! one transaction; `claim_due` leases due deliveries straight from the due-time index and never
//! past a subscriber's in-flight cap; `complete` is fenced by the lease, so a worker that lost
//! its lease changes nothing; every transition persists `run_at`, the attempt count and the
//! window atomically. Nothing here reads a clock: `now` is always an argument.

mod claim;
mod error;
mod event_types;
pub(crate) mod fair_share;
pub mod health;
mod migrations;
mod model;
mod paging;
mod postgres;
pub mod repeats;
mod resends;
mod rules;
mod sql;
mod sqlite;
mod stats;
mod tenancy;
#[cfg(feature = "testing")]
pub mod testing;
pub mod type_patterns;
#[cfg(feature = "testing")]
pub use testing::open;

use std::sync::Arc;

use async_trait::async_trait;
use hookline_policy::{Shown, UnixMs};

pub(crate) use claim::*;
pub use error::{BackendError, StoreError};
pub(crate) use event_types::*;
pub use event_types::{MAX_EVENT_TYPES, MAX_SCHEMA_VERSIONS};
pub(crate) use fair_share::*;
pub use migrations::{AppliedMigration, SchemaStatus, Version};
pub use model::*;
pub(crate) use paging::*;
pub use postgres::PostgresStore;
pub(crate) use resends::*;
pub use resends::{
    check_resend, is_resend_suffix, MAX_RESEND_SPAN_MS, MAX_RESEND_TYPES, MAX_RESEND_WALK,
};
pub(crate) use rules::*;
pub use rules::{
    check_rate, check_replay, DEAD_LETTERS_METRIC, MAX_RATE_PER_SECOND, MAX_REPLAY,
    MIN_RATE_PER_SECOND, NO_POLICY,
};
pub(crate) use sql::UNVERSIONED_ERROR;
pub use sqlite::page_cache::{install as install_sqlite_page_cache, PageCacheNotInstalled};
pub use sqlite::SqliteStore;
pub(crate) use stats::*;
pub(crate) use tenancy::*;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Completions under way beside a claim ([`DeliveryQueue::complete_and_claim`]): their results once
/// committed.
pub type Completing =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<CompletionResult>>> + Send>>;

/// Every role at once: what a process that serves the API and delivers holds. Each role is a
/// trait of its own so that a part of hookline can say which it uses; a backend implements
/// each, and this follows.
pub trait Store:
    Liveness
    + Tenants
    + Subscribers
    + DeliveryQueue
    + DeadLetters
    + Resends
    + PolicyRecords
    + CapacityRecords
    + EventTypes
    + Health
{
}

impl<T> Store for T where
    T: Liveness
        + Tenants
        + Subscribers
        + DeliveryQueue
        + DeadLetters
        + Resends
        + PolicyRecords
        + CapacityRecords
        + EventTypes
        + Health
{
}

/// Whether the store takes commits, and what keeps failing inside it.
#[async_trait]
pub trait Liveness: Send + Sync + 'static {
    /// Commits a one-row write. A store can answer reads while refusing writes (a read-only
    /// file or replica, a full disk, a lock held elsewhere); only a commit shows that it can
    /// take events.
    async fn heartbeat(&self, now: UnixMs) -> Result<()>;

    /// Why work the store does on its own keeps failing, if it does (maintenance a full disk
    /// stops while small commits still go through): a store in that state is not healthy
    /// whatever a heartbeat says.
    fn maintenance_failure(&self) -> Option<String> {
        None
    }
}

/// Tenants: the platform's customers. A tenant's subscribers get its events only; its quotas
/// are kept where what they count is written (a subscriber's creation, a publish).
#[async_trait]
pub trait Tenants: Send + Sync + 'static {
    /// An id any tenant ever had (a deleted one's too): `Conflict`.
    async fn create_tenant(&self, new: NewTenant, now: UnixMs) -> Result<Tenant>;

    /// A deleted tenant is `NotFound`.
    async fn get_tenant(&self, id: &str) -> Result<Tenant>;

    /// In the order they were created.
    async fn list_tenants(&self, limit: u32, cursor: Option<String>) -> Result<Page<Tenant>>;

    /// A lowered quota takes nothing away: subscribers past a new `max_subscribers` stay.
    async fn update_tenant(&self, id: &str, patch: TenantPatch, now: UnixMs) -> Result<Tenant>;

    /// Final, at once: its subscribers are revoked as [`Subscribers::revoke_subscriber`]
    /// revokes one (their waiting deliveries die `subscription_revoked`), and the tenant is
    /// gone; its id is never used again. Answers the tenant as it was.
    async fn delete_tenant(&self, id: &str, now: UnixMs) -> Result<Tenant>;

    /// The deliveries of tenant `id`'s subscribers, by state (zero for one that does not
    /// exist). It counts rows: for a tenant's overview, read on request.
    async fn tenant_counts(&self, id: &str) -> Result<StateCounts>;

    /// A portal session for an existing tenant (else `NotFound`).
    async fn create_portal_session(
        &self,
        new: NewPortalSession,
        now: UnixMs,
    ) -> Result<PortalSession>;

    /// The session whose token hashes to `token_sha256` (lower-case hex), if it may be used at
    /// `now`: not revoked, not expired, and its tenant not deleted.
    async fn active_portal_session(
        &self,
        token_sha256: &str,
        now: UnixMs,
    ) -> Result<Option<PortalSession>>;

    /// Revokes tenant `tenant_id`'s session `id` at once (`NotFound` if it has no such session;
    /// one already revoked is answered as it is).
    async fn revoke_portal_session(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMs,
    ) -> Result<PortalSession>;
}

/// Subscribers: their settings, secrets and revocation.
#[async_trait]
pub trait Subscribers: Send + Sync + 'static {
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
}

/// The queue itself: events in, deliveries claimed, attempted, completed, expired and read.
#[async_trait]
pub trait DeliveryQueue: Send + Sync + 'static {
    /// Fires when another process may have made deliveries due (a publish, a resume, a
    /// replay). `None` where no other process can ([`Backend::shared`] is false): this
    /// process's own API wakes the dispatcher directly.
    fn wakeups(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Commits the event and one delivery per matching, non-revoked subscriber, all at once.
    async fn publish(&self, event: NewEvent, now: UnixMs) -> Result<PublishOutcome>;

    async fn get_event(&self, id: &str) -> Result<Event>;

    /// Events newest first (by acceptance, then id), each with its delivery counts.
    async fn list_events(
        &self,
        filter: EventFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<EventSummary>>;

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

    /// [`DeliveryQueue::complete`] (at `claim.now`) and [`DeliveryQueue::claim_due`] together.
    /// Each result stands on its own: completions that failed are the caller's to retry, and
    /// what the claim leased is the caller's to send whatever became of them (a claim that
    /// fails does not undo the completions). The claim's deliveries never wait for the
    /// completions to commit: the completions come back as a future ([`Completing`]), since a
    /// large batch of them (attempts timing out together) takes long enough to hold up a
    /// healthy subscriber's first attempt. Whether the claim sees the slots the completions
    /// free is the backend's: otherwise they are the caller's next claim's.
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
    /// Reads the window index only. Answers the subscriber of each delivery that died (for
    /// the dead letters counted by subscriber), as many as died.
    async fn expire_windows(&self, sweep: WindowSweep) -> Result<Vec<String>>;

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

    /// Deletes up to `batch` delivered deliveries last changed before `before`, with their
    /// attempt history, and answers how many. Deliveries a replay audit names are kept. Small
    /// batches keep each transaction short so workers are never blocked for long.
    async fn prune_delivered(&self, before: UnixMs, batch: u32) -> Result<u64>;
}

/// Dead letters, and the audited replays that release them.
#[async_trait]
pub trait DeadLetters: Send + Sync + 'static {
    async fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<DeadLetter>>;

    /// Dead letters by reason and subscriber (those that died at or after `since`, of
    /// `tenant_id`'s subscribers when given), largest groups first, at most `limit` groups. It
    /// counts every dead letter since `since`: for an operator's look, not a hot path.
    async fn dead_letter_groups(
        &self,
        since: UnixMs,
        tenant_id: Option<String>,
        limit: u32,
    ) -> Result<Vec<DeadLetterGroup>>;

    /// How many dead letters that died at or after `since` are still dead, by reason (through
    /// an index on the time of death: cheap for a recent `since`).
    async fn dead_letters_by_reason(
        &self,
        since: UnixMs,
        tenant_id: Option<String>,
    ) -> Result<Vec<(hookline_policy::DeadReason, u64)>>;

    /// Moves up to `limit` dead letters matching the filter back to the queue, with a fresh
    /// budget and window, released at most `per_second`, and records the audit, atomically.
    /// Subscribers that are revoked are never selected.
    async fn replay(&self, request: ReplayRequest, now: UnixMs) -> Result<Replay>;

    /// The ids `replay` would select for this request now, in its order; changes nothing.
    async fn preview_replay(&self, request: ReplayRequest) -> Result<Vec<String>>;

    async fn get_replay(&self, id: &str) -> Result<Replay>;

    /// `tenant_id`: only the replays made for that tenant.
    async fn list_replays(
        &self,
        tenant_id: Option<String>,
        order: ListOrder,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Replay>>;
}

/// Resends: new deliveries of events already published, to one subscriber, for one that lost
/// what it was sent; bounded, paced and audited as replays are.
#[async_trait]
pub trait Resends: Send + Sync + 'static {
    /// Makes a delivery to `request.subscriber_id` of each of up to `limit` events its tenant
    /// published in the range (oldest first) whose type the subscriber takes now and the
    /// request names, each `<event id>:<subscriber id>:resend-<n>`, with a fresh budget and
    /// window, released at most `per_second` (held while the subscriber is paused), and records
    /// the audit, atomically. An unknown subscriber is `NotFound`, a revoked one `Conflict`.
    async fn resend(&self, request: ResendRequest, now: UnixMs) -> Result<Resend>;

    /// The event ids `resend` would select for this request now, in its order; changes nothing.
    async fn preview_resend(&self, request: ResendRequest) -> Result<Vec<String>>;

    async fn get_resend(&self, id: &str) -> Result<Resend>;

    async fn list_resends(
        &self,
        filter: ResendFilter,
        order: ListOrder,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Resend>>;
}

/// Named retry policies and the rollouts that try them on a cohort.
#[async_trait]
pub trait PolicyRecords: Send + Sync + 'static {
    /// Fires when another process may have started or changed a rollout (`None` where no
    /// other process can: this process's own API makes every change).
    fn policy_changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

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
}

/// What the capacity model reads and keeps: the backlog, what waits, the meters.
#[async_trait]
pub trait CapacityRecords: Send + Sync + 'static {
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
}

/// The event type catalog: the platform's, shared by every tenant. A type is never deleted and
/// its name never reused; its schema versions are added or replaced, never removed.
#[async_trait]
pub trait EventTypes: Send + Sync + 'static {
    /// Fires when another process may have changed the catalog (`None` where no other process
    /// can: this process's own API makes every change).
    fn event_type_changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// A name any type has: `Conflict`. Past [`MAX_EVENT_TYPES`]: `OverQuota`.
    async fn create_event_type(&self, new: NewEventType, now: UnixMs) -> Result<EventType>;

    async fn get_event_type(&self, name: &str) -> Result<EventType>;

    /// In the order they were registered.
    async fn list_event_types(&self, limit: u32, cursor: Option<String>)
        -> Result<Page<EventType>>;

    /// Past [`MAX_SCHEMA_VERSIONS`] versions: `Invalid`, and nothing changes.
    async fn update_event_type(
        &self,
        name: &str,
        patch: EventTypePatch,
        now: UnixMs,
    ) -> Result<EventType>;

    /// The sum of every type's `revision`: each write adds one to it, in whatever order
    /// concurrent writes commit, so a copy of the catalog whose sum differs is stale. It reads
    /// one small column of a bounded table.
    async fn event_types_revision(&self) -> Result<i64>;
}

/// Subscriber health as hookline tells it (`health.rs`), the endpoint lifecycle, and what the
/// operational events read.
#[async_trait]
pub trait Health: Send + Sync + 'static {
    /// Pauses every active subscriber the request names, with `status_reason`
    /// `auto_disabled`, and answers them. Atomic per row: one that succeeded since it was read
    /// is not paused.
    async fn auto_disable(&self, request: health::AutoDisable) -> Result<Vec<Subscriber>>;

    /// Subscribers with something to watch (failing, told of, or revoked and not told of), by
    /// id after `after`, at most `limit`, through the index of those alone.
    async fn watched_subscribers(
        &self,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<health::Watched>>;

    /// Records that `id`'s operators were told `to` (begun at `at`), if what was last told is
    /// still `from`; `false` when another process told first.
    async fn set_told(
        &self,
        id: &str,
        from: Option<health::Condition>,
        to: Option<(health::Condition, UnixMs)>,
    ) -> Result<bool>;

    /// Replays made at or after `since`, not yet recorded finished, whose deliveries have all
    /// ended, oldest first, at most `limit`.
    async fn finished_replays(&self, since: UnixMs, limit: u32) -> Result<Vec<Replay>>;

    /// Records that replay `id` was seen to finish at `at`; `false` when it already was.
    async fn set_replay_finished(&self, id: &str, at: UnixMs) -> Result<bool>;

    /// How many dead letters that died at or after `since` are still dead, by reason, leaving
    /// out subscriber `except`'s (the operational endpoint's: never told about itself).
    async fn dead_letter_inflow(
        &self,
        since: UnixMs,
        except: &str,
    ) -> Result<Vec<(hookline_policy::DeadReason, u64)>>;
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

/// What a backend is, as the processes that run on it need to know it: read from its URL
/// before anything is opened, since a configuration's defaults follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    /// Its name, for messages.
    pub name: &'static str,
    /// Whether several processes may share it (api and worker roles, a fleet of workers);
    /// otherwise one process serves it, and it locks the store for that process.
    pub shared: bool,
    /// Delivery slots a process has when its configuration sets none. A slot freed by an
    /// attempt stays idle until the next claim answers: a claim on a shared database is
    /// network round trips and a commit per statement, several times a SQLite writer job, so
    /// the same rate needs more slots there (docs/perf-journal.md, "Delivery slots by
    /// database": on SQLite 1,024 slots passed the memory target; on PostgreSQL 2,048 made
    /// claims too large while publishes ran).
    pub default_slots: u64,
}

const SQLITE: Backend = Backend {
    name: "SQLite",
    shared: false,
    default_slots: 512,
};

const POSTGRES: Backend = Backend {
    name: "PostgreSQL",
    shared: true,
    default_slots: 1024,
};

impl Backend {
    /// The backend `url` names (`sqlite://PATH`, `postgres://...`, `postgresql://...`).
    pub fn of(url: &str) -> Result<Backend> {
        Ok(match Location::of(url)? {
            Location::Sqlite(_) => SQLITE,
            Location::Postgres(_) => POSTGRES,
        })
    }
}

/// Where a database URL points, by backend.
enum Location<'a> {
    /// The embedded default: a file path.
    Sqlite(&'a str),
    Postgres(&'a str),
}

impl<'a> Location<'a> {
    fn of(url: &'a str) -> Result<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Location::Postgres(url));
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::Invalid(
                    "sqlite:// needs a file path, e.g. sqlite://hookline.db".into(),
                ));
            }
            return Ok(Location::Sqlite(path));
        }
        Err(StoreError::Invalid(format!(
            "unsupported URL {url:?}; expected sqlite://PATH or postgres://..."
        )))
    }
}

/// Opens the backend a database URL names: `sqlite://PATH` (the embedded default) or
/// `postgres://...` / `postgresql://...` (the scale-out backend), running its migrations.
pub async fn open_with(url: &str, options: &OpenOptions) -> Result<Arc<dyn Store>> {
    Ok(match Location::of(url)? {
        Location::Postgres(url) => Arc::new(PostgresStore::open(url, options.pool_size).await?),
        Location::Sqlite(path) => Arc::new(SqliteStore::open(path, options).await?),
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
    match Location::of(url)? {
        Location::Postgres(url) => PostgresStore::schema_status(url).await,
        Location::Sqlite(path) => {
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
    match Location::of(url)? {
        Location::Postgres(_) => Err(StoreError::Invalid(POSTGRES_BACKUPS.into())),
        Location::Sqlite(path) => {
            let path = path.to_owned();
            blocking(move || sqlite::backup(&path, &to)).await
        }
    }
}

/// Replaces the SQLite store at `url` with the backup `from`, refusing while anything has the
/// store open (a hookline serving from it).
pub async fn restore(from: std::path::PathBuf, url: &str) -> Result<BackupSummary> {
    match Location::of(url)? {
        Location::Postgres(_) => Err(StoreError::Invalid(POSTGRES_BACKUPS.into())),
        Location::Sqlite(path) => {
            let path = path.to_owned();
            blocking(move || sqlite::restore(&from, &path)).await
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::caused_by("a blocking store task", e))?
}
