//! Every PostgreSQL write. Each runs inside the caller's transaction.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::GenericClient;
use hookline_policy::{Breaker, DeadReason, FailingStreak, UnixMs};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::reads::{self, corrupt};
use super::{execute, queries, query, query_one, tenants, to_bigint, to_int, Numbers};
use crate::*;

pub(super) async fn notify(c: &impl GenericClient, channel: &str) -> Result<()> {
    execute(c, queries::NOTIFY, &[&channel]).await?;
    Ok(())
}

pub(super) async fn create_subscriber(
    c: &impl GenericClient,
    new: NewSubscriber,
    now: UnixMs,
) -> Result<Subscriber> {
    if let Some(tenant) = &new.tenant_id {
        tenants::room_for_a_subscriber(c, tenant).await?;
    }
    let inserted = c
        .execute(
            queries::CREATE_SUBSCRIBER,
            &[
                &new.id,
                &new.url,
                &new.event_types,
                &new.secret,
                &now,
                &new.max_in_flight.map(to_int),
                &new.rate_limit_per_second,
                &new.payload_version,
                &new.headers.encode(),
                &Origin::of_url(&new.url).as_str(),
                &new.tenant_id,
            ],
        )
        .await;
    match inserted {
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Err(StoreError::Conflict(
            format!("subscriber {:?} already exists", new.id),
        )),
        other => {
            other?;
            reads::subscriber(c, &new.id).await
        }
    }
}

pub(super) async fn update_subscriber(
    c: &impl GenericClient,
    id: &str,
    patch: SubscriberPatch,
    now: UnixMs,
    channel: &str,
) -> Result<Subscriber> {
    let (next, resumed) = patched(reads::subscriber_for_update(c, id).await?, patch, now)?;
    execute(
        c,
        queries::UPDATE_SUBSCRIBER,
        &[
            &id,
            &next.url,
            &next.event_types,
            &next.status.as_str(),
            &now,
            &next.max_in_flight.map(to_int),
            &next.rate_limit_per_second,
            &next.payload_version,
            &next.headers.encode(),
            &next.origin.as_str(),
            &next.status_reason.map(StatusReason::as_str),
            &next.failing.since,
            &to_int(next.failing.attempts),
        ],
    )
    .await?;
    if resumed {
        execute(c, queries::RELEASE_HELD, &[&id]).await?;
        notify(c, channel).await?;
    }
    reads::subscriber(c, id).await
}

pub(super) async fn rotate_secret(
    c: &impl GenericClient,
    id: &str,
    secret: String,
    grace_until: UnixMs,
    now: UnixMs,
) -> Result<Subscriber> {
    let current = reads::subscriber_for_update(c, id).await?;
    let (previous, until) = rotation(&current, grace_until, now)?;
    execute(
        c,
        queries::ROTATE_SECRET,
        &[&id, &secret, &previous, &until, &now],
    )
    .await?;
    reads::subscriber(c, id).await
}

/// Takes the claims' lock for the rest of the transaction: one claim at a time per schema, and
/// nothing else that locks a subscriber and then its waiting rows while a claim runs.
async fn lock_out_claims(c: &impl GenericClient) -> Result<()> {
    execute(c, queries::LOCK_OUT_CLAIMS, &[]).await?;
    Ok(())
}

/// A revocation locks the subscriber, then its waiting rows; a claim locks the due rows it
/// scans, then their subscribers (for their rate limiters and slow starts). Run side by side
/// they could each wait for the other (a deadlock, which failed the revocation), so a
/// revocation first waits for the claim under way and holds the next one off: the emergency
/// action for a compromised endpoint always goes through. Taken again by a completion that
/// revokes, which takes it before its first lock (`complete`).
pub(super) async fn revoke_subscriber(
    c: &impl GenericClient,
    id: &str,
    reason: StatusReason,
    now: UnixMs,
) -> Result<()> {
    lock_out_claims(c).await?;
    let updated = execute(
        c,
        queries::REVOKE_SUBSCRIBER,
        &[&id, &now, &reason.as_str()],
    )
    .await?;
    if updated == 0 {
        reads::subscriber(c, id).await?;
        return Ok(());
    }
    let killed = execute(
        c,
        queries::KILL_WAITING,
        &[&id, &DeadReason::SubscriptionRevoked.as_str(), &now],
    )
    .await?;
    count_dead(DeadReason::SubscriptionRevoked, None, killed);
    Ok(())
}

