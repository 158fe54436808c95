//! Every PostgreSQL read.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use hookline_policy::{Breaker, DeadReason, UnixMs};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{query, query_one, query_opt};
use crate::*;

pub(super) fn not_found(what: &str, id: &str) -> StoreError {
    StoreError::NotFound(format!("{what} {id:?}"))
}

pub(super) fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::backend(format!("unexpected {what} {value:?} in the database"))
}

const SUBSCRIBER_COLUMNS: &str =
    "seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret, \
     previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms, \
     max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin, \
     breaker_allowance";

fn subscriber_row(r: &Row) -> Result<(i64, Subscriber)> {
    let status: String = r.get(5);
    let headers: Option<String> = r.get(17);
    let url: String = r.get(2);
    // Missing only on a row an older binary wrote since this one started (`origin` backfills).
    let origin = stored_origin(r.get::<_, Option<&str>>(18), &url).into_owned();
    Ok((
        r.get(0),
        Subscriber {
            id: r.get(1),
            url,
            origin,
            event_types: r.get(3),
            secret: r.get(4),
            previous_secret: r.get(8),
            previous_secret_until: r.get(9),
            status: SubscriberStatus::parse(&status).ok_or_else(|| corrupt("status", &status))?,
            created_at: r.get(6),
            updated_at: r.get(7),
            breaker: Breaker {
                consecutive_failures: r.get::<_, i32>(10) as u32,
                open_until: r.get(11),
                cool_down_ms: r.get(12),
                allowance: r.get::<_, Option<i32>>(19).map(|n| n as u32),
            },
            max_in_flight: r.get::<_, Option<i32>>(13).map(|n| n as u32),
            rate_limit_per_second: r.get(14),
            rate_next_at: r.get(15),
            payload_version: r.get(16),
            headers: SubscriberHeaders::decode(headers.as_deref())
                // Not the value itself: it holds credentials, and errors are logged.
                .ok_or_else(|| corrupt("headers", "(not a JSON object of strings)"))?,
        },
    ))
}

async fn one_subscriber(c: &impl GenericClient, id: &str, lock: &str) -> Result<Subscriber> {
    let row = query_opt(
        c,
        &format!("SELECT {SUBSCRIBER_COLUMNS} FROM subscribers WHERE id = $1 {lock}"),
        &[&id],
    )
    .await?
    .ok_or_else(|| not_found("subscriber", id))?;
    Ok(subscriber_row(&row)?.1)
}

pub(super) async fn subscriber(c: &impl GenericClient, id: &str) -> Result<Subscriber> {
    one_subscriber(c, id, "").await
}

/// Locks the row for the rest of the transaction, so two concurrent updates cannot both act on
/// the state they read.
pub(super) async fn subscriber_for_update(c: &impl GenericClient, id: &str) -> Result<Subscriber> {
    one_subscriber(c, id, "FOR UPDATE").await
}

pub(super) async fn subscribers_by_id(
    c: &impl GenericClient,
    ids: &[String],
) -> Result<Vec<Subscriber>> {
    let rows = query(
        c,
        &format!("SELECT {SUBSCRIBER_COLUMNS} FROM subscribers WHERE id = ANY ($1)"),
        &[&ids],
    )
    .await?;
    rows.iter().map(|r| Ok(subscriber_row(r)?.1)).collect()
}

/// Those of `ids` revoked or not in the table.
pub(super) async fn gone_among(c: &impl GenericClient, ids: Vec<String>) -> Result<Vec<String>> {
    let rows = query(
        c,
        "SELECT asked FROM UNNEST($1::text[]) AS asked
         LEFT JOIN subscribers s ON s.id = asked
         WHERE s.id IS NULL OR s.status = 'revoked'",
        &[&ids],
    )
    .await?;
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
        &sql::subscriber_page(SUBSCRIBER_COLUMNS, "split_part(url, '?', 1)"),
        &[
            &after,
            &filter.like_pattern()?,
            &filter.search_query_values,
            &(i64::from(limit) + 1),
        ],
    )
    .await?;
    let rows = rows
        .iter()
        .map(subscriber_row)
        .collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

pub(super) async fn event(c: &impl GenericClient, id: &str) -> Result<Event> {
    let r = query_opt(
        c,
        "SELECT id, type, payload, payload_version, accepted_at, deliveries, published_by
             FROM events WHERE id = $1",
        &[&id],
    )
    .await?
    .ok_or_else(|| not_found("event", id))?;
    let mut event = Event {
        id: r.get(0),
        event_type: r.get(1),
        payload: r.get(2),
        payload_version: r.get(3),
        earlier_payloads: earlier_payloads(c, id).await?,
        accepted_at: r.get(4),
        deliveries: r.get::<_, i64>(5) as u64,
        counts: StateCounts::default(),
        published_by: r.get(6),
    };
    for r in query(
        c,
        "SELECT state, count(*) FROM deliveries WHERE event_id = $1 GROUP BY state",
        &[&id],
    )
    .await?
    {
        let state: String = r.get(0);
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        event.counts.add(state, r.get::<_, i64>(1) as u64);
    }
    Ok(event)
}

