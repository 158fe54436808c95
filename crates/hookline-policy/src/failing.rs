//! How long a subscriber has been failing: the run of failed attempts (retryable or permanent)
//! since its last success. The breaker counts only retryable failures and a permanent answer
//! closes it (the subscriber is up), so a subscriber answering every delivery with 404 never
//! opens it; this streak sees both, and is what marks a subscriber failing for its operators
//! and what pauses one that has failed for too long (`[lifecycle] disable_after`).

use crate::{Outcome, UnixMs};

/// Persisted with the subscriber, beside its breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailingStreak {
    /// When the first failed attempt since the last success ended; `None` when the last
    /// attempt that said anything succeeded (or there was none).
    pub since: Option<UnixMs>,
    /// Failed attempts since then, up to [`FailingStreak::MAX_COUNTED`].
    pub attempts: u32,
}

impl FailingStreak {
    /// Failed attempts are counted up to this: past it a failure changes nothing, so a
    /// subscriber answering every delivery with 404 costs the completions no write of its row.
    pub const MAX_COUNTED: u32 = 100;

    /// The streak after an attempt ended with `outcome` at `now`. A lost attempt (the worker
    /// crashed) says nothing about the subscriber: no change.
    pub fn after(self, outcome: Outcome, now: UnixMs) -> FailingStreak {
        match outcome {
            Outcome::Success => FailingStreak::default(),
            Outcome::Lost => self,
            Outcome::Retryable | Outcome::Permanent => FailingStreak {
                since: Some(self.since.unwrap_or(now)),
                attempts: self.attempts.saturating_add(1).min(Self::MAX_COUNTED),
            },
        }
    }

    /// Whether every attempt since `cutoff` or earlier failed: the streak began at or before it.
    pub fn began_by(&self, cutoff: UnixMs) -> bool {
        self.since.is_some_and(|since| since <= cutoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_success_ends_it_and_a_lost_attempt_changes_nothing() {
        let s = FailingStreak::default()
            .after(Outcome::Permanent, 10)
            .after(Outcome::Retryable, 20)
            .after(Outcome::Lost, 30);
        assert_eq!(
            s,
            FailingStreak {
                since: Some(10),
                attempts: 2
            }
        );
        assert!(s.began_by(10) && !s.began_by(9));
        assert_eq!(s.after(Outcome::Success, 40), FailingStreak::default());
        assert!(!FailingStreak::default().began_by(i64::MAX));
    }

    proptest! {
        /// Over any outcomes: `since` is the end of the first failure after the last success
        /// (lost attempts skipped), `attempts` the failures since.
        #[test]
        fn it_starts_at_the_first_failure_since_the_last_success(outcomes in proptest::collection::vec(0u8..4, 0..240)) {
            let all = [Outcome::Success, Outcome::Retryable, Outcome::Permanent, Outcome::Lost];
            let mut s = FailingStreak::default();
            for (t, o) in outcomes.iter().enumerate() {
                s = s.after(all[usize::from(*o)], i64::try_from(t).unwrap());
            }
            let said: Vec<(usize, Outcome)> = outcomes.iter().enumerate()
                .map(|(t, o)| (t, all[usize::from(*o)]))
                .filter(|(_, o)| *o != Outcome::Lost)
                .collect();
            let run: Vec<usize> = said.iter().rev()
                .take_while(|(_, o)| *o != Outcome::Success)
                .map(|(t, _)| *t)
                .collect();
            prop_assert_eq!(s.attempts, u32::try_from(run.len()).unwrap().min(FailingStreak::MAX_COUNTED));
            prop_assert_eq!(s.since, run.last().map(|t| i64::try_from(*t).unwrap()));
        }
    }
}