pub(super) async fn publish(
    c: &impl GenericClient,
    event: NewEvent,
    now: UnixMs,
    channel: &str,
) -> Result<PublishOutcome> {
    // A concurrent publish of the same id waits here for the other transaction to finish.
    let inserted = execute(
        c,
        queries::INSERT_EVENT,
        &[
            &event.id,
            &event.event_type,
            &event.payload,
            &event.payload_version,
            &now,
            &event.published_by,
            &event.tenant_id,
            &event.ordering_key,
            &event.traceparent,
        ],
    )
    .await?;
    if inserted == 0 {
        let row = query_one(c, queries::PUBLISHED, &[&event.id]).await?;
        let (payload, version): (String, i64) = (row.get(1), row.get(2));
        let published_by: Option<&str> = row.get(5);
        let receipt = EventReceipt {
            id: event.id.clone(),
            tenant_id: row.get(6),
            event_type: row.get(0),
            ordering_key: row.get(7),
            deliveries: row.bigint(3)?,
            unversioned: row.bigint(4)?,
        };
        let earlier = reads::earlier_payloads(c, &event.id).await?;
        return Ok(republished(
            event,
            receipt,
            published_by,
            &payload,
            version,
            &earlier,
        ));
    }
    let versions = event.versions();
    let oldest = versions[0];
    let patterns = type_patterns::patterns_matching(&event.event_type);
    // A resume in progress either committed (and this publish sees the subscriber active) or
    // waits for this publish, then releases what it held.
    execute(
        c,
        queries::SHARE_LOCK_PAUSED,
        &[&patterns, &event.tenant_id, &event.only_subscriber],
    )
    .await?;
    if let Some(key) = &event.ordering_key {
        lock_ordering_keys(c, &[key.as_str()]).await?;
    }
    // One statement fans the event out to every matching subscriber that is not revoked, each
    // with the highest version at or below its pin (the latest when unpinned); one pinned below
    // every version gets a delivery that is dead at once, with the reason.
    let counts = query_one(
        c,
        queries::FAN_OUT,
        &[
            &event.id,
            &patterns,
            &now,
            &event.payload_version,
            &versions,
            &oldest,
            &DeadReason::PermanentFailure.as_str(),
            &UNVERSIONED_ERROR,
            &event.tenant_id,
            &event.only_subscriber,
            &event.ordering_key,
        ],
    )
    .await?;
    let (deliveries, unversioned) = (non_negative(counts.get(0)), non_negative(counts.get(1)));
    if let Some(key) = &event.ordering_key {
        execute(c, queries::HOLD_BEHIND_IN_ORDER, &[&event.id, key]).await?;
    }
    reached_its_subscriber(&event, deliveries)?;
    admitted(&event, deliveries - unversioned)?;
    count_dead(DeadReason::PermanentFailure, None, unversioned);
    execute(
        c,
        queries::COUNT_DELIVERIES,
        &[&event.id, &to_bigint(deliveries), &to_bigint(unversioned)],
    )
    .await?;
    if !event.earlier_payloads.is_empty() {
        let (earlier, payloads): (Vec<i64>, Vec<&str>) = event
            .earlier_payloads
            .iter()
            .map(|(v, p)| (*v, p.as_str()))
            .unzip();
        execute(
            c,
            queries::INSERT_EARLIER_PAYLOADS,
            &[&event.id, &earlier, &payloads],
        )
        .await?;
    }
    if deliveries > unversioned {
        notify(c, channel).await?;
    }
    Ok(PublishOutcome::Accepted(EventReceipt {
        id: event.id,
        tenant_id: event.tenant_id,
        event_type: event.event_type,
        ordering_key: event.ordering_key,
        deliveries,
        unversioned,
    }))
}

/// Takes the locks of ordering `keys` for the rest of the transaction (`LOCK_ORDERING_KEYS`):
/// after every row lock the caller needs, since nothing may be waited for while they are held.
async fn lock_ordering_keys(c: &impl GenericClient, keys: &[&str]) -> Result<()> {
    execute(c, queries::LOCK_ORDERING_KEYS, &[&keys]).await?;
    Ok(())
}

/// After deliveries of these `(subscriber, ordering key)` ended, the first of each pair's key
/// waiting behind them goes due: last in the transaction, under the keys' locks.
async fn release_next_in_order(c: &impl GenericClient, ended: &[(String, String)]) -> Result<()> {
    if ended.is_empty() {
        return Ok(());
    }
    let keys: Vec<&str> = ended.iter().map(|(_, k)| k.as_str()).collect();
    lock_ordering_keys(c, &keys).await?;
    let subscribers: Vec<&str> = ended.iter().map(|(s, _)| s.as_str()).collect();
    execute(c, queries::RELEASE_NEXT_IN_ORDER, &[&subscribers, &keys]).await?;
    Ok(())
}

fn due_row(r: &Row) -> Result<DueRow> {
    Ok(DueRow {
        key: r.get(0),
        id: r.get(1),
        event_id: r.get(2),
        subscriber_id: r.get(3),
        attempts: r.int(4)?,
        first_seen: r.get(5),
        window_start: r.get(6),
        run_at: r.get::<_, Option<i64>>(7).unwrap_or(0),
        payload_version: r.get(8),
        claimed_at: r.get(9),
    })
}

