//! hookline's durable queue. One trait, [`Store`], that every backend implements and one
//! conformance suite (`tests/conformance.rs`) that every backend passes, so the dispatcher and
//! the API never know which database they run on.
//!
//! The trait is shaped by the invariants: `publish` commits an event with all its deliveries in
//! one transaction; `claim_due` leases due deliveries straight from the due-time index and never
//! past a subscriber's in-flight cap; `complete` is fenced by the lease, so a worker that lost
//! its lease changes nothing; every transition persists `run_at`, the attempt count and the
//! window atomically. Nothing here reads a clock: `now` is always an argument.

mod migrations;
mod model;
mod postgres;
mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

use async_trait::async_trait;
use hookline_policy::{BreakerConfig, BreakerState, DeadReason, Outcome, UnixMs};

pub use migrations::{AppliedMigration, SchemaStatus, Version};
pub use model::*;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

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
    #[error("storage failure: {0}")]
    Backend(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Commits a one-row write. A store can answer reads while refusing writes (a read-only
    /// file or replica, a full disk, a lock held elsewhere); only a commit shows that it can
    /// take events.
    async fn heartbeat(&self, now: UnixMs) -> Result<()>;

    /// Fires when another process may have made deliveries due (a publish, a resume, a
    /// replay), for backends that several processes share. `None` for single-process backends,
    /// whose own API wakes the dispatcher directly.
    fn wakeups(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    async fn create_subscriber(&self, new: NewSubscriber, now: UnixMs) -> Result<Subscriber>;
    async fn get_subscriber(&self, id: &str) -> Result<Subscriber>;
    async fn list_subscribers(
        &self,
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
    /// The earliest `run_at` among deliveries waiting to be claimed, the earliest lease expiry
    /// among deliveries in flight, and the earliest end of a waiting delivery's window
    /// (`window_ms` long): when an idle worker next has something to do.
    async fn next_wakeup(&self, window_ms: i64) -> Result<Option<UnixMs>>;
    /// Ends, as `window_expired` and without an attempt, up to `sweep.limit` deliveries not in
    /// flight (scheduled, due, held for a paused subscriber, deferred by a breaker, waiting for
    /// a rate limit or a slot) whose window has ended, recording what each was waiting on.
    /// Reads the window index only. Answers how many died.
    async fn expire_windows(&self, sweep: WindowSweep) -> Result<u64>;
    /// Depths by state and the oldest waiting deliveries (`max_in_flight_per_subscriber` is the
    /// cap of subscribers without their own). It counts every row, so callers run it on an
    /// interval, never per scrape.
    async fn queue_stats(
        &self,
        now: UnixMs,
        max_in_flight_per_subscriber: u32,
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

    /// Moves up to `limit` dead letters matching the filter back to the queue, with a fresh
    /// budget and window, released at most `per_second`, and records the audit, atomically.
    /// Subscribers that are revoked are never selected.
    async fn replay(&self, request: ReplayRequest, now: UnixMs) -> Result<Replay>;
    /// The ids `replay` would select for this request now, in its order; changes nothing.
    async fn preview_replay(&self, request: ReplayRequest) -> Result<Vec<String>>;
    async fn get_replay(&self, id: &str) -> Result<Replay>;
    async fn list_replays(&self, limit: u32, cursor: Option<String>) -> Result<Page<Replay>>;

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
    /// When a subscriber's circuit breaker opens, and for how long.
    pub breaker: BreakerConfig,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            breaker: BreakerConfig {
                failures: 5,
                cool_down: std::time::Duration::from_secs(30),
                max_cool_down: std::time::Duration::from_secs(300),
            },
        }
    }
}

/// Opens the backend a database URL names with default options.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    open_with(url, &OpenOptions::default()).await
}

/// Which backend a database URL names.
enum Backend<'a> {
    /// The embedded default: a file path.
    Sqlite(&'a str),
    Postgres(&'a str),
}

fn backend(url: &str) -> Result<Backend<'_>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
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
        Backend::Postgres(url) => {
            Arc::new(PostgresStore::open(url, options.pool_size, options.breaker).await?)
        }
        Backend::Sqlite(path) => Arc::new(SqliteStore::open(path, options.breaker).await?),
    })
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

