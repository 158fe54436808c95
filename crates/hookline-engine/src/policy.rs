//! Which policy decides for which subscriber: a named policy (classification table, retry
//! schedule, circuit breaker), the policies in force at one moment (the default, and a
//! rollout's candidate for its cohort), and this process's snapshot of them, which the
//! dispatcher reads when it decides. The `hookline` crate keeps the snapshot current from the
//! store and reads and writes policies as operators define them.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use hookline_policy::{in_share, BreakerConfig, Classification, RetryPolicy};
use hookline_store::Rollout;

/// The policy the config defines.
pub const DEFAULT_POLICY: &str = "default";

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub classification: Classification,
    pub retry: RetryPolicy,
    pub breaker: BreakerConfig,
}

/// The policies in force at one moment.
#[derive(Debug)]
pub struct InForce {
    /// For every subscriber outside a rollout's cohort.
    pub default: Arc<Policy>,
    pub rollout: Option<Cohort>,
}

/// The subscribers a running rollout moved to its candidate.
#[derive(Debug)]
pub struct Cohort {
    pub rollout: Rollout,
    pub candidate: Arc<Policy>,
    listed: HashSet<String>,
}

impl Cohort {
    pub fn new(rollout: Rollout, candidate: Arc<Policy>) -> Self {
        Cohort {
            listed: rollout.subscriber_ids.iter().cloned().collect(),
            rollout,
            candidate,
        }
    }

    pub fn contains(&self, subscriber_id: &str) -> bool {
        self.listed.contains(subscriber_id) || in_share(subscriber_id, self.rollout.basis_points)
    }
}

impl InForce {
    /// The one delivery window the store's window sweep and claims apply to every delivery:
    /// the policy in force's, or a candidate's that has everyone (only such a candidate may
    /// have another window: see `api::rollouts` in the `hookline` crate).
    pub fn delivery_window(&self) -> std::time::Duration {
        match &self.rollout {
            Some(cohort) if cohort.rollout.basis_points == hookline_policy::EVERYONE => {
                cohort.candidate.retry.delivery_window()
            }
            _ => self.default.retry.delivery_window(),
        }
    }

    /// The policy that decides for this subscriber now.
    pub fn policy_for(&self, subscriber_id: &str) -> &Arc<Policy> {
        match &self.rollout {
            Some(cohort) if cohort.contains(subscriber_id) => &cohort.candidate,
            _ => &self.default,
        }
    }
}

/// This process's snapshot of the policies in force, replaced whole when they change:
/// decisions read it when they decide, so an attempt that was under way during an abort is
/// decided by the baseline.
#[derive(Debug)]
pub struct PoliciesInForce(RwLock<Arc<InForce>>);

impl PoliciesInForce {
    /// `default` alone in force, until the first [`PoliciesInForce::install`].
    pub fn new(default: Arc<Policy>) -> Self {
        PoliciesInForce(RwLock::new(Arc::new(InForce {
            default,
            rollout: None,
        })))
    }

    pub fn current(&self) -> Arc<InForce> {
        self.0.read().unwrap().clone()
    }

    pub fn install(&self, in_force: Arc<InForce>) {
        *self.0.write().unwrap() = in_force;
    }
}