/// Loads the destinations of a batch, once each, signing with the secrets valid at `now`.
async fn destinations(
    c: &impl GenericClient,
    rows: &[DueRow],
    now: UnixMs,
) -> Result<Vec<Arc<Destination>>> {
    let mut ids: Vec<String> = rows.iter().map(|r| r.subscriber_id.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    let found: HashMap<String, Arc<Destination>> = reads::subscribers_by_id(c, &ids)
        .await?
        .into_iter()
        .map(|s| (s.id.clone(), Arc::new(s.destination(now))))
        .collect();
    rows.iter()
        .map(|r| {
            found.get(&r.subscriber_id).cloned().ok_or_else(|| {
                StoreError::backend(format!("delivery {} lost its subscriber", r.id))
            })
        })
        .collect()
}

/// Attaches the event bodies (loaded once per event) to a leased batch.
async fn claimed(
    c: &impl GenericClient,
    rows: Vec<DueRow>,
    destinations: Vec<Arc<Destination>>,
    lease: i64,
    kind: LeaseKind,
) -> Result<Vec<ClaimedDelivery>> {
    // One body per event and payload version: earlier versions live in event_payloads, the
    // latest (and a row's missing version) in events.
    let mut wanted: Vec<(&str, Option<i64>)> = rows
        .iter()
        .map(|r| (r.event_id.as_str(), r.payload_version))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let (event_ids, versions): (Vec<&str>, Vec<Option<i64>>) = wanted.into_iter().unzip();
    let events: HashMap<(String, Option<i64>), Arc<EventBody>> =
        query(c, queries::EVENT_BODIES, &[&event_ids, &versions])
            .await?
            .into_iter()
            .map(|r| {
                let e = EventBody {
                    id: r.get(0),
                    event_type: r.get(2),
                    payload: r.get(3),
                    payload_version: r.get(4),
                    accepted_at: r.get(5),
                    traceparent: r.get(6),
                };
                ((e.id.clone(), r.get(1)), Arc::new(e))
            })
            .collect();
    rows.into_iter()
        .zip(destinations)
        .map(|(row, destination)| {
            let event = events
                .get(&(row.event_id.clone(), row.payload_version))
                .cloned()
                .ok_or_else(|| {
                    StoreError::backend(format!("delivery {} lost its event", row.id))
                })?;
            Ok(row.leased(lease, kind, destination, event))
        })
        .collect()
}

/// Due rows whose subscriber was not active when the claim read it: held while it is paused,
/// dead while it is revoked. The status is read again under a share lock, which orders this
/// after any resume or revocation in progress (they lock the subscriber's row): a resume that
/// committed first is seen, and one that comes later waits for this claim and then releases
/// what it held. So no row is held for an active subscriber, and no row waits for a revoked
/// one (a publish or a completion that raced a revocation left it scheduled; it dies here).
async fn settle_inactive(c: &impl GenericClient, keys: &[i64], now: UnixMs) -> Result<()> {
    // Those locked by a change in progress are skipped (see `LOCK_DUE_SUBSCRIBERS`).
    let locked: Vec<String> = query(c, queries::LOCK_DUE_SUBSCRIBERS, &[&keys])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    execute(c, queries::HOLD_PAUSED, &[&keys, &locked]).await?;
    let killed = execute(
        c,
        queries::KILL_REVOKED,
        &[
            &keys,
            &DeadReason::SubscriptionRevoked.as_str(),
            &now,
            &locked,
        ],
    )
    .await?;
    count_dead(DeadReason::SubscriptionRevoked, None, killed);
    Ok(())
}

/// The part of a subscriber's breaker a claim reads (open until, allowance), from the columns
/// at `until` and `allowance` of `r`.
fn breaker(r: &Row, until: usize, allowance: usize) -> Result<Breaker> {
    Ok(Breaker {
        open_until: r.get(until),
        allowance: r.int_opt(allowance)?,
        ..Breaker::default()
    })
}

/// A due row as `DUE` and `DUE_OF_TENANTS` read it, as the plan considers it.
fn candidate<'r>(r: &'r Row, in_flight: &HashMap<&str, u32>) -> Result<Candidate<'r>> {
    let (key, subscriber, status): (i64, &str, &str) = (r.get(0), r.get(1), r.get(2));
    Ok(Candidate {
        key,
        status: SubscriberStatus::parse(status).ok_or_else(|| corrupt("status", status))?,
        limits: Limits {
            id: subscriber,
            origin: Origin::stored_text(r.get(8), r.get(9)),
            breaker: breaker(r, 3, 10)?,
            max_in_flight: r.int_opt(4)?,
            rate_limit_per_second: r.get(5),
            rate_next_at: r.get(6),
        },
        in_flight: in_flight.get(subscriber).copied().unwrap_or(0),
        attempts: r.int(7)?,
    })
}