/// The versions of an event below its latest, ascending.
pub(super) async fn earlier_payloads(
    c: &impl GenericClient,
    event_id: &str,
) -> Result<Vec<(i64, String)>> {
    Ok(query(
        c,
        "SELECT version, payload FROM event_payloads WHERE event_id = $1 ORDER BY version",
        &[&event_id],
    )
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
    for r in query(
        c,
        "SELECT delivery_seq, ordinal, started_at, duration_ms, outcome, status, error, response_body,
                lost, policy
             FROM attempts WHERE delivery_seq = ANY ($1) ORDER BY seq",
        &[&keys],
    )
    .await?
    {
        let outcome: String = r.get(4);
        out.entry(r.get(0)).or_default().push(AttemptRecord {
            ordinal: r.get::<_, i32>(1) as u32,
            started_at: r.get(2),
            duration_ms: r.get::<_, i64>(3) as u64,
            outcome: read_outcome(&outcome, r.get(8)).ok_or_else(|| corrupt("outcome", &outcome))?,
            status: r.get::<_, Option<i32>>(5).map(|s| s as u16),
            error: r.get(6),
            response_body: r.get(7),
            policy: r.get(9),
        });
    }
    Ok(out)
}

/// Only a delivery that died of its window shows what it was waiting on (an older release's
/// replay, or a later death, leaves the column behind).
fn waiting_on(r: &Row, i: usize, reason: Option<DeadReason>) -> Result<Option<WaitingOn>> {
    let value: Option<String> = r.get(i);
    match value {
        Some(v) if reason == Some(DeadReason::WindowExpired) => WaitingOn::parse(&v)
            .map(Some)
            .ok_or_else(|| corrupt("waiting_on", &v)),
        _ => Ok(None),
    }
}

pub(super) async fn dead_letter_groups(
    c: &impl GenericClient,
    since: UnixMs,
    limit: u32,
) -> Result<Vec<DeadLetterGroup>> {
    let rows = query(
        c,
        &sql::recent_dead(sql::DEAD_LETTER_GROUPS, ""),
        &[&since, &i64::from(limit)],
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
                count: r.get::<_, i64>(2).max(0) as u64,
                oldest_dead_at: r.get(3),
                newest_dead_at: r.get(4),
            })
        })
        .collect()
}

pub(super) async fn dead_letters_by_reason(
    c: &impl GenericClient,
    since: UnixMs,
) -> Result<Vec<(DeadReason, u64)>> {
    let rows = query(
        c,
        &sql::recent_dead(sql::DEAD_LETTERS_BY_REASON, ""),
        &[&since],
    )
    .await?;
    rows.iter()
        .map(|r| {
            let reason = dead_reason(r.get(0))?.ok_or_else(|| corrupt("dead_reason", ""))?;
            Ok((reason, r.get::<_, i64>(1).max(0) as u64))
        })
        .collect()
}

fn dead_reason(value: Option<String>) -> Result<Option<DeadReason>> {
    value
        .map(|v| DeadReason::parse(&v).ok_or_else(|| corrupt("dead_reason", &v)))
        .transpose()
}

const DELIVERY_COLUMNS: &str = "d.seq, d.id, d.event_id, d.subscriber_id, d.state, d.attempts, \
     d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at, d.dead_error, d.waiting_on";

