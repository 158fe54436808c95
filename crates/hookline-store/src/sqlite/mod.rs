//! The embedded default backend. One file, no server: a single write connection behind group
//! commit (see `writer`) and a small pool of read connections that WAL lets run beside it.
//! One hookline process owns a database file; running several against one file is what the
//! PostgreSQL backend is for.

mod backup;
mod capacity;
mod dead_tally;
mod event_types;
mod fan_outs;
mod health;
pub(crate) mod page_cache;
mod queries;
mod reads;
mod resends;
mod rollouts;
mod scheduled;
mod schema;
mod serve_lock;
mod subscriber_cache;
mod tenants;
pub(crate) mod writer;
mod writes;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use hookline_policy::UnixMs;
use rusqlite::{Connection, OpenFlags};

use crate::repeats::{Repeats, REPEATED_WARNING_EVERY};
use crate::*;
use serve_lock::ServeLock;
use writer::WriterHandle;

pub(crate) use backup::{backup, restore};
pub(crate) use schema::status as schema_status;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => {
                StoreError::StorageFull(BackendError::new("").with_source(e))
            }
            _ => StoreError::failed(e),
        }
    }
}

pub struct SqliteStore {
    writer: WriterHandle,
    fan_outs: fan_outs::FanOuts,
    readers: Arc<ReaderPool>,
    /// Dropping it (with the store) stops the checkpointer thread.
    _stop_checkpointer: std::sync::mpsc::Sender<()>,
    /// Why checkpoints are failing, while they are (`Store::maintenance_failure`).
    checkpoints_failing: Arc<Mutex<Option<String>>>,
}

/// How often WAL frames are copied back into the database file, off the writer's thread: a
/// commit never waits for a checkpoint, so a large, cold database does not slow claims.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// Past this many WAL frames (~64 MiB of 4 KiB pages) still not copied back, a checkpoint
/// that briefly waits for the writer runs instead, so the WAL cannot grow without bound.
const WAL_FRAMES_LIMIT: i64 = 16_384;

/// Checkpoints until `stop` is dropped; while they fail, `failing` says why (and the warning is
/// logged once every `REPEATED_WARNING_EVERY` with its count, not every 200 ms).
fn run_checkpointer(
    conn: Connection,
    stop: std::sync::mpsc::Receiver<()>,
    failing: Arc<Mutex<Option<String>>>,
) {
    let mut repeats = Repeats::new(REPEATED_WARNING_EVERY);
    let checkpoint = |statement: &str| {
        conn.query_row(statement, [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })
    };
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY)
    {
        // PASSIVE never blocks the writer or readers; it copies what it can.
        let result = checkpoint(queries::CHECKPOINT_PASSIVE).and_then(|(frames, copied)| {
            if frames - copied > WAL_FRAMES_LIMIT {
                checkpoint(queries::CHECKPOINT_TRUNCATE)?;
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                if failing
                    .lock()
                    .expect("checkpoint state poisoned")
                    .take()
                    .is_some()
                {
                    let unlogged = repeats.stopped().unwrap_or(0);
                    tracing::info!(unlogged, "WAL checkpoints succeed again");
                }
            }
            Err(e) => {
                *failing.lock().expect("checkpoint state poisoned") =
                    Some(format!("WAL checkpoints are failing: {e}"));
                if let Some(times) = repeats.occurred(std::time::Instant::now()) {
                    tracing::warn!(error = %e, times, "WAL checkpoint failed");
                }
            }
        }
    }
}

const MAX_IDLE_READERS: usize = 8;

/// Read connections, opened on demand and kept for reuse.
struct ReaderPool {
    path: String,
    idle: Mutex<Vec<Connection>>,
    /// A serving store's lock, let go after the idle connections close (fields drop in order;
    /// a read under way holds the pool until its connection is back or closed).
    _serving: Option<Arc<ServeLock>>,
}

impl ReaderPool {
    fn take(&self) -> Result<Connection> {
        if let Some(conn) = self.idle.lock().expect("reader pool poisoned").pop() {
            return Ok(conn);
        }
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(conn)
    }

    /// Keeps at most `MAX_IDLE_READERS`; a burst of reads does not leave a crowd of open
    /// connections behind.
    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().expect("reader pool poisoned");
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
    }
}

