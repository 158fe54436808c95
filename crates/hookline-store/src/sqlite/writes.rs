//! Every write, each run by the writer thread inside a group transaction.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use hookline_policy::{DeadReason, UnixMs};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

use super::subscriber_cache::SubscriberCache;
use super::writer::{Writer, WriterState};
use super::{queries, reads, tenants};
use crate::*;

pub(super) fn create_subscriber(
    c: &Connection,
    new: NewSubscriber,
    now: UnixMs,
) -> Result<Subscriber> {
    if let Some(tenant) = &new.tenant_id {
        tenants::room_for_a_subscriber(c, tenant)?;
    }
    let types = serde_json::to_string(&new.event_types).expect("strings serialize");
    let inserted = c
        .prepare_cached(queries::CREATE_SUBSCRIBER)?
        .execute(params![
            new.id,
            new.url,
            types,
            new.secret,
            now,
            new.max_in_flight,
            new.rate_limit_per_second,
            new.payload_version,
            new.headers.encode(),
            Origin::of_url(&new.url).as_str(),
            new.tenant_id
        ]);
    match inserted {
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            Err(StoreError::Conflict(format!(
                "subscriber {:?} already exists",
                new.id
            )))
        }
        other => {
            other?;
            reads::subscriber(c, &new.id)
        }
    }
}

pub(super) fn update_subscriber(
    c: &Connection,
    id: &str,
    patch: SubscriberPatch,
    now: UnixMs,
) -> Result<Subscriber> {
    let (next, resumed) = patched(reads::subscriber(c, id)?, patch, now)?;
    c.prepare_cached(queries::UPDATE_SUBSCRIBER)?
        .execute(params![
            id,
            next.url,
            serde_json::to_string(&next.event_types).expect("strings serialize"),
            next.status.as_str(),
            now,
            next.max_in_flight,
            next.rate_limit_per_second,
            next.payload_version,
            next.headers.encode(),
            next.origin.as_str(),
            next.status_reason.map(StatusReason::as_str),
            next.failing.since,
            next.failing.attempts
        ])?;
    if resumed {
        // Claims set `held` on deliveries of a paused subscriber; resuming puts them back in
        // the due index, at the run_at they always kept.
        c.prepare_cached(queries::RELEASE_HELD)?.execute([id])?;
    }
    reads::subscriber(c, id)
}

pub(super) fn rotate_secret(
    c: &Connection,
    id: &str,
    secret: String,
    grace_until: UnixMs,
    now: UnixMs,
) -> Result<Subscriber> {
    let current = reads::subscriber(c, id)?;
    let (previous, until) = rotation(&current, grace_until, now)?;
    c.prepare_cached(queries::ROTATE_SECRET)?
        .execute(params![id, secret, previous, until, now])?;
    reads::subscriber(c, id)
}

pub(super) fn revoke_subscriber(w: &mut Writer, id: &str, now: UnixMs) -> Result<()> {
    revoke(&w.conn, &mut w.state, id, StatusReason::Deleted, now)
}

/// Revokes each of `ids` with their tenant, as [`revoke_subscriber`] does one.
pub(super) fn revoke_subscribers(w: &mut Writer, ids: &[String], now: UnixMs) -> Result<()> {
    for id in ids {
        revoke(&w.conn, &mut w.state, id, StatusReason::TenantDeleted, now)?;
    }
    Ok(())
}

/// [`revoke_subscriber`] on the parts of the writer it changes, for a caller holding
/// statements of the connection.
fn revoke(
    c: &Connection,
    state: &mut WriterState,
    id: &str,
    reason: StatusReason,
    now: UnixMs,
) -> Result<()> {
    let updated = c
        .prepare_cached(queries::REVOKE_SUBSCRIBER)?
        .execute(params![id, now, reason.as_str()])?;
    if updated == 0 {
        // Either unknown (an error) or already revoked (nothing more to do).
        reads::subscriber(c, id)?;
        return Ok(());
    }
    let killed = c.prepare_cached(queries::KILL_WAITING)?.execute(params![
        id,
        DeadReason::SubscriptionRevoked.as_str(),
        now
    ])?;
    state.died_waiting(id, DeadReason::SubscriptionRevoked, killed as u64);
    Ok(())
}