/// The subscriber a patch makes of `current`, and whether it resumes a paused subscriber (whose
/// held deliveries must then be released). Revocation is final and is not a patch.
/// The heartbeat write, in SQL both backends take (SQLite reads `$1` as parameter 1).
pub(crate) const HEARTBEAT: &str = "INSERT INTO hookline_heartbeat (id, beat_at) VALUES (1, $1)
     ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at";

pub(crate) fn patched(current: Subscriber, patch: SubscriberPatch) -> Result<(Subscriber, bool)> {
    if current.status == SubscriberStatus::Revoked {
        return Err(StoreError::Conflict(format!(
            "subscriber {:?} is revoked; revocation is final",
            current.id
        )));
    }
    let status = patch.status.unwrap_or(current.status);
    if status == SubscriberStatus::Revoked {
        return Err(StoreError::Invalid(
            "a subscriber is revoked by deleting it, not by a status change".into(),
        ));
    }
    let resumed = current.status == SubscriberStatus::Paused && status == SubscriberStatus::Active;
    Ok((
        Subscriber {
            url: patch.url.unwrap_or(current.url),
            event_types: patch.event_types.unwrap_or(current.event_types),
            status,
            max_in_flight: patch.max_in_flight.unwrap_or(current.max_in_flight),
            rate_limit_per_second: patch
                .rate_limit_per_second
                .unwrap_or(current.rate_limit_per_second),
            payload_version: patch.payload_version.unwrap_or(current.payload_version),
            headers: patch.headers.unwrap_or(current.headers),
            ..current
        },
        resumed,
    ))
}

/// What a rotation keeps of the current secret: it stays valid until `grace_until`, unless the
/// grace period is already over. Revoked subscribers have nothing to rotate.
pub(crate) fn rotation(
    current: &Subscriber,
    grace_until: UnixMs,
    now: UnixMs,
) -> Result<(Option<String>, Option<UnixMs>)> {
    if current.status == SubscriberStatus::Revoked {
        return Err(StoreError::Conflict(format!(
            "subscriber {:?} is revoked; revocation is final",
            current.id
        )));
    }
    Ok(if grace_until > now {
        (Some(current.secret.clone()), Some(grace_until))
    } else {
        (None, None)
    })
}

/// Counts deliveries that just died, for `hookline_dead_letters_total{reason}`: the one place
/// every backend reports dead-letter inflow, whichever path killed them.
pub(crate) fn count_dead(reason: DeadReason, n: u64) {
    if n > 0 {
        metrics::counter!("hookline_dead_letters_total", "reason" => reason.as_str()).increment(n);
    }
}

/// Why a delivery is leased: a claim of a due delivery, or a rescue of one whose lease ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseKind {
    Claim,
    Rescue,
}

/// A delivery row read for a claim or a rescue, before it is leased. Both backends read the
/// same columns ([`DUE_COLUMNS`]) into it.
pub(crate) struct DueRow {
    pub key: i64,
    pub id: String,
    pub event_id: String,
    pub subscriber_id: String,
    pub attempts: u32,
    pub first_seen: UnixMs,
    pub window_start: UnixMs,
    pub run_at: UnixMs,
    /// The payload version it sends; `None` (rows written before versions) sends the latest.
    pub payload_version: Option<i64>,
    /// When it last changed: for a delivery in flight, when its attempt was claimed (a rescue
    /// leaves it alone, so a lost attempt is recorded with its real start).
    pub claimed_at: UnixMs,
}

impl DueRow {
    /// The leased delivery: `attempt` is the number of the attempt the lease is for.
    pub fn leased(
        self,
        lease: i64,
        attempt: u32,
        kind: LeaseKind,
        destination: Arc<Destination>,
        event: Arc<EventBody>,
    ) -> ClaimedDelivery {
        let lost_attempt_started_at = match kind {
            LeaseKind::Claim => None,
            LeaseKind::Rescue => Some(self.claimed_at),
        };
        ClaimedDelivery {
            key: DeliveryKey(self.key),
            id: self.id,
            lease,
            attempt,
            first_seen: self.first_seen,
            window_start: self.window_start,
            due_at: self.run_at,
            lost_attempt_started_at,
            destination,
            event,
        }
    }
}

