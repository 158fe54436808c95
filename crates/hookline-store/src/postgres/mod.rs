//! The scale-out backend: many hookline processes on many machines share one PostgreSQL.
//!
//! What a shared database adds to the SQLite backend's guarantees: claims are made with
//! `FOR UPDATE SKIP LOCKED` under a transaction-scoped advisory lock, so the per-subscriber
//! in-flight cap is counted exactly across every process; every lease names its owner; a
//! publish, resume or replay sends `NOTIFY` so idle workers in other processes wake at once; a
//! rollout's change sends one they read as "the policies changed", and a change to the event
//! type catalog one they read as "the catalog changed".

mod capacity;
mod event_types;
mod health;
mod queries;
mod reads;
mod resends;
mod rollouts;
mod schema;
mod tenants;
mod writes;

use std::fmt::Display;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use hookline_policy::UnixMs;
use tokio::sync::Notify;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls, Row};

use crate::*;

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            // Text PostgreSQL cannot hold, a NUL byte in an id or a filter (SQLite just finds
            // nothing): the caller's input, not a failing store.
            Some(db)
                if *db.code() == tokio_postgres::error::SqlState::CHARACTER_NOT_IN_REPERTOIRE =>
            {
                StoreError::Invalid(
                    "text with a NUL byte, which PostgreSQL cannot store or compare".into(),
                )
            }
            Some(db) => {
                let (code, message) = (db.code().clone(), db.message().to_owned());
                let failure = BackendError::answered(code.code(), &message, e);
                if code == tokio_postgres::error::SqlState::DISK_FULL {
                    StoreError::StorageFull(failure)
                } else if unreachable_state(code.code()) {
                    StoreError::Unreachable(failure)
                } else {
                    StoreError::Backend(failure)
                }
            }
            // The connection closed or its socket failed: the server went away.
            None if e.is_closed() || lost_connection(&e) => {
                StoreError::Unreachable(BackendError::new("").with_source(e))
            }
            None => StoreError::failed(e),
        }
    }
}

/// SQLSTATEs that say the server cannot serve now rather than that the statement failed:
/// connection exceptions (class 08), a server shutting down or starting (57P01 to 57P03), and a
/// read-only transaction (25006: a standby not yet promoted, reached before it was).
fn unreachable_state(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "25006")
}

/// Whether an error without a server answer is a connection lost or refused: an `io::Error`
/// of one of those kinds in its causes. (tokio-postgres wraps its own encoding and parsing
/// failures in `io::Error`s too, of other kinds: those stay storage failures, not a wait.)
fn lost_connection(e: &tokio_postgres::Error) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| connection_lost(io.kind()))
        {
            return true;
        }
        cause = c.source();
    }
    false
}

fn connection_lost(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | NotConnected
            | BrokenPipe
            | UnexpectedEof
            | TimedOut
            | HostUnreachable
            | NetworkUnreachable
    )
}

/// A pool that found no connection in time cannot reach the database now, nor one whose
/// connecting failed without the server's answer (refused, lost, or no host taking writes:
/// `target_session_attrs=read-write` during a failover); a server's answer says why through its
/// SQLSTATE (a password refused is a storage failure, which waiting does not mend).
impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) if e.as_db_error().is_some() => {
                StoreError::from(e)
            }
            deadpool_postgres::PoolError::Backend(e) => StoreError::Unreachable(
                BackendError::new("cannot connect to PostgreSQL").with_source(e),
            ),
            deadpool_postgres::PoolError::Timeout(_) => StoreError::Unreachable(
                BackendError::new("no PostgreSQL connection in time").with_source(e),
            ),
            e => StoreError::caused_by("no PostgreSQL connection", e),
        }
    }
}

/// Statements are prepared once per connection and reused, so a query costs one round trip
/// instead of two (prepare, then execute).
async fn statement(c: &impl GenericClient, sql: &str) -> Result<tokio_postgres::Statement> {
    Ok(c.prepare_cached(sql).await?)
}

pub(super) async fn query(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    Ok(c.query(&statement(c, sql).await?, params).await?)
}

pub(super) async fn query_one(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    Ok(c.query_one(&statement(c, sql).await?, params).await?)
}