impl SqliteStore {
    /// Opens (creating and migrating) the database at `path`. A serving store
    /// ([`OpenOptions::serving`]) locks the file for this process first (`serve_lock`), and is
    /// refused while another serves it.
    pub async fn open(path: &str, options: &OpenOptions) -> Result<Self> {
        let (path, options) = (path.to_owned(), options.clone());
        tokio::task::spawn_blocking(move || Self::open_blocking(path, &options))
            .await
            .map_err(|e| StoreError::caused_by("opening the SQLite store", e))?
    }

    fn open_blocking(path: String, options: &OpenOptions) -> Result<Self> {
        // Before any connection: see `serve_lock` on why the lock outlives every one of them.
        let serve_lock = options
            .serving
            .then(|| ServeLock::take(&path).map(Arc::new))
            .transpose()?;
        let mut conn = Connection::open(&path).map_err(|e| {
            StoreError::Invalid(format!("database: cannot open SQLite file {path:?}: {e}"))
        })?;
        // WAL lets readers run beside the writer; FULL makes every commit survive power loss,
        // and group commit keeps that to one fsync per batch.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        // The writer touches the due index, the lease index and the rows it updates on every
        // batch; 32 MiB of page cache keeps a million-row table from paging through the OS.
        conn.pragma_update(None, "cache_size", -32_768)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        schema::migrate(&mut conn)?;
        #[cfg(feature = "testing")]
        if let Some(pages) = crate::testing::sqlite_page_cap(&path) {
            conn.pragma_update(None, "max_page_count", pages)?;
        }
        let checkpoint_conn = Connection::open(&path)?;
        checkpoint_conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let (checkpointer, stop) = std::sync::mpsc::channel();
        let checkpoints_failing = Arc::new(Mutex::new(None));
        let failing = checkpoints_failing.clone();
        let checkpointer_lock = serve_lock.clone();
        std::thread::Builder::new()
            .name("hookline-sqlite-checkpoint".into())
            .spawn(move || {
                run_checkpointer(checkpoint_conn, stop, failing);
                drop(checkpointer_lock);
            })
            .map_err(|e| StoreError::caused_by("cannot start the checkpointer", e))?;
        Ok(Self {
            _stop_checkpointer: checkpointer,
            checkpoints_failing,
            writer: WriterHandle::spawn(conn, serve_lock.clone())?,
            fan_outs: Default::default(),
            readers: Arc::new(ReaderPool {
                path,
                idle: Mutex::new(Vec::new()),
                _serving: serve_lock,
            }),
        })
    }

    /// Runs a read on a pooled connection off the async threads.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let pool = self.readers.clone();
        tokio::task::spawn_blocking(move || {
            let conn = pool.take()?;
            let result = f(&conn);
            pool.give_back(conn);
            result
        })
        .await
        .map_err(|e| StoreError::caused_by("a SQLite read", e))?
    }
}

#[async_trait]
impl Liveness for SqliteStore {
    /// The WAL checkpoints, which a full disk stops while small commits still go through.
    fn maintenance_failure(&self) -> Option<String> {
        self.checkpoints_failing
            .lock()
            .expect("checkpoint state poisoned")
            .clone()
    }

    async fn heartbeat(&self, now: UnixMs) -> Result<()> {
        self.writer
            .write(move |w| {
                w.conn.prepare_cached(queries::HEARTBEAT)?.execute([now])?;
                Ok(())
            })
            .await
    }
}

#[async_trait]
impl Tenants for SqliteStore {
    async fn create_tenant(&self, new: NewTenant, now: UnixMs) -> Result<Tenant> {
        self.writer
            .write(move |w| {
                let created = tenants::create(&w.conn, &new, now)?;
                w.tenants.any = true;
                Ok(created)
            })
            .await
    }

    async fn get_tenant(&self, id: &str) -> Result<Tenant> {
        let id = id.to_owned();
        self.read(move |c| tenants::tenant(c, &id)).await
    }

    async fn list_tenants(&self, limit: u32, cursor: Option<String>) -> Result<Page<Tenant>> {
        let after = parse_cursor(cursor)?;
        self.read(move |c| tenants::tenants(c, limit, after)).await
    }

    async fn update_tenant(&self, id: &str, patch: TenantPatch, now: UnixMs) -> Result<Tenant> {
        let id = id.to_owned();
        self.writer
            .write(move |w| tenants::update(&w.conn, &id, patch.clone(), now))
            .await
    }

    async fn delete_tenant(&self, id: &str, now: UnixMs) -> Result<Tenant> {
        let id = id.to_owned();
        self.writer
            .write(move |w| tenants::delete(w, &id, now))
            .await
    }

