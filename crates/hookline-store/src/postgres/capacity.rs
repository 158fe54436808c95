//! Capacity on PostgreSQL: the backlog, and every process's meter, summed.

use deadpool_postgres::GenericClient;

use hookline_policy::Shown;

use super::{execute, queries, query, query_one, query_opt, to_bigint};
use crate::*;

/// Meters older than this are forgotten.
const DAY_MS: i64 = 24 * 3600 * 1000;

pub(super) async fn backlog(c: &impl GenericClient, now: UnixMs) -> Result<Backlog> {
    let r = query_one(c, queries::BACKLOG, &[&now]).await?;
    Ok(backlog_of(r.get(0), r.get(1), r.get(2), r.get(3)))
}

pub(super) async fn backlog_waits(c: &impl GenericClient, now: UnixMs) -> Result<BacklogWaits> {
    let deferred = query(c, queries::BACKLOG_DEFERRED, &[&now])
        .await?
        .iter()
        .map(|r| deferred_of(r.get(0), r.get(1), r.get(2)))
        .collect();
    let r = query_one(c, queries::BACKLOG_RATE_LIMITED, &[&now]).await?;
    Ok(BacklogWaits {
        deferred,
        rate_limited: non_negative(r.get(0)),
        rate_limited_longest_ms: non_negative(r.get(1)),
    })
}

pub(super) async fn record_meter(
    c: &impl GenericClient,
    owner: &str,
    at: UnixMs,
    m: MeterReading,
) -> Result<()> {
    execute(
        c,
        queries::RECORD_METER,
        &[
            &owner,
            &at,
            &to_bigint(m.new_attempts),
            &to_bigint(m.retry_attempts),
            &to_bigint(m.failed_attempts),
            &to_bigint(m.busy_slot_samples),
            &to_bigint(m.slot_samples),
            &to_bigint(m.answered_attempts),
            &to_bigint(m.held_slot_samples),
        ],
    )
    .await?;
    execute(c, queries::FORGET_METERS, &[&at.saturating_sub(DAY_MS)]).await?;
    Ok(())
}

pub(super) async fn meter_totals(c: &impl GenericClient, since: UnixMs) -> Result<MeterReading> {
    let r = query_one(c, queries::METER_TOTALS, &[&since]).await?;
    let n = |i: usize| non_negative(r.get(i));
    Ok(MeterReading {
        new_attempts: n(0),
        retry_attempts: n(1),
        failed_attempts: n(2),
        busy_slot_samples: n(3),
        slot_samples: n(4),
        answered_attempts: n(5),
        held_slot_samples: n(6),
    })
}

pub(super) async fn record_shown(c: &impl GenericClient, at: UnixMs, shown: Shown) -> Result<()> {
    execute(
        c,
        queries::RECORD_SHOWN,
        &[&shown.per_s, &shown.evidence.as_str(), &at],
    )
    .await?;
    Ok(())
}

pub(super) async fn attempt_history(
    c: &impl GenericClient,
    since: UnixMs,
    limit: u32,
) -> Result<AttemptHistory> {
    let rows = query(c, queries::ATTEMPT_HISTORY, &[&since, &i64::from(limit)]).await?;
    attempt_history_of(
        rows.iter()
            .map(|r| (r.get::<_, i64>(0), r.get(1), r.get(2))),
    )
}

pub(super) async fn shown(c: &impl GenericClient) -> Result<Option<Shown>> {
    let row = query_opt(c, queries::SHOWN, &[]).await?;
    Ok(row.map(|r| shown_of(r.get(0), r.get(1))))
}
