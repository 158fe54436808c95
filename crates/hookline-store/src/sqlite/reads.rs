//! Every read. These run on pooled read connections, and a few on the writer's connection when
//! a write answers with the row it wrote.

use hookline_policy::{Breaker, DeadReason, FailingStreak, UnixMs};
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::queries;
use crate::*;

pub(super) fn not_found(what: &str, id: &str) -> StoreError {
    StoreError::NotFound(format!("{what} {id:?}"))
}

fn corrupt(what: &str, value: &str) -> rusqlite::Error {
    rusqlite::Error::InvalidColumnType(0, format!("{what} {value:?}"), rusqlite::types::Type::Text)
}

/// A stored `status_reason`: NULL, or one of [`StatusReason::as_str`].
fn status_reason(stored: Option<String>) -> rusqlite::Result<Option<StatusReason>> {
    stored
        .map(|s| StatusReason::parse(&s).ok_or_else(|| corrupt("status_reason", &s)))
        .transpose()
}

/// A subscriber's row as `SUBSCRIBER` and `SUBSCRIBER_PAGE` read it.
pub(super) fn subscriber_row(r: &Row<'_>) -> rusqlite::Result<(i64, Subscriber)> {
    let types: String = r.get(3)?;
    let status: String = r.get(5)?;
    let headers: Option<String> = r.get(17)?;
    let url: String = r.get(2)?;
    // Missing only on a row an older binary wrote since this one started (`origin` backfills).
    let stored: Option<String> = r.get(18)?;
    let origin = Origin::stored(stored, &url);
    Ok((
        r.get(0)?,
        Subscriber {
            id: r.get(1)?,
            tenant_id: r.get(20)?,
            url,
            origin,
            event_types: serde_json::from_str(&types)
                .map_err(|_| corrupt("event_types", &types))?,
            secret: r.get(4)?,
            previous_secret: r.get(8)?,
            previous_secret_until: r.get(9)?,
            status: SubscriberStatus::parse(&status).ok_or_else(|| corrupt("status", &status))?,
            status_reason: status_reason(r.get(23)?)?,
            created_at: r.get(6)?,
            updated_at: r.get(7)?,
            breaker: Breaker {
                consecutive_failures: r.get(10)?,
                open_until: r.get(11)?,
                cool_down_ms: r.get(12)?,
                allowance: r.get(19)?,
            },
            failing: FailingStreak {
                since: r.get(21)?,
                attempts: r.get(22)?,
            },
            max_in_flight: r.get(13)?,
            rate_limit_per_second: r.get(14)?,
            rate_next_at: r.get(15)?,
            payload_version: r.get(16)?,
            headers: SubscriberHeaders::decode(headers.as_deref())
                // Not the value itself: it holds credentials, and errors are logged.
                .ok_or_else(|| corrupt("headers", "(not a JSON object of strings)"))?,
        },
    ))
}

pub(super) fn subscriber(c: &Connection, id: &str) -> Result<Subscriber> {
    Ok(keyed_subscriber(c, id)?.1)
}

/// A subscriber and its rowid (`seq`).
pub(super) fn keyed_subscriber(c: &Connection, id: &str) -> Result<(i64, Subscriber)> {
    c.prepare_cached(queries::SUBSCRIBER)?
        .query_row([id], subscriber_row)
        .optional()?
        .ok_or_else(|| not_found("subscriber", id))
}