pub(super) async fn query_opt(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>> {
    Ok(c.query_opt(&statement(c, sql).await?, params).await?)
}

pub(super) async fn execute(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64> {
    Ok(c.execute(&statement(c, sql).await?, params).await?)
}

/// The model's numbers are unsigned and PostgreSQL's signed: INT columns hold attempts, caps,
/// shares and statuses, BIGINT ones durations and counts. A value read back out of the model
/// type's range is a corrupt row: an error naming the column, never a number wrapped into
/// another.
pub(super) trait Numbers {
    /// INT column `i` as the model's type.
    fn int<T: TryFrom<i32>>(&self, i: usize) -> Result<T>;
    /// Nullable INT column `i` as the model's type.
    fn int_opt<T: TryFrom<i32>>(&self, i: usize) -> Result<Option<T>>;
    /// BIGINT column `i` as the model's type.
    fn bigint<T: TryFrom<i64>>(&self, i: usize) -> Result<T>;
    /// Nullable BIGINT column `i` as the model's type.
    fn bigint_opt<T: TryFrom<i64>>(&self, i: usize) -> Result<Option<T>>;
}

impl Numbers for Row {
    fn int<T: TryFrom<i32>>(&self, i: usize) -> Result<T> {
        in_range(self, i, self.get::<_, i32>(i))
    }

    fn int_opt<T: TryFrom<i32>>(&self, i: usize) -> Result<Option<T>> {
        let v: Option<i32> = self.get(i);
        v.map(|v| in_range(self, i, v)).transpose()
    }

    fn bigint<T: TryFrom<i64>>(&self, i: usize) -> Result<T> {
        in_range(self, i, self.get::<_, i64>(i))
    }

    fn bigint_opt<T: TryFrom<i64>>(&self, i: usize) -> Result<Option<T>> {
        let v: Option<i64> = self.get(i);
        v.map(|v| in_range(self, i, v)).transpose()
    }
}

/// `v`, read from column `i` of `r`, as the model's type.
fn in_range<S: Copy + Display, T: TryFrom<S>>(r: &Row, i: usize, v: S) -> Result<T> {
    T::try_from(v).map_err(|_| reads::corrupt(r.columns()[i].name(), &v.to_string()))
}

/// A number of the model as the INT that stores it. Those stored so are bounded far below
/// `i32::MAX` (attempts by `max_attempts`, caps and shares by the API's limits); one beyond
/// would be stored as the most the column holds, never as a negative number.
pub(super) fn to_int(v: impl TryInto<i32>) -> i32 {
    v.try_into().unwrap_or(i32::MAX)
}

pub struct PostgresStore {
    pool: Pool,
    /// `NOTIFY` channel, one per schema so stores in different schemas do not wake each other.
    channel: String,
    /// Names this process in every lease it takes, for the operator reading a stuck row.
    owner: String,
    /// Where this process's next claim's walk over the tenants starts.
    tenant_cursor: std::sync::Mutex<TenantCursor>,
    wake: Arc<Notify>,
    policy_changes: Arc<Notify>,
    event_type_changes: Arc<Notify>,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl PostgresStore {
    /// `pool_size` connections serve the API and the dispatcher of this process; LISTEN takes
    /// one more.
    pub async fn open(url: &str, pool_size: usize) -> Result<Self> {
        let config = tokio_postgres::Config::from_str(url)
            .map_err(|e| StoreError::Invalid(format!("database: bad PostgreSQL URL: {e}")))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .build()
            .map_err(|e| StoreError::caused_by("cannot build the PostgreSQL pool", e))?;
        let mut client = pool.get().await.map_err(|e| {
            StoreError::Invalid(format!("database: cannot connect to PostgreSQL: {e}"))
        })?;
        schema::migrate(&mut client).await?;
        let schema: String = client.query_one(queries::CURRENT_SCHEMA, &[]).await?.get(0);
        drop(client);
        let channel = format!(
            "hookline_wake_{}",
            schema
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect::<String>()
        );
        let wake = Arc::new(Notify::new());
        let policy_changes = Arc::new(Notify::new());
        let event_type_changes = Arc::new(Notify::new());
        let listener = tokio::spawn(listen(
            config,
            channel.clone(),
            wake.clone(),
            Changes {
                policies: policy_changes.clone(),
                event_types: event_type_changes.clone(),
            },
        ));
        Ok(Self {
            listener,
            pool,
            channel,
            owner: format!(
                "{}:{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "hookline".into()),
                std::process::id()
            ),
            tenant_cursor: Default::default(),
            wake,
            policy_changes,
            event_type_changes,
        })
    }

    /// The schema of the database at `url`, without migrating it.
    pub async fn schema_status(url: &str) -> Result<SchemaStatus> {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(|e| {
            StoreError::Invalid(format!("database: cannot connect to PostgreSQL: {e}"))
        })?;
        let connection = tokio::spawn(connection);
        let status = schema::status(&client).await;
        drop(client);
        let _ = connection.await;
        status
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        Ok(self.pool.get().await?)
    }
}

/// Applies completions in one transaction on a connection of `pool`'s.
async fn complete_on(
    pool: &Pool,
    completions: Vec<Completion>,
    now: UnixMs,
) -> Result<Vec<CompletionResult>> {
    if completions.is_empty() {
        return Ok(Vec::new());
    }
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let results = writes::complete(&tx, completions, now).await?;
    tx.commit().await?;
    Ok(results)
}

/// The `NOTIFY` payload of a rollout's start or change.
pub(super) const POLICY_CHANGE: &str = "policies";

/// What a notification other than a wake-up tells this process: something it keeps a copy of
/// changed.
#[derive(Clone)]
struct Changes {
    /// A rollout started or changed ([`POLICY_CHANGE`]).
    policies: Arc<Notify>,
    /// The event type catalog changed ([`event_types::EVENT_TYPE_CHANGE`]).
    event_types: Arc<Notify>,
}

impl Changes {
    /// Everything may have changed (notifications were missed while not listening).
    fn all(&self) {
        self.policies.notify_one();
        self.event_types.notify_one();
    }
}

/// Keeps a connection LISTENing on the channel and turns notifications into wake-ups (those
/// whose payload is [`POLICY_CHANGE`] or [`event_types::EVENT_TYPE_CHANGE`] into `changes`).
/// When the connection drops it reconnects; meanwhile the dispatcher's poll fallback keeps
/// things moving.
async fn listen(
    config: tokio_postgres::Config,
    channel: String,
    wake: Arc<Notify>,
    changes: Changes,
) {
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
                let pump_wake = wake.clone();
                let pump_changes = changes.clone();
                let pump = tokio::spawn(async move {
                    let _ready = ready_tx;
                    while let Some(message) =
                        std::future::poll_fn(|cx| connection.poll_message(cx)).await
                    {
                        match message {
                            Ok(AsyncMessage::Notification(n)) if n.payload() == POLICY_CHANGE => {
                                pump_changes.policies.notify_one()
                            }
                            Ok(AsyncMessage::Notification(n))
                                if n.payload() == event_types::EVENT_TYPE_CHANGE =>
                            {
                                pump_changes.event_types.notify_one()
                            }
                            Ok(AsyncMessage::Notification(_)) => pump_wake.notify_one(),
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "LISTEN connection failed");
                                break;
                            }
                        }
                    }
                });
                // The channel is an identifier, which no parameter can carry: the schema's name,
                // with anything but letters and digits made `_` (`PostgresStore::open`).
                if let Err(e) = client.batch_execute(&format!("LISTEN {channel}")).await {
                    tracing::warn!(error = %e, "LISTEN failed");
                } else {
                    // Anything published (or changed) while we were not listening is found by
                    // these wake-ups.
                    wake.notify_one();
                    changes.all();
                    let _ = ready_rx.await; // resolves when the pump stops
                }
                pump.abort();
            }
            Err(e) => tracing::warn!(error = %e, "cannot connect for LISTEN"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[async_trait]
impl Liveness for PostgresStore {
    async fn heartbeat(&self, now: UnixMs) -> Result<()> {
        execute(&self.client().await?, queries::HEARTBEAT, &[&now]).await?;
        Ok(())
    }
}

#[async_trait]
impl Tenants for PostgresStore {
    async fn create_tenant(&self, new: NewTenant, now: UnixMs) -> Result<Tenant> {
        tenants::create(&self.client().await?, &new, now).await
    }

    async fn get_tenant(&self, id: &str) -> Result<Tenant> {
        tenants::tenant(&self.client().await?, id).await
    }

    async fn list_tenants(&self, limit: u32, cursor: Option<String>) -> Result<Page<Tenant>> {
        let after = parse_cursor(cursor)?;
        tenants::tenants(&self.client().await?, limit, after).await
    }

    async fn update_tenant(&self, id: &str, patch: TenantPatch, now: UnixMs) -> Result<Tenant> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let t = tenants::update(&tx, id, patch, now).await?;
        tx.commit().await?;
        Ok(t)
    }

    async fn delete_tenant(&self, id: &str, now: UnixMs) -> Result<Tenant> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let t = tenants::delete(&tx, id, now).await?;
        tx.commit().await?;
        Ok(t)
    }

    async fn tenant_counts(&self, id: &str) -> Result<StateCounts> {
        tenants::counts(&self.client().await?, id).await
    }

    async fn create_portal_session(
        &self,
        new: NewPortalSession,
        now: UnixMs,
    ) -> Result<PortalSession> {
        tenants::create_portal_session(&self.client().await?, &new, now).await
    }

    async fn active_portal_session(
        &self,
        token_sha256: &str,
        now: UnixMs,
    ) -> Result<Option<PortalSession>> {
        tenants::active_portal_session(&self.client().await?, token_sha256, now).await
    }

    async fn revoke_portal_session(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMs,
    ) -> Result<PortalSession> {
        tenants::revoke_portal_session(&self.client().await?, tenant_id, id, now).await
    }
}

