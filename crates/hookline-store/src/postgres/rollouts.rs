//! Rollouts on PostgreSQL: the record of each, which one runs, and the reports that compare
//! them. A change sends `NOTIFY` so every process decides by it at once.

use deadpool_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use super::reads::not_found;
use super::{
    execute, queries, query, query_one, query_opt, to_bigint, to_int, Numbers, POLICY_CHANGE,
};
use crate::*;

fn rollout_row(r: &Row) -> Result<(i64, Rollout)> {
    let abort_if = match (r.get::<_, Option<f64>>(6), r.bigint_opt(7)?) {
        (Some(terminal_rate_increase), Some(min_deliveries)) => Some(AbortIf {
            terminal_rate_increase,
            min_deliveries,
        }),
        _ => None,
    };
    Ok((
        r.get(0),
        Rollout {
            id: r.get(1),
            policy: r.get(2),
            baseline: r.get(3),
            basis_points: r.int(4)?,
            subscriber_ids: subscriber_ids_read(r.get(5))?,
            abort_if,
            state: rollout_state_read(r.get(8))?,
            reason: r.get(9),
            started_at: r.get(10),
            ended_at: r.get(11),
            created_by: r.get(12),
        },
    ))
}

async fn running(c: &impl GenericClient) -> Result<Option<Rollout>> {
    match query_opt(c, queries::RUNNING_ROLLOUT, &[]).await? {
        Some(row) => Ok(Some(rollout_row(&row)?.1)),
        None => Ok(None),
    }
}

pub(super) async fn rollout(c: &impl GenericClient, id: &str) -> Result<Rollout> {
    let row = query_opt(c, queries::ROLLOUT, &[&id])
        .await?
        .ok_or_else(|| not_found("rollout", id))?;
    Ok(rollout_row(&row)?.1)
}

pub(super) async fn rollouts(
    c: &impl GenericClient,
    limit: u32,
    after: i64,
) -> Result<Page<Rollout>> {
    let rows = query(c, queries::ROLLOUTS, &[&after, &(i64::from(limit) + 1)]).await?;
    let rows = rows.iter().map(rollout_row).collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

async fn promoted(c: &impl GenericClient) -> Result<Option<String>> {
    Ok(query_opt(c, queries::PROMOTED_POLICY, &[])
        .await?
        .map(|r| r.get(0)))
}

/// Read in a repeatable-read transaction: one snapshot for both reads.
pub(super) async fn in_force(c: &impl GenericClient) -> Result<PoliciesInForce> {
    Ok(PoliciesInForce {
        default: promoted(c).await?,
        rollout: running(c).await?,
    })
}

/// Starts and changes run one at a time per schema, so none decides on what another is
/// changing (a start reading the policy in force while a promotion commits).
async fn one_at_a_time(c: &impl GenericClient) -> Result<()> {
    execute(c, queries::ROLLOUTS_ONE_AT_A_TIME, &[]).await?;
    Ok(())
}

pub(super) async fn start(c: &impl GenericClient, r: Rollout, channel: &str) -> Result<Rollout> {
    one_at_a_time(c).await?;
    if let Some(running) = running(c).await? {
        return Err(rollout_running(&running.id));
    }
    check_baseline(&r, promoted(c).await?.as_deref())?;
    let inserted = c
        .execute(
            queries::INSERT_ROLLOUT,
            &[
                &r.id,
                &r.policy,
                &r.baseline,
                &to_int(r.basis_points),
                &subscriber_ids_text(&r.subscriber_ids),
                &r.abort_if.map(|a| a.terminal_rate_increase),
                &r.abort_if.map(|a| to_bigint(a.min_deliveries)),
                &r.state.as_str(),
                &r.reason,
                &r.started_at,
                &r.ended_at,
                &r.created_by,
            ],
        )
        .await;
    match inserted {
        // Another process started one between the look and the insert (or the id is taken).
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Err(StoreError::Conflict(
            "another rollout started at the same moment; promote or abort it first".into(),
        )),
        Err(e) => Err(e.into()),
        Ok(_) => {
            execute(c, queries::NOTIFY_WITH, &[&channel, &POLICY_CHANGE]).await?;
            Ok(r)
        }
    }
}

pub(super) async fn change(
    c: &impl GenericClient,
    id: &str,
    change: RolloutChange,
    now: UnixMs,
    channel: &str,
) -> Result<Rollout> {
    one_at_a_time(c).await?;
    let row = query_opt(c, queries::ROLLOUT_FOR_UPDATE, &[&id])
        .await?
        .ok_or_else(|| not_found("rollout", id))?;
    let changed = rollout_changed(rollout_row(&row)?.1, change, now)?;
    execute(
        c,
        queries::CHANGE_ROLLOUT,
        &[
            &to_int(changed.basis_points),
            &changed.state.as_str(),
            &changed.reason,
            &changed.ended_at,
            &changed.id,
        ],
    )
    .await?;
    execute(c, queries::NOTIFY_WITH, &[&channel, &POLICY_CHANGE]).await?;
    Ok(changed)
}

pub(super) async fn report(c: &impl GenericClient, q: &CohortQuery) -> Result<CohortReport> {
    let range: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&q.policy, &q.since, &q.until];
    let t = query_one(c, queries::COHORT_TOTALS, &range).await?;
    let count = |i: usize| non_negative(t.get(i));
    let mut report = CohortReport {
        deliveries: count(0),
        subscribers: count(1),
        delivered: count(2),
        dead: count(3),
        retry_attempts: count(4),
        retried: count(5),
        ..CohortReport::default()
    };
    report.dead_by_reason = query(c, queries::COHORT_DEAD, &range)
        .await?
        .iter()
        .map(|r| {
            (
                r.get::<_, Option<String>>(0).unwrap_or_default(),
                non_negative(r.get(1)),
            )
        })
        .collect();
    let n = report.deliveries;
    if n > 0 {
        for (quantile, slot) in [
            (0.5, &mut report.first_attempt_latency_p50_ms),
            (0.99, &mut report.first_attempt_latency_p99_ms),
        ] {
            let rank = to_bigint(nearest_rank(n, quantile));
            *slot = query_opt(
                c,
                queries::COHORT_LATENCY_AT,
                &[&q.policy, &q.since, &q.until, &rank],
            )
            .await?
            .map(|r| r.get(0));
        }
    }
    Ok(report)
}