pub(super) fn publish(w: &mut Writer, event: &NewEvent, now: UnixMs) -> Result<PublishOutcome> {
    let (c, state) = (&w.conn, &mut w.state);
    let existing = c
        .prepare_cached(queries::PUBLISHED)?
        .query_row([&event.id], |r| {
            Ok((
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<String>>(5)?,
                EventReceipt {
                    id: event.id.clone(),
                    tenant_id: r.get(6)?,
                    event_type: r.get(0)?,
                    ordering_key: r.get(7)?,
                    deliveries: r.get(3)?,
                    unversioned: r.get(4)?,
                },
            ))
        })
        .optional()?;
    if let Some((payload, version, published_by, receipt)) = existing {
        let earlier = reads::earlier_payloads(c, &event.id)?;
        return Ok(republished(
            event.clone(),
            receipt,
            published_by.as_deref(),
            &payload,
            version,
            &earlier,
        ));
    }
    let versions = event.versions();
    let patterns = serde_json::to_string(&type_patterns::patterns_matching(&event.event_type))
        .expect("strings serialize");
    let (deliveries, unversioned) = count_fan_out(c, state, event, &patterns, versions[0])?;
    // Refused before anything is written: a refusal after writing would make the writer run
    // its whole batch again (`writer.rs`), and refusals come in numbers when the writer is
    // busiest. Those dead at once take no room.
    reached_its_subscriber(event, deliveries)?;
    admitted(event, deliveries - unversioned)?;
    if let Some(tenant) = &event.tenant_id {
        tenants::admit(c, tenant, now)?;
    }
    let fan_out = FanOut {
        patterns: &patterns,
        versions: &versions,
        counted: deliveries,
    };
    if let Err(e) = fan_out_rows(c, event, &fan_out, now) {
        // Stopped halfway, the statement kept the rows it made, counted as changes only
        // after a conflict (`FAN_OUT`): the batch runs again all the same. With the
        // subscribers read by the count, what is left to stop it without a conflict is the
        // file (an I/O error, a full disk) or a count the insert does not match.
        w.failed_after_writing();
        return Err(e);
    }
    w.state.dead_on_arrival(unversioned);
    c.prepare_cached(queries::INSERT_EVENT)?.execute(params![
        event.id,
        event.event_type,
        event.payload,
        event.payload_version,
        now,
        deliveries,
        event.published_by,
        unversioned,
        event.tenant_id,
        event.ordering_key,
        event.traceparent
    ])?;
    for (version, payload) in &event.earlier_payloads {
        c.prepare_cached(queries::INSERT_EARLIER_PAYLOAD)?
            .execute(params![event.id, version, payload])?;
    }
    Ok(PublishOutcome::Accepted(EventReceipt {
        id: event.id.clone(),
        tenant_id: event.tenant_id.clone(),
        event_type: event.event_type.clone(),
        ordering_key: event.ordering_key.clone(),
        deliveries,
        unversioned,
    }))
}

/// What [`fan_out_rows`] writes, as [`count_fan_out`] found it.
struct FanOut<'a> {
    /// The JSON array of the patterns matching the event's type.
    patterns: &'a str,
    /// Every version the event carries, oldest first.
    versions: &'a [i64],
    counted: u64,
}

/// Counts the deliveries an event fans out to, and those dead at once (pinned below every
/// version it has): `(deliveries, dead at once)`, each waiting one `fanned_out` in `state`.
///
/// Read before the fan-out is written rather than with its `RETURNING`, which keeps every row
/// it returns in a table of its own before the first is read: the read costs less (the bench's
/// `fanout`). The write connection is the file's only writer, so the insert that follows in
/// the same transaction writes exactly these; if the job fails, the counts are undone with it.
fn count_fan_out(
    c: &Connection,
    state: &mut WriterState,
    event: &NewEvent,
    patterns: &str,
    oldest: i64,
) -> Result<(u64, u64)> {
    let (mut deliveries, mut unversioned) = (0u64, 0u64);
    let mut fanned_out = c.prepare_cached(queries::FANNED_OUT_TO)?;
    let mut rows = fanned_out.query(params![
        oldest,
        patterns,
        event.tenant_id,
        event.only_subscriber
    ])?;
    while let Some(r) = rows.next()? {
        deliveries += 1;
        if r.get::<_, bool>(1)? {
            unversioned += 1;
        } else {
            // Borrowed from the row: the change log already copies each id once.
            state.fanned_out(r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?);
        }
    }
    Ok((deliveries, unversioned))
}