/// What one claim may still take of each subscriber: its in-flight cap (its own, or the default,
/// or one probe while its breaker is half-open) and its rate limit. Both backends run every due
/// row through this, in due order.
pub(crate) struct ClaimBudget {
    now: UnixMs,
    default_cap: u32,
    retries_left: usize,
    excluded: std::collections::HashSet<String>,
    /// Per subscriber: slots left, and the rate limiter's next admission time.
    subscribers: std::collections::HashMap<String, (u32, Option<UnixMs>)>,
}

/// The answer to publishing an id that exists: the original answer when the type and every
/// payload version are the same, a conflict when anything differs.
pub(crate) fn republished(
    event: NewEvent,
    existing: EventReceipt,
    payload: &str,
    payload_version: i64,
    earlier_payloads: &[(i64, String)],
) -> PublishOutcome {
    let same = existing.event_type == event.event_type
        && payload == event.payload
        && payload_version == event.payload_version
        && earlier_payloads == event.earlier_payloads.as_slice();
    if same {
        PublishOutcome::AlreadyAccepted(existing)
    } else {
        PublishOutcome::Conflict
    }
}

/// The error a delivery dies with when the event has no version its subscriber accepts.
pub(crate) const UNVERSIONED_ERROR: &str = "no payload version at or below ";

/// The columns after `event_id, subscriber_id` of a delivery a publish fans out to subscriber
/// `s`, in either backend's placeholders (`?` or `$`), reading the event's versions from
/// `versions`, a row source with a column `v` (parameters: 3 now, 4 the latest version, 5 every version as an
/// array, 6 the oldest version, 7 the dead reason and 8 the error of an unversioned delivery).
/// Its payload version is the highest at or below the subscriber's pin (the latest when
/// unpinned); a subscriber pinned below every version gets a delivery that is dead at once.
/// A paused subscriber's deliveries are held from the start (so that an older release, whose
/// claims read the status without a lock, finds them held and its resume releases them); the
/// PostgreSQL publish first share-locks the paused subscribers it fans out to, which orders it
/// with a concurrent resume.
pub(crate) fn fan_out(placeholder: char, versions: &str) -> String {
    FAN_OUT
        .replace("VERSIONS", versions)
        .replace('?', &placeholder.to_string())
}

const FAN_OUT: &str = "
    CASE WHEN s.payload_version < ?6 THEN 'dead' ELSE 'scheduled' END,
    CASE WHEN s.payload_version < ?6 THEN FALSE ELSE s.status = 'paused' END, ?3, ?3, CASE WHEN s.payload_version < ?6 THEN NULL ELSE CAST(?3 AS BIGINT) END, ?3,
    CASE WHEN s.payload_version IS NULL OR s.payload_version >= ?4 THEN ?4
         WHEN s.payload_version < ?6 THEN NULL
         ELSE (SELECT max(v) FROM VERSIONS WHERE v <= s.payload_version) END,
    CASE WHEN s.payload_version < ?6 THEN ?7 END,
    CASE WHEN s.payload_version < ?6 THEN CAST(?3 AS BIGINT) END,
    CASE WHEN s.payload_version < ?6 THEN ?8 || s.payload_version END";

/// The dead letters a replay selects, in either backend's placeholders (parameters: 1 the
/// reason, 2 the subscriber or NULL, 3 the limit): `seq, id`, the subscriber's pin and the
/// version the replay would send ([`REPLAY_VERSION`]). Oldest dead first, then by key: the
/// order `list_dead_letters` pages in, so listing N and replaying N selects the same N.
pub(crate) fn replay_selection(placeholder: char) -> String {
    format!(
        "SELECT d.seq, d.id, s.payload_version, {REPLAY_VERSION}
         FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
         WHERE d.state = 'dead' AND d.dead_reason = ?1
           AND (CAST(?2 AS TEXT) IS NULL OR d.subscriber_id = ?2)
           AND s.status != 'revoked'
         ORDER BY d.dead_at, d.seq LIMIT ?3"
    )
    .replace('?', &placeholder.to_string())
}