/// The tenants' shares (`fair_share.rs`): rounds of scans, each one statement reading every
/// tenant of the round through its own part of `deliveries_tenant_due` (at most
/// `share_scan_bound` rows each), leaving out what the claim's first scan in due order leaves
/// out and the rows the same tenants' earlier scans looked at.
async fn share_among_tenants(
    c: &impl GenericClient,
    req: &ClaimRequest,
    (tenants, held): (Vec<WaitingTenant<String>>, HeldElsewhere),
    scanning: (&mut ClaimBudget, &mut ClaimPlan<i64>),
    excluded: &Excluded,
    in_flight: &HashMap<&str, u32>,
) -> Result<()> {
    let (budget, plan) = scanning;
    let excluded_origins: Vec<&str> = excluded.origins.iter().map(Origin::as_str).collect();
    let mut seen_of: Vec<Vec<i64>> = vec![Vec::new(); tenants.len()];
    let mut fair = FairShare::new(req.slots, req.room(), tenants, held);
    loop {
        let round = fair.next_round();
        if round.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = round.iter().map(|a| a.tenant.as_str()).collect();
        let bounds: Vec<i64> = round
            .iter()
            .map(|a| to_bigint(share_scan_bound(a.rows)))
            .collect();
        let seen: Vec<i64> = round
            .iter()
            .flat_map(|a| seen_of[a.index].iter().copied())
            .collect();
        let due = query(
            c,
            queries::DUE_OF_TENANTS,
            &[
                &req.now,
                &excluded.subscribers,
                &budget.takes_retries(),
                &req.window_ended_for_start,
                &seen,
                &excluded_origins,
                &names,
                &bounds,
            ],
        )
        .await?;
        let mut rows = due.iter().peekable();
        for (place, share) in (1i64..).zip(&round) {
            let seen_before = plan.seen.len();
            plan.begin_share(share.rows);
            let mut reading = true;
            while let Some(r) = rows.next_if(|r| r.get::<_, i64>(11) == place) {
                reading = reading && plan.consider(budget, candidate(r, in_flight)?, r.get(0));
            }
            seen_of[share.index].extend_from_slice(&plan.seen[seen_before..]);
            fair.took(share.index, plan.taken_in_scan());
        }
    }
}

/// Whether any tenant has deliveries due at `now`: what a claim with no free slot can lend to.
/// A read of the tenant index only, outside any transaction.
pub(super) async fn a_tenant_is_due(c: &impl GenericClient, now: UnixMs) -> Result<bool> {
    let walk = to_int(TENANTS_PER_CLAIM);
    let waiting = query(c, queries::TENANTS_WAITING, &[&"", &walk]).await?;
    Ok(waiting.iter().any(|r| r.get::<_, UnixMs>(1) <= now))
}