fn delivery_row(r: &Row) -> Result<(i64, Delivery)> {
    let state: String = r.get(4);
    let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
    let reason = dead_reason(r.get(9))?;
    Ok((
        r.get(0),
        Delivery {
            id: r.get(1),
            event_id: r.get(2),
            subscriber_id: r.get(3),
            state,
            attempts: r.get::<_, i32>(5) as u32,
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
    // Subscriber ids hold no ':', so the last one separates the two halves of a webhook-id.
    let (event_id, subscriber_id) = id
        .rsplit_once(':')
        .ok_or_else(|| not_found("delivery", id))?;
    let rows = query(
        c,
        &format!(
            "SELECT {DELIVERY_COLUMNS}, {SENT_VERSION} FROM deliveries d WHERE d.event_id = $1 AND d.subscriber_id = $2"
        ),
        &[&event_id, &subscriber_id],
    )
    .await?;
    with_history(c, &rows)
        .await?
        .pop()
        .map(|(_, d)| d)
        .ok_or_else(|| not_found("delivery", id))
}

/// `WHERE` clauses built from the filters that are set, so each list can use its index.
#[derive(Default)]
struct Conditions {
    sql: Vec<String>,
    values: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Conditions {
    fn add<T: ToSql + Sync + Send + 'static>(&mut self, column: &str, value: Option<T>) {
        if let Some(v) = value {
            self.values.push(Box::new(v));
            self.sql.push(format!("{column} = ${}", self.values.len()));
        }
    }

    /// The rows past `after` by `columns` (integer columns, compared as a row), in `order`.
    async fn query(
        mut self,
        c: &impl GenericClient,
        select: &str,
        (columns, after, order): (&[&str], &[i64], ListOrder),
        limit: u32,
    ) -> Result<Vec<Row>> {
        let mut marks = Vec::with_capacity(after.len());
        for v in after {
            self.values.push(Box::new(*v));
            marks.push(format!("${}", self.values.len()));
        }
        let (cursor, order_by) = order.keyset(columns, &marks.join(", "));
        self.sql.push(cursor);
        let sql = format!(
            "{select} WHERE {} ORDER BY {order_by} LIMIT {}",
            self.sql.join(" AND "),
            u64::from(limit) + 1
        );
        let params: Vec<&(dyn ToSql + Sync)> = self
            .values
            .iter()
            .map(|v| &**v as &(dyn ToSql + Sync))
            .collect();
        query(c, &sql, &params).await
    }
}

pub(super) async fn deliveries(
    c: &impl GenericClient,
    filter: &DeliveryFilter,
    limit: u32,
    after: i64,
) -> Result<Page<Delivery>> {
    let mut cond = Conditions::default();
    cond.add("d.event_id", filter.event_id.clone());
    cond.add("d.subscriber_id", filter.subscriber_id.clone());
    cond.add("d.state", filter.state.map(|s| s.as_str().to_owned()));
    let rows = cond
        .query(
            c,
            &format!("SELECT {DELIVERY_COLUMNS}, {SENT_VERSION} FROM deliveries d"),
            (&["d.seq"], &[after], filter.order),
            limit,
        )
        .await?;
    Ok(page(with_history(c, &rows).await?, limit))
}

pub(super) async fn dead_letters(
    c: &impl GenericClient,
    filter: &DeadLetterFilter,
    limit: u32,
    after: DeathPosition,
) -> Result<Page<DeadLetter>> {
    let mut cond = Conditions::default();
    cond.add("d.state", Some("dead".to_owned()));
    cond.add(
        "d.dead_reason",
        filter.reason.map(|r| r.as_str().to_owned()),
    );
    cond.add("d.subscriber_id", filter.subscriber_id.clone());
    let rows = cond
        .query(
            c,
            &dead_letters_select(""),
            (DEATH_ORDER, &[after.0, after.1], ListOrder::OldestFirst),
            limit,
        )
        .await?;
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
    let r = query_one(
        c,
        "SELECT (SELECT min(run_at) FROM deliveries WHERE state = 'scheduled' AND NOT held),
                (SELECT min(lease_expires) FROM deliveries WHERE state = 'in_flight'),
                (SELECT min(window_start) FROM deliveries WHERE state = 'scheduled')",
        &[],
    )
    .await?;
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
    for r in query(
        c,
        "SELECT f.subscriber_id, f.n, s.origin, s.url
         FROM (SELECT subscriber_id, count(*) AS n FROM deliveries
               WHERE state = 'in_flight' GROUP BY 1) f
         JOIN subscribers s ON s.id = f.subscriber_id",
        &[],
    )
    .await?
    {
        let origin = stored_origin(r.get(2), r.get(3));
        counted.add(r.get(0), &origin, r.get::<_, i64>(1) as u32);
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
    for r in query(
        c,
        "SELECT state, count(*) FROM deliveries GROUP BY state",
        &[],
    )
    .await?
    {
        let state: String = r.get(0);
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        stats.counts.add(state, r.get::<_, i64>(1) as u64);
    }
    let in_flight = in_flight(c).await?;
    let groups: Vec<DueGroup> = query(
        c,
        "SELECT d.subscriber_id, min(d.run_at), min(CASE WHEN d.attempts = 0 THEN d.run_at END),
                min(s.breaker_open_until), min(s.rate_next_at), min(s.max_in_flight),
                min(s.breaker_allowance), min(s.origin), min(s.url)
         FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
         WHERE d.state = 'scheduled' AND NOT d.held AND d.run_at <= $1
         GROUP BY d.subscriber_id",
        &[&now],
    )
    .await?
    .iter()
    .map(|r| {
        let subscriber: &str = r.get(0);
        let oldest_due: UnixMs = r.get(1);
        let origin = stored_origin(r.get(7), r.get(8));
        DueGroup {
            oldest_due,
            oldest_first_attempt: r.get(2),
            state: WaitState {
                held: false,
                run_at: Some(oldest_due),
                breaker_open_until: r.get(3),
                rate_next_at: r.get(4),
                in_flight: in_flight.of_subscriber(subscriber),
                cap: cap_in_force(
                    r.get::<_, Option<i32>>(5).map(|n| n as u32),
                    caps.max_in_flight_per_subscriber,
                    r.get::<_, Option<i32>>(6).map(|n| n as u32),
                ),
                host_in_flight: in_flight.of_origin(&origin),
                host_cap: host_cap_in_force(caps.max_in_flight_per_host),
                // The oldest due row of a group is first in its subscriber's line.
                queued_at_rate: false,
                held_back: held_back.iter().any(|id| id == subscriber),
            },
        }
    })
    .collect();
    let r = query_one(
        c,
        "SELECT (SELECT min(d.run_at) FROM subscribers s JOIN deliveries d ON d.subscriber_id = s.id
                 WHERE s.status = 'paused' AND d.state = 'scheduled' AND d.held),
                (SELECT min(first_seen) FROM deliveries WHERE state = 'scheduled' AND attempts > 0)",
        &[],
    )
    .await?;
    (stats.oldest_ready_since, stats.oldest_waiting_since) =
        ready_and_waiting(groups, r.get(0), now);
    stats.oldest_retrying_first_seen = r.get(1);
    stats.open_breakers = query(
        c,
        "SELECT id FROM subscribers WHERE breaker_open_until IS NOT NULL ORDER BY id",
        &[],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    let r = query_one(c, &sql::behind_open_breakers("JOIN"), &[]).await?;
    stats.behind_open_breakers = r.get::<_, i64>(0).max(0) as u64;
    stats.behind_open_breakers_first_seen = r.get(1);
    Ok(stats)
}

const REPLAY_COLUMNS: &str =
    "seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected";

async fn replay_row(c: &impl GenericClient, r: &Row) -> Result<(i64, Replay)> {
    let seq: i64 = r.get(0);
    let reason: String = r.get(3);
    let delivery_ids: Vec<String> = query(
        c,
        "SELECT d.id FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
             WHERE ri.replay_seq = $1 ORDER BY d.seq",
        &[&seq],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    let counts = query_one(c,
            &format!("SELECT count(*) FILTER (WHERE d.state = 'delivered'), count(*) FILTER (WHERE d.state = 'dead')
             FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
             WHERE ri.replay_seq = $1 AND {LATEST_REPLAY}"),
            &[&seq],
        )
        .await?;
    Ok((
        seq,
        Replay {
            id: r.get(1),
            created_at: r.get(2),
            reason: DeadReason::parse(&reason).ok_or_else(|| corrupt("reason", &reason))?,
            subscriber_id: r.get(4),
            limit: r.get::<_, i64>(5) as u32,
            per_second: r.get(6),
            requested_by: r.get(7),
            selected: r.get::<_, i64>(8) as u64,
            delivery_ids,
            delivered: counts.get::<_, i64>(0) as u64,
            dead: counts.get::<_, i64>(1) as u64,
        },
    ))
}

pub(super) async fn replay(c: &impl GenericClient, id: &str) -> Result<Replay> {
    let row = query_opt(
        c,
        &format!("SELECT {REPLAY_COLUMNS} FROM replays WHERE id = $1"),
        &[&id],
    )
    .await?
    .ok_or_else(|| not_found("replay", id))?;
    Ok(replay_row(c, &row).await?.1)
}

pub(super) async fn replays(
    c: &impl GenericClient,
    order: ListOrder,
    limit: u32,
    after: i64,
) -> Result<Page<Replay>> {
    let (cursor, order_by) = order.keyset(&["seq"], "$1");
    let rows = query(
        c,
        &format!(
            "SELECT {REPLAY_COLUMNS} FROM replays WHERE {cursor} ORDER BY {order_by} LIMIT $2"
        ),
        &[&after, &(i64::from(limit) + 1)],
    )
    .await?;
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
    let row = query_opt(
        c,
        &format!("SELECT {POLICY_COLUMNS} FROM policies WHERE name = $1"),
        &[&name],
    )
    .await?
    .ok_or_else(|| not_found("policy", name))?;
    Ok(policy_row(&row).1)
}

pub(super) async fn policies(
    c: &impl GenericClient,
    limit: u32,
    after: i64,
) -> Result<Page<StoredPolicy>> {
    let rows = query(
        c,
        &format!("SELECT {POLICY_COLUMNS} FROM policies WHERE seq > $1 ORDER BY seq LIMIT $2"),
        &[&after, &(i64::from(limit) + 1)],
    )
    .await?;
    Ok(page(rows.iter().map(policy_row).collect(), limit))
}