/// Inserts the event's `counted` deliveries: one statement fans the event out to every
/// matching subscriber that is not revoked, each with the highest version at or below its pin
/// (the latest when unpinned, of `versions`, oldest first); one pinned below every version gets
/// a delivery that is dead at once, with the reason. An insert that writes other than what was
/// counted is refused: the waiting counts claims trust would be wrong. Then, for an event with
/// an ordering key, those behind an earlier delivery of the key are held.
fn fan_out_rows(c: &Connection, event: &NewEvent, fan_out: &FanOut, now: UnixMs) -> Result<()> {
    let versions = fan_out.versions;
    let inserted = c.prepare_cached(queries::FAN_OUT)?.execute(params![
        event.id,
        fan_out.patterns,
        now,
        event.payload_version,
        serde_json::to_string(versions).expect("integers serialize"),
        versions[0],
        DeadReason::PermanentFailure.as_str(),
        UNVERSIONED_ERROR,
        event.tenant_id,
        event.only_subscriber,
        event.ordering_key
    ])?;
    let counted = fan_out.counted;
    if inserted as u64 != counted {
        return Err(StoreError::backend(format!(
            "the fan-out of event {} wrote {inserted} deliveries, counted {counted}",
            event.id
        )));
    }
    if let Some(key) = &event.ordering_key {
        // The single writer orders this after every ending that could release them.
        c.prepare_cached(queries::HOLD_BEHIND_IN_ORDER)?
            .execute(params![event.id, key])?;
    }
    Ok(())
}

fn due_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DueRow> {
    Ok(DueRow {
        key: r.get(0)?,
        id: r.get(1)?,
        event_id: r.get(2)?,
        subscriber_id: r.get(3)?,
        attempts: r.get(4)?,
        first_seen: r.get(5)?,
        window_start: r.get(6)?,
        run_at: r.get::<_, Option<i64>>(7)?.unwrap_or(0),
        payload_version: r.get(8)?,
        claimed_at: r.get(9)?,
    })
}

/// Destinations and events met during one claim, built once each: a fan-out batch shares one
/// event body across all its deliveries. Subscriber rows come from the writer's cache, kept
/// between claims; a destination is built per claim, with its time.
struct Lookups<'w> {
    /// When the claim happens: decides whether a rotated-out secret still signs.
    now: UnixMs,
    subscribers: &'w mut SubscriberCache,
    destinations: HashMap<String, Arc<Destination>>,
    /// Per event and payload version (`None`: the latest).
    events: HashMap<(String, Option<i64>), Arc<EventBody>>,
}

impl<'w> Lookups<'w> {
    fn new(now: UnixMs, subscribers: &'w mut SubscriberCache) -> Self {
        Self {
            now,
            subscribers,
            destinations: HashMap::new(),
            events: HashMap::new(),
        }
    }

    fn subscriber(&mut self, c: &Connection, id: &str) -> Result<Arc<Subscriber>> {
        self.subscribers.get(c, id)
    }

    fn destination(&mut self, c: &Connection, id: &str) -> Result<Arc<Destination>> {
        if let Some(found) = self.destinations.get(id) {
            return Ok(found.clone());
        }
        let destination = Arc::new(self.subscriber(c, id)?.destination(self.now));
        self.destinations.insert(id.to_owned(), destination.clone());
        Ok(destination)
    }

    fn event(&mut self, c: &Connection, id: &str, version: Option<i64>) -> Result<Arc<EventBody>> {
        let key = (id.to_owned(), version);
        if let Some(found) = self.events.get(&key) {
            return Ok(found.clone());
        }
        // Earlier versions live in event_payloads; the latest (and a row's missing version)
        // in events.
        let body = c
            .prepare_cached(queries::EVENT_BODY)?
            .query_row(params![id, version], |r| {
                Ok(EventBody {
                    id: r.get(0)?,
                    event_type: r.get(1)?,
                    payload: r.get(2)?,
                    payload_version: r.get(3)?,
                    accepted_at: r.get(4)?,
                    traceparent: r.get(5)?,
                })
            })?;
        let body = Arc::new(body);
        self.events.insert(key, body.clone());
        Ok(body)
    }

    fn claimed(
        &mut self,
        c: &Connection,
        row: DueRow,
        lease: i64,
        kind: LeaseKind,
    ) -> Result<ClaimedDelivery> {
        let destination = self.destination(c, &row.subscriber_id)?;
        let event = self.event(c, &row.event_id, row.payload_version)?;
        Ok(row.leased(lease, kind, destination, event))
    }
}

