//! Resends on PostgreSQL: the walk's pages, the new deliveries in one statement, and the audit.
//! What is selected and what each delivery is called is decided in `crate::resends`.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use hookline_policy::UnixMs;
use tokio_postgres::Row;

use super::reads::{self, not_found};
use super::{execute, queries, query, query_one, query_opt, writes, Numbers};
use crate::*;

/// What a resend of `req` selects for `subscriber` now, walking its range in pages.
pub(super) async fn selection(
    c: &impl GenericClient,
    req: &ResendRequest,
    subscriber: &Subscriber,
) -> Result<Vec<ResendEvent>> {
    validate_resend(req)?;
    let mut walk = ResendWalk::new(req, subscriber);
    while let Some((at, after, asked)) = walk.next_page() {
        let rows = query(
            c,
            queries::RESEND_CANDIDATES,
            &[
                &at,
                &after,
                &subscriber.tenant_id,
                &req.since,
                &req.until,
                &i64::from(asked),
                &subscriber.payload_version,
            ],
        )
        .await?;
        let page = rows
            .iter()
            .map(|r| ResendCandidate {
                accepted_at: r.get(0),
                id: r.get(1),
                event_type: r.get(2),
                version: r.get(3),
            })
            .collect();
        walk.read(page, asked);
    }
    Ok(walk.selected())
}

/// Makes the resend's deliveries and its audit, in the caller's transaction, and answers its
/// id. The subscriber's row is locked first, as a revocation or a resume locks it: a resend
/// and a revocation are ordered (no delivery is made for a subscriber revoked meanwhile), so
/// are a resend and a resume (which releases what the resend held), and two resends to one
/// subscriber number their deliveries one after the other.
pub(super) async fn resend(
    c: &impl GenericClient,
    req: ResendRequest,
    now: UnixMs,
    channel: &str,
) -> Result<String> {
    let subscriber = reads::subscriber_for_update(c, &req.subscriber_id).await?;
    resendable(&subscriber)?;
    let selected = selection(c, &req, &subscriber).await?;
    resend_as_previewed(&req, &selected)?;
    let id = new_resend_id();
    let resend_seq: i64 = query_one(
        c,
        queries::INSERT_RESEND,
        &[
            &id,
            &subscriber.tenant_id,
            &now,
            &req.subscriber_id,
            &req.since,
            &req.until,
            &req.event_types,
            &i64::from(req.limit),
            &req.per_second,
            &req.requested_by,
            &to_bigint(selected.len()),
        ],
    )
    .await?
    .get(0);
    let events: Vec<&str> = selected.iter().map(|e| e.id.as_str()).collect();
    let so_far: HashMap<String, i32> =
        query(c, queries::RESENDS_SO_FAR, &[&events, &req.subscriber_id])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    let (mut release, mut versions, mut numbers) = (Vec::new(), Vec::new(), Vec::new());
    for (i, event) in selected.iter().enumerate() {
        release.push(release_at(now, i, req.per_second));
        versions.push(event.version);
        numbers.push(
            so_far
                .get(&event.id)
                .copied()
                .unwrap_or(0)
                .saturating_add(1),
        );
    }
    let held = subscriber.status == SubscriberStatus::Paused;
    execute(
        c,
        queries::INSERT_RESENT,
        &[
            &events,
            &req.subscriber_id,
            &held,
            &now,
            &subscriber.tenant_id,
            &release,
            &versions,
            &numbers,
            &resend_seq,
        ],
    )
    .await?;
    if !selected.is_empty() && !held {
        writes::notify(c, channel).await?;
    }
    Ok(id)
}

/// A resend's row as `RESEND` and `RESENDS` read it.
async fn resend_row(c: &impl GenericClient, r: &Row) -> Result<(i64, Resend)> {
    let seq: i64 = r.get(0);
    let delivery_ids: Vec<String> = query(c, queries::RESENT_DELIVERIES, &[&seq])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let counts = query_one(c, queries::RESEND_OUTCOMES, &[&seq]).await?;
    Ok((
        seq,
        Resend {
            id: r.get(1),
            tenant_id: r.get(2),
            created_at: r.get(3),
            subscriber_id: r.get(4),
            since: r.get(5),
            until: r.get(6),
            event_types: r.get(7),
            limit: r.bigint(8)?,
            per_second: r.get(9),
            requested_by: r.get(10),
            selected: r.bigint(11)?,
            delivery_ids,
            delivered: non_negative(counts.get(0)),
            dead: non_negative(counts.get(1)),
        },
    ))
}

pub(super) async fn get(c: &impl GenericClient, id: &str) -> Result<Resend> {
    let row = query_opt(c, queries::RESEND, &[&id])
        .await?
        .ok_or_else(|| not_found("resend", id))?;
    Ok(resend_row(c, &row).await?.1)
}

pub(super) async fn list(
    c: &impl GenericClient,
    filter: &ResendFilter,
    order: ListOrder,
    limit: u32,
    after: i64,
) -> Result<Page<Resend>> {
    let sql = match order {
        ListOrder::OldestFirst => queries::RESENDS,
        ListOrder::NewestFirst => queries::RESENDS_NEWEST_FIRST,
    };
    let more = i64::from(limit) + 1;
    let rows = query(
        c,
        sql,
        &[&after, &more, &filter.tenant_id, &filter.subscriber_id],
    )
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        out.push(resend_row(c, r).await?);
    }
    Ok(page(out, limit))
}