#[async_trait]
impl Subscribers for PostgresStore {
    async fn create_subscriber(&self, new: NewSubscriber, now: UnixMs) -> Result<Subscriber> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let s = writes::create_subscriber(&tx, new, now).await?;
        tx.commit().await?;
        Ok(s)
    }

    async fn get_subscriber(&self, id: &str) -> Result<Subscriber> {
        reads::subscriber(&self.client().await?, id).await
    }

    async fn gone_among(&self, ids: Vec<String>) -> Result<Vec<String>> {
        reads::gone_among(&self.client().await?, ids).await
    }

    async fn list_subscribers(
        &self,
        filter: SubscriberFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Subscriber>> {
        let after = parse_cursor(cursor)?;
        reads::subscribers(&self.client().await?, &filter, limit, after).await
    }

    async fn update_subscriber(
        &self,
        id: &str,
        patch: SubscriberPatch,
        now: UnixMs,
    ) -> Result<Subscriber> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let s = writes::update_subscriber(&tx, id, patch, now, &self.channel).await?;
        tx.commit().await?;
        Ok(s)
    }

    async fn rotate_secret(
        &self,
        id: &str,
        secret: String,
        grace_until: UnixMs,
        now: UnixMs,
    ) -> Result<Subscriber> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let s = writes::rotate_secret(&tx, id, secret, grace_until, now).await?;
        tx.commit().await?;
        Ok(s)
    }

    async fn revoke_subscriber(&self, id: &str, now: UnixMs) -> Result<Subscriber> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        writes::revoke_subscriber(&tx, id, StatusReason::Deleted, now).await?;
        let s = reads::subscriber(&tx, id).await?;
        tx.commit().await?;
        Ok(s)
    }
}