fn new_lease() -> i64 {
    rand::random::<i64>()
}

/// The subscribers on `origins` (through the index `subscribers_origin`).
fn subscribers_on(c: &Connection, origins: &[Origin]) -> Result<Vec<String>> {
    if origins.is_empty() {
        return Ok(Vec::new());
    }
    let ids = c
        .prepare_cached(queries::SUBSCRIBERS_ON)?
        .query_map(
            [serde_json::to_string(origins).expect("origins serialize")],
            |r| r.get(0),
        )?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(ids)
}

/// Each subscriber with deliveries in flight and how many, counted from the lease index
/// (which holds only rows in flight) as the claim or sweep begins: a count kept in memory
/// beside the rows measured no gain for the whole process (the bench's `sustained` and
/// `single`, and `isolation` with 5,000 attempts in flight). The subscribers are read through
/// the cache the claim's scan reads its rows' subscribers from: a query joining the counts to
/// the table cost more per claimed delivery than the cache (callgrind, `throughput`).
/// Subscribers are never deleted; one missing all the same (a file edited by hand) is left
/// out, as the join left it out, rather than failing claims.
fn busy(w: &mut Writer) -> Result<Vec<(Arc<Subscriber>, u32)>> {
    let counted = in_flight_per_subscriber(&w.conn)?;
    let mut busy = Vec::with_capacity(counted.len());
    for (id, n) in counted {
        match w.subscribers.get(&w.conn, &id) {
            Ok(subscriber) => busy.push((subscriber, n)),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(busy)
}

pub(super) fn in_flight_per_subscriber(c: &Connection) -> Result<Vec<(String, u32)>> {
    Ok(c.prepare_cached(queries::IN_FLIGHT_PER_SUBSCRIBER)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?)
}

/// What a claim's scans read their rows through: the plan and its budget, the subscribers'
/// rows, and what each subscriber has in flight.
struct Scanning<'c, 'w> {
    c: &'c Connection,
    lookups: Lookups<'w>,
    in_flight: &'c HashMap<&'c str, u32>,
    budget: ClaimBudget,
    plan: ClaimPlan<DueRow>,
}

impl Scanning<'_, '_> {
    /// Puts one scan's rows through the plan until it says to stop, or until `cut_short` says
    /// to after a row taken (given the budget and the row's subscriber): answers whether
    /// `cut_short` ended it.
    fn read(
        &mut self,
        rows: &mut rusqlite::Rows<'_>,
        mut cut_short: impl FnMut(&ClaimBudget, &str) -> bool,
    ) -> Result<bool> {
        while let Some(r) = rows.next()? {
            let row = due_row(r)?;
            let subscriber = self.lookups.subscriber(self.c, &row.subscriber_id)?;
            let candidate = Candidate {
                key: row.key,
                status: subscriber.status,
                limits: subscriber.limits(),
                in_flight: self
                    .in_flight
                    .get(row.subscriber_id.as_str())
                    .copied()
                    .unwrap_or(0),
                attempts: row.attempts,
            };
            let taken = self.plan.take.len();
            if !self.plan.consider(&mut self.budget, candidate, row) {
                return Ok(false);
            }
            if self.plan.take.len() > taken && cut_short(&self.budget, &subscriber.id) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The tenants' shares (`fair_share.rs`): rounds of scans, each tenant's through its own
    /// part of `deliveries_tenant_due`, leaving out what the claim's first scan in due order
    /// leaves out (`excluded_ids`) and the rows its own earlier scans looked at.
    fn share_among_tenants(
        &mut self,
        req: &ClaimRequest,
        (tenants, held): (Vec<WaitingTenant<String>>, HeldElsewhere),
        excluded_ids: &[String],
    ) -> Result<()> {
        let excluded = serde_json::to_string(excluded_ids).expect("subscriber ids serialize");
        let mut seen_of: Vec<Vec<i64>> = vec![Vec::new(); tenants.len()];
        let mut fair = FairShare::new(req.slots, req.room(), tenants, held);
        loop {
            let round = fair.next_round();
            if round.is_empty() {
                return Ok(());
            }
            for share in round {
                let seen_before = self.plan.seen.len();
                self.plan.begin_share(share.rows);
                let mut stmt = self.c.prepare_cached(queries::DUE_OF_TENANT)?;
                let mut rows = stmt.query(params![
                    req.now,
                    excluded,
                    self.budget.takes_retries(),
                    req.window_ended_for_start,
                    serde_json::to_string(&seen_of[share.index]).expect("keys serialize"),
                    share.tenant
                ])?;
                self.read(&mut rows, |_, _| false)?;
                seen_of[share.index].extend_from_slice(&self.plan.seen[seen_before..]);
                fair.took(share.index, self.plan.taken_in_scan());
            }
        }
    }
}

/// The tenants with deliveries waiting, walked from `cursor` one seek each, at most
/// [`TENANTS_PER_CLAIM`], each with when its earliest comes due. Without tenants, this is one
/// seek of an empty index.
fn tenants_waiting(c: &Connection, cursor: &mut TenantCursor) -> Result<Vec<(String, UnixMs)>> {
    let mut next = c.prepare_cached(queries::NEXT_TENANT_WAITING)?;
    let mut waiting: Vec<(String, UnixMs)> = Vec::new();
    while waiting.len() < TENANTS_PER_CLAIM {
        let after = waiting.last().map_or(cursor.after(), |(t, _)| t.as_str());
        let found = next
            .query_row([after], |r| Ok((r.get::<_, String>(0)?, r.get(1)?)))
            .optional()?;
        let Some(tenant) = found else {
            break;
        };
        waiting.push(tenant);
    }
    cursor.advance(waiting.iter().map(|(t, _)| t.as_str()));
    Ok(waiting)
}

pub(super) fn claim_due(w: &mut Writer, req: &ClaimRequest) -> Result<Vec<ClaimedDelivery>> {
    if req.limit == 0 && req.lend == 0 {
        return Ok(Vec::new());
    }
    let waiting = if w.tenants.any {
        tenants_waiting(&w.conn, &mut w.tenants.cursor)?
    } else {
        Vec::new()
    };
    if req.limit == 0 && !waiting.iter().any(|(_, due_since)| *due_since <= req.now) {
        // No free slot, and nobody to lend to (`ClaimRequest::lend`).
        return Ok(Vec::new());
    }
    // Subscribers none of whose due rows this claim can take are left out of the scan inside
    // SQLite (see `ClaimBudget::unclaimable`): a wall of their due rows cannot fill the scan,
    // though SQLite still walks it (the due index holds only `run_at`), so when they are all
    // that waits there is no scan at all (`ScheduledCounts`).
    let mut budget = ClaimBudget::new(req);
    let busy = busy(w)?;
    let in_flight: HashMap<&str, u32> = busy.iter().map(|(s, n)| (s.id.as_str(), *n)).collect();
    let c = &w.conn;
    let rate_limited = c
        .prepare_cached(queries::RATE_LIMITED)?
        .query_map([req.now], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    let mut excluded = budget.unclaimable(
        busy.iter().map(|(s, n)| {
            let origin = Cow::Borrowed(s.origin.as_str());
            let limits = Limits::in_flight_bound(&s.id, origin, s.max_in_flight, s.breaker);
            (limits, *n)
        }),
        rate_limited,
    );
    let sharing = fair_share::sharing(
        waiting
            .iter()
            .map(|(t, due_since)| (t.as_str(), *due_since)),
        req.now,
        busy.iter().map(|(s, n)| (s.tenant_id.as_deref(), *n)),
    );
    let plan = ClaimPlan::row_by_row(req.limit, &budget);
    let mut scanning = Scanning {
        c,
        lookups: Lookups::new(req.now, &mut w.subscribers),
        in_flight: &in_flight,
        budget,
        plan,
    };
    if !sharing.0.is_empty() {
        let excluded_ids = excluded.ids(subscribers_on(c, &excluded.origins)?);
        scanning.share_among_tenants(req, sharing, &excluded_ids)?;
    }
    scanning.plan.begin_fill(&scanning.budget);
    let trusted = w.state.scheduled().trusted(req.now);
    // Whether the fill read its scans without skipping any on the counts' word (a fill the
    // shares left nothing to is neither).
    let mut read_in_full = false;
    let excludes =
        |excluded: &[String], id: &str| excluded.binary_search_by(|e| e.as_str().cmp(id)).is_ok();
    while !scanning.plan.is_full() {
        let excluded_ids = excluded.ids(subscribers_on(c, &excluded.origins)?);
        if trusted
            && w.state
                .scheduled()
                .all_left_out(|id| excludes(&excluded_ids, id))
        {
            // Every waiting row is a left-out subscriber's: the scan would walk them all to
            // find nothing.
            read_in_full = false;
            break;
        }
        let mut stmt = c.prepare_cached(queries::DUE)?;
        let mut rows = stmt.query(params![
            req.now,
            serde_json::to_string(&excluded_ids).expect("subscriber ids serialize"),
            scanning.budget.takes_retries(),
            req.window_ended_for_start,
            serde_json::to_string(&scanning.plan.seen).expect("keys serialize")
        ])?;
        // When the row taken used up the last subscriber with waiting rows that this scan does
        // not leave out, the rest of the scan is left-out subscribers' rows: stop rather than
        // read on to the wall.
        let cut_short = scanning.read(&mut rows, |budget, id| {
            trusted
                && budget.is_used_up(id)
                && w.state
                    .scheduled()
                    .all_left_out(|id| budget.is_used_up(id) || excludes(&excluded_ids, id))
        })?;
        drop(rows);
        read_in_full = !cut_short;
        if cut_short || !scanning.plan.widen(&scanning.budget, &mut excluded) {
            break;
        }
    }
    let Scanning {
        mut lookups,
        budget,
        plan,
        ..
    } = scanning;
    if read_in_full {
        w.state.claimed_in_full(req.now);
    }
    for key in plan.hold {
        c.prepare_cached(queries::HOLD)?.execute([key])?;
    }
    for key in &plan.revoked {
        let subscriber_id: String = c.prepare_cached(queries::KILL_DUE)?.query_row(
            params![key, DeadReason::SubscriptionRevoked.as_str(), req.now],
            |r| r.get(0),
        )?;
        w.state
            .died_waiting(&subscriber_id, DeadReason::SubscriptionRevoked, 1);
    }
    for (key, until) in plan.defer {
        c.prepare_cached(queries::DEFER)?
            .execute(params![key, until])?;
    }
    for (id, next_at) in budget.rate_updates() {
        c.prepare_cached(queries::SET_RATE_NEXT_AT)?
            .execute(params![id, next_at])?;
    }
    for (id, cap) in budget.ramps_ended() {
        c.prepare_cached(queries::END_SLOW_START)?
            .execute(params![id, cap])?;
    }
    let lease = new_lease();
    let expires = req.now + req.lease_ms;
    let mut claimed = Vec::with_capacity(plan.take.len());
    // Taken from the statement cache once, not once per row (see `complete`).
    let mut leased = c.prepare_cached(queries::LEASE)?;
    for row in plan.take {
        leased.execute(params![row.key, lease, expires, req.now])?;
        w.state.claimed(&row.subscriber_id);
        claimed.push(lookups.claimed(c, row, lease, LeaseKind::Claim)?);
    }
    Ok(claimed)
}

pub(super) fn rescue_expired(
    w: &mut Writer,
    now: UnixMs,
    limit: usize,
    lease_ms: i64,
) -> Result<Vec<ClaimedDelivery>> {
    let c = &w.conn;
    let rows = c
        .prepare_cached(queries::EXPIRED_LEASES)?
        .query_map(params![now, to_bigint(limit)], due_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let lease = new_lease();
    let mut lookups = Lookups::new(now, &mut w.subscribers);
    let mut rescued = Vec::with_capacity(rows.len());
    for row in rows {
        c.prepare_cached(queries::RENEW_LEASE)?
            .execute(params![row.key, lease, now + lease_ms])?;
        rescued.push(lookups.claimed(c, row, lease, LeaseKind::Rescue)?);
    }
    Ok(rescued)
}

pub(super) fn complete(
    w: &mut Writer,
    completions: &[Completion],
    now: UnixMs,
) -> Result<Vec<CompletionResult>> {
    let c = &w.conn;
    // Taken from the statement cache once per batch rather than once per row: each take and
    // give-back hashes the statement's text.
    // The lease fence. The subscriber's status and breaker come from the claims' cache, which
    // forgets a row the moment this connection changes it: so they are as of this point in
    // the batch, earlier completions' breaker changes and revocations included. Joining the
    // subscriber here instead cost a visible share of a completion (callgrind, `single`).
    let mut holder = c.prepare_cached(queries::LEASE_HOLDER)?;
    let mut ended = c.prepare_cached(queries::END_ATTEMPT)?;
    let mut attempted = c.prepare_cached(queries::INSERT_ATTEMPT)?;
    let mut results = Vec::with_capacity(completions.len());
    for done in completions {
        let holding = holder
            .query_row(params![done.key.0, done.lease], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })
            .optional()?;
        let Some((subscriber_id, ordering_key)) = holding else {
            results.push(CompletionResult::LeaseLost);
            continue;
        };
        // Subscribers are never deleted. One missing all the same (a file edited by hand)
        // has nothing to complete its delivery against: left in flight, as a lost lease is.
        let subscriber = match w.subscribers.get(c, &subscriber_id) {
            Ok(subscriber) => subscriber,
            Err(StoreError::NotFound(_)) => {
                results.push(CompletionResult::LeaseLost);
                continue;
            }
            Err(e) => return Err(e),
        };
        let breaker = subscriber.breaker;
        let end = Ending::of(done.transition, subscriber.status);
        ended.execute(params![
            done.key.0,
            end.state.as_str(),
            end.run_at,
            end.dead_reason_str(),
            now
        ])?;
        w.state
            .completed(&subscriber_id, &end, done.record.policy.as_deref());
        let a = &done.record;
        let (outcome, lost) = stored_outcome(a.outcome);
        attempted.execute(params![
            done.key.0,
            a.ordinal,
            a.started_at,
            to_bigint(a.duration_ms),
            outcome,
            a.status,
            a.error,
            a.response_body,
            lost,
            a.policy
        ])?;
        if done.revoke_subscriber {
            revoke(c, &mut w.state, &subscriber_id, StatusReason::Gone, now)?;
        }
        if let Some(key) = ordering_key.filter(|_| end.state.ended()) {
            release_next_in_order(c, &subscriber_id, &key)?;
        }
        let next = breaker.after(&done.breaker, &subscriber_id, a.outcome, now);
        let failing = subscriber.failing.after(a.outcome, now);
        if next != breaker || failing != subscriber.failing {
            c.prepare_cached(queries::SET_BREAKER)?.execute(params![
                subscriber_id,
                next.consecutive_failures,
                next.open_until,
                next.cool_down_ms,
                next.allowance,
                failing.since,
                failing.attempts
            ])?;
        }
        results.push(CompletionResult::Applied);
    }
    Ok(results)
}

/// A dead letter a replay selects: key, id, its subscriber's pin, the version it would send.
type Selected = (i64, String, Option<i64>, Option<i64>);

pub(super) fn replay_selection(c: &Connection, req: &ReplayRequest) -> Result<Vec<Selected>> {
    validate_replay(req)?;
    Ok(c.prepare_cached(reads::replay_selection_statement(req))?
        .query_map(
            params![
                req.reason.as_str(),
                req.subscriber_id,
                selection_limit(req),
                req.tenant_id
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?)
}

pub(super) fn replay(w: &mut Writer, req: &ReplayRequest, now: UnixMs) -> Result<String> {
    let c = &w.conn;
    let selected = replay_selection(c, req)?;
    selection_as_previewed(req, selected.iter().map(|(_, id, _, _)| id.as_str()))?;
    let id = format!("rpl_{:016x}", rand::random::<u64>());
    c.prepare_cached(queries::INSERT_REPLAY)?.execute(params![
        id,
        now,
        req.reason.as_str(),
        req.subscriber_id,
        req.limit,
        req.per_second,
        req.requested_by,
        to_bigint(selected.len()),
        req.tenant_id
    ])?;
    let replay_seq = c.last_insert_rowid();
    for (i, (key, _, pin, version)) in selected.iter().enumerate() {
        if version.is_none() {
            // Still no version for its subscriber's pin: it dies again at once, on the record.
            c.prepare_cached(queries::DIE_AGAIN_UNVERSIONED)?
                .execute(params![
                    key,
                    DeadReason::PermanentFailure.as_str(),
                    now,
                    UNVERSIONED_ERROR,
                    pin
                ])?;
            w.state.died_again(DeadReason::PermanentFailure);
        } else {
            // Pacing is persisted as each delivery's run_at, so a restart keeps it.
            let release = release_at(now, i, req.per_second);
            let subscriber_id: String = c
                .prepare_cached(queries::RELEASE_REPLAYED)?
                .query_row(params![key, release, now, version], |r| r.get(0))?;
            w.state.replayed(&subscriber_id);
        }
        c.prepare_cached(queries::INSERT_REPLAY_ITEM)?
            .execute(params![replay_seq, key])?;
    }
    Ok(id)
}

pub(super) fn expire_windows(w: &mut Writer, sweep: WindowSweep) -> Result<Vec<String>> {
    let mut in_flight = InFlight::default();
    for (s, n) in busy(w)? {
        in_flight.add(&s.id, &s.origin, n);
    }
    let c = &w.conn;
    let expiring = c
        .prepare_cached(queries::EXPIRING_WINDOWS)?
        .query_map(
            params![sweep.started_before(), to_bigint(sweep.limit), sweep.now],
            |r| {
                let subscriber: String = r.get(1)?;
                let (stored, url): (Option<String>, String) = (r.get(8)?, r.get(9)?);
                let origin = Origin::stored(stored, &url);
                let state = WaitState {
                    held: r.get(2)?,
                    run_at: r.get(3)?,
                    breaker_open_until: r.get(4)?,
                    rate_next_at: r.get(5)?,
                    in_flight: in_flight.of_subscriber(&subscriber),
                    cap: cap_in_force(
                        r.get(6)?,
                        sweep.caps.max_in_flight_per_subscriber,
                        r.get(7)?,
                    ),
                    host_in_flight: in_flight.of_origin(&origin),
                    host_cap: host_cap_in_force(sweep.caps.max_in_flight_per_host),
                    queued_at_rate: r.get(10)?,
                    // The dispatcher's own view; a window that ends on it ends on its cause.
                    held_back: false,
                    ordered: r.get(11)?,
                };
                let ordering_key: Option<String> = r.get(12)?;
                Ok((
                    r.get::<_, i64>(0)?,
                    state.waiting_on(sweep.now),
                    subscriber,
                    ordering_key,
                ))
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (key, waiting_on, subscriber_id, _) in &expiring {
        c.prepare_cached(queries::EXPIRE_WINDOW)?.execute(params![
            key,
            DeadReason::WindowExpired.as_str(),
            sweep.now,
            waiting_on.map(WaitingOn::as_str)
        ])?;
        w.state
            .died_waiting(subscriber_id, DeadReason::WindowExpired, 1);
    }
    // After every death of the pass: one behind another that died with it is not the next.
    for (_, _, subscriber_id, ordering_key) in &expiring {
        if let Some(key) = ordering_key {
            release_next_in_order(c, subscriber_id, key)?;
        }
    }
    let orphaned = c
        .prepare_cached(queries::ORPHANED_IN_ORDER)?
        .query_map([to_bigint(sweep.limit)], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<(String, String)>>>()?;
    for (subscriber_id, key) in &orphaned {
        release_next_in_order(c, subscriber_id, key)?;
    }
    Ok(expiring
        .into_iter()
        .map(|(_, _, subscriber_id, _)| subscriber_id)
        .collect())
}

/// After a delivery of `subscriber_id`'s ordering `key` ended (delivered or dead), the first of
/// that key waiting behind it goes due: the single writer orders this after any publish.
fn release_next_in_order(c: &Connection, subscriber_id: &str, key: &str) -> Result<()> {
    c.prepare_cached(queries::RELEASE_NEXT_IN_ORDER)?
        .execute(params![subscriber_id, key])?;
    Ok(())
}

pub(super) fn prune_delivered(c: &Connection, before: UnixMs, batch: u32) -> Result<u64> {
    let keys = c
        .prepare_cached(queries::PRUNABLE)?
        .query_map(params![before, batch], |r| r.get::<_, i64>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for key in &keys {
        c.prepare_cached(queries::PRUNE_ATTEMPTS)?.execute([key])?;
        c.prepare_cached(queries::PRUNE_DELIVERY)?.execute([key])?;
    }
    Ok(keys.len() as u64)
}

pub(super) fn create_policy(c: &Connection, policy: StoredPolicy) -> Result<StoredPolicy> {
    let inserted = c.prepare_cached(queries::INSERT_POLICY)?.execute(params![
        policy.name,
        policy.definition,
        policy.created_at,
        policy.created_by
    ]);
    match inserted {
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            Err(policy_exists(&policy.name))
        }
        other => other.map(|_| policy).map_err(Into::into),
    }
}