    async fn tenant_counts(&self, id: &str) -> Result<StateCounts> {
        let id = id.to_owned();
        self.read(move |c| tenants::counts(c, &id)).await
    }

    async fn create_portal_session(
        &self,
        new: NewPortalSession,
        now: UnixMs,
    ) -> Result<PortalSession> {
        self.writer
            .write(move |w| tenants::create_portal_session(&w.conn, &new, now))
            .await
    }

    async fn active_portal_session(
        &self,
        token_sha256: &str,
        now: UnixMs,
    ) -> Result<Option<PortalSession>> {
        let hash = token_sha256.to_owned();
        self.read(move |c| tenants::active_portal_session(c, &hash, now))
            .await
    }

    async fn revoke_portal_session(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMs,
    ) -> Result<PortalSession> {
        let (tenant_id, id) = (tenant_id.to_owned(), id.to_owned());
        self.writer
            .write(move |w| tenants::revoke_portal_session(&w.conn, &tenant_id, &id, now))
            .await
    }
}

#[async_trait]
impl Subscribers for SqliteStore {
    async fn create_subscriber(&self, new: NewSubscriber, now: UnixMs) -> Result<Subscriber> {
        self.writer
            .write(move |w| writes::create_subscriber(&w.conn, new.clone(), now))
            .await
    }

    async fn get_subscriber(&self, id: &str) -> Result<Subscriber> {
        let id = id.to_owned();
        self.read(move |c| reads::subscriber(c, &id)).await
    }

    async fn gone_among(&self, ids: Vec<String>) -> Result<Vec<String>> {
        self.read(move |c| reads::gone_among(c, &ids)).await
    }

    async fn list_subscribers(
        &self,
        filter: SubscriberFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Subscriber>> {
        let after = parse_cursor(cursor)?;
        self.read(move |c| reads::subscribers(c, &filter, limit, after))
            .await
    }

    async fn update_subscriber(
        &self,
        id: &str,
        patch: SubscriberPatch,
        now: UnixMs,
    ) -> Result<Subscriber> {
        let id = id.to_owned();
        self.writer
            .write(move |w| writes::update_subscriber(&w.conn, &id, patch.clone(), now))
            .await
    }

    async fn rotate_secret(
        &self,
        id: &str,
        secret: String,
        grace_until: UnixMs,
        now: UnixMs,
    ) -> Result<Subscriber> {
        let id = id.to_owned();
        self.writer
            .write(move |w| writes::rotate_secret(&w.conn, &id, secret.clone(), grace_until, now))
            .await
    }

    async fn revoke_subscriber(&self, id: &str, now: UnixMs) -> Result<Subscriber> {
        let id = id.to_owned();
        self.writer
            .write(move |w| {
                writes::revoke_subscriber(w, &id, now)?;
                reads::subscriber(&w.conn, &id)
            })
            .await
    }
}

#[async_trait]
impl DeliveryQueue for SqliteStore {
    async fn publish(&self, event: NewEvent, now: UnixMs) -> Result<PublishOutcome> {
        let turn = self.fan_outs.turn(&event.event_type);
        let outcome = self
            .writer
            .write_in(turn, move |w| writes::publish(w, &event, now))
            .await?;
        if let PublishOutcome::Accepted(receipt) = &outcome {
            self.fan_outs
                .accepted(&receipt.event_type, receipt.deliveries);
        }
        Ok(outcome)
    }

    async fn get_event(&self, id: &str) -> Result<Event> {
        let id = id.to_owned();
        self.read(move |c| reads::event(c, &id)).await
    }

