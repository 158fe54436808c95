//! Every read. These run on pooled read connections, and a few on the writer's connection when
//! a write answers with the row it wrote.

use hookline_policy::{Breaker, DeadReason, UnixMs};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};

use crate::*;

pub(super) fn not_found(what: &str, id: &str) -> StoreError {
    StoreError::NotFound(format!("{what} {id:?}"))
}

fn corrupt(what: &str, value: &str) -> rusqlite::Error {
    rusqlite::Error::InvalidColumnType(0, format!("{what} {value:?}"), rusqlite::types::Type::Text)
}

const SUBSCRIBER_COLUMNS: &str =
    "seq, id, url, event_types, secret, status, created_at, updated_at, previous_secret, \
     previous_secret_until, breaker_failures, breaker_open_until, breaker_cool_down_ms, \
     max_in_flight, rate_limit_per_second, rate_next_at, payload_version, headers, origin, \
     breaker_allowance";

fn subscriber_row(r: &Row<'_>) -> rusqlite::Result<(i64, Subscriber)> {
    let types: String = r.get(3)?;
    let status: String = r.get(5)?;
    let headers: Option<String> = r.get(17)?;
    let url: String = r.get(2)?;
    // Missing only on a row an older binary wrote since this one started (`origin` backfills).
    let stored: Option<String> = r.get(18)?;
    let origin = stored_origin(stored.as_deref(), &url).into_owned();
    Ok((
        r.get(0)?,
        Subscriber {
            id: r.get(1)?,
            url,
            origin,
            event_types: serde_json::from_str(&types)
                .map_err(|_| corrupt("event_types", &types))?,
            secret: r.get(4)?,
            previous_secret: r.get(8)?,
            previous_secret_until: r.get(9)?,
            status: SubscriberStatus::parse(&status).ok_or_else(|| corrupt("status", &status))?,
            created_at: r.get(6)?,
            updated_at: r.get(7)?,
            breaker: Breaker {
                consecutive_failures: r.get(10)?,
                open_until: r.get(11)?,
                cool_down_ms: r.get(12)?,
                allowance: r.get(19)?,
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
    c.prepare_cached(&format!(
        "SELECT {SUBSCRIBER_COLUMNS} FROM subscribers WHERE id = ?1"
    ))?
    .query_row([id], subscriber_row)
    .optional()?
    .ok_or_else(|| not_found("subscriber", id))
}

/// Those of `ids` revoked or not in the table, in one statement (the ids as a JSON array).
pub(super) fn gone_among(c: &Connection, ids: &[String]) -> Result<Vec<String>> {
    let ids = serde_json::to_string(ids).map_err(StoreError::failed)?;
    Ok(c.prepare_cached(
        "SELECT asked.value FROM json_each(?1) AS asked
         LEFT JOIN subscribers s ON s.id = asked.value
         WHERE s.id IS NULL OR s.status = 'revoked'",
    )?
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
        .prepare_cached(&sql::subscriber_page(
            SUBSCRIBER_COLUMNS,
            "substr(url, 1, instr(url || '?', '?') - 1)",
        ))?
        .query_map(
            params![
                after,
                filter.like_pattern()?,
                filter.search_query_values,
                limit + 1
            ],
            subscriber_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

pub(super) fn event(c: &Connection, id: &str) -> Result<Event> {
    let mut event = c
        .prepare_cached(
            "SELECT id, type, payload, payload_version, accepted_at, deliveries, published_by
             FROM events WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(Event {
                id: r.get(0)?,
                event_type: r.get(1)?,
                payload: r.get(2)?,
                payload_version: r.get(3)?,
                earlier_payloads: Vec::new(),
                accepted_at: r.get(4)?,
                deliveries: r.get(5)?,
                counts: StateCounts::default(),
                published_by: r.get(6)?,
            })
        })
        .optional()?
        .ok_or_else(|| not_found("event", id))?;
    event.earlier_payloads = earlier_payloads(c, id)?;
    let mut stmt = c.prepare_cached(
        "SELECT state, count(*) FROM deliveries WHERE event_id = ?1 GROUP BY state",
    )?;
    let mut rows = stmt.query([id])?;
    while let Some(r) = rows.next()? {
        let state: String = r.get(0)?;
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        event.counts.add(state, r.get(1)?);
    }
    Ok(event)
}

/// The versions of an event below its latest, ascending.
pub(super) fn earlier_payloads(c: &Connection, event_id: &str) -> Result<Vec<(i64, String)>> {
    Ok(c.prepare_cached(
        "SELECT version, payload FROM event_payloads WHERE event_id = ?1 ORDER BY version",
    )?
    .query_map([event_id], |r| Ok((r.get(0)?, r.get(1)?)))?
    .collect::<rusqlite::Result<Vec<_>>>()?)
}

fn history(c: &Connection, key: i64) -> Result<Vec<AttemptRecord>> {
    let rows = c
        .prepare_cached(
            "SELECT ordinal, started_at, duration_ms, outcome, status, error, response_body, lost,
                    policy
             FROM attempts WHERE delivery_seq = ?1 ORDER BY rowid",
        )?
        .query_map([key], |r| {
            let outcome: String = r.get(3)?;
            Ok(AttemptRecord {
                ordinal: r.get(0)?,
                started_at: r.get(1)?,
                duration_ms: r.get::<_, i64>(2)? as u64,
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

/// Only a delivery that died of its window shows what it was waiting on (an older release's
/// replay, or a later death, leaves the column behind).
fn waiting_on(
    r: &Row<'_>,
    i: usize,
    reason: Option<DeadReason>,
) -> rusqlite::Result<Option<WaitingOn>> {
    let value: Option<String> = r.get(i)?;
    match value {
        Some(v) if reason == Some(DeadReason::WindowExpired) => WaitingOn::parse(&v)
            .map(Some)
            .ok_or_else(|| corrupt("waiting_on", &v)),
        _ => Ok(None),
    }
}

pub(super) fn dead_letter_groups(
    c: &Connection,
    since: UnixMs,
    limit: u32,
) -> Result<Vec<DeadLetterGroup>> {
    let mut statement = c.prepare_cached(&recent_dead(sql::DEAD_LETTER_GROUPS))?;
    let rows = statement.query_map(rusqlite::params![since, limit], |r| {
        let status: String = r.get(5)?;
        Ok(DeadLetterGroup {
            reason: dead_reason(r.get(0)?)?.ok_or_else(|| corrupt("dead_reason", ""))?,
            subscriber_id: r.get(1)?,
            subscriber_status: SubscriberStatus::parse(&status)
                .ok_or_else(|| corrupt("status", &status))?,
            count: r.get::<_, i64>(2)?.max(0) as u64,
            oldest_dead_at: r.get(3)?,
            newest_dead_at: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn dead_letters_by_reason(
    c: &Connection,
    since: UnixMs,
) -> Result<Vec<(DeadReason, u64)>> {
    let mut statement = c.prepare_cached(&recent_dead(sql::DEAD_LETTERS_BY_REASON))?;
    let rows = statement.query_map([since], |r| {
        let reason = dead_reason(r.get(0)?)?.ok_or_else(|| corrupt("dead_reason", ""))?;
        Ok((reason, r.get::<_, i64>(1)?.max(0) as u64))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn dead_reason(value: Option<String>) -> rusqlite::Result<Option<DeadReason>> {
    value
        .map(|v| DeadReason::parse(&v).ok_or_else(|| corrupt("dead_reason", &v)))
        .transpose()
}

const DELIVERY_COLUMNS: &str = "d.seq, d.id, d.event_id, d.subscriber_id, d.state, d.attempts, \
     d.first_seen, d.window_start, d.run_at, d.dead_reason, d.dead_at, d.dead_error, d.waiting_on";

fn delivery_row(r: &Row<'_>) -> rusqlite::Result<(i64, Delivery)> {
    let state: String = r.get(4)?;
    let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
    let reason = dead_reason(r.get(9)?)?;
    Ok((
        r.get(0)?,
        Delivery {
            id: r.get(1)?,
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
        .prepare_cached(&format!(
            "SELECT {DELIVERY_COLUMNS}, {SENT_VERSION} FROM deliveries d WHERE d.id = ?1"
        ))?
        .query_row([id], delivery_row)
        .optional()?
        .ok_or_else(|| not_found("delivery", id))?;
    Ok(with_history(c, vec![row])?.remove(0).1)
}

/// `WHERE` clauses built from the filters that are set, so each list can use its index.
#[derive(Default)]
struct Conditions {
    sql: Vec<&'static str>,
    values: Vec<Value>,
}

impl Conditions {
    fn add(&mut self, clause: &'static str, value: Option<Value>) {
        if let Some(v) = value {
            self.sql.push(clause);
            self.values.push(v);
        }
    }

    /// A clause without a parameter: a literal is what lets SQLite pick a partial index.
    fn always(&mut self, clause: &'static str) {
        self.sql.push(clause);
    }

    /// The statement that lists the rows past a cursor on `columns`, in `order`.
    fn statement(
        &self,
        select: &str,
        (columns, order): (&[&str], ListOrder),
        limit: u32,
    ) -> String {
        let marks = vec!["?"; columns.len()].join(", ");
        let (cursor, order_by) = order.keyset(columns, &marks);
        let mut clauses: Vec<&str> = self.sql.clone();
        clauses.push(&cursor);
        format!(
            "{select} WHERE {} ORDER BY {order_by} LIMIT {}",
            clauses.join(" AND "),
            limit as u64 + 1
        )
    }

    /// The rows past `after` by `columns` (integer columns, compared as a row), in `order`.
    fn query<K, T>(
        mut self,
        c: &Connection,
        select: &str,
        (columns, after, order): (&[&str], &[i64], ListOrder),
        limit: u32,
        row: impl FnMut(&Row<'_>) -> rusqlite::Result<(K, T)>,
    ) -> Result<Vec<(K, T)>> {
        let sql = self.statement(select, (columns, order), limit);
        self.values.extend(after.iter().map(|v| Value::Integer(*v)));
        let rows = c
            .prepare_cached(&sql)?
            .query_map(params_from_iter(self.values), row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

pub(super) fn deliveries(
    c: &Connection,
    filter: &DeliveryFilter,
    limit: u32,
    after: i64,
) -> Result<Page<Delivery>> {
    let mut cond = Conditions::default();
    cond.add("d.event_id = ?", filter.event_id.clone().map(Value::Text));
    cond.add(
        "d.subscriber_id = ?",
        filter.subscriber_id.clone().map(Value::Text),
    );
    cond.add(
        "d.state = ?",
        filter.state.map(|s| Value::Text(s.as_str().into())),
    );
    let select = format!("SELECT {DELIVERY_COLUMNS}, {SENT_VERSION} FROM deliveries d");
    let rows = cond.query(
        c,
        &select,
        (&["d.seq"], &[after], filter.order),
        limit,
        delivery_row,
    )?;
    Ok(page(with_history(c, rows)?, limit))
}

/// The dead letters `filter` selects. The state is a literal, so that an index on dead rows
/// can be named ([`dead_letters_index`]).
fn dead_letter_conditions(filter: &DeadLetterFilter) -> Conditions {
    let mut cond = Conditions::default();
    cond.always("d.state = 'dead'");
    cond.add(
        "d.dead_reason = ?",
        filter.reason.map(|r| Value::Text(r.as_str().into())),
    );
    cond.add(
        "d.subscriber_id = ?",
        filter.subscriber_id.clone().map(Value::Text),
    );
    cond
}

/// For one reason and one subscriber, their dead letters exactly (`deliveries_dead`), sorted
/// after: left to itself SQLite walks the whole reason in dying order
/// (`deliveries_dead_reason_at`, which spares it the sort) to find that subscriber's, which
/// takes a second when the reason holds a million others. For one reason alone that walk is
/// the right plan, and SQLite picks it.
fn dead_letters_index(filter: &DeadLetterFilter) -> &'static str {
    match (&filter.reason, &filter.subscriber_id) {
        (Some(_), Some(_)) => "INDEXED BY deliveries_dead",
        _ => "",
    }
}

/// What a replay of `req` selects, read as its page of the dead-letter queue is.
pub(super) fn replay_selection_sql(req: &ReplayRequest) -> String {
    let filter = DeadLetterFilter {
        reason: Some(req.reason),
        subscriber_id: req.subscriber_id.clone(),
    };
    sql::replay_selection('?', dead_letters_index(&filter), req)
}

pub(super) fn dead_letters(
    c: &Connection,
    filter: &DeadLetterFilter,
    limit: u32,
    after: DeathPosition,
) -> Result<Page<DeadLetter>> {
    let rows = dead_letter_conditions(filter).query(
        c,
        &dead_letters_select(dead_letters_index(filter)),
        (DEATH_ORDER, &[after.0, after.1], ListOrder::OldestFirst),
        limit,
        |r| {
            Ok((
                DeathPosition(r.get(7)?, r.get(0)?),
                DeadLetter {
                    delivery_id: r.get(1)?,
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
        },
    )?;
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
        .prepare_cached(
            "SELECT (SELECT min(run_at) FROM deliveries WHERE state = 'scheduled' AND held = 0),
                    (SELECT min(lease_expires) FROM deliveries WHERE state = 'in_flight'),
                    (SELECT min(window_start) FROM deliveries WHERE state = 'scheduled')",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(earliest([
        due,
        expiry,
        window_start.map(|t| t.saturating_add(window_ms)),
    ]))
}

/// Deliveries in flight per subscriber, read through the lease index (in-flight rows only).
/// Without `INDEXED BY`, SQLite (which has no statistics here) walks `deliveries_subscriber`
/// over every row of the table to spare itself a sort: 0.3 s per 200,000 rows, on the writer's
/// thread at start and after every rollback, and in every refresh of the gauges.
pub(super) const IN_FLIGHT_PER_SUBSCRIBER: &str = "SELECT subscriber_id, count(*)
     FROM deliveries INDEXED BY deliveries_lease WHERE state = 'in_flight' GROUP BY 1";

/// [`IN_FLIGHT_PER_SUBSCRIBER`] with each subscriber's origin (and URL, for a row an older
/// binary wrote without one).
fn in_flight_by_origin() -> String {
    format!(
        "SELECT f.*, s.origin, s.url FROM ({IN_FLIGHT_PER_SUBSCRIBER}) f
         JOIN subscribers s ON s.id = f.subscriber_id"
    )
}

/// A query of recent dead letters, through the range of `deliveries_dead_at`.
fn recent_dead(query: &str) -> String {
    sql::recent_dead(query, "INDEXED BY deliveries_dead_at")
}

/// How many deliveries are in each state, in the order of `DeliveryState::ALL`: one statement
/// (one snapshot), each count from the entries of the state's partial index rather than the
/// table's rows. Literals, not parameters: only a literal lets SQLite pick a partial index.
fn state_counts() -> String {
    let counts = DeliveryState::ALL.map(|state| {
        format!(
            "(SELECT count(*) FROM deliveries WHERE state = '{}')",
            state.as_str()
        )
    });
    format!("SELECT {}", counts.join(", "))
}

/// Per subscriber with deliveries due at `?1`: the oldest due, the oldest due first attempt,
/// and what may hold it back. Through the due index: only the rows due now, not every row of
/// every subscriber.
const DUE_GROUPS: &str =
    "SELECT d.subscriber_id, min(d.run_at), min(CASE WHEN d.attempts = 0 THEN d.run_at END),
            s.breaker_open_until, s.rate_next_at, s.max_in_flight, s.breaker_allowance,
            s.origin, s.url
     FROM deliveries d INDEXED BY deliveries_due JOIN subscribers s ON s.id = d.subscriber_id
     WHERE d.state = 'scheduled' AND d.held = 0 AND d.run_at <= ?1
     GROUP BY d.subscriber_id";

/// The oldest delivery held by a paused subscriber: from the paused subscribers (`CROSS JOIN`
/// keeps them the outer loop) to their rows, so it costs nothing while nobody is paused and
/// what their rows cost when someone is; joined the other way SQLite reads every scheduled
/// row of every subscriber for `held`.
const OLDEST_PAUSED: &str = "SELECT min(d.run_at)
     FROM subscribers s CROSS JOIN deliveries d ON d.subscriber_id = s.id
     WHERE s.status = 'paused' AND d.state = 'scheduled' AND d.held = 1";

/// Each count reads the index the test below names, so a large backlog of delayed
/// deliveries costs the gauges' refresh little.
pub(super) fn queue_stats(
    c: &Connection,
    now: UnixMs,
    caps: InFlightCaps,
    held_back: &[String],
) -> Result<QueueStats> {
    let mut stats = QueueStats::default();
    let counts = c.prepare_cached(&state_counts())?.query_row([], |r| {
        DeliveryState::ALL
            .iter()
            .enumerate()
            .map(|(i, state)| Ok((*state, r.get(i)?)))
            .collect::<rusqlite::Result<Vec<(DeliveryState, u64)>>>()
    })?;
    for (state, n) in counts {
        stats.counts.add(state, n);
    }
    let mut in_flight = InFlight::default();
    let busy = c
        .prepare_cached(&in_flight_by_origin())?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<Vec<(String, u32, Option<String>, String)>>>()?;
    for (subscriber, n, stored, url) in busy {
        in_flight.add(&subscriber, &stored_origin(stored.as_deref(), &url), n);
    }
    let groups = c
        .prepare_cached(DUE_GROUPS)?
        .query_map([now], |r| {
            let subscriber: String = r.get(0)?;
            let oldest_due: UnixMs = r.get(1)?;
            let (stored, url): (Option<String>, String) = (r.get(7)?, r.get(8)?);
            let origin = stored_origin(stored.as_deref(), &url);
            Ok(DueGroup {
                oldest_due,
                oldest_first_attempt: r.get(2)?,
                state: WaitState {
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
        .prepare_cached(OLDEST_PAUSED)?
        .query_row([], |r| r.get(0))?;
    (stats.oldest_ready_since, stats.oldest_waiting_since) =
        ready_and_waiting(groups, oldest_paused, now);
    stats.oldest_retrying_first_seen = c
        .prepare_cached(
            "SELECT min(first_seen) FROM deliveries WHERE state = 'scheduled' AND attempts > 0",
        )?
        .query_row([], |r| r.get(0))?;
    stats.open_breakers = c
        .prepare_cached(
            "SELECT id FROM subscribers WHERE breaker_open_until IS NOT NULL ORDER BY id",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    (
        stats.behind_open_breakers,
        stats.behind_open_breakers_first_seen,
    ) = c
        .prepare_cached(&sql::behind_open_breakers("CROSS JOIN"))?
        .query_row([], |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?)))?;
    Ok(stats)
}

const REPLAY_COLUMNS: &str =
    "seq, id, created_at, reason, subscriber_id, limit_n, per_second, requested_by, selected";

fn replay_row(c: &Connection, r: &Row<'_>) -> Result<(i64, Replay)> {
    let seq: i64 = r.get(0)?;
    let reason: String = r.get(3)?;
    let delivery_ids = c
        .prepare_cached(
            "SELECT d.id FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
             WHERE ri.replay_seq = ?1 ORDER BY d.seq",
        )?
        .query_map([seq], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let (delivered, dead): (u64, u64) = c
        .prepare_cached(&format!(
            "SELECT coalesce(sum(d.state = 'delivered'), 0), coalesce(sum(d.state = 'dead'), 0)
             FROM replay_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
             WHERE ri.replay_seq = ?1 AND {LATEST_REPLAY}"
        ))?
        .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok((
        seq,
        Replay {
            id: r.get(1)?,
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
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {REPLAY_COLUMNS} FROM replays WHERE id = ?1"
    ))?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(r) => Ok(replay_row(c, r)?.1),
        None => Err(not_found("replay", id)),
    }
}

pub(super) fn replays(
    c: &Connection,
    order: ListOrder,
    limit: u32,
    after: i64,
) -> Result<Page<Replay>> {
    let (cursor, order_by) = order.keyset(&["seq"], "?1");
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {REPLAY_COLUMNS} FROM replays WHERE {cursor} ORDER BY {order_by} LIMIT ?2"
    ))?;
    let mut rows = stmt.query(params![after, limit + 1])?;
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
    c.prepare_cached(&format!(
        "SELECT {POLICY_COLUMNS} FROM policies WHERE name = ?1"
    ))?
    .query_row([name], policy_row)
    .optional()?
    .map(|(_, p)| p)
    .ok_or_else(|| not_found("policy", name))
}

pub(super) fn policies(c: &Connection, limit: u32, after: i64) -> Result<Page<StoredPolicy>> {
    let rows = c
        .prepare_cached(&format!(
            "SELECT {POLICY_COLUMNS} FROM policies WHERE seq > ?1 ORDER BY seq LIMIT ?2"
        ))?
        .query_map(params![after, limit + 1], policy_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(subscriber_id: Option<&str>) -> ReplayRequest {
        ReplayRequest {
            reason: DeadReason::PermanentFailure,
            subscriber_id: subscriber_id.map(str::to_owned),
            limit: 1_000,
            per_second: None,
            requested_by: None,
            expected: None,
        }
    }

    /// A page of the dead-letter queue as `dead_letters` asks for it.
    fn dead_letters_page(filter: DeadLetterFilter) -> String {
        dead_letter_conditions(&filter).statement(
            &dead_letters_select(dead_letters_index(&filter)),
            (DEATH_ORDER, ListOrder::OldestFirst),
            50,
        )
    }

    fn plan(c: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let now = std::iter::repeat_n(0, stmt.parameter_count());
        stmt.query_map(rusqlite::params_from_iter(now), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// The gauges' counts, the writer's in-flight counts, the capacity model's backlog and the
    /// recent dead letters (the console's overview, per request) each read the index expected:
    /// a partial index, or one subscriber's rows, never the whole table nor every row through
    /// `deliveries_subscriber`. With 1,000,000 delayed deliveries in the store, that walk cost
    /// more than a CPU-second per gauge refresh.
    #[test]
    fn periodic_reads_use_the_index_meant_for_them() {
        let mut c = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut c).unwrap();
        // Each statement, and the access every one of its reads of `deliveries` must use (a
        // count: its index entries alone; the due groups: a range of due rows).
        let expected = [
            (state_counts(), vec!["COVERING INDEX deliveries_"; 4]),
            (
                IN_FLIGHT_PER_SUBSCRIBER.to_owned(),
                vec!["USING INDEX deliveries_lease"],
            ),
            (in_flight_by_origin(), vec!["USING INDEX deliveries_lease"]),
            (
                DUE_GROUPS.to_owned(),
                vec!["SEARCH d USING INDEX deliveries_due (run_at<?)"],
            ),
            (
                super::super::capacity::backlog_counts(),
                vec![
                    "COVERING INDEX deliveries_window",
                    "COVERING INDEX deliveries_lease",
                    "COVERING INDEX deliveries_due",
                    "COVERING INDEX deliveries_due (run_at<?)",
                ],
            ),
            (
                OLDEST_PAUSED.to_owned(),
                vec!["SEARCH d USING INDEX deliveries_subscriber (subscriber_id=?)"],
            ),
            (
                dead_letters_page(DeadLetterFilter {
                    reason: Some(DeadReason::PermanentFailure),
                    subscriber_id: None,
                }),
                vec!["SEARCH d USING INDEX deliveries_dead_reason_at (dead_reason=?"],
            ),
            (
                dead_letters_page(DeadLetterFilter {
                    reason: Some(DeadReason::PermanentFailure),
                    subscriber_id: Some("a".into()),
                }),
                vec!["SEARCH d USING INDEX deliveries_dead (dead_reason=? AND subscriber_id=?)"],
            ),
            (
                replay_selection_sql(&replay(None)),
                vec!["SEARCH d USING INDEX deliveries_dead_reason_at (dead_reason=?"],
            ),
            (
                replay_selection_sql(&replay(Some("a"))),
                vec!["SEARCH d USING INDEX deliveries_dead (dead_reason=? AND subscriber_id=?)"],
            ),
            // What waits: the rows due later through the due index, and the due rows of
            // subscribers with an open breaker (or a rate limit) through their own index.
            (
                sql::backlog_deferred("d.held = 0"),
                vec![
                    "SEARCH d USING INDEX deliveries_due (run_at>?)",
                    "SEARCH d USING INDEX deliveries_subscriber (subscriber_id=?)",
                ],
            ),
            (
                sql::backlog_rate_limited("d.held = 0"),
                vec!["SEARCH d USING INDEX deliveries_subscriber (subscriber_id=?)"],
            ),
            (
                recent_dead(sql::DEAD_LETTERS_BY_REASON),
                vec!["SEARCH deliveries USING INDEX deliveries_dead_at (dead_at>?)"],
            ),
            (
                recent_dead(sql::DEAD_LETTER_GROUPS),
                vec!["SEARCH d USING INDEX deliveries_dead_at (dead_at>?)"],
            ),
        ];
        for (sql, accesses) in expected {
            let reads: Vec<String> = plan(&c, &sql)
                .into_iter()
                .filter(|step| step.starts_with("SCAN d") || step.starts_with("SEARCH d"))
                .collect();
            assert_eq!(reads.len(), accesses.len(), "{sql}\n{reads:?}");
            for (step, access) in reads.iter().zip(accesses) {
                assert!(step.contains(access), "{sql}\nreads {step}, not {access}");
            }
        }
    }
}