/// For reads: the payload version delivery `d` sends (or sent). Rows written before payload
/// versions (NULL) send the event's latest; a delivery that died for want of a version has none.
pub(crate) const SENT_VERSION: &str =
    "CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
         WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
         ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END";

/// The payload version a replayed delivery `d` of subscriber `s` sends: chosen again by the
/// subscriber's pin at replay time, the highest version at or below it (NULL: none).
pub(crate) const REPLAY_VERSION: &str = "(SELECT max(v) FROM (
        SELECT e.payload_version AS v FROM events e WHERE e.id = d.event_id
        UNION ALL SELECT p.version FROM event_payloads p WHERE p.event_id = d.event_id) AS versions
     WHERE s.payload_version IS NULL OR v <= s.payload_version)";

/// The columns both backends read into a [`DueRow`], in its order.
pub(crate) const DUE_COLUMNS: &str = "seq, id, event_id, subscriber_id, attempts, first_seen, \
     window_start, run_at, payload_version, updated_at";

/// How an outcome is stored: a lost attempt as `retryable` with the `lost` flag, so releases
/// that predate `lost` still read the history (they see a retryable failure).
pub(crate) fn stored_outcome(outcome: Outcome) -> (&'static str, Option<bool>) {
    match outcome {
        Outcome::Lost => (Outcome::Retryable.as_str(), Some(true)),
        other => (other.as_str(), None),
    }
}

/// The outcome a history row records, from its `outcome` and `lost` columns.
pub(crate) fn read_outcome(outcome: &str, lost: Option<bool>) -> Option<Outcome> {
    match lost {
        Some(true) => Some(Outcome::Lost),
        _ => Outcome::parse(outcome),
    }
}

/// What a claim needs to know of a subscriber, beyond its status.
pub(crate) struct Limits<'a> {
    pub id: &'a str,
    pub breaker: hookline_policy::Breaker,
    pub max_in_flight: Option<u32>,
    pub rate_limit_per_second: Option<f64>,
    pub rate_next_at: Option<UnixMs>,
}

impl<'a> Limits<'a> {
    /// Just what bounds its deliveries in flight (its cap and its breaker), as
    /// [`ClaimBudget::unclaimable`] needs.
    pub(crate) fn in_flight_bound(
        id: &'a str,
        max_in_flight: Option<u32>,
        open_until: Option<UnixMs>,
    ) -> Self {
        Limits {
            id,
            breaker: hookline_policy::Breaker {
                open_until,
                ..Default::default()
            },
            max_in_flight,
            rate_limit_per_second: None,
            rate_next_at: None,
        }
    }

    /// How many of its deliveries may be in flight now: its own cap or the default, the one
    /// probe while its breaker is half-open, none while it is open.
    fn cap(&self, now: UnixMs, default_cap: u32) -> u32 {
        match self.breaker.state(now) {
            BreakerState::Closed => self.max_in_flight.unwrap_or(default_cap),
            BreakerState::HalfOpen => 1,
            BreakerState::Open { .. } => 0,
        }
    }
}

impl Subscriber {
    pub(crate) fn limits(&self) -> Limits<'_> {
        Limits {
            id: &self.id,
            breaker: self.breaker,
            max_in_flight: self.max_in_flight,
            rate_limit_per_second: self.rate_limit_per_second,
            rate_next_at: self.rate_next_at,
        }
    }
}

/// What to do with one due row.
pub(crate) enum Admission {
    Take,
    /// Leave it due: its subscriber is at its cap, rate-limited, or retries are used up.
    Skip,
    /// Its subscriber's breaker is open: move it to the half-open time.
    Defer(UnixMs),
}

impl ClaimBudget {
    pub fn new(request: &ClaimRequest) -> Self {
        Self {
            now: request.now,
            default_cap: request.max_in_flight_per_subscriber,
            retries_left: request.max_retries,
            excluded: request.exclude_subscribers.iter().cloned().collect(),
            subscribers: Default::default(),
        }
    }

