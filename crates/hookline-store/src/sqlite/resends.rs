//! Resends on SQLite: the walk's pages, the new deliveries and the audit, in one writer job.
//! What is selected and what each delivery is called is decided in `crate::resends`.

use hookline_policy::UnixMs;
use rusqlite::{params, Connection, ErrorCode, Row};

use super::queries;
use super::reads::{self, not_found};
use super::writer::Writer;
use crate::*;

/// What a resend of `req` selects for `subscriber` now, walking its range in pages.
pub(super) fn selection(
    c: &Connection,
    req: &ResendRequest,
    subscriber: &Subscriber,
) -> Result<Vec<ResendEvent>> {
    validate_resend(req)?;
    let mut walk = ResendWalk::new(req, subscriber);
    let mut candidates = c.prepare_cached(queries::RESEND_CANDIDATES)?;
    while let Some((at, after, asked)) = walk.next_page() {
        let page = candidates
            .query_map(
                params![
                    at,
                    after,
                    subscriber.tenant_id,
                    req.since,
                    req.until,
                    asked,
                    subscriber.payload_version
                ],
                |r| {
                    Ok(ResendCandidate {
                        accepted_at: r.get(0)?,
                        id: r.get(1)?,
                        event_type: r.get(2)?,
                        version: r.get(3)?,
                    })
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        walk.read(page, asked);
    }
    Ok(walk.selected())
}

/// The event ids a resend of `req` would select now.
pub(super) fn preview(c: &Connection, req: &ResendRequest) -> Result<Vec<String>> {
    let subscriber = reads::subscriber(c, &req.subscriber_id)?;
    resendable(&subscriber)?;
    let selected = selection(c, req, &subscriber)?;
    Ok(selected.into_iter().map(|e| e.id).collect())
}

/// Makes the resend's deliveries and its audit, and answers its id. The writer is the file's
/// only writer, so the subscriber's status and each event's resends so far, read here, are
/// what the inserts that follow find.
pub(super) fn resend(w: &mut Writer, req: &ResendRequest, now: UnixMs) -> Result<String> {
    let c = &w.conn;
    let subscriber = reads::subscriber(c, &req.subscriber_id)?;
    resendable(&subscriber)?;
    let selected = selection(c, req, &subscriber)?;
    resend_as_previewed(req, &selected)?;
    let id = new_resend_id();
    c.prepare_cached(queries::INSERT_RESEND)?.execute(params![
        id,
        subscriber.tenant_id,
        now,
        req.subscriber_id,
        req.since,
        req.until,
        serde_json::to_string(&req.event_types).expect("strings serialize"),
        req.limit,
        req.per_second,
        req.requested_by,
        to_bigint(selected.len())
    ])?;
    let resend_seq = c.last_insert_rowid();
    let held = subscriber.status == SubscriberStatus::Paused;
    for (i, event) in selected.iter().enumerate() {
        let (first, past) = resend_id_range(&event.id, &req.subscriber_id);
        let so_far: i64 = c
            .prepare_cached(queries::RESENDS_SO_FAR)?
            .query_row(params![first, past], |r| r.get(0))?;
        let n = so_far.saturating_add(1);
        let delivery_id = resend_delivery_id(&event.id, &req.subscriber_id, n);
        let inserted = c.prepare_cached(queries::INSERT_RESENT)?.execute(params![
            delivery_id,
            event.id,
            req.subscriber_id,
            held,
            now,
            release_at(now, i, req.per_second),
            event.version,
            subscriber.tenant_id,
            n
        ]);
        match inserted {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::ConstraintViolation =>
            {
                return Err(StoreError::Conflict(format!(
                    "delivery id {delivery_id:?} is another delivery's (an event whose id ends \
                     in \":{}\" sent to a subscriber named \"resend-{n}\"): nothing was resent",
                    req.subscriber_id
                )));
            }
            other => other?,
        };
        c.prepare_cached(queries::INSERT_RESEND_ITEM)?
            .execute(params![resend_seq, c.last_insert_rowid()])?;
        w.state.resent(&req.subscriber_id);
    }
    Ok(id)
}

/// A resend's row as `RESEND` and `RESENDS` read it.
fn resend_row(c: &Connection, r: &Row<'_>) -> Result<(i64, Resend)> {
    let seq: i64 = r.get(0)?;
    let delivery_ids = c
        .prepare_cached(queries::RESENT_DELIVERIES)?
        .query_map([seq], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let (delivered, dead): (u64, u64) = c
        .prepare_cached(queries::RESEND_OUTCOMES)?
        .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let types: String = r.get(7)?;
    Ok((
        seq,
        Resend {
            id: r.get(1)?,
            tenant_id: r.get(2)?,
            created_at: r.get(3)?,
            subscriber_id: r.get(4)?,
            since: r.get(5)?,
            until: r.get(6)?,
            event_types: serde_json::from_str(&types)
                .map_err(|e| StoreError::caused_by("a resend's event_types are unreadable", e))?,
            limit: r.get(8)?,
            per_second: r.get(9)?,
            requested_by: r.get(10)?,
            selected: r.get(11)?,
            delivery_ids,
            delivered,
            dead,
        },
    ))
}

pub(super) fn get(c: &Connection, id: &str) -> Result<Resend> {
    let mut stmt = c.prepare_cached(queries::RESEND)?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(r) => Ok(resend_row(c, r)?.1),
        None => Err(not_found("resend", id)),
    }
}

pub(super) fn list(
    c: &Connection,
    filter: &ResendFilter,
    order: ListOrder,
    limit: u32,
    after: i64,
) -> Result<Page<Resend>> {
    let mut stmt = c.prepare_cached(match order {
        ListOrder::OldestFirst => queries::RESENDS,
        ListOrder::NewestFirst => queries::RESENDS_NEWEST_FIRST,
    })?;
    let mut rows = stmt.query(params![
        after,
        limit + 1,
        filter.tenant_id,
        filter.subscriber_id
    ])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(resend_row(c, r)?);
    }
    Ok(page(out, limit))
}
