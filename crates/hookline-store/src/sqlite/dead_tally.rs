//! Dead letters the writer's jobs made, counted into `hookline_dead_letters_total` only once
//! their batch has committed: a job that is undone, a batch that is rolled back or run again
//! (`writer.rs`) must not count its deliveries' deaths, or count them twice.

use hookline_policy::DeadReason;

use crate::rules::count_dead;

#[derive(Default)]
pub(super) struct DeadTally {
    /// Since the last commit, in the order counted.
    pending: Vec<(DeadReason, Option<String>, u64)>,
}

/// Where a job's counts begin, to drop them if it fails.
#[derive(Clone, Copy)]
pub(super) struct Mark(usize);

impl DeadTally {
    /// `n` deliveries died for `reason`, as `policy` decided (`None`: no policy did).
    pub fn add(&mut self, reason: DeadReason, policy: Option<&str>, n: u64) {
        if n > 0 {
            self.pending.push((reason, policy.map(str::to_owned), n));
        }
    }

    pub fn mark(&self) -> Mark {
        Mark(self.pending.len())
    }

    /// Drops what was counted since `mark` (a failed job's).
    pub fn roll_back_to(&mut self, mark: Mark) {
        self.pending.truncate(mark.0);
    }

    /// The batch committed: its deaths are counted.
    pub fn committed(&mut self) {
        for (reason, policy, n) in self.pending.drain(..) {
            count_dead(reason, policy.as_deref(), n);
        }
    }

    /// The batch was rolled back: none of its deliveries died.
    pub fn rolled_back(&mut self) {
        self.pending.clear();
    }

    /// Whether no death waits for a commit.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}