    async fn list_events(
        &self,
        filter: EventFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<EventSummary>> {
        let after = EventPosition::parse(cursor)?;
        self.read(move |c| reads::events(c, &filter, limit, after))
            .await
    }

    async fn claim_due(&self, request: ClaimRequest) -> Result<Vec<ClaimedDelivery>> {
        self.writer
            .write(move |w| writes::claim_due(w, &request))
            .await
    }

    async fn rescue_expired(
        &self,
        now: UnixMs,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<ClaimedDelivery>> {
        self.writer
            .write(move |w| writes::rescue_expired(w, now, limit, lease_ms))
            .await
    }

    async fn complete(
        &self,
        completions: Vec<Completion>,
        now: UnixMs,
    ) -> Result<Vec<CompletionResult>> {
        self.writer
            .write(move |w| writes::complete(w, &completions, now))
            .await
    }

    /// Both in one writer job (one commit, not two): the claim sees the completions, so the
    /// slots they free at a subscriber's cap are claimed again at once; nothing is claimed
    /// when the job fails; the completions' future is ready.
    async fn complete_and_claim(
        &self,
        completions: Vec<Completion>,
        claim: ClaimRequest,
    ) -> (Completing, Result<Vec<ClaimedDelivery>>) {
        let job = self
            .writer
            .write(move |w| {
                let completed = writes::complete(w, &completions, claim.now)?;
                Ok((completed, w.undoable(|w| writes::claim_due(w, &claim))))
            })
            .await;
        let (completed, claimed) = match job {
            Ok((completed, claimed)) => (Ok(completed), claimed),
            // The job did not commit: nothing it claimed is leased.
            Err(e) => (Err(e), Ok(Vec::new())),
        };
        (Box::pin(std::future::ready(completed)), claimed)
    }

    async fn next_wakeup(&self, window_ms: i64) -> Result<Option<UnixMs>> {
        self.read(move |c| reads::next_wakeup(c, window_ms)).await
    }

    async fn expire_windows(&self, sweep: WindowSweep) -> Result<Vec<String>> {
        self.writer
            .write(move |w| writes::expire_windows(w, sweep))
            .await
    }

    async fn queue_stats(
        &self,
        now: UnixMs,
        caps: InFlightCaps,
        held_back: &[String],
    ) -> Result<QueueStats> {
        let held_back = held_back.to_vec();
        self.read(move |c| reads::queue_stats(c, now, caps, &held_back))
            .await
    }

    async fn get_delivery(&self, id: &str) -> Result<Delivery> {
        let id = id.to_owned();
        self.read(move |c| reads::delivery(c, &id)).await
    }

    async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Delivery>> {
        let after = parse_cursor_in(cursor, filter.order)?;
        self.read(move |c| reads::deliveries(c, &filter, limit, after))
            .await
    }

    async fn prune_delivered(&self, before: UnixMs, batch: u32) -> Result<u64> {
        self.writer
            .write(move |w| writes::prune_delivered(&w.conn, before, batch))
            .await
    }
}

#[async_trait]
impl DeadLetters for SqliteStore {
    async fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<DeadLetter>> {
        let after = DeathPosition::parse(cursor)?;
        self.read(move |c| reads::dead_letters(c, &filter, limit, after))
            .await
    }

    async fn dead_letter_groups(
        &self,
        since: UnixMs,
        tenant_id: Option<String>,
        limit: u32,
    ) -> Result<Vec<DeadLetterGroup>> {
        self.read(move |c| reads::dead_letter_groups(c, since, tenant_id.as_deref(), limit))
            .await
    }

    async fn dead_letters_by_reason(
        &self,
        since: UnixMs,
        tenant_id: Option<String>,
    ) -> Result<Vec<(hookline_policy::DeadReason, u64)>> {
        self.read(move |c| reads::dead_letters_by_reason(c, since, tenant_id.as_deref()))
            .await
    }

    async fn replay(&self, request: ReplayRequest, now: UnixMs) -> Result<Replay> {
        self.writer
            .write(move |w| {
                let id = writes::replay(w, &request, now)?;
                reads::replay(&w.conn, &id)
            })
            .await
    }

    async fn preview_replay(&self, request: ReplayRequest) -> Result<Vec<String>> {
        self.read(move |c| {
            let selected = writes::replay_selection(c, &request)?;
            Ok(selected.into_iter().map(|(_, id, _, _)| id).collect())
        })
        .await
    }

    async fn get_replay(&self, id: &str) -> Result<Replay> {
        let id = id.to_owned();
        self.read(move |c| reads::replay(c, &id)).await
    }

    async fn list_replays(
        &self,
        tenant_id: Option<String>,
        order: ListOrder,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Replay>> {
        let after = parse_cursor_in(cursor, order)?;
        self.read(move |c| reads::replays(c, tenant_id.as_deref(), order, limit, after))
            .await
    }
}

#[async_trait]
impl Resends for SqliteStore {
    async fn resend(&self, request: ResendRequest, now: UnixMs) -> Result<Resend> {
        self.writer
            .write(move |w| {
                let id = resends::resend(w, &request, now)?;
                resends::get(&w.conn, &id)
            })
            .await
    }

    async fn preview_resend(&self, request: ResendRequest) -> Result<Vec<String>> {
        self.read(move |c| resends::preview(c, &request)).await
    }

    async fn get_resend(&self, id: &str) -> Result<Resend> {
        let id = id.to_owned();
        self.read(move |c| resends::get(c, &id)).await
    }

    async fn list_resends(
        &self,
        filter: ResendFilter,
        order: ListOrder,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Resend>> {
        let after = parse_cursor_in(cursor, order)?;
        self.read(move |c| resends::list(c, &filter, order, limit, after))
            .await
    }
}

#[async_trait]
impl PolicyRecords for SqliteStore {
    async fn create_policy(&self, policy: StoredPolicy) -> Result<StoredPolicy> {
        self.writer
            .write(move |w| writes::create_policy(&w.conn, policy.clone()))
            .await
    }

    async fn get_policy(&self, name: &str) -> Result<StoredPolicy> {
        let name = name.to_owned();
        self.read(move |c| reads::policy(c, &name)).await
    }

    async fn list_policies(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<StoredPolicy>> {
        let after = parse_cursor(cursor)?;
        self.read(move |c| reads::policies(c, limit, after)).await
    }

    async fn start_rollout(&self, rollout: Rollout) -> Result<Rollout> {
        self.writer
            .write(move |w| rollouts::start(&w.conn, rollout.clone()))
            .await
    }

    async fn get_rollout(&self, id: &str) -> Result<Rollout> {
        let id = id.to_owned();
        self.read(move |c| rollouts::rollout(c, &id)).await
    }

    async fn list_rollouts(&self, limit: u32, cursor: Option<String>) -> Result<Page<Rollout>> {
        let after = parse_cursor(cursor)?;
        self.read(move |c| rollouts::rollouts(c, limit, after))
            .await
    }

    async fn change_rollout(
        &self,
        id: &str,
        change: RolloutChange,
        now: UnixMs,
    ) -> Result<Rollout> {
        let id = id.to_owned();
        self.writer
            .write(move |w| rollouts::change(&w.conn, &id, change.clone(), now))
            .await
    }

    async fn policies_in_force(&self) -> Result<PoliciesInForce> {
        self.read(rollouts::in_force).await
    }

    async fn cohort_report(&self, query: CohortQuery) -> Result<CohortReport> {
        self.read(move |c| rollouts::report(c, &query)).await
    }
}

#[async_trait]
impl CapacityRecords for SqliteStore {
    async fn backlog(&self, now: UnixMs) -> Result<Backlog> {
        self.read(move |c| capacity::backlog(c, now)).await
    }

    async fn backlog_waits(&self, now: UnixMs) -> Result<BacklogWaits> {
        self.read(move |c| capacity::backlog_waits(c, now)).await
    }

    async fn record_meter(&self, owner: &str, at: UnixMs, reading: MeterReading) -> Result<()> {
        let owner = owner.to_owned();
        self.writer
            .write(move |w| capacity::record_meter(&w.conn, &owner, at, reading))
            .await
    }

    async fn meter_totals(&self, since: UnixMs) -> Result<MeterReading> {
        self.read(move |c| capacity::meter_totals(c, since)).await
    }

    async fn record_shown(&self, at: UnixMs, shown: Shown) -> Result<()> {
        self.writer
            .write(move |w| capacity::record_shown(&w.conn, at, shown))
            .await
    }

    async fn shown(&self) -> Result<Option<Shown>> {
        self.read(capacity::shown).await
    }

    async fn attempt_history(&self, since: UnixMs, limit: u32) -> Result<AttemptHistory> {
        self.read(move |c| capacity::attempt_history(c, since, limit))
            .await
    }
}

#[async_trait]
impl EventTypes for SqliteStore {
    async fn create_event_type(&self, new: NewEventType, now: UnixMs) -> Result<EventType> {
        self.writer
            .write(move |w| event_types::create(&w.conn, &new, now))
            .await
    }

    async fn get_event_type(&self, name: &str) -> Result<EventType> {
        let name = name.to_owned();
        self.read(move |c| event_types::event_type(c, &name)).await
    }

    async fn list_event_types(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<EventType>> {
        let after = parse_cursor(cursor)?;
        self.read(move |c| event_types::event_types(c, limit, after))
            .await
    }

    async fn update_event_type(
        &self,
        name: &str,
        patch: EventTypePatch,
        now: UnixMs,
    ) -> Result<EventType> {
        let name = name.to_owned();
        self.writer
            .write(move |w| event_types::update(&w.conn, &name, patch.clone(), now))
            .await
    }

    async fn event_types_revision(&self) -> Result<i64> {
        self.read(event_types::revision).await
    }
}
