//! Capacity on SQLite: the backlog, and the meter of the one process that owns the file.

use hookline_policy::Shown;
use rusqlite::{params, Connection, OptionalExtension};

use super::queries;
use crate::*;

/// Meters older than this are forgotten.
const DAY_MS: i64 = 24 * 3600 * 1000;

pub(super) fn backlog(c: &Connection, now: UnixMs) -> Result<Backlog> {
    Ok(c.prepare_cached(queries::BACKLOG)?.query_row([now], |r| {
        Ok(backlog_of(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })?)
}

pub(super) fn backlog_waits(c: &Connection, now: UnixMs) -> Result<BacklogWaits> {
    let deferred = c
        .prepare_cached(queries::BACKLOG_DEFERRED)?
        .query_map([now], |r| Ok(deferred_of(r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let (rate_limited, longest) = c
        .prepare_cached(queries::BACKLOG_RATE_LIMITED)?
        .query_row([now], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
    Ok(BacklogWaits {
        deferred,
        rate_limited: non_negative(rate_limited),
        rate_limited_longest_ms: non_negative(longest),
    })
}

pub(super) fn record_meter(c: &Connection, owner: &str, at: UnixMs, m: MeterReading) -> Result<()> {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    c.prepare_cached(queries::RECORD_METER)?.execute(params![
        owner,
        at,
        n(m.new_attempts),
        n(m.retry_attempts),
        n(m.failed_attempts),
        n(m.busy_slot_samples),
        n(m.slot_samples),
        n(m.answered_attempts),
        n(m.held_slot_samples),
    ])?;
    c.prepare_cached(queries::FORGET_METERS)?
        .execute([at.saturating_sub(DAY_MS)])?;
    Ok(())
}

pub(super) fn meter_totals(c: &Connection, since: UnixMs) -> Result<MeterReading> {
    Ok(c.prepare_cached(queries::METER_TOTALS)?
        .query_row([since], |r| {
            let n = |i: usize| r.get::<_, i64>(i).map(non_negative);
            Ok(MeterReading {
                new_attempts: n(0)?,
                retry_attempts: n(1)?,
                failed_attempts: n(2)?,
                busy_slot_samples: n(3)?,
                slot_samples: n(4)?,
                answered_attempts: n(5)?,
                held_slot_samples: n(6)?,
            })
        })?)
}

pub(super) fn record_shown(c: &Connection, at: UnixMs, shown: Shown) -> Result<()> {
    c.prepare_cached(queries::RECORD_SHOWN)?.execute(params![
        shown.per_s,
        shown.evidence.as_str(),
        at
    ])?;
    Ok(())
}

pub(super) fn attempt_history(c: &Connection, since: UnixMs, limit: u32) -> Result<AttemptHistory> {
    let rows = c
        .prepare(queries::ATTEMPT_HISTORY)?
        .query_map(params![since, limit], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, bool>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    attempt_history_of(rows)
}

pub(super) fn shown(c: &Connection) -> Result<Option<Shown>> {
    Ok(c.prepare_cached(queries::SHOWN)?
        .query_row([], |r| Ok(shown_of(r.get(0)?, &r.get::<_, String>(1)?)))
        .optional()?)
}