pub(super) async fn claim_due(
    c: &impl GenericClient,
    req: ClaimRequest,
    owner: &str,
    tenant_cursor: &std::sync::Mutex<TenantCursor>,
) -> Result<Vec<ClaimedDelivery>> {
    // One claimer at a time per schema: the per-subscriber counts below are then exact across
    // every process. A claim is a few statements, so the queue this forms is short.
    lock_out_claims(c).await?;
    // In flight per subscriber across every process (a short list: at most the slots of all
    // workers), the subscribers whose rate limiter admits nobody yet, and the tenants with
    // deliveries waiting: three statements in one round trip.
    let after = tenant_cursor.lock().unwrap().after().to_owned();
    let walk = to_int(TENANTS_PER_CLAIM);
    let (in_flight_params, rate_params): ([&(dyn ToSql + Sync); 1], [&(dyn ToSql + Sync); 1]) =
        ([&owner], [&req.now]);
    let walk_params: [&(dyn ToSql + Sync); 2] = [&after, &walk];
    let (busy_rows, rate_limited, waiting) = tokio::try_join!(
        query(c, queries::IN_FLIGHT_LIMITS, &in_flight_params),
        query(c, queries::RATE_LIMITED, &rate_params),
        query(c, queries::TENANTS_WAITING, &walk_params),
    )?;
    tenant_cursor
        .lock()
        .unwrap()
        .advance(waiting.iter().map(|r| r.get::<_, &str>(0)));
    let busy = busy_rows
        .iter()
        .map(|r| {
            let origin = Origin::stored_text(r.get(4), r.get(5));
            let limits =
                Limits::in_flight_bound(r.get(0), origin, r.int_opt(2)?, breaker(r, 3, 6)?);
            Ok((limits, r.bigint(1)?))
        })
        .collect::<Result<Vec<(Limits, u32)>>>()?;
    let in_flight: HashMap<&str, u32> = busy.iter().map(|(l, n)| (l.id, *n)).collect();
    let mut budget = ClaimBudget::new(&req);
    let mut excluded = budget.unclaimable(busy, rate_limited.iter().map(|r| r.get(0)));
    let scan = to_bigint(scan_bound(req.limit));
    let mut plan = ClaimPlan::fetched(req.limit, &budget);
    let mine = busy_rows
        .iter()
        .map(|r| Ok((r.get::<_, Option<&str>>(7), r.bigint(8)?)))
        .collect::<Result<Vec<_>>>()?;
    let sharing = fair_share::sharing(waiting.iter().map(|r| (r.get(0), r.get(1))), req.now, mine);
    if !sharing.0.is_empty() {
        let scanning = (&mut budget, &mut plan);
        share_among_tenants(c, &req, sharing, scanning, &excluded, &in_flight).await?;
    }
    plan.begin_fill(&budget);
    while !plan.is_full() {
        let excluded_origins: Vec<&str> = excluded.origins.iter().map(Origin::as_str).collect();
        // See `DUE` in `claims.sql` for why it is written so.
        let due = query(
            c,
            queries::DUE,
            &[
                &req.now,
                &scan,
                &excluded.subscribers,
                &budget.takes_retries(),
                &req.window_ended_for_start,
                &plan.seen,
                &excluded_origins,
            ],
        )
        .await?;
        for r in &due {
            if !plan.consider(&mut budget, candidate(r, &in_flight)?, r.get(0)) {
                break;
            }
        }
        if !plan.widen(&budget, &mut excluded) {
            break;
        }
    }
    let mut rate: Vec<(&str, i64)> = budget
        .rate_updates()
        .map(|(id, next)| (id.as_str(), next))
        .collect();
    let (ramp_ids, ramp_caps): (Vec<&str>, Vec<i32>) = budget
        .ramps_ended()
        .map(|(id, cap)| (id.as_str(), to_int(cap)))
        .unzip();
    // Locked in id order, as completions lock the subscribers whose breakers they change: a
    // claim and completions beside it (another worker's, or this one's: `complete_and_claim`)
    // never wait on each other's subscriber rows in a cycle.
    rate.sort_unstable();
    let (rate_ids, rate_next): (Vec<&str>, Vec<i64>) = rate.into_iter().unzip();
    let mut locked: Vec<&str> = rate_ids.iter().chain(&ramp_ids).copied().collect();
    locked.sort_unstable();
    locked.dedup();
    if !locked.is_empty() {
        execute(c, queries::LOCK_SUBSCRIBERS, &[&locked]).await?;
    }
    if !rate_ids.is_empty() {
        execute(c, queries::SET_RATE_NEXT_AT, &[&rate_ids, &rate_next]).await?;
    }
    if !ramp_ids.is_empty() {
        execute(c, queries::END_SLOW_STARTS, &[&ramp_ids, &ramp_caps]).await?;
    }
    if !plan.defer.is_empty() {
        let (defer, defer_until): (Vec<i64>, Vec<i64>) = plan.defer.into_iter().unzip();
        execute(c, queries::DEFER, &[&defer, &defer_until]).await?;
    }
    // Held or killed after reading each status again under a lock (see `settle_inactive`).
    let inactive: Vec<i64> = plan.hold.into_iter().chain(plan.revoked).collect();
    if !inactive.is_empty() {
        settle_inactive(c, &inactive, req.now).await?;
    }
    let take = plan.take;
    if take.is_empty() {
        return Ok(Vec::new());
    }
    let lease: i64 = rand::random();
    let rows = query(
        c,
        queries::LEASE,
        &[&take, &lease, &owner, &(req.now + req.lease_ms), &req.now],
    )
    .await?;
    let mut rows = rows.iter().map(due_row).collect::<Result<Vec<_>>>()?;
    rows.sort_by_key(|r| (r.run_at, r.key));
    let destinations = destinations(c, &rows, req.now).await?;
    claimed(c, rows, destinations, lease, LeaseKind::Claim).await
}

pub(super) async fn rescue_expired(
    c: &impl GenericClient,
    now: UnixMs,
    limit: usize,
    lease_ms: i64,
    owner: &str,
) -> Result<Vec<ClaimedDelivery>> {
    let lease: i64 = rand::random();
    // See `RESCUE_EXPIRED` in `claims.sql` for how a completion in between is kept.
    let rows = query(
        c,
        queries::RESCUE_EXPIRED,
        &[&now, &to_bigint(limit), &lease, &owner, &(now + lease_ms)],
    )
    .await?;
    let rows = rows.iter().map(due_row).collect::<Result<Vec<_>>>()?;
    let destinations = destinations(c, &rows, now).await?;
    claimed(c, rows, destinations, lease, LeaseKind::Rescue).await
}

