//! Which policy decides for which subscriber, kept current from the store, and a rollout's
//! comparison and automatic abort.
//!
//! The store keeps the record (the policy in force for everyone, the rollout running); every
//! process keeps a snapshot of it (the engine's `PoliciesInForce`), kept current here. A change made through this process's API replaces the
//! snapshot at once; one made elsewhere (another process on PostgreSQL) is read within
//! [`REFRESH_EVERY_MS`]. Decisions read the snapshot when they decide, so an attempt that was
//! under way during an abort is decided by the baseline.

pub use hookline_api::{CohortView, DifferenceView, DifferencesView, LatencyMs};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hookline_engine::clock::Clock;
use hookline_engine::policy::{Cohort, InForce, PoliciesInForce, Policy, DEFAULT_POLICY};
use hookline_policy::{compare_proportions, Difference, UnixMs};
use hookline_store::{
    AbortIf, CohortQuery, CohortReport, Rollout, RolloutChange, Store, StoreError,
};
use tokio::sync::watch;

use crate::policies::{NewPolicy, PolicyExt};

/// How often a process reads the policies in force (a change made elsewhere reaches it within
/// this).
const REFRESH_EVERY_MS: i64 = 1_000;
/// How often a running rollout's `abort_if` is checked.
const ABORT_CHECK_EVERY_MS: i64 = 10_000;

/// Every process's view of the policies in force.
pub struct Policies {
    store: Arc<dyn Store>,
    /// The configuration's `default`.
    configured: Arc<Policy>,
    /// Stored policies never change, so one read is kept for good.
    known: Mutex<HashMap<String, Arc<Policy>>>,
    /// What the dispatcher decides by.
    in_force: Arc<PoliciesInForce>,
    /// One refresh at a time, from read to install: a refresh that read before a change
    /// committed never installs after one that read after it.
    refreshing: tokio::sync::Mutex<()>,
}

