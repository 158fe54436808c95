//! Every PostgreSQL read.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use hookline_policy::{Breaker, DeadReason, FailingStreak, UnixMs};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{queries, query, query_one, query_opt, Numbers};
use crate::*;

pub(super) fn not_found(what: &str, id: &str) -> StoreError {
    StoreError::NotFound(format!("{what} {id:?}"))
}

pub(super) fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::backend(format!("unexpected {what} {value:?} in the database"))
}

/// A stored `status_reason`: NULL, or one of [`StatusReason::as_str`].
fn status_reason(stored: Option<String>) -> Result<Option<StatusReason>> {
    stored
        .map(|s| StatusReason::parse(&s).ok_or_else(|| corrupt("status_reason", &s)))
        .transpose()
}

/// A subscriber's row as `SUBSCRIBER` and the other reads of subscribers read it.
pub(super) fn subscriber_row(r: &Row) -> Result<(i64, Subscriber)> {
    let status: String = r.get(5);
    let headers: Option<String> = r.get(17);
    let url: String = r.get(2);
    // Missing only on a row an older binary wrote since this one started (`origin` backfills).
    let origin = Origin::stored(r.get(18), &url);
    Ok((
        r.get(0),
        Subscriber {
            id: r.get(1),
            tenant_id: r.get(20),
            url,
            origin,
            event_types: r.get(3),
            secret: r.get(4),
            previous_secret: r.get(8),
            previous_secret_until: r.get(9),
            status: SubscriberStatus::parse(&status).ok_or_else(|| corrupt("status", &status))?,
            status_reason: status_reason(r.get(23))?,
            created_at: r.get(6),
            updated_at: r.get(7),
            breaker: Breaker {
                consecutive_failures: r.int(10)?,
                open_until: r.get(11),
                cool_down_ms: r.get(12),
                allowance: r.int_opt(19)?,
            },
            failing: FailingStreak {
                since: r.get(21),
                attempts: r.int(22)?,
            },
            max_in_flight: r.int_opt(13)?,
            rate_limit_per_second: r.get(14),
            rate_next_at: r.get(15),
            payload_version: r.get(16),
            headers: SubscriberHeaders::decode(headers.as_deref())
                // Not the value itself: it holds credentials, and errors are logged.
                .ok_or_else(|| corrupt("headers", "(not a JSON object of strings)"))?,
        },
    ))
}

/// The subscriber `sql` reads by `id`.
async fn one_subscriber(c: &impl GenericClient, sql: &str, id: &str) -> Result<Subscriber> {
    let row = query_opt(c, sql, &[&id])
        .await?
        .ok_or_else(|| not_found("subscriber", id))?;
    Ok(subscriber_row(&row)?.1)
}

pub(super) async fn subscriber(c: &impl GenericClient, id: &str) -> Result<Subscriber> {
    one_subscriber(c, queries::SUBSCRIBER, id).await
}

/// Locks the row for the rest of the transaction, so two concurrent updates cannot both act on
/// the state they read.
pub(super) async fn subscriber_for_update(c: &impl GenericClient, id: &str) -> Result<Subscriber> {
    one_subscriber(c, queries::SUBSCRIBER_FOR_UPDATE, id).await
}

pub(super) async fn subscribers_by_id(
    c: &impl GenericClient,
    ids: &[String],
) -> Result<Vec<Subscriber>> {
    let rows = query(c, queries::SUBSCRIBERS_BY_ID, &[&ids]).await?;
    rows.iter().map(|r| Ok(subscriber_row(r)?.1)).collect()
}