    /// The subscribers none of whose due rows this claim can take, for the backend to leave out
    /// of its scan: excluded by the caller, rate-limited until later (`rate_limited`), or with
    /// as many in flight as they may have (`busy`: each subscriber with deliveries in flight,
    /// and how many). Skipping their rows one by one instead would let a wall of them, ahead
    /// in due order, use up the scan and hide everyone else's. Open breakers are not here:
    /// their rows are deferred, which moves them out of the way for good.
    pub fn unclaimable<'a>(
        &self,
        busy: impl IntoIterator<Item = (Limits<'a>, u32)>,
        rate_limited: impl IntoIterator<Item = String>,
    ) -> Vec<String> {
        let full = busy.into_iter().filter_map(|(limits, in_flight)| {
            let open = matches!(limits.breaker.state(self.now), BreakerState::Open { .. });
            (!open && in_flight >= limits.cap(self.now, self.default_cap))
                .then(|| limits.id.to_owned())
        });
        let mut ids: Vec<String> = full
            .chain(rate_limited)
            .chain(self.excluded.iter().cloned())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether retries may still be taken: when not, the backend leaves them out of its scan.
    pub fn takes_retries(&self) -> bool {
        self.retries_left > 0
    }

    /// `in_flight` is how many the subscriber has in flight before this claim.
    pub fn admit(&mut self, s: &Limits<'_>, in_flight: u32, attempts: u32) -> Admission {
        let now = self.now;
        let default_cap = self.default_cap;
        let (slots, next_at) = self.subscribers.entry(s.id.to_owned()).or_insert_with(|| {
            (
                s.cap(now, default_cap).saturating_sub(in_flight),
                s.rate_next_at,
            )
        });
        if let BreakerState::Open { until } = s.breaker.state(now) {
            return Admission::Defer(until);
        }
        if *slots == 0 || (attempts > 0 && self.retries_left == 0) || self.excluded.contains(s.id) {
            return Admission::Skip;
        }
        if let Some(rate) = s.rate_limit_per_second {
            let at = next_at.unwrap_or(now).max(now);
            if at > now {
                return Admission::Skip;
            }
            *next_at = Some(at.saturating_add((1000.0 / rate).ceil() as i64));
        }
        *slots -= 1;
        if attempts > 0 {
            self.retries_left -= 1;
        }
        Admission::Take
    }

    /// New rate-limiter times to persist, per subscriber.
    pub fn rate_updates(&self) -> impl Iterator<Item = (&String, UnixMs)> {
        self.subscribers
            .iter()
            .filter_map(|(id, (_, next))| next.map(|n| (id, n)))
    }
}

/// The due deliveries of one subscriber, as the queue gauges read them.
pub(crate) struct DueGroup {
    pub oldest_due: UnixMs,
    /// The oldest due first attempt, if any.
    pub oldest_first_attempt: Option<UnixMs>,
    pub state: WaitState,
}

/// Splits the due deliveries into those a claim could take now and those waiting on
/// something ([`WaitState::waiting_on`], the rule the window sweep records), with the held
/// deliveries of paused subscribers: the oldest ready first attempt, and the oldest waiting
/// delivery per cause.
pub(crate) fn ready_and_waiting(
    groups: impl IntoIterator<Item = DueGroup>,
    oldest_paused: Option<UnixMs>,
    now: UnixMs,
) -> (Option<UnixMs>, Vec<(WaitingOn, UnixMs)>) {
    let mut ready = None;
    let mut waiting: std::collections::HashMap<WaitingOn, UnixMs> = Default::default();
    for g in groups {
        match g.state.waiting_on(now) {
            None => ready = earliest([ready, g.oldest_first_attempt]),
            Some(cause) => {
                let at = waiting.entry(cause).or_insert(g.oldest_due);
                *at = (*at).min(g.oldest_due);
            }
        }
    }
    if let Some(at) = oldest_paused {
        waiting.insert(WaitingOn::Paused, at);
    }
    let mut waiting: Vec<(WaitingOn, UnixMs)> = waiting.into_iter().collect();
    waiting.sort_by_key(|(cause, _)| cause.as_str());
    (ready, waiting)
}

/// The earliest of several optional times.
pub(crate) fn earliest(times: impl IntoIterator<Item = Option<UnixMs>>) -> Option<UnixMs> {
    times.into_iter().flatten().min()
}

/// The most dead letters one replay may select.
pub const MAX_REPLAY: u32 = 1000;

/// The paces an outsider may ask for, per second: a replay's `per_second` and a subscriber's
/// `rate_limit_per_second`. The floor keeps every time computed from them (a replay's release
/// times, the limiter's next admission) within days, never past what RFC 3339 can render.
pub const MIN_RATE_PER_SECOND: f64 = 0.001;
pub const MAX_RATE_PER_SECOND: f64 = 100_000.0;

/// Refuses a pace outside [`MIN_RATE_PER_SECOND`, `MAX_RATE_PER_SECOND`], naming the field.
pub fn check_rate(field: &str, rate: f64) -> Result<f64> {
    if rate.is_finite() && (MIN_RATE_PER_SECOND..=MAX_RATE_PER_SECOND).contains(&rate) {
        Ok(rate)
    } else {
        Err(StoreError::Invalid(format!(
            "{field} must be a number from {MIN_RATE_PER_SECOND} to {MAX_RATE_PER_SECOND}"
        )))
    }
}

pub(crate) fn validate_replay(req: &ReplayRequest) -> Result<()> {
    if req.limit == 0 || req.limit > MAX_REPLAY {
        return Err(StoreError::Invalid(format!(
            "limit must be between 1 and {MAX_REPLAY}"
        )));
    }
    if let Some(rate) = req.per_second {
        check_rate("per_second", rate)?;
    }
    Ok(())
}

/// When the `i`-th delivery of a replay is released: all at once, or paced `per_second`.
pub(crate) fn release_at(now: UnixMs, i: usize, per_second: Option<f64>) -> UnixMs {
    match per_second {
        Some(rate) => now.saturating_add((i as f64 * 1000.0 / rate) as i64),
        None => now,
    }
}

/// Turns `limit + 1` rows keyed by their position into a page: the extra row means "more".
pub(crate) fn page<K: std::fmt::Display, T>(mut rows: Vec<(K, T)>, limit: u32) -> Page<T> {
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|(key, _)| key.to_string())
    } else {
        None
    };
    Page {
        items: rows.into_iter().map(|(_, item)| item).collect(),
        next_cursor,
    }
}