impl Policies {
    /// Starts from the configuration's `default` alone; [`Policies::refresh`] reads the rest.
    pub fn new(store: Arc<dyn Store>, configured: Policy) -> Arc<Self> {
        let configured = Arc::new(configured);
        Arc::new(Policies {
            store,
            in_force: Arc::new(PoliciesInForce::new(configured.clone())),
            configured,
            known: Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// The configuration's `default`.
    pub fn configured(&self) -> &Arc<Policy> {
        &self.configured
    }

    pub fn current(&self) -> Arc<InForce> {
        self.in_force.current()
    }

    /// The snapshot this keeps current, for the dispatcher.
    pub fn in_force(&self) -> Arc<PoliciesInForce> {
        self.in_force.clone()
    }

    /// A policy by name: `default` is the configuration's, the others are stored.
    pub async fn named(&self, name: &str) -> Result<Arc<Policy>, StoreError> {
        if name == DEFAULT_POLICY {
            return Ok(self.configured.clone());
        }
        if let Some(p) = self.known.lock().unwrap().get(name) {
            return Ok(p.clone());
        }
        let stored = self.store.get_policy(name).await?;
        let unreadable = format!("policy {name:?} is stored unreadably");
        let definition: NewPolicy = serde_json::from_str(&stored.definition)
            .map_err(|e| StoreError::caused_by(unreadable.clone(), e))?;
        // A stored definition spells out every field: nothing comes from the defaults.
        let policy = Arc::new(
            Policy::read(definition, &self.configured)
                .map_err(|e| StoreError::caused_by(unreadable, e))?,
        );
        self.known
            .lock()
            .unwrap()
            .insert(name.to_owned(), policy.clone());
        Ok(policy)
    }

    /// Reads the policies in force from the store and makes them this process's.
    pub async fn refresh(&self) -> Result<Arc<InForce>, StoreError> {
        let _one_at_a_time = self.refreshing.lock().await;
        let record = self.store.policies_in_force().await?;
        let default = match &record.default {
            Some(name) => self.named(name).await?,
            None => self.configured.clone(),
        };
        let rollout = match record.rollout {
            Some(rollout) => {
                let candidate = self.named(&rollout.policy).await?;
                Some(Cohort::new(rollout, candidate))
            }
            None => None,
        };
        let fresh = Arc::new(InForce { default, rollout });
        self.in_force.install(fresh.clone());
        Ok(fresh)
    }
}

/// Keeps `policies` current and checks a running rollout's `abort_if`, until `stop` changes.
pub async fn keep_current(
    policies: Arc<Policies>,
    clock: Arc<dyn Clock>,
    mut stop: watch::Receiver<bool>,
) {
    let mut next_abort_check = clock.now_ms() + ABORT_CHECK_EVERY_MS;
    let changes = policies.store.policy_changes();
    let changed_elsewhere = || async {
        match &changes {
            Some(n) => n.notified().await,
            None => std::future::pending().await,
        }
    };
    while !*stop.borrow() {
        let now = clock.now_ms();
        match policies.refresh().await {
            Ok(in_force) if now >= next_abort_check => {
                next_abort_check = now + ABORT_CHECK_EVERY_MS;
                if let Some(cohort) = &in_force.rollout {
                    if let Err(e) = check_abort(&policies, &cohort.rollout, now).await {
                        tracing::warn!(error = %e, rollout = %cohort.rollout.id, "abort_if check failed");
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                hookline_engine::telemetry::store_error("policies_in_force");
                tracing::warn!(error = %e, "cannot read the policies in force; keeping the last known");
            }
        }
        tokio::select! {
            _ = clock.sleep_until(now + REFRESH_EVERY_MS) => {}
            _ = changed_elsewhere() => {}
            _ = stop.changed() => {}
        }
    }
}

/// Aborts `rollout` when its `abort_if` holds now.
async fn check_abort(
    policies: &Policies,
    rollout: &Rollout,
    now: UnixMs,
) -> Result<(), StoreError> {
    let Some(abort_if) = rollout.abort_if else {
        return Ok(());
    };
    let (baseline, candidate) = reports(&policies.store, rollout, now).await?;
    let Some(reason) = abort_reason(abort_if, &baseline, &candidate) else {
        return Ok(());
    };
    match policies
        .store
        .change_rollout(
            &rollout.id,
            RolloutChange::Abort {
                reason: reason.clone(),
            },
            now,
        )
        .await
    {
        Ok(_) => {
            tracing::warn!(rollout = %rollout.id, %reason, "rollout aborted itself");
            policies.refresh().await?;
            Ok(())
        }
        // Ended meanwhile (by an operator, or by another process's check).
        Err(StoreError::Conflict(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What the baseline's and the candidate's deliveries did since the rollout started (until it
/// ended, for one that did).
pub async fn reports(
    store: &Arc<dyn Store>,
    rollout: &Rollout,
    now: UnixMs,
) -> Result<(CohortReport, CohortReport), StoreError> {
    let until = rollout.ended_at.unwrap_or(now.saturating_add(1));
    let report = |policy: &str| {
        store.cohort_report(CohortQuery {
            policy: policy.to_owned(),
            since: rollout.started_at,
            until,
        })
    };
    Ok((
        report(&rollout.baseline).await?,
        report(&rollout.policy).await?,
    ))
}

/// Dead over ended: the share of deliveries that reached an end and died.
fn terminal(r: &CohortReport) -> (u64, u64) {
    (r.dead, r.ended())
}

/// Retried over attempted: the share of deliveries that needed more than one attempt (what
/// the significance of the retry rate is tested on: a rate per delivery is not a proportion).
fn retried(r: &CohortReport) -> (u64, u64) {
    (r.retried, r.deliveries)
}

/// Attempts after the first, per delivery.
fn retry_rate(r: &CohortReport) -> Option<f64> {
    ratio((r.retry_attempts, r.deliveries))
}

fn ratio((hits, of): (u64, u64)) -> Option<f64> {
    (of > 0).then(|| hits as f64 / of as f64)
}

/// The reason to abort, when `abort_if` holds: the candidate's terminal rate passes the
/// baseline's by more than allowed, with enough ended deliveries in each cohort.
pub fn abort_reason(
    abort_if: AbortIf,
    baseline: &CohortReport,
    candidate: &CohortReport,
) -> Option<String> {
    if baseline.ended() < abort_if.min_deliveries || candidate.ended() < abort_if.min_deliveries {
        return None;
    }
    let (b, c) = (ratio(terminal(baseline))?, ratio(terminal(candidate))?);
    (c - b > abort_if.terminal_rate_increase).then(|| {
        format!(
            "abort_if: the candidate's terminal rate {c:.4} exceeds the baseline's {b:.4} by \
             more than {} (over {} and {} ended deliveries)",
            abort_if.terminal_rate_increase,
            candidate.ended(),
            baseline.ended()
        )
    })
}

pub fn cohort_view(policy: &str, r: &CohortReport) -> CohortView {
    CohortView {
        policy: policy.to_owned(),
        subscribers: r.subscribers,
        deliveries: r.deliveries,
        first_attempt_latency_ms: LatencyMs {
            p50: r.first_attempt_latency_p50_ms,
            p99: r.first_attempt_latency_p99_ms,
        },
        retry_rate: retry_rate(r),
        retried: r.retried,
        terminal_rate: ratio(terminal(r)),
        ended: r.ended(),
        pending: r.deliveries.saturating_sub(r.ended()),
        delivered: r.delivered,
        dead: r.dead,
        dead_by_reason: r.dead_by_reason.clone(),
    }
}

fn difference_view(
    difference: Option<Difference>,
    rate_difference: Option<f64>,
    tested: &'static str,
) -> DifferenceView {
    DifferenceView {
        difference: rate_difference,
        z: difference.map(|d| d.z),
        significant: difference.is_some_and(|d| d.significant),
        tested: tested.to_owned(),
    }
}

/// The differences a comparison shows, candidate minus baseline, each with a two-proportion
/// z-test at 95%.
pub fn differences_view(baseline: &CohortReport, candidate: &CohortReport) -> DifferencesView {
    let minus = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
    let terminal_test = compare_proportions(terminal(baseline), terminal(candidate));
    DifferencesView {
        retry_rate: difference_view(
            compare_proportions(retried(baseline), retried(candidate)),
            minus(retry_rate(candidate), retry_rate(baseline)),
            "share of deliveries retried at least once",
        ),
        terminal_rate: difference_view(
            terminal_test,
            terminal_test.map(|d| d.difference),
            "share of ended deliveries that died",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(delivered: u64, dead: u64) -> CohortReport {
        CohortReport {
            deliveries: delivered + dead,
            delivered,
            dead,
            ..CohortReport::default()
        }
    }

    #[test]
    fn abort_if_needs_enough_ended_deliveries_on_both_sides() {
        let abort_if = AbortIf {
            terminal_rate_increase: 0.05,
            min_deliveries: 200,
        };
        // 5% against 50% dead: far past the allowed increase.
        assert!(abort_reason(abort_if, &report(190, 10), &report(100, 100)).is_some());
        // Not enough on the baseline's side.
        assert!(abort_reason(abort_if, &report(190, 9), &report(100, 100)).is_none());
        // Within the allowed increase: 5% against 9.5%.
        assert!(abort_reason(abort_if, &report(190, 10), &report(181, 19)).is_none());
        // Better is never a reason.
        assert!(abort_reason(abort_if, &report(100, 100), &report(200, 0)).is_none());
    }

    #[test]
    fn differences_show_the_rates_and_their_significance() {
        let mut baseline = report(0, 400);
        baseline.retry_attempts = 0;
        let mut candidate = report(0, 400);
        candidate.retry_attempts = 1600;
        candidate.retried = 400;
        let d = differences_view(&baseline, &candidate);
        assert_eq!(d.retry_rate.difference, Some(4.0));
        assert!(d.retry_rate.significant);
        assert_eq!(d.terminal_rate.difference, Some(0.0));
        assert!(!d.terminal_rate.significant);
        let empty = differences_view(&CohortReport::default(), &candidate);
        assert_eq!(empty.terminal_rate.difference, None);
        assert!(!empty.terminal_rate.significant);
    }
}