#[async_trait]
impl DeliveryQueue for PostgresStore {
    fn wakeups(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    async fn publish(&self, event: NewEvent, now: UnixMs) -> Result<PublishOutcome> {
        let mut client = self.client().await?;
        let mut charged = None;
        if let Some(tenant) = &event.tenant_id {
            // A publish of an id already published is answered, not counted against the rate.
            if !tenants::published(&client, &event.id).await? {
                charged = tenants::admit(&mut client, tenant, now).await?;
            }
        }
        let tenant = event.tenant_id.clone();
        let outcome = async {
            let tx = client.transaction().await?;
            let outcome = writes::publish(&tx, event, now, &self.channel).await?;
            tx.commit().await?;
            Ok(outcome)
        }
        .await;
        // What stored no event takes nothing from the rate: as on SQLite, where the limiter
        // moves in the publish's own transaction.
        if let (Some(charge), Some(tenant)) = (charged, tenant) {
            if !matches!(outcome, Ok(PublishOutcome::Accepted(_))) {
                tenants::refund(&client, &tenant, charge).await?;
            }
        }
        outcome
    }

    async fn get_event(&self, id: &str) -> Result<Event> {
        reads::event(&self.client().await?, id).await
    }

    async fn list_events(
        &self,
        filter: EventFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<EventSummary>> {
        let after = EventPosition::parse(cursor)?;
        reads::events(&self.client().await?, &filter, limit, after).await
    }

    async fn claim_due(&self, request: ClaimRequest) -> Result<Vec<ClaimedDelivery>> {
        if request.limit == 0
            && (request.lend == 0
                || !writes::a_tenant_is_due(&self.client().await?, request.now).await?)
        {
            // No free slot, and nobody to lend to (`ClaimRequest::lend`).
            return Ok(Vec::new());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let claimed = writes::claim_due(&tx, request, &self.owner, &self.tenant_cursor).await?;
        tx.commit().await?;
        Ok(claimed)
    }

    async fn rescue_expired(
        &self,
        now: UnixMs,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<ClaimedDelivery>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let rescued = writes::rescue_expired(&tx, now, limit, lease_ms, &self.owner).await?;
        tx.commit().await?;
        Ok(rescued)
    }

    async fn complete(
        &self,
        completions: Vec<Completion>,
        now: UnixMs,
    ) -> Result<Vec<CompletionResult>> {
        complete_on(&self.pool, completions, now).await
    }

    /// The claim beside the completions, in transactions of their own: completions never
    /// hold subscriber rows while waiting for the claim's lock; the slots they free are the
    /// caller's next claim's.
    async fn complete_and_claim(
        &self,
        completions: Vec<Completion>,
        claim: ClaimRequest,
    ) -> (Completing, Result<Vec<ClaimedDelivery>>) {
        // Two transactions: completions may lock subscriber rows (a breaker, a revocation)
        // that a claim holding its lock may update too (a rate limiter), so waiting for that
        // lock while holding them could deadlock; and taking the lock before completing
        // serialized every worker's completions behind every claim.
        //
        // The claim runs beside the completions, on a connection of its own: each is a network
        // round trip and a commit or more, and the worker's freed slots stand idle until the
        // claim answers (one after the other measurably fewer deliveries a second: perf-journal,
        // "Completions beside the claim"). Another worker's completions and claims already
        // interleave with these the same way; both lock subscriber rows in id order. The
        // claim answers as soon as it has leased: a large batch of completions of attempts that
        // timed out together takes long, and a healthy delivery the claim took would wait for
        // them (tests/it/isolation_at_scale.rs). The slots they free are the caller's next claim's.
        let now = claim.now;
        if completions.iter().any(|c| c.revoke_subscriber) {
            // A revocation kills its subscriber's waiting deliveries, which a claim beside it
            // could be leasing (and would send, the subscriber still active in its snapshot):
            // one after the other, the claim sees the subscriber revoked.
            let completed = self.complete(completions, now).await;
            return (
                Box::pin(std::future::ready(completed)),
                self.claim_due(claim).await,
            );
        }
        let pool = self.pool.clone();
        let completing = tokio::spawn(async move { complete_on(&pool, completions, now).await });
        let claimed = self.claim_due(claim).await;
        let completing: Completing = Box::pin(async move {
            completing
                .await
                .unwrap_or_else(|e| Err(StoreError::caused_by("completions", e)))
        });
        (completing, claimed)
    }

    async fn next_wakeup(&self, window_ms: i64) -> Result<Option<UnixMs>> {
        reads::next_wakeup(&self.client().await?, window_ms).await
    }

    async fn expire_windows(&self, sweep: WindowSweep) -> Result<Vec<String>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let expired = writes::expire_windows(&tx, sweep).await?;
        tx.commit().await?;
        Ok(expired)
    }

    async fn queue_stats(
        &self,
        now: UnixMs,
        caps: InFlightCaps,
        held_back: &[String],
    ) -> Result<QueueStats> {
        reads::queue_stats(&self.client().await?, now, caps, held_back).await
    }

    async fn get_delivery(&self, id: &str) -> Result<Delivery> {
        reads::delivery(&self.client().await?, id).await
    }

    async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Delivery>> {
        let after = parse_cursor_in(cursor, filter.order)?;
        reads::deliveries(&self.client().await?, &filter, limit, after).await
    }

    async fn prune_delivered(&self, before: UnixMs, batch: u32) -> Result<u64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let pruned = writes::prune_delivered(&tx, before, batch).await?;
        tx.commit().await?;
        Ok(pruned)
    }
}

#[async_trait]
impl DeadLetters for PostgresStore {
    async fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<DeadLetter>> {
        let after = DeathPosition::parse(cursor)?;
        reads::dead_letters(&self.client().await?, &filter, limit, after).await
    }

