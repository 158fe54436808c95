//! "Do the arithmetic": the schedule a policy implies, attempt by attempt, so an operator can see
//! before deploying whether the attempt budget fits the delivery window and what the worst-case
//! retry amplification is.

use std::time::Duration;

use crate::RetryPolicy;

/// Whether an attempt can still start inside the delivery window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowFit {
    /// Even on the slowest path (longest jitter, every earlier attempt timing out) it starts in time.
    Always,
    /// Only some jitter draws and attempt durations let it start in time.
    Sometimes,
    /// It can never start: the delivery is dead before this attempt.
    Never,
}

impl WindowFit {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowFit::Always => "yes",
            WindowFit::Sometimes => "maybe",
            WindowFit::Never => "no",
        }
    }
}

/// One attempt of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    /// 1-based attempt number.
    pub attempt: u32,
    /// The nominal (un-jittered) wait before this attempt; zero for the first.
    pub nominal_delay: Duration,
    /// Earliest start since first seen: shortest jitter, instant failures.
    pub earliest: Duration,
    /// Latest start since first seen: longest jitter, every earlier attempt running to its timeout.
    pub latest: Duration,
    pub fit: WindowFit,
}

/// The whole schedule of one delivery under a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub rows: Vec<ScheduleRow>,
    /// The most attempts one delivery can cost: the retry amplification upper bound.
    pub worst_case_attempts: u32,
    /// The latest moment (since first seen) at which any attempt can start.
    pub last_attempt_latest: Duration,
}

/// A retry budget the window cannot hold: an attempt the schedule says can never start. The one
/// rule for it, shared by named policies (refused when defined) and the configured `[retry]`
/// (refused by `serve` and `hookline config check`), so both say the same thing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "attempt {attempt} can never start inside the {} delivery window (it starts {} after first \
     seen at the earliest): lower retry.max_attempts or widen retry.delivery_window",
    humantime::format_duration(*.window),
    humantime::format_duration(*.earliest)
)]
pub struct NeverStarts {
    /// The first attempt that cannot start.
    pub attempt: u32,
    /// When it would start at the earliest, since first seen.
    pub earliest: Duration,
    pub window: Duration,
}

impl RetryPolicy {
    /// Refused when an attempt can never start inside the window: the budget promises attempts
    /// the window will never make, which reads as more patience than the policy has.
    pub fn fits_window(&self, attempt_timeout: Duration) -> Result<(), NeverStarts> {
        let schedule = self.schedule(attempt_timeout);
        match schedule.rows.iter().find(|r| r.fit == WindowFit::Never) {
            Some(row) => Err(NeverStarts {
                attempt: row.attempt,
                earliest: row.earliest,
                window: self.delivery_window(),
            }),
            None => Ok(()),
        }
    }

    /// The schedule this policy implies, for attempts that each take at most `attempt_timeout`.
    /// Queue wait is not included: it is a property of load, not of the policy.
    pub fn schedule(&self, attempt_timeout: Duration) -> Schedule {
        let window = self.delivery_window();
        let mut rows = Vec::with_capacity(self.max_attempts() as usize);
        let (mut earliest, mut latest) = (Duration::ZERO, Duration::ZERO);
        for attempt in 1..=self.max_attempts() {
            let nominal_delay = if attempt == 1 {
                Duration::ZERO
            } else {
                let nominal = self.nominal_delay(attempt - 1);
                let (low, high) = self.jitter().bounds(nominal);
                earliest += low;
                latest += attempt_timeout + high;
                nominal
            };
            let fit = if latest <= window {
                WindowFit::Always
            } else if earliest <= window {
                WindowFit::Sometimes
            } else {
                WindowFit::Never
            };
            rows.push(ScheduleRow {
                attempt,
                nominal_delay,
                earliest,
                latest,
                fit,
            });
        }
        let possible = rows.iter().filter(|r| r.fit != WindowFit::Never);
        // One row per attempt of a u32 budget: the count fits.
        let worst_case_attempts = u32::try_from(possible.clone().count()).unwrap_or(u32::MAX);
        let last_attempt_latest = possible
            .map(|r| r.latest.min(window))
            .max()
            .unwrap_or_default();
        Schedule {
            rows,
            worst_case_attempts,
            last_attempt_latest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Jitter;
    use proptest::prelude::*;

    #[test]
    fn a_short_policy_fits_its_window() {
        let p = RetryPolicy::new(
            Duration::from_secs(2),
            Duration::from_secs(300),
            6,
            Duration::from_secs(1800),
            Jitter::Equal,
        )
        .unwrap();
        let s = p.schedule(Duration::from_secs(10));
        let earliest: Vec<u64> = s.rows.iter().map(|r| r.earliest.as_secs()).collect();
        // Waits of [1..2], [2..4], [4..8], [8..16], [16..32] seconds.
        assert_eq!(earliest, [0, 1, 3, 7, 15, 31]);
        let latest: Vec<u64> = s.rows.iter().map(|r| r.latest.as_secs()).collect();
        assert_eq!(latest, [0, 12, 26, 44, 70, 112]);
        assert!(s.rows.iter().all(|r| r.fit == WindowFit::Always));
        assert_eq!(s.worst_case_attempts, 6);
        assert_eq!(s.last_attempt_latest, Duration::from_secs(112));
    }

    #[test]
    fn attempts_past_the_window_are_counted_out() {
        let p = RetryPolicy::new(
            Duration::from_secs(60),
            Duration::from_secs(60),
            10,
            Duration::from_secs(130),
            Jitter::None,
        )
        .unwrap();
        let s = p.schedule(Duration::from_secs(10));
        let fits: Vec<&str> = s.rows.iter().map(|r| r.fit.as_str()).collect();
        assert_eq!(fits[..4], ["yes", "yes", "maybe", "no"]);
        assert_eq!(s.worst_case_attempts, 3);
        assert_eq!(s.last_attempt_latest, Duration::from_secs(130));
        let e = p.fits_window(Duration::from_secs(10)).unwrap_err();
        assert_eq!((e.attempt, e.earliest), (4, Duration::from_secs(180)));
        assert_eq!(
            e.to_string(),
            "attempt 4 can never start inside the 2m 10s delivery window (it starts 3m after \
             first seen at the earliest): lower retry.max_attempts or widen retry.delivery_window"
        );
    }

    proptest! {
        #[test]
        fn schedule_is_monotone_and_bounded(
            base in 1u64..10_000, extra in 0u64..100_000, attempts in 1u32..15,
            window in 1u64..10_000_000, timeout in 0u64..30_000
        ) {
            let p = RetryPolicy::new(
                Duration::from_millis(base), Duration::from_millis(base + extra), attempts,
                Duration::from_millis(window), Jitter::Equal,
            ).unwrap();
            let s = p.schedule(Duration::from_millis(timeout));
            prop_assert_eq!(s.rows.len(), attempts as usize);
            prop_assert!(s.worst_case_attempts >= 1 && s.worst_case_attempts <= attempts);
            prop_assert!(s.last_attempt_latest <= p.delivery_window());
            for pair in s.rows.windows(2) {
                prop_assert!(pair[0].earliest <= pair[1].earliest);
                prop_assert!(pair[0].latest <= pair[1].latest);
                prop_assert!(pair[1].nominal_delay <= p.max_delay());
            }
        }
    }
}