pub(super) async fn complete(
    c: &impl GenericClient,
    completions: Vec<Completion>,
    now: UnixMs,
) -> Result<Vec<CompletionResult>> {
    // A batch that revokes (a 410) holds claims off before it locks anything, as
    // `revoke_subscriber` needs (it would otherwise take the lock holding rows a claim waits for).
    if completions.iter().any(|done| done.revoke_subscriber) {
        lock_out_claims(c).await?;
    }
    // Each completion's ending as `Ending::of` decides it for an active subscriber and for a
    // revoked one; the statement picks by the subscriber's status as it finds it.
    let mut keys = Vec::with_capacity(completions.len());
    let mut leases = Vec::with_capacity(completions.len());
    let mut endings = EndingColumns::default();
    let mut if_revoked = EndingColumns::default();
    for done in &completions {
        keys.push(done.key.0);
        leases.push(done.lease);
        endings.push(Ending::of(done.transition, SubscriberStatus::Active));
        if_revoked.push(Ending::of(done.transition, SubscriberStatus::Revoked));
    }
    // One statement for the whole batch, fenced row by row by the lease.
    let applied = query(
        c,
        queries::COMPLETE,
        &[
            &keys,
            &leases,
            &endings.state,
            &endings.run_at,
            &endings.reason,
            &if_revoked.state,
            &if_revoked.run_at,
            &if_revoked.reason,
            &now,
            &to_int(FailingStreak::MAX_COUNTED),
        ],
    )
    .await?;
    let policies: HashMap<i64, Option<&str>> = completions
        .iter()
        .map(|done| (done.key.0, done.record.policy.as_deref()))
        .collect();
    for r in &applied {
        if let Some(reason) = r.get::<_, Option<&str>>(2).and_then(DeadReason::parse) {
            let policy = policies.get(&r.get::<_, i64>(0)).copied().flatten();
            count_dead(reason, policy, 1);
        }
    }
    // Breakers not closed-and-clean, or failing: a success may reset them (or grow a slow start).
    let mut dirty: Vec<String> = applied
        .iter()
        .filter(|r| r.get::<_, bool>(3))
        .map(|r| r.get(1))
        .collect();
    dirty.sort_unstable();
    dirty.dedup();
    // Keyed deliveries that ended: the next of each key goes, once this batch holds nothing
    // else it must wait for.
    let ended_in_order: Vec<(String, String)> = applied
        .iter()
        .filter(|r| DeliveryState::parse(r.get(4)).is_some_and(DeliveryState::ended))
        .filter_map(|r| Some((r.get(1), r.get::<_, Option<String>>(5)?)))
        .collect();
    // Subscribers whose streak a permanent failure still changes.
    let counting: HashSet<String> = applied
        .iter()
        .filter(|r| r.get::<_, bool>(6))
        .map(|r| r.get(1))
        .collect();
    let applied: HashMap<i64, String> = applied.iter().map(|r| (r.get(0), r.get(1))).collect();

    let mut history = AttemptColumns::default();
    let mut revoke = Vec::new();
    let results = completions
        .iter()
        .map(|done| {
            let Some(subscriber) = applied.get(&done.key.0) else {
                return CompletionResult::LeaseLost;
            };
            history.push(done.key.0, &done.record);
            if done.revoke_subscriber {
                revoke.push(subscriber.clone());
            }
            CompletionResult::Applied
        })
        .collect();
    history.insert(c).await?;
    update_breakers(c, &completions, &applied, &dirty, &counting, now).await?;
    revoke.sort();
    revoke.dedup();
    for subscriber in revoke {
        revoke_subscriber(c, &subscriber, StatusReason::Gone, now).await?;
    }
    release_next_in_order(c, &ended_in_order).await?;
    Ok(results)
}

/// Folds this batch's outcomes, in order, into each subscriber's breaker and failing streak,
/// under row locks so concurrent batches from other processes serialize per subscriber.
async fn update_breakers(
    c: &impl GenericClient,
    completions: &[Completion],
    applied: &HashMap<i64, String>,
    dirty: &[String],
    counting: &HashSet<String>,
    now: UnixMs,
) -> Result<()> {
    // Only subscribers whose breaker or streak can change are read and locked: those with
    // retryable failures to count, permanent ones while their streak still counts, and those
    // not closed-and-clean or failing (a success resets them). Healthy traffic, and a
    // subscriber that has answered 404 for long, cost nothing here.
    let mut ids: Vec<&str> = completions
        .iter()
        .filter_map(|d| Some((d.record.outcome, applied.get(&d.key.0)?)))
        .filter(|(outcome, id)| match outcome {
            hookline_policy::Outcome::Retryable => true,
            hookline_policy::Outcome::Permanent => counting.contains(*id),
            _ => false,
        })
        .map(|(_, id)| id.as_str())
        .chain(dirty.iter().map(String::as_str))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Ok(());
    }
    type Health = (Breaker, FailingStreak);
    let mut health: HashMap<String, (Health, Health)> =
        query(c, queries::BREAKERS_FOR_UPDATE, &[&ids])
            .await?
            .iter()
            .map(|r| {
                let b = Breaker {
                    consecutive_failures: r.int(1)?,
                    open_until: r.get(2),
                    cool_down_ms: r.get(3),
                    allowance: r.int_opt(4)?,
                };
                let f = FailingStreak {
                    since: r.get(5),
                    attempts: r.int(6)?,
                };
                Ok((r.get(0), ((b, f), (b, f))))
            })
            .collect::<Result<_>>()?;
    for done in completions {
        let Some(id) = applied.get(&done.key.0) else {
            continue;
        };
        if let Some((_, (breaker, failing))) = health.get_mut(id) {
            let outcome = done.record.outcome;
            *breaker = breaker.after(&done.breaker, id, outcome, now);
            *failing = failing.after(outcome, now);
        }
    }
    let changed: Vec<(&String, &Health)> = health
        .iter()
        .filter(|(_, (before, after))| before != after)
        .map(|(id, (_, after))| (id, after))
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = changed.iter().map(|(id, _)| id.as_str()).collect();
    let failures: Vec<i32> = changed
        .iter()
        .map(|(_, (b, _))| to_int(b.consecutive_failures))
        .collect();
    let until: Vec<Option<i64>> = changed.iter().map(|(_, (b, _))| b.open_until).collect();
    let cool: Vec<i64> = changed.iter().map(|(_, (b, _))| b.cool_down_ms).collect();
    let allowance: Vec<Option<i32>> = changed
        .iter()
        .map(|(_, (b, _))| b.allowance.map(to_int))
        .collect();
    let failing_since: Vec<Option<i64>> = changed.iter().map(|(_, (_, f))| f.since).collect();
    let failed: Vec<i32> = changed
        .iter()
        .map(|(_, (_, f))| to_int(f.attempts))
        .collect();
    execute(
        c,
        queries::SET_BREAKERS,
        &[
            &ids,
            &failures,
            &until,
            &cool,
            &allowance,
            &failing_since,
            &failed,
        ],
    )
    .await?;
    Ok(())
}