    async fn dead_letter_groups(
        &self,
        since: UnixMs,
        tenant_id: Option<String>,
        limit: u32,
    ) -> Result<Vec<DeadLetterGroup>> {
        reads::dead_letter_groups(&self.client().await?, since, tenant_id.as_deref(), limit).await
    }

    async fn dead_letters_by_reason(
        &self,
        since: UnixMs,
        tenant_id: Option<String>,
    ) -> Result<Vec<(hookline_policy::DeadReason, u64)>> {
        reads::dead_letters_by_reason(&self.client().await?, since, tenant_id.as_deref()).await
    }

    async fn replay(&self, request: ReplayRequest, now: UnixMs) -> Result<Replay> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let id = writes::replay(&tx, request, now, &self.channel).await?;
        let replay = reads::replay(&tx, &id).await?;
        tx.commit().await?;
        Ok(replay)
    }

    async fn preview_replay(&self, request: ReplayRequest) -> Result<Vec<String>> {
        let rows = writes::replay_selection(
            &self.client().await?,
            &request,
            writes::Selecting::ToPreview,
        )
        .await?;
        Ok(rows.iter().map(|r| r.get(1)).collect())
    }

    async fn get_replay(&self, id: &str) -> Result<Replay> {
        reads::replay(&self.client().await?, id).await
    }

