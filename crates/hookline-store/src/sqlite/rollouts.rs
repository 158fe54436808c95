//! Rollouts on SQLite: the record of each, which one runs, and the reports that compare them.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Row};

use super::queries;
use super::reads::not_found;
use crate::*;

/// A rollout's row as `ROLLOUT` and `ROLLOUTS` read it, with its key; its texts are checked by
/// [`finish`].
type RawRollout = (i64, Rollout, String, String);

fn rollout_row(r: &Row<'_>) -> rusqlite::Result<RawRollout> {
    let abort_if = match (r.get::<_, Option<f64>>(6)?, r.get::<_, Option<i64>>(7)?) {
        (Some(terminal_rate_increase), Some(min)) => Some(AbortIf {
            terminal_rate_increase,
            min_deliveries: non_negative(min),
        }),
        _ => None,
    };
    Ok((
        r.get(0)?,
        Rollout {
            id: r.get(1)?,
            policy: r.get(2)?,
            baseline: r.get(3)?,
            basis_points: r.get(4)?,
            subscriber_ids: Vec::new(),
            abort_if,
            state: RolloutState::Running,
            reason: r.get(9)?,
            started_at: r.get(10)?,
            ended_at: r.get(11)?,
            created_by: r.get(12)?,
        },
        r.get(5)?,
        r.get(8)?,
    ))
}

fn finish((seq, mut rollout, ids, state): RawRollout) -> Result<(i64, Rollout)> {
    rollout.subscriber_ids = subscriber_ids_read(&ids)?;
    rollout.state = rollout_state_read(&state)?;
    Ok((seq, rollout))
}

/// The rollout `sql` reads with `params`, if any.
fn select<P: rusqlite::Params>(c: &Connection, sql: &str, params: P) -> Result<Option<Rollout>> {
    let row = c
        .prepare_cached(sql)?
        .query_row(params, rollout_row)
        .optional()?;
    Ok(row.map(finish).transpose()?.map(|(_, r)| r))
}

fn running(c: &Connection) -> Result<Option<Rollout>> {
    select(c, queries::RUNNING_ROLLOUT, [])
}

pub(super) fn rollout(c: &Connection, id: &str) -> Result<Rollout> {
    select(c, queries::ROLLOUT, [id])?.ok_or_else(|| not_found("rollout", id))
}

pub(super) fn rollouts(c: &Connection, limit: u32, after: i64) -> Result<Page<Rollout>> {
    let rows = c
        .prepare_cached(queries::ROLLOUTS)?
        .query_map(params![after, limit + 1], rollout_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let rows = rows.into_iter().map(finish).collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

fn promoted(c: &Connection) -> Result<Option<String>> {
    Ok(c.prepare_cached(queries::PROMOTED_POLICY)?
        .query_row([], |r| r.get(0))
        .optional()?)
}

pub(super) fn in_force(c: &Connection) -> Result<PoliciesInForce> {
    // One snapshot for both reads: a promotion between them would show neither.
    let snapshot = c.unchecked_transaction()?;
    Ok(PoliciesInForce {
        default: promoted(&snapshot)?,
        rollout: running(&snapshot)?,
    })
}

pub(super) fn start(c: &Connection, r: Rollout) -> Result<Rollout> {
    if let Some(running) = running(c)? {
        return Err(rollout_running(&running.id));
    }
    check_baseline(&r, promoted(c)?.as_deref())?;
    let inserted = c.prepare_cached(queries::INSERT_ROLLOUT)?.execute(params![
        r.id,
        r.policy,
        r.baseline,
        r.basis_points,
        subscriber_ids_text(&r.subscriber_ids),
        r.abort_if.map(|a| a.terminal_rate_increase),
        r.abort_if.map(|a| to_bigint(a.min_deliveries)),
        r.state.as_str(),
        r.reason,
        r.started_at,
        r.ended_at,
        r.created_by,
    ]);
    match inserted {
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            Err(StoreError::Conflict(format!("rollout {:?} exists", r.id)))
        }
        other => other.map(|_| r).map_err(Into::into),
    }
}

pub(super) fn change(
    c: &Connection,
    id: &str,
    change: RolloutChange,
    now: UnixMs,
) -> Result<Rollout> {
    let changed = rollout_changed(rollout(c, id)?, change, now)?;
    c.prepare_cached(queries::CHANGE_ROLLOUT)?.execute(params![
        changed.basis_points,
        changed.state.as_str(),
        changed.reason,
        changed.ended_at,
        changed.id,
    ])?;
    Ok(changed)
}

pub(super) fn report(c: &Connection, q: &CohortQuery) -> Result<CohortReport> {
    let range = params![q.policy, q.since, q.until];
    let mut report = c
        .prepare_cached(queries::COHORT_TOTALS)?
        .query_row(range, |r| {
            Ok(CohortReport {
                deliveries: non_negative(r.get(0)?),
                subscribers: non_negative(r.get(1)?),
                delivered: non_negative(r.get(2)?),
                dead: non_negative(r.get(3)?),
                retry_attempts: non_negative(r.get(4)?),
                retried: non_negative(r.get(5)?),
                ..CohortReport::default()
            })
        })?;
    report.dead_by_reason = c
        .prepare_cached(queries::COHORT_DEAD)?
        .query_map(range, |r| {
            Ok((
                r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                non_negative(r.get(1)?),
            ))
        })?
        .collect::<rusqlite::Result<BTreeMap<_, _>>>()?;
    let n = report.deliveries;
    if n > 0 {
        let at = |quantile: f64| -> Result<Option<i64>> {
            let rank = to_bigint(nearest_rank(n, quantile));
            Ok(c.prepare_cached(queries::COHORT_LATENCY_AT)?
                .query_row(params![q.policy, q.since, q.until, rank], |r| r.get(0))
                .optional()?)
        };
        report.first_attempt_latency_p50_ms = at(0.5)?;
        report.first_attempt_latency_p99_ms = at(0.99)?;
    }
    Ok(report)
}