/// Endings as one array per column, for `UNNEST`.
#[derive(Default)]
struct EndingColumns {
    state: Vec<&'static str>,
    run_at: Vec<Option<i64>>,
    reason: Vec<Option<&'static str>>,
}

impl EndingColumns {
    fn push(&mut self, end: Ending) {
        self.state.push(end.state.as_str());
        self.run_at.push(end.run_at);
        self.reason.push(end.dead_reason_str());
    }
}

/// Attempt records as one array per column, for a single `INSERT ... SELECT FROM UNNEST`.
#[derive(Default)]
struct AttemptColumns<'a> {
    delivery: Vec<i64>,
    ordinal: Vec<i32>,
    started_at: Vec<i64>,
    duration_ms: Vec<i64>,
    outcome: Vec<&'static str>,
    lost: Vec<Option<bool>>,
    status: Vec<Option<i32>>,
    error: Vec<Option<&'a str>>,
    response_body: Vec<Option<&'a str>>,
    policy: Vec<Option<&'a str>>,
}

impl<'a> AttemptColumns<'a> {
    fn push(&mut self, key: i64, a: &'a AttemptRecord) {
        self.delivery.push(key);
        self.ordinal.push(to_int(a.ordinal));
        self.started_at.push(a.started_at);
        self.duration_ms.push(to_bigint(a.duration_ms));
        let (outcome, lost) = stored_outcome(a.outcome);
        self.outcome.push(outcome);
        self.lost.push(lost);
        self.status.push(a.status.map(i32::from));
        self.error.push(a.error.as_deref());
        self.response_body.push(a.response_body.as_deref());
        self.policy.push(a.policy.as_deref());
    }

    async fn insert(&self, c: &impl GenericClient) -> Result<()> {
        if self.delivery.is_empty() {
            return Ok(());
        }
        execute(
            c,
            queries::INSERT_ATTEMPTS,
            &[
                &self.delivery,
                &self.ordinal,
                &self.started_at,
                &self.duration_ms,
                &self.outcome,
                &self.status,
                &self.error,
                &self.response_body,
                &self.lost,
                &self.policy,
            ],
        )
        .await?;
        Ok(())
    }
}

/// Whether a replay's selection locks the dead letters it selects.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Selecting {
    /// For a preview: nothing is locked.
    ToPreview,
    /// For the replay that releases them.
    ToRelease,
}

/// The dead letters a replay selects: `seq, id`, the subscriber's pin, the version to send.
pub(super) async fn replay_selection(
    c: &impl GenericClient,
    req: &ReplayRequest,
    selecting: Selecting,
) -> Result<Vec<Row>> {
    validate_replay(req)?;
    let sql = match (req.subscriber_id.is_some(), selecting) {
        (false, Selecting::ToPreview) => queries::REPLAY_SELECTION,
        (true, Selecting::ToPreview) => queries::REPLAY_SELECTION_OF_SUBSCRIBER,
        (false, Selecting::ToRelease) => queries::REPLAY_SELECTION_FOR_UPDATE,
        (true, Selecting::ToRelease) => queries::REPLAY_SELECTION_OF_SUBSCRIBER_FOR_UPDATE,
    };
    query(
        c,
        sql,
        &[
            &req.reason.as_str(),
            &req.subscriber_id,
            &i64::from(selection_limit(req)),
            &req.tenant_id,
        ],
    )
    .await
}