/// Those of `ids` revoked or not in the table, in one statement (the ids as a JSON array).
pub(super) fn gone_among(c: &Connection, ids: &[String]) -> Result<Vec<String>> {
    let ids = serde_json::to_string(ids).map_err(StoreError::failed)?;
    Ok(c.prepare_cached(queries::GONE_AMONG)?
        .query_map([ids], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?)
}

pub(super) fn subscribers(
    c: &Connection,
    filter: &SubscriberFilter,
    limit: u32,
    after: i64,
) -> Result<Page<Subscriber>> {
    let rows = c
        .prepare_cached(queries::SUBSCRIBER_PAGE)?
        .query_map(
            params![
                after,
                filter.like_pattern()?,
                filter.search_query_values,
                limit + 1,
                filter.tenant_id
            ],
            subscriber_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

pub(super) fn event(c: &Connection, id: &str) -> Result<Event> {
    let mut event = c
        .prepare_cached(queries::EVENT)?
        .query_row([id], |r| {
            Ok(Event {
                id: r.get(0)?,
                tenant_id: r.get(7)?,
                event_type: r.get(1)?,
                payload: r.get(2)?,
                payload_version: r.get(3)?,
                earlier_payloads: Vec::new(),
                accepted_at: r.get(4)?,
                deliveries: r.get(5)?,
                counts: StateCounts::default(),
                published_by: r.get(6)?,
                ordering_key: r.get(8)?,
                traceparent: r.get(9)?,
            })
        })
        .optional()?
        .ok_or_else(|| not_found("event", id))?;
    event.earlier_payloads = earlier_payloads(c, id)?;
    let mut stmt = c.prepare_cached(queries::EVENT_STATE_COUNTS)?;
    let mut rows = stmt.query([id])?;
    while let Some(r) = rows.next()? {
        let state: String = r.get(0)?;
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        event.counts.add(state, r.get(1)?);
    }
    Ok(event)
}

/// A page of events newest first, after `after` (see `EVENT_PAGE`), with their counts.
pub(super) fn events(
    c: &Connection,
    filter: &EventFilter,
    limit: u32,
    after: EventPosition,
) -> Result<Page<EventSummary>> {
    let EventPosition(at, id) = after;
    let mut rows = c
        .prepare_cached(queries::EVENT_PAGE)?
        .query_map(
            params![
                at,
                id,
                filter.event_type,
                filter.type_prefix,
                filter.tenant_id,
                filter.since.unwrap_or(i64::MIN),
                filter.until.unwrap_or(i64::MAX),
                i64::from(limit) + 1
            ],
            |r| {
                Ok((
                    EventPosition(r.get(0)?, r.get(1)?),
                    EventSummary {
                        id: r.get(1)?,
                        event_type: r.get(2)?,
                        payload_version: r.get(3)?,
                        accepted_at: r.get(0)?,
                        deliveries: r.get(4)?,
                        tenant_id: r.get(5)?,
                        counts: StateCounts::default(),
                    },
                ))
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let ids: Vec<&str> = rows.iter().map(|(_, e)| e.id.as_str()).collect();
    let at_row: std::collections::HashMap<String, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| ((*id).to_owned(), i))
        .collect();
    let ids = serde_json::to_string(&ids).map_err(StoreError::failed)?;
    let mut counts = c.prepare_cached(queries::EVENTS_STATE_COUNTS)?;
    let mut counted = counts.query([ids])?;
    while let Some(r) = counted.next()? {
        let (event, state): (String, String) = (r.get(0)?, r.get(1)?);
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        if let Some(&i) = at_row.get(event.as_str()) {
            let e = &mut rows[i].1;
            e.counts.add(state, r.get(2)?);
        }
    }
    Ok(page(rows, limit))
}

/// The versions of an event below its latest, ascending.
pub(super) fn earlier_payloads(c: &Connection, event_id: &str) -> Result<Vec<(i64, String)>> {
    Ok(c.prepare_cached(queries::EARLIER_PAYLOADS)?
        .query_map([event_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?)
}

fn history(c: &Connection, key: i64) -> Result<Vec<AttemptRecord>> {
    let rows = c
        .prepare_cached(queries::DELIVERY_ATTEMPTS)?
        .query_map([key], |r| {
            let outcome: String = r.get(3)?;
            Ok(AttemptRecord {
                ordinal: r.get(0)?,
                started_at: r.get(1)?,
                duration_ms: non_negative(r.get(2)?),
                outcome: read_outcome(&outcome, r.get(7)?)
                    .ok_or_else(|| corrupt("outcome", &outcome))?,
                status: r.get(4)?,
                error: r.get(5)?,
                response_body: r.get(6)?,
                policy: r.get(8)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The column `waiting_on` at `i` as a delivery shows it.
fn waiting_on(
    r: &Row<'_>,
    i: usize,
    reason: Option<DeadReason>,
) -> rusqlite::Result<Option<WaitingOn>> {
    let value: Option<String> = r.get(i)?;
    shown_waiting_on(value.as_deref(), reason).map_err(|v| corrupt("waiting_on", v))
}

pub(super) fn dead_letter_groups(
    c: &Connection,
    since: UnixMs,
    tenant_id: Option<&str>,
    limit: u32,
) -> Result<Vec<DeadLetterGroup>> {
    let mut statement = c.prepare_cached(queries::DEAD_LETTER_GROUPS)?;
    let rows = statement.query_map(rusqlite::params![since, limit, tenant_id], |r| {
        let status: String = r.get(5)?;
        Ok(DeadLetterGroup {
            reason: dead_reason(r.get(0)?)?.ok_or_else(|| corrupt("dead_reason", ""))?,
            subscriber_id: r.get(1)?,
            subscriber_status: SubscriberStatus::parse(&status)
                .ok_or_else(|| corrupt("status", &status))?,
            count: non_negative(r.get(2)?),
            oldest_dead_at: r.get(3)?,
            newest_dead_at: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn dead_letters_by_reason(
    c: &Connection,
    since: UnixMs,
    tenant_id: Option<&str>,
) -> Result<Vec<(DeadReason, u64)>> {
    let mut statement = c.prepare_cached(queries::DEAD_LETTERS_BY_REASON)?;
    let rows = statement.query_map(params![since, tenant_id], |r| {
        let reason = dead_reason(r.get(0)?)?.ok_or_else(|| corrupt("dead_reason", ""))?;
        Ok((reason, non_negative(r.get(1)?)))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn dead_reason(value: Option<String>) -> rusqlite::Result<Option<DeadReason>> {
    value
        .map(|v| DeadReason::parse(&v).ok_or_else(|| corrupt("dead_reason", &v)))
        .transpose()
}

/// A delivery's row as `DELIVERY` and the lists of deliveries read it.
fn delivery_row(r: &Row<'_>) -> rusqlite::Result<(i64, Delivery)> {
    let state: String = r.get(4)?;
    let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
    let reason = dead_reason(r.get(9)?)?;
    Ok((
        r.get(0)?,
        Delivery {
            id: r.get(1)?,
            tenant_id: r.get(14)?,
            event_id: r.get(2)?,
            subscriber_id: r.get(3)?,
            state,
            attempts: r.get(5)?,
            first_seen: r.get(6)?,
            window_start: r.get(7)?,
            next_attempt_at: if state == DeliveryState::Scheduled {
                r.get(8)?
            } else {
                None
            },
            dead_reason: reason,
            dead_at: r.get(10)?,
            // Kept from a death an older release replayed; only a dead delivery shows it.
            dead_error: if state == DeliveryState::Dead {
                r.get(11)?
            } else {
                None
            },
            waiting_on: waiting_on(r, 12, reason)?,
            payload_version: r.get(13)?,
            attempt_history: Vec::new(),
        },
    ))
}

fn with_history(c: &Connection, rows: Vec<(i64, Delivery)>) -> Result<Vec<(i64, Delivery)>> {
    rows.into_iter()
        .map(|(key, mut d)| {
            d.attempt_history = history(c, key)?;
            Ok((key, d))
        })
        .collect()
}

pub(super) fn delivery(c: &Connection, id: &str) -> Result<Delivery> {
    let row = c
        .prepare_cached(queries::DELIVERY)?
        .query_row([id], delivery_row)
        .optional()?
        .ok_or_else(|| not_found("delivery", id))?;
    Ok(with_history(c, vec![row])?.remove(0).1)
}

/// The rows of `sql` with `params`, which end with the cursor's key and the limit (one row
/// more than a page, which says there are more).
fn listed<P: rusqlite::Params, K, T>(
    c: &Connection,
    sql: &str,
    params: P,
    row: impl FnMut(&Row<'_>) -> rusqlite::Result<(K, T)>,
) -> Result<Vec<(K, T)>> {
    Ok(c.prepare_cached(sql)?
        .query_map(params, row)?
        .collect::<rusqlite::Result<Vec<_>>>()?)
}

pub(super) fn deliveries(
    c: &Connection,
    filter: &DeliveryFilter,
    limit: u32,
    after: i64,
) -> Result<Page<Delivery>> {
    let newest_first = filter.order == ListOrder::NewestFirst;
    let state = filter.state.map(DeliveryState::as_str);
    let more = i64::from(limit) + 1;
    let rows = match (&filter.event_id, &filter.subscriber_id) {
        (Some(event), subscriber) => listed(
            c,
            if newest_first {
                queries::EVENT_DELIVERIES_NEWEST_FIRST
            } else {
                queries::EVENT_DELIVERIES
            },
            params![event, subscriber, state, after, more, filter.tenant_id],
            delivery_row,
        )?,
        (None, Some(subscriber)) => listed(
            c,
            if newest_first {
                queries::SUBSCRIBER_DELIVERIES_NEWEST_FIRST
            } else {
                queries::SUBSCRIBER_DELIVERIES
            },
            params![subscriber, state, after, more, filter.tenant_id],
            delivery_row,
        )?,
        (None, None) => listed(
            c,
            if newest_first {
                queries::DELIVERIES_NEWEST_FIRST
            } else {
                queries::DELIVERIES
            },
            params![state, after, more, filter.tenant_id],
            delivery_row,
        )?,
    };
    Ok(page(with_history(c, rows)?, limit))
}

/// The statement that lists the dead letters `filter` selects (see `dead_letters.sql`).
fn dead_letters_statement(filter: &DeadLetterFilter) -> &'static str {
    match (&filter.reason, &filter.subscriber_id) {
        (Some(_), Some(_)) => queries::DEAD_LETTERS_OF_REASON_AND_SUBSCRIBER,
        (Some(_), None) => queries::DEAD_LETTERS_OF_REASON,
        (None, Some(_)) => queries::DEAD_LETTERS_OF_SUBSCRIBER,
        (None, None) => queries::DEAD_LETTERS,
    }
}

/// The statement that selects what a replay of `req` releases, read as its page of the
/// dead-letter queue is (see `dead_letters.sql`).
pub(super) fn replay_selection_statement(req: &ReplayRequest) -> &'static str {
    match req.subscriber_id {
        Some(_) => queries::REPLAY_SELECTION_OF_SUBSCRIBER,
        None => queries::REPLAY_SELECTION,
    }
}

pub(super) fn dead_letters(
    c: &Connection,
    filter: &DeadLetterFilter,
    limit: u32,
    after: DeathPosition,
) -> Result<Page<DeadLetter>> {
    let row = |r: &Row<'_>| {
        Ok((
            DeathPosition(r.get(7)?, r.get(0)?),
            DeadLetter {
                delivery_id: r.get(1)?,
                tenant_id: r.get(10)?,
                event_id: r.get(2)?,
                event_type: r.get(3)?,
                subscriber_id: r.get(4)?,
                payload_version: r.get(5)?,
                reason: dead_reason(r.get(6)?)?.ok_or_else(|| corrupt("dead_reason", ""))?,
                dead_at: r.get(7)?,
                dead_error: r.get(8)?,
                waiting_on: waiting_on(r, 9, dead_reason(r.get(6)?)?)?,
                attempt_history: Vec::new(),
            },
        ))
    };
    let (sql, more) = (dead_letters_statement(filter), i64::from(limit) + 1);
    let DeathPosition(dead_at, key) = after;
    let tenant = &filter.tenant_id;
    let rows = match (filter.reason.map(DeadReason::as_str), &filter.subscriber_id) {
        (Some(reason), Some(subscriber)) => listed(
            c,
            sql,
            params![reason, subscriber, dead_at, key, more, tenant],
            row,
        )?,
        (Some(reason), None) => listed(c, sql, params![reason, dead_at, key, more, tenant], row)?,
        (None, Some(subscriber)) => {
            listed(c, sql, params![subscriber, dead_at, key, more, tenant], row)?
        }
        (None, None) => listed(c, sql, params![dead_at, key, more, tenant], row)?,
    };
    let rows = rows
        .into_iter()
        .map(|(key, mut d)| {
            d.attempt_history = history(c, key.1)?;
            Ok((key, d))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

pub(super) fn next_wakeup(c: &Connection, window_ms: i64) -> Result<Option<UnixMs>> {
    let (due, expiry, window_start): (Option<i64>, Option<i64>, Option<i64>) = c
        .prepare_cached(queries::NEXT_WAKEUP)?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(earliest([
        due,
        expiry,
        window_start.map(|t| t.saturating_add(window_ms)),
    ]))
}

/// Each count reads the index the test below names, so a large backlog of delayed
/// deliveries costs the gauges' refresh little.
pub(super) fn queue_stats(
    c: &Connection,
    now: UnixMs,
    caps: InFlightCaps,
    held_back: &[String],
) -> Result<QueueStats> {
    let mut stats = QueueStats::default();
    let counts: [u64; 4] = c
        .prepare_cached(queries::STATE_COUNTS)?
        .query_row([], |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]))?;
    let states = [
        DeliveryState::Scheduled,
        DeliveryState::InFlight,
        DeliveryState::Delivered,
        DeliveryState::Dead,
    ];
    for (state, n) in states.into_iter().zip(counts) {
        stats.counts.add(state, n);
    }
    let mut in_flight = InFlight::default();
    let busy = c
        .prepare_cached(queries::IN_FLIGHT_BY_ORIGIN)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<Vec<(String, u32, Option<String>, String)>>>()?;
    for (subscriber, n, stored, url) in busy {
        in_flight.add(&subscriber, &Origin::stored(stored, &url), n);
    }
    let groups = c
        .prepare_cached(queries::DUE_GROUPS)?
        .query_map([now], |r| {
            let subscriber: String = r.get(0)?;
            let oldest_due: UnixMs = r.get(1)?;
            let (stored, url): (Option<String>, String) = (r.get(7)?, r.get(8)?);
            let origin = Origin::stored(stored, &url);
            Ok(DueGroup {
                oldest_due,
                oldest_first_attempt: r.get(2)?,
                state: WaitState {
                    // Rows behind their key are held: not among the due rows read here.
                    ordered: false,
                    held: false,
                    run_at: Some(oldest_due),
                    breaker_open_until: r.get(3)?,
                    rate_next_at: r.get(4)?,
                    in_flight: in_flight.of_subscriber(&subscriber),
                    cap: cap_in_force(r.get(5)?, caps.max_in_flight_per_subscriber, r.get(6)?),
                    host_in_flight: in_flight.of_origin(&origin),
                    host_cap: host_cap_in_force(caps.max_in_flight_per_host),
                    // The oldest due row of a group is first in its subscriber's line.
                    queued_at_rate: false,
                    held_back: held_back.contains(&subscriber),
                },
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let oldest_paused: Option<UnixMs> = c
        .prepare_cached(queries::OLDEST_PAUSED)?
        .query_row([], |r| r.get(0))?;
    let oldest_ordered: Option<UnixMs> = c
        .prepare_cached(queries::OLDEST_ORDERED)?
        .query_row([], |r| r.get(0))?;
    (stats.oldest_ready_since, stats.oldest_waiting_since) =
        ready_and_waiting(groups, oldest_paused, oldest_ordered, now);
    stats.oldest_retrying_first_seen = c
        .prepare_cached(queries::OLDEST_RETRYING)?
        .query_row([], |r| r.get(0))?;
    stats.open_breakers = c
        .prepare_cached(queries::OPEN_BREAKERS)?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    (
        stats.behind_open_breakers,
        stats.behind_open_breakers_first_seen,
    ) = c
        .prepare_cached(queries::BEHIND_OPEN_BREAKERS)?
        .query_row([], |r| Ok((non_negative(r.get(0)?), r.get(1)?)))?;
    Ok(stats)
}

/// A replay's row as `REPLAY` and `REPLAYS` read it.
pub(super) fn replay_row(c: &Connection, r: &Row<'_>) -> Result<(i64, Replay)> {
    let seq: i64 = r.get(0)?;
    let reason: String = r.get(3)?;
    let delivery_ids = c
        .prepare_cached(queries::REPLAYED_DELIVERIES)?
        .query_map([seq], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let (delivered, dead): (u64, u64) = c
        .prepare_cached(queries::REPLAY_OUTCOMES)?
        .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok((
        seq,
        Replay {
            id: r.get(1)?,
            tenant_id: r.get(9)?,
            created_at: r.get(2)?,
            reason: DeadReason::parse(&reason).ok_or_else(|| corrupt("reason", &reason))?,
            subscriber_id: r.get(4)?,
            limit: r.get(5)?,
            per_second: r.get(6)?,
            requested_by: r.get(7)?,
            selected: r.get(8)?,
            delivery_ids,
            delivered,
            dead,
        },
    ))
}

pub(super) fn replay(c: &Connection, id: &str) -> Result<Replay> {
    let mut stmt = c.prepare_cached(queries::REPLAY)?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(r) => Ok(replay_row(c, r)?.1),
        None => Err(not_found("replay", id)),
    }
}

pub(super) fn replays(
    c: &Connection,
    tenant_id: Option<&str>,
    order: ListOrder,
    limit: u32,
    after: i64,
) -> Result<Page<Replay>> {
    let mut stmt = c.prepare_cached(match order {
        ListOrder::OldestFirst => queries::REPLAYS,
        ListOrder::NewestFirst => queries::REPLAYS_NEWEST_FIRST,
    })?;
    let mut rows = stmt.query(params![after, limit + 1, tenant_id])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(replay_row(c, r)?);
    }
    Ok(page(out, limit))
}

fn policy_row(r: &Row<'_>) -> rusqlite::Result<(i64, StoredPolicy)> {
    Ok((
        r.get(0)?,
        StoredPolicy {
            name: r.get(1)?,
            definition: r.get(2)?,
            created_at: r.get(3)?,
            created_by: r.get(4)?,
        },
    ))
}

pub(super) fn policy(c: &Connection, name: &str) -> Result<StoredPolicy> {
    c.prepare_cached(queries::POLICY)?
        .query_row([name], policy_row)
        .optional()?
        .map(|(_, p)| p)
        .ok_or_else(|| not_found("policy", name))
}

pub(super) fn policies(c: &Connection, limit: u32, after: i64) -> Result<Page<StoredPolicy>> {
    let rows = c
        .prepare_cached(queries::POLICIES)?
        .query_map(params![after, limit + 1], policy_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(subscriber_id: Option<&str>) -> &'static str {
        replay_selection_statement(&ReplayRequest {
            tenant_id: None,
            reason: DeadReason::PermanentFailure,
            subscriber_id: subscriber_id.map(str::to_owned),
            limit: 1_000,
            per_second: None,
            requested_by: None,
            expected: None,
        })
    }

    /// The statement of a page of the dead-letter queue as `dead_letters` asks for it.
    fn dead_letters_page(subscriber_id: Option<&str>) -> &'static str {
        dead_letters_statement(&DeadLetterFilter {
            tenant_id: None,
            reason: Some(DeadReason::PermanentFailure),
            subscriber_id: subscriber_id.map(str::to_owned),
        })
    }

    fn plan(c: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let now = std::iter::repeat_n(0, stmt.parameter_count());
        stmt.query_map(rusqlite::params_from_iter(now), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// Each statement reads `deliveries` (`d`) as many times as it names accesses, each
    /// through the access named.
    fn assert_reads(expected: &[(&str, Vec<&str>)]) {
        let mut c = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut c).unwrap();
        for (sql, accesses) in expected {
            let reads: Vec<String> = plan(&c, sql)
                .into_iter()
                .filter(|step| step.starts_with("SCAN d") || step.starts_with("SEARCH d"))
                .collect();
            assert_eq!(reads.len(), accesses.len(), "{sql}\n{reads:?}");
            for (step, access) in reads.iter().zip(accesses) {
                assert!(step.contains(access), "{sql}\nreads {step}, not {access}");
            }
        }
    }

    /// The gauges' counts, the claims' in-flight counts, the capacity model's backlog and the
    /// recent dead letters (the console's overview, per request) each read the index expected:
    /// a partial index, or one subscriber's rows, never the whole table nor every row through
    /// `deliveries_subscriber`. With 1,000,000 delayed deliveries in the store, that walk cost
    /// more than a CPU-second per gauge refresh.
    #[test]
    fn periodic_reads_use_the_index_meant_for_them() {
        // Each statement, and the access every one of its reads of `deliveries` must use (a
        // count: its index entries alone; the due groups: a range of due rows).
        assert_reads(&[
            (queries::STATE_COUNTS, vec!["COVERING INDEX deliveries_"; 4]),
            (
                queries::IN_FLIGHT_PER_SUBSCRIBER,
                vec!["USING INDEX deliveries_lease"],
            ),
            (
                queries::IN_FLIGHT_BY_ORIGIN,
                vec!["USING INDEX deliveries_lease"],
            ),
            (
                queries::DUE_GROUPS,
                vec!["SEARCH d USING INDEX deliveries_due (run_at<?)"],
            ),
            (
                queries::BACKLOG,
                vec![
                    "COVERING INDEX deliveries_window",
                    "COVERING INDEX deliveries_lease",
                    "COVERING INDEX deliveries_due",
                    "COVERING INDEX deliveries_due (run_at<?)",
                ],
            ),
            (
                queries::OLDEST_PAUSED,
                vec!["SEARCH d USING INDEX deliveries_subscriber (subscriber_id=?)"],
            ),
            (
                queries::ORPHANED_IN_ORDER,
                vec!["USING INDEX deliveries_ordering"],
            ),
            (
                queries::OLDEST_ORDERED,
                vec!["USING INDEX deliveries_ordering"],
            ),
            (
                queries::RELEASE_NEXT_IN_ORDER,
                vec![
                    "SEARCH deliveries USING INTEGER PRIMARY KEY (rowid=?)",
                    "SEARCH deliveries USING INDEX deliveries_ordering (subscriber_id=? AND ordering_key=?)",
                    "SEARCH deliveries USING INDEX deliveries_ordering (subscriber_id=? AND ordering_key=?)",
                ],
            ),
            (
                dead_letters_page(None),
                vec!["SEARCH d USING INDEX deliveries_dead_reason_at (dead_reason=?"],
            ),
            (
                dead_letters_page(Some("a")),
                vec!["SEARCH d USING INDEX deliveries_dead (dead_reason=? AND subscriber_id=?)"],
            ),
            (
                replay(None),
                vec!["SEARCH d USING INDEX deliveries_dead_reason_at (dead_reason=?"],
            ),
            (
                replay(Some("a")),
                vec!["SEARCH d USING INDEX deliveries_dead (dead_reason=? AND subscriber_id=?)"],
            ),
            // What waits: the rows due later through the due index, and the due rows of
            // subscribers with an open breaker (or a rate limit) through their own index.
            (
                queries::BACKLOG_DEFERRED,
                vec![
                    "SEARCH d USING INDEX deliveries_due (run_at>?)",
                    "SEARCH d USING INDEX deliveries_subscriber (subscriber_id=?)",
                ],
            ),
            (
                queries::BACKLOG_RATE_LIMITED,
                vec!["SEARCH d USING INDEX deliveries_subscriber (subscriber_id=?)"],
            ),
            (
                queries::DEAD_LETTERS_BY_REASON,
                vec!["SEARCH deliveries USING INDEX deliveries_dead_at (dead_at>?)"],
            ),
            (
                queries::DEAD_LETTER_GROUPS,
                vec!["SEARCH d USING INDEX deliveries_dead_at (dead_at>?)"],
            ),
        ]);
    }

    /// A claim's walk over the tenants is one seek per tenant, and each tenant's share is read
    /// from its own range of the tenant index: never a walk of other tenants' rows.
    #[test]
    fn claims_reach_each_tenant_s_due_rows_through_its_own_index() {
        assert_reads(&[
            (
                queries::NEXT_TENANT_WAITING,
                vec!["SEARCH deliveries USING INDEX deliveries_tenant_due (tenant_id>?)"],
            ),
            (
                queries::DUE_OF_TENANT,
                vec!["SEARCH deliveries USING INDEX deliveries_tenant_due (tenant_id=? AND run_at<?)"],
            ),
        ]);
    }

    /// A list of deliveries walks the index of the filter it is written for, from the cursor
    /// on, whichever other filters are set.
    #[test]
    fn delivery_lists_walk_the_index_of_their_filter() {
        assert_reads(&[
            (
                queries::EVENT_DELIVERIES,
                vec!["SEARCH d USING INDEX deliveries_event (event_id=? AND rowid>?)"],
            ),
            (
                queries::EVENT_DELIVERIES_NEWEST_FIRST,
                vec!["SEARCH d USING INDEX deliveries_event (event_id=? AND rowid<?)"],
            ),
            (
                queries::SUBSCRIBER_DELIVERIES,
                vec!["SEARCH d USING INDEX deliveries_subscriber (subscriber_id=? AND rowid>?)"],
            ),
            (
                queries::SUBSCRIBER_DELIVERIES_NEWEST_FIRST,
                vec!["SEARCH d USING INDEX deliveries_subscriber (subscriber_id=? AND rowid<?)"],
            ),
            (
                queries::DELIVERIES,
                vec!["SEARCH d USING INTEGER PRIMARY KEY (rowid>?)"],
            ),
            (
                queries::DELIVERIES_NEWEST_FIRST,
                vec!["SEARCH d USING INTEGER PRIMARY KEY (rowid<?)"],
            ),
        ]);
    }
}
