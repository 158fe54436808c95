//! Policies and their rollouts in the simulation: the policy a seed is configured with, the
//! candidates its rollouts try, and the process's view of which decides for whom, kept by
//! `hookline`'s own [`Policies`] from the store's record, as a serving process keeps it.

use std::collections::BTreeSet;
use std::time::Duration;

use hookline::policies::PolicyExt;
use hookline_engine::policy::Policy;
use hookline_policy::{BreakerConfig, Classification, Jitter, RetryPolicy};
use hookline_store::{Rollout, RolloutChange, RolloutState, StoreError, StoredPolicy};

use crate::prng::Prng;
use crate::{Sim, Violation};

/// A policy drawn from the seed, with the standard classification table: its retry schedule
/// (within `window`, which every policy of a seed shares: only a candidate for everyone may
/// have another, and the checks read one) and its breaker.
pub(crate) fn draw(rng: &mut Prng, name: &str, window: Duration) -> Policy {
    let retry = RetryPolicy::new(
        Duration::from_millis(rng.between(200, 1_000)),
        Duration::from_secs(rng.between(2, 15)),
        u32::try_from(rng.between(1, 8)).unwrap_or(1),
        window,
        *rng.pick(&Jitter::ALL).expect("jitters"),
    )
    .expect("a valid policy");
    Policy {
        name: name.to_owned(),
        classification: Classification::default(),
        retry,
        breaker: BreakerConfig {
            failures: u32::try_from(rng.between(2, 6)).unwrap_or(2),
            cool_down: Duration::from_secs(rng.between(1, 10)),
            max_cool_down: Duration::from_secs(rng.between(10, 30)),
        },
    }
}

/// A rollout's step: with none running, a candidate stored and a rollout of it started (a
/// share of subscribers and some by name); with one running, a new share, a promote or an
/// abort. The process then reads the record again, as a serving process does after a change.
pub(crate) async fn step(sim: &mut Sim) -> Result<(), Violation> {
    let changed = match sim.rollout.clone() {
        None => start(sim).await,
        Some(id) => {
            let change = match sim.rng.between(0, 2) {
                0 => RolloutChange::Share(u32::try_from(sim.rng.between(0, 10_000)).unwrap_or(0)),
                1 => RolloutChange::Promote,
                _ => RolloutChange::Abort {
                    reason: "the simulation aborts it".into(),
                },
            };
            sim.trace(|| format!("rollout {id}: {change:?}"));
            match sim.store.change_rollout(&id, change, sim.now).await {
                Ok(rollout) => {
                    if rollout.state != RolloutState::Running {
                        sim.rollout = None;
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    };
    if let Err(e) = changed {
        return sim.refused("rollout", e);
    }
    refresh(sim).await
}

/// A candidate's classification: the standard table, or one that retries a 400 or gives up on
/// a 503 at once.
fn draw_classification(rng: &mut Prng) -> Classification {
    let standard = Classification::default();
    let mut retryable: BTreeSet<u16> = standard.retryable().clone();
    match rng.between(0, 3) {
        0 => {
            retryable.insert(400);
        }
        1 => {
            retryable.remove(&503);
        }
        _ => return standard,
    }
    Classification::new(retryable, standard.revoke().iter().copied()).expect("a valid table")
}

async fn start(sim: &mut Sim) -> Result<(), StoreError> {
    // Named by the step: a step whose start a full disk refused leaves its name unused.
    let n = sim.step;
    let window = Duration::from_millis(sim.settings.window_ms.unsigned_abs());
    let candidate = Policy {
        classification: draw_classification(&mut sim.rng),
        ..draw(&mut sim.rng, &format!("candidate-{n}"), window)
    };
    let baseline = sim.policies.current().default.name.clone();
    let named: Vec<String> = sim
        .subscribers
        .iter()
        .filter(|_| sim.rng.percent(20))
        .map(|s| s.id.clone())
        .collect();
    let rollout = Rollout {
        id: format!("rollout-{n}"),
        policy: candidate.name.clone(),
        baseline,
        basis_points: u32::try_from(sim.rng.between(0, 10_000)).unwrap_or(0),
        subscriber_ids: named,
        abort_if: None,
        state: RolloutState::Running,
        reason: None,
        started_at: sim.now,
        ended_at: None,
        created_by: None,
    };
    sim.trace(|| format!("rollout {rollout:?} of {candidate:?}"));
    sim.store
        .create_policy(StoredPolicy {
            name: candidate.name.clone(),
            definition: candidate.to_json().to_string(),
            created_at: sim.now,
            created_by: None,
        })
        .await?;
    let started = sim.store.start_rollout(rollout).await?;
    sim.summary.rollouts += 1;
    sim.rollout = Some(started.id);
    Ok(())
}

/// The process reads the policies in force from the store (at its start, and after a change).
pub(crate) async fn refresh(sim: &mut Sim) -> Result<(), Violation> {
    match sim.policies.refresh().await {
        Ok(_) => Ok(()),
        Err(e) => Err(sim.violation("store answers", format!("policies in force: {e}"))),
    }
}