pub(super) async fn replay(
    c: &impl GenericClient,
    req: ReplayRequest,
    now: UnixMs,
    channel: &str,
) -> Result<String> {
    let rows = replay_selection(c, &req, Selecting::ToRelease).await?;
    selection_as_previewed(&req, rows.iter().map(|r| r.get::<_, &str>(1)))?;
    let selected: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    let id = format!("rpl_{:016x}", rand::random::<u64>());
    let replay_seq: i64 = query_one(
        c,
        queries::INSERT_REPLAY,
        &[
            &id,
            &now,
            &req.reason.as_str(),
            &req.subscriber_id,
            &i64::from(req.limit),
            &req.per_second,
            &req.requested_by,
            &to_bigint(selected.len()),
            &req.tenant_id,
        ],
    )
    .await?
    .get(0);
    let (mut released, mut release, mut versions) = (Vec::new(), Vec::new(), Vec::new());
    let (mut unversioned, mut pins) = (Vec::new(), Vec::new());
    for (i, r) in rows.iter().enumerate() {
        match r.get::<_, Option<i64>>(3) {
            Some(version) => {
                released.push(r.get::<_, i64>(0));
                release.push(release_at(now, i, req.per_second));
                versions.push(version);
            }
            None => {
                unversioned.push(r.get::<_, i64>(0));
                pins.push(r.get::<_, Option<i64>>(2).unwrap_or_default());
            }
        }
    }
    // Pacing is persisted as each delivery's run_at, so a restart keeps it.
    execute(
        c,
        queries::RELEASE_REPLAYED,
        &[&released, &release, &now, &versions],
    )
    .await?;
    // Still no version for its subscriber's pin: it dies again at once, on the record.
    execute(
        c,
        queries::DIE_AGAIN_UNVERSIONED,
        &[
            &unversioned,
            &pins,
            &DeadReason::PermanentFailure.as_str(),
            &now,
            &UNVERSIONED_ERROR,
        ],
    )
    .await?;
    count_dead(DeadReason::PermanentFailure, None, unversioned.len() as u64);
    execute(c, queries::INSERT_REPLAY_ITEMS, &[&replay_seq, &selected]).await?;
    if !released.is_empty() {
        notify(c, channel).await?;
    }
    Ok(id)
}

pub(super) async fn expire_windows(
    c: &impl GenericClient,
    sweep: WindowSweep,
) -> Result<Vec<String>> {
    // Rows a claim is taking are locked by it and skipped: they are in flight, and their
    // attempt's outcome decides.
    let in_flight = reads::in_flight(c).await?;
    let rows = query(
        c,
        queries::EXPIRING_WINDOWS,
        &[&sweep.started_before(), &to_bigint(sweep.limit), &sweep.now],
    )
    .await?;
    let mut ended_in_order: Vec<(String, String)> = rows
        .iter()
        .filter_map(|r| Some((r.get(6), r.get::<_, Option<String>>(12)?)))
        .collect();
    let (keys, waiting): (Vec<i64>, Vec<Option<&str>>) = rows
        .iter()
        .map(|r| {
            let origin = Origin::stored(r.get(8), r.get(9));
            let state = WaitState {
                held: r.get(1),
                run_at: r.get(2),
                breaker_open_until: r.get(3),
                rate_next_at: r.get(4),
                in_flight: in_flight.of_subscriber(r.get(6)),
                cap: cap_in_force(
                    r.int_opt(5)?,
                    sweep.caps.max_in_flight_per_subscriber,
                    r.int_opt(7)?,
                ),
                host_in_flight: in_flight.of_origin(&origin),
                host_cap: host_cap_in_force(sweep.caps.max_in_flight_per_host),
                queued_at_rate: r.get(10),
                // The dispatcher's own view; a window that ends on it ends on its cause.
                held_back: false,
                ordered: r.get(11),
            };
            Ok((
                r.get::<_, i64>(0),
                state.waiting_on(sweep.now).map(WaitingOn::as_str),
            ))
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    let expired: Vec<String> = query(
        c,
        queries::EXPIRE_WINDOWS,
        &[
            &keys,
            &waiting,
            &DeadReason::WindowExpired.as_str(),
            &sweep.now,
        ],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    count_dead(DeadReason::WindowExpired, None, expired.len() as u64);
    // And lines whose first delivery waits with nothing ahead of it (`ORPHANED_IN_ORDER`).
    for r in query(c, queries::ORPHANED_IN_ORDER, &[&to_bigint(sweep.limit)]).await? {
        ended_in_order.push((r.get(0), r.get(1)));
    }
    release_next_in_order(c, &ended_in_order).await?;
    Ok(expired)
}

pub(super) async fn prune_delivered(
    c: &impl GenericClient,
    before: UnixMs,
    batch: u32,
) -> Result<u64> {
    let pruned: Vec<i64> = query(c, queries::PRUNE_DELIVERED, &[&before, &i64::from(batch)])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    execute(c, queries::PRUNE_ATTEMPTS, &[&pruned]).await?;
    Ok(pruned.len() as u64)
}

pub(super) async fn create_policy(
    c: &impl GenericClient,
    policy: StoredPolicy,
) -> Result<StoredPolicy> {
    let inserted = c
        .execute(
            queries::INSERT_POLICY,
            &[
                &policy.name,
                &policy.definition,
                &policy.created_at,
                &policy.created_by,
            ],
        )
        .await;
    match inserted {
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Err(policy_exists(&policy.name)),
        other => other.map(|_| policy).map_err(Into::into),
    }
}