    async fn list_replays(
        &self,
        tenant_id: Option<String>,
        order: ListOrder,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Replay>> {
        let after = parse_cursor_in(cursor, order)?;
        reads::replays(
            &self.client().await?,
            tenant_id.as_deref(),
            order,
            limit,
            after,
        )
        .await
    }
}

#[async_trait]
impl Resends for PostgresStore {
    async fn resend(&self, request: ResendRequest, now: UnixMs) -> Result<Resend> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let id = resends::resend(&tx, request, now, &self.channel).await?;
        let resend = resends::get(&tx, &id).await?;
        tx.commit().await?;
        Ok(resend)
    }

    async fn preview_resend(&self, request: ResendRequest) -> Result<Vec<String>> {
        let client = self.client().await?;
        let subscriber = reads::subscriber(&client, &request.subscriber_id).await?;
        resendable(&subscriber)?;
        let selected = resends::selection(&client, &request, &subscriber).await?;
        Ok(selected.into_iter().map(|e| e.id).collect())
    }

    async fn get_resend(&self, id: &str) -> Result<Resend> {
        resends::get(&self.client().await?, id).await
    }

    async fn list_resends(
        &self,
        filter: ResendFilter,
        order: ListOrder,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<Resend>> {
        let after = parse_cursor_in(cursor, order)?;
        resends::list(&self.client().await?, &filter, order, limit, after).await
    }
}

#[async_trait]
impl PolicyRecords for PostgresStore {
    fn policy_changes(&self) -> Option<Arc<Notify>> {
        Some(self.policy_changes.clone())
    }

    async fn create_policy(&self, policy: StoredPolicy) -> Result<StoredPolicy> {
        writes::create_policy(&self.client().await?, policy).await
    }

    async fn get_policy(&self, name: &str) -> Result<StoredPolicy> {
        reads::policy(&self.client().await?, name).await
    }

    async fn list_policies(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<StoredPolicy>> {
        let after = parse_cursor(cursor)?;
        reads::policies(&self.client().await?, limit, after).await
    }

    async fn start_rollout(&self, rollout: Rollout) -> Result<Rollout> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let started = rollouts::start(&tx, rollout, &self.channel).await?;
        tx.commit().await?;
        Ok(started)
    }