/// Those of `ids` revoked or not in the table.
pub(super) async fn gone_among(c: &impl GenericClient, ids: Vec<String>) -> Result<Vec<String>> {
    let rows = query(c, queries::GONE_AMONG, &[&ids]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

pub(super) async fn subscribers(
    c: &impl GenericClient,
    filter: &SubscriberFilter,
    limit: u32,
    after: i64,
) -> Result<Page<Subscriber>> {
    let rows = query(
        c,
        queries::SUBSCRIBER_PAGE,
        &[
            &after,
            &filter.like_pattern()?,
            &filter.search_query_values,
            &(i64::from(limit) + 1),
            &filter.tenant_id,
        ],
    )
    .await?;
    let rows = rows
        .iter()
        .map(subscriber_row)
        .collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

/// A page of events newest first, after `after` (see `EVENT_PAGE`), with their counts.
pub(super) async fn events(
    c: &impl GenericClient,
    filter: &EventFilter,
    limit: u32,
    after: EventPosition,
) -> Result<Page<EventSummary>> {
    let EventPosition(at, id) = after;
    let found = query(
        c,
        queries::EVENT_PAGE,
        &[
            &at,
            &id,
            &filter.event_type,
            &filter.type_prefix,
            &filter.tenant_id,
            &filter.since.unwrap_or(i64::MIN),
            &filter.until.unwrap_or(i64::MAX),
            &(i64::from(limit) + 1),
        ],
    )
    .await?;
    let mut rows = found
        .iter()
        .map(|r| {
            Ok((
                EventPosition(r.get(0), r.get(1)),
                EventSummary {
                    id: r.get(1),
                    event_type: r.get(2),
                    payload_version: r.get(3),
                    accepted_at: r.get(0),
                    deliveries: r.bigint(4)?,
                    tenant_id: r.get(5),
                    counts: StateCounts::default(),
                },
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let ids: Vec<&str> = rows.iter().map(|(_, e)| e.id.as_str()).collect();
    let at_row: std::collections::HashMap<String, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| ((*id).to_owned(), i))
        .collect();
    for r in query(c, queries::EVENTS_STATE_COUNTS, &[&ids]).await? {
        let (event, state): (&str, String) = (r.get(0), r.get(1));
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        if let Some(&i) = at_row.get(event) {
            let e = &mut rows[i].1;
            e.counts.add(state, non_negative(r.get(2)));
        }
    }
    Ok(page(rows, limit))
}

pub(super) async fn event(c: &impl GenericClient, id: &str) -> Result<Event> {
    let r = query_opt(c, queries::EVENT, &[&id])
        .await?
        .ok_or_else(|| not_found("event", id))?;
    let mut event = Event {
        id: r.get(0),
        tenant_id: r.get(7),
        event_type: r.get(1),
        payload: r.get(2),
        payload_version: r.get(3),
        earlier_payloads: earlier_payloads(c, id).await?,
        accepted_at: r.get(4),
        deliveries: r.bigint(5)?,
        counts: StateCounts::default(),
        published_by: r.get(6),
        ordering_key: r.get(8),
        traceparent: r.get(9),
    };
    for r in query(c, queries::EVENT_STATE_COUNTS, &[&id]).await? {
        let state: String = r.get(0);
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        event.counts.add(state, non_negative(r.get(1)));
    }
    Ok(event)
}

/// The versions of an event below its latest, ascending.
pub(super) async fn earlier_payloads(
    c: &impl GenericClient,
    event_id: &str,
) -> Result<Vec<(i64, String)>> {
    Ok(query(c, queries::EARLIER_PAYLOADS, &[&event_id])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// The attempt histories of many deliveries in one query.
async fn histories(
    c: &impl GenericClient,
    keys: &[i64],
) -> Result<HashMap<i64, Vec<AttemptRecord>>> {
    let mut out: HashMap<i64, Vec<AttemptRecord>> = HashMap::new();
    for r in query(c, queries::DELIVERY_ATTEMPTS, &[&keys]).await? {
        let outcome: String = r.get(4);
        out.entry(r.get(0)).or_default().push(AttemptRecord {
            ordinal: r.int(1)?,
            started_at: r.get(2),
            duration_ms: r.bigint(3)?,
            outcome: read_outcome(&outcome, r.get(8))
                .ok_or_else(|| corrupt("outcome", &outcome))?,
            status: r.int_opt(5)?,
            error: r.get(6),
            response_body: r.get(7),
            policy: r.get(9),
        });
    }
    Ok(out)
}

/// The column `waiting_on` at `i` as a delivery shows it.
fn waiting_on(r: &Row, i: usize, reason: Option<DeadReason>) -> Result<Option<WaitingOn>> {
    shown_waiting_on(r.get(i), reason).map_err(|v| corrupt("waiting_on", v))
}

pub(super) async fn dead_letter_groups(
    c: &impl GenericClient,
    since: UnixMs,
    tenant_id: Option<&str>,
    limit: u32,
) -> Result<Vec<DeadLetterGroup>> {
    let rows = query(
        c,
        queries::DEAD_LETTER_GROUPS,
        &[&since, &i64::from(limit), &tenant_id],
    )
    .await?;
    rows.iter()
        .map(|r| {
            let status: &str = r.get(5);
            Ok(DeadLetterGroup {
                reason: dead_reason(r.get(0))?.ok_or_else(|| corrupt("dead_reason", ""))?,
                subscriber_id: r.get(1),
                subscriber_status: SubscriberStatus::parse(status)
                    .ok_or_else(|| corrupt("status", status))?,
                count: non_negative(r.get(2)),
                oldest_dead_at: r.get(3),
                newest_dead_at: r.get(4),
            })
        })
        .collect()
}

pub(super) async fn dead_letters_by_reason(
    c: &impl GenericClient,
    since: UnixMs,
    tenant_id: Option<&str>,
) -> Result<Vec<(DeadReason, u64)>> {
    let rows = query(c, queries::DEAD_LETTERS_BY_REASON, &[&since, &tenant_id]).await?;
    rows.iter()
        .map(|r| {
            let reason = dead_reason(r.get(0))?.ok_or_else(|| corrupt("dead_reason", ""))?;
            Ok((reason, non_negative(r.get(1))))
        })
        .collect()
}

fn dead_reason(value: Option<String>) -> Result<Option<DeadReason>> {
    value
        .map(|v| DeadReason::parse(&v).ok_or_else(|| corrupt("dead_reason", &v)))
        .transpose()
}

/// A delivery's row as `DELIVERY` and the lists of deliveries read it.
fn delivery_row(r: &Row) -> Result<(i64, Delivery)> {
    let state: String = r.get(4);
    let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
    let reason = dead_reason(r.get(9))?;
    Ok((
        r.get(0),
        Delivery {
            id: r.get(1),
            tenant_id: r.get(14),
            event_id: r.get(2),
            subscriber_id: r.get(3),
            state,
            attempts: r.int(5)?,
            first_seen: r.get(6),
            window_start: r.get(7),
            next_attempt_at: if state == DeliveryState::Scheduled {
                r.get(8)
            } else {
                None
            },
            dead_reason: reason,
            dead_at: r.get(10),
            // Kept from a death an older release replayed; only a dead delivery shows it.
            dead_error: if state == DeliveryState::Dead {
                r.get(11)
            } else {
                None
            },
            waiting_on: waiting_on(r, 12, reason)?,
            payload_version: r.get(13),
            attempt_history: Vec::new(),
        },
    ))
}

async fn with_history(c: &impl GenericClient, rows: &[Row]) -> Result<Vec<(i64, Delivery)>> {
    let mut rows = rows.iter().map(delivery_row).collect::<Result<Vec<_>>>()?;
    let keys: Vec<i64> = rows.iter().map(|(k, _)| *k).collect();
    let mut h = histories(c, &keys).await?;
    for (key, d) in &mut rows {
        d.attempt_history = h.remove(key).unwrap_or_default();
    }
    Ok(rows)
}

pub(super) async fn delivery(c: &impl GenericClient, id: &str) -> Result<Delivery> {
    // The id itself is not stored: it is read as the parts it is made of, each way it reads.
    for (event_id, subscriber_id, resend) in delivery_id_readings(id) {
        let rows = query(c, queries::DELIVERY, &[&event_id, &subscriber_id, &resend]).await?;
        if let Some((_, d)) = with_history(c, &rows).await?.pop() {
            return Ok(d);
        }
    }
    Err(not_found("delivery", id))
}

pub(super) async fn deliveries(
    c: &impl GenericClient,
    filter: &DeliveryFilter,
    limit: u32,
    after: i64,
) -> Result<Page<Delivery>> {
    let newest_first = filter.order == ListOrder::NewestFirst;
    let state = filter.state.map(DeliveryState::as_str);
    let more = i64::from(limit) + 1;
    let rows = match (&filter.event_id, &filter.subscriber_id) {
        (Some(event), subscriber) => {
            let sql = if newest_first {
                queries::EVENT_DELIVERIES_NEWEST_FIRST
            } else {
                queries::EVENT_DELIVERIES
            };
            let tenant = &filter.tenant_id;
            query(c, sql, &[event, subscriber, &state, &after, &more, tenant]).await?
        }
        (None, Some(subscriber)) => {
            let sql = if newest_first {
                queries::SUBSCRIBER_DELIVERIES_NEWEST_FIRST
            } else {
                queries::SUBSCRIBER_DELIVERIES
            };
            query(
                c,
                sql,
                &[subscriber, &state, &after, &more, &filter.tenant_id],
            )
            .await?
        }
        (None, None) => {
            let sql = if newest_first {
                queries::DELIVERIES_NEWEST_FIRST
            } else {
                queries::DELIVERIES
            };
            query(c, sql, &[&state, &after, &more, &filter.tenant_id]).await?
        }
    };
    Ok(page(with_history(c, &rows).await?, limit))
}

pub(super) async fn dead_letters(
    c: &impl GenericClient,
    filter: &DeadLetterFilter,
    limit: u32,
    after: DeathPosition,
) -> Result<Page<DeadLetter>> {
    let DeathPosition(dead_at, key) = after;
    let more = i64::from(limit) + 1;
    let tenant = &filter.tenant_id;
    let rows = match (filter.reason.map(DeadReason::as_str), &filter.subscriber_id) {
        (Some(reason), Some(subscriber)) => {
            let params: [&(dyn ToSql + Sync); 6] =
                [&reason, subscriber, &dead_at, &key, &more, tenant];
            query(c, queries::DEAD_LETTERS_OF_REASON_AND_SUBSCRIBER, &params).await?
        }
        (Some(reason), None) => {
            let params: [&(dyn ToSql + Sync); 5] = [&reason, &dead_at, &key, &more, tenant];
            query(c, queries::DEAD_LETTERS_OF_REASON, &params).await?
        }
        (None, Some(subscriber)) => {
            let params: [&(dyn ToSql + Sync); 5] = [subscriber, &dead_at, &key, &more, tenant];
            query(c, queries::DEAD_LETTERS_OF_SUBSCRIBER, &params).await?
        }
        (None, None) => query(c, queries::DEAD_LETTERS, &[&dead_at, &key, &more, tenant]).await?,
    };
    let keys: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    let mut h = histories(c, &keys).await?;
    let items = rows
        .iter()
        .map(|r| {
            let key: i64 = r.get(0);
            Ok((
                DeathPosition(r.get(7), key),
                DeadLetter {
                    delivery_id: r.get(1),
                    tenant_id: r.get(10),
                    event_id: r.get(2),
                    event_type: r.get(3),
                    subscriber_id: r.get(4),
                    payload_version: r.get(5),
                    reason: dead_reason(r.get(6))?.ok_or_else(|| corrupt("dead_reason", ""))?,
                    dead_at: r.get(7),
                    dead_error: r.get(8),
                    waiting_on: waiting_on(r, 9, dead_reason(r.get(6))?)?,
                    attempt_history: h.remove(&key).unwrap_or_default(),
                },
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(page(items, limit))
}

pub(super) async fn next_wakeup(c: &impl GenericClient, window_ms: i64) -> Result<Option<UnixMs>> {
    let r = query_one(c, queries::NEXT_WAKEUP, &[]).await?;
    let window_start: Option<i64> = r.get(2);
    Ok(earliest([
        r.get(0),
        r.get(1),
        window_start.map(|t| t.saturating_add(window_ms)),
    ]))
}

/// Deliveries in flight per subscriber and per origin, across every process.
pub(super) async fn in_flight(c: &impl GenericClient) -> Result<InFlight> {
    let mut counted = InFlight::default();
    for r in query(c, queries::IN_FLIGHT, &[]).await? {
        let origin = Origin::stored(r.get(2), r.get(3));
        counted.add(r.get(0), &origin, r.bigint(1)?);
    }
    Ok(counted)
}

pub(super) async fn queue_stats(
    c: &impl GenericClient,
    now: UnixMs,
    caps: InFlightCaps,
    held_back: &[String],
) -> Result<QueueStats> {
    let mut stats = QueueStats::default();
    for r in query(c, queries::STATE_COUNTS, &[]).await? {
        let state: String = r.get(0);
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        stats.counts.add(state, non_negative(r.get(1)));
    }
    let in_flight = in_flight(c).await?;
    let groups = query(c, queries::DUE_GROUPS, &[&now])
        .await?
        .iter()
        .map(|r| {
            let subscriber: &str = r.get(0);
            let oldest_due: UnixMs = r.get(1);
            let origin = Origin::stored(r.get(7), r.get(8));
            Ok(DueGroup {
                oldest_due,
                oldest_first_attempt: r.get(2),
                state: WaitState {
                    // Rows behind their key are held: not among the due rows read here.
                    ordered: false,
                    held: false,
                    run_at: Some(oldest_due),
                    breaker_open_until: r.get(3),
                    rate_next_at: r.get(4),
                    in_flight: in_flight.of_subscriber(subscriber),
                    cap: cap_in_force(
                        r.int_opt(5)?,
                        caps.max_in_flight_per_subscriber,
                        r.int_opt(6)?,
                    ),
                    host_in_flight: in_flight.of_origin(&origin),
                    host_cap: host_cap_in_force(caps.max_in_flight_per_host),
                    // The oldest due row of a group is first in its subscriber's line.
                    queued_at_rate: false,
                    held_back: held_back.iter().any(|id| id == subscriber),
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let r = query_one(c, queries::OLDEST_WAITING, &[]).await?;
    (stats.oldest_ready_since, stats.oldest_waiting_since) =
        ready_and_waiting(groups, r.get(0), r.get(2), now);
    stats.oldest_retrying_first_seen = r.get(1);
    stats.open_breakers = query(c, queries::OPEN_BREAKERS, &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let r = query_one(c, queries::BEHIND_OPEN_BREAKERS, &[]).await?;
    stats.behind_open_breakers = non_negative(r.get(0));
    stats.behind_open_breakers_first_seen = r.get(1);
    Ok(stats)
}

/// A replay's row as `REPLAY` and `REPLAYS` read it.
pub(super) async fn replay_row(c: &impl GenericClient, r: &Row) -> Result<(i64, Replay)> {
    let seq: i64 = r.get(0);
    let reason: String = r.get(3);
    let delivery_ids: Vec<String> = query(c, queries::REPLAYED_DELIVERIES, &[&seq])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let counts = query_one(c, queries::REPLAY_OUTCOMES, &[&seq]).await?;
    Ok((
        seq,
        Replay {
            id: r.get(1),
            tenant_id: r.get(9),
            created_at: r.get(2),
            reason: DeadReason::parse(&reason).ok_or_else(|| corrupt("reason", &reason))?,
            subscriber_id: r.get(4),
            limit: r.bigint(5)?,
            per_second: r.get(6),
            requested_by: r.get(7),
            selected: r.bigint(8)?,
            delivery_ids,
            delivered: non_negative(counts.get(0)),
            dead: non_negative(counts.get(1)),
        },
    ))
}

pub(super) async fn replay(c: &impl GenericClient, id: &str) -> Result<Replay> {
    let row = query_opt(c, queries::REPLAY, &[&id])
        .await?
        .ok_or_else(|| not_found("replay", id))?;
    Ok(replay_row(c, &row).await?.1)
}

pub(super) async fn replays(
    c: &impl GenericClient,
    tenant_id: Option<&str>,
    order: ListOrder,
    limit: u32,
    after: i64,
) -> Result<Page<Replay>> {
    let sql = match order {
        ListOrder::OldestFirst => queries::REPLAYS,
        ListOrder::NewestFirst => queries::REPLAYS_NEWEST_FIRST,
    };
    let rows = query(c, sql, &[&after, &(i64::from(limit) + 1), &tenant_id]).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        out.push(replay_row(c, r).await?);
    }
    Ok(page(out, limit))
}

fn policy_row(r: &Row) -> (i64, StoredPolicy) {
    (
        r.get(0),
        StoredPolicy {
            name: r.get(1),
            definition: r.get(2),
            created_at: r.get(3),
            created_by: r.get(4),
        },
    )
}

pub(super) async fn policy(c: &impl GenericClient, name: &str) -> Result<StoredPolicy> {
    let row = query_opt(c, queries::POLICY, &[&name])
        .await?
        .ok_or_else(|| not_found("policy", name))?;
    Ok(policy_row(&row).1)
}

pub(super) async fn policies(
    c: &impl GenericClient,
    limit: u32,
    after: i64,
) -> Result<Page<StoredPolicy>> {
    let rows = query(c, queries::POLICIES, &[&after, &(i64::from(limit) + 1)]).await?;
    Ok(page(rows.iter().map(policy_row).collect(), limit))
}