/// A replay's audit counts the outcome of a delivery `ri` it released only while it is that
/// delivery's latest replay: a later replay of the same delivery counts it instead.
pub(crate) const LATEST_REPLAY: &str = "NOT EXISTS (SELECT 1 FROM replay_items later
    WHERE later.delivery_seq = ri.delivery_seq AND later.replay_seq > ri.replay_seq)";

/// The order dead letters are listed and replayed in: oldest dead first, then by key.
pub(crate) const DEATH_ORDER: &str = "d.dead_at, d.seq";

/// A dead letter's place in [`DEATH_ORDER`], and its cursor (`dead_at.seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeathPosition(pub i64, pub i64);

impl std::fmt::Display for DeathPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

impl DeathPosition {
    /// Parses a dead-letter cursor as [`page`] wrote it; none starts at the beginning.
    pub fn parse(cursor: Option<String>) -> Result<Self> {
        let Some(c) = cursor else {
            return Ok(DeathPosition(i64::MIN, i64::MIN));
        };
        let parsed = c
            .split_once('.')
            .and_then(|(at, seq)| Some(DeathPosition(at.parse().ok()?, seq.parse().ok()?)));
        parsed.ok_or_else(|| {
            StoreError::Invalid(format!("cursor {c:?} is not a cursor this API returned"))
        })
    }
}

/// Parses a list cursor; every backend pages by its row key.
pub(crate) fn parse_cursor(cursor: Option<String>) -> Result<i64> {
    match cursor {
        None => Ok(0),
        Some(c) => c.parse::<i64>().ok().filter(|v| *v >= 0).ok_or_else(|| {
            StoreError::Invalid(format!("cursor {c:?} is not a cursor this API returned"))
        }),
    }
}