    async fn get_rollout(&self, id: &str) -> Result<Rollout> {
        rollouts::rollout(&self.client().await?, id).await
    }

    async fn list_rollouts(&self, limit: u32, cursor: Option<String>) -> Result<Page<Rollout>> {
        let after = parse_cursor(cursor)?;
        rollouts::rollouts(&self.client().await?, limit, after).await
    }

    async fn change_rollout(
        &self,
        id: &str,
        change: RolloutChange,
        now: UnixMs,
    ) -> Result<Rollout> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let changed = rollouts::change(&tx, id, change, now, &self.channel).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn policies_in_force(&self) -> Result<PoliciesInForce> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await?;
        let in_force = rollouts::in_force(&tx).await?;
        tx.commit().await?;
        Ok(in_force)
    }

    async fn cohort_report(&self, query: CohortQuery) -> Result<CohortReport> {
        rollouts::report(&self.client().await?, &query).await
    }
}

#[async_trait]
impl CapacityRecords for PostgresStore {
    async fn backlog(&self, now: UnixMs) -> Result<Backlog> {
        capacity::backlog(&self.client().await?, now).await
    }

    async fn backlog_waits(&self, now: UnixMs) -> Result<BacklogWaits> {
        capacity::backlog_waits(&self.client().await?, now).await
    }

    async fn record_meter(&self, owner: &str, at: UnixMs, reading: MeterReading) -> Result<()> {
        capacity::record_meter(&self.client().await?, owner, at, reading).await
    }

    async fn meter_totals(&self, since: UnixMs) -> Result<MeterReading> {
        capacity::meter_totals(&self.client().await?, since).await
    }

    async fn record_shown(&self, at: UnixMs, shown: Shown) -> Result<()> {
        capacity::record_shown(&self.client().await?, at, shown).await
    }

    async fn shown(&self) -> Result<Option<Shown>> {
        capacity::shown(&self.client().await?).await
    }

    async fn attempt_history(&self, since: UnixMs, limit: u32) -> Result<AttemptHistory> {
        capacity::attempt_history(&self.client().await?, since, limit).await
    }
}

#[async_trait]
impl EventTypes for PostgresStore {
    fn event_type_changes(&self) -> Option<Arc<Notify>> {
        Some(self.event_type_changes.clone())
    }

    async fn create_event_type(&self, new: NewEventType, now: UnixMs) -> Result<EventType> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let created = event_types::create(&tx, &new, now, &self.channel).await?;
        tx.commit().await?;
        Ok(created)
    }

    async fn get_event_type(&self, name: &str) -> Result<EventType> {
        event_types::event_type(&self.client().await?, name).await
    }

    async fn list_event_types(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<Page<EventType>> {
        let after = parse_cursor(cursor)?;
        event_types::event_types(&self.client().await?, limit, after).await
    }

    async fn update_event_type(
        &self,
        name: &str,
        patch: EventTypePatch,
        now: UnixMs,
    ) -> Result<EventType> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let changed = event_types::update(&tx, name, patch, now, &self.channel).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn event_types_revision(&self) -> Result<i64> {
        event_types::revision(&self.client().await?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the failures of a connection tell a caller to wait and send again: a server
    /// answering that it cannot serve now, or a socket refused or lost. An answer that the
    /// statement failed, or an `io::Error` of another kind (tokio-postgres's own encoding
    /// failures are), is a storage failure.
    #[test]
    fn only_a_lost_connection_is_unreachable() {
        for code in ["08006", "08001", "57P01", "57P03", "25006"] {
            assert!(unreachable_state(code), "{code}");
        }
        for code in ["23505", "28P01", "40P01", "42P01", "53100"] {
            assert!(!unreachable_state(code), "{code}");
        }
        for kind in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            assert!(connection_lost(kind), "{kind:?}");
        }
        for kind in [
            std::io::ErrorKind::InvalidInput,
            std::io::ErrorKind::InvalidData,
            std::io::ErrorKind::Other,
        ] {
            assert!(!connection_lost(kind), "{kind:?}");
        }
    }
}
