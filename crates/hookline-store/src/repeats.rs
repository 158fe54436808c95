//! A warning that repeats (a WAL checkpoint failing every 200 ms, for as long as the disk is
//! full) is logged at most once per interval, with how many times it happened since: the log
//! says it is still happening without drowning everything else.

use std::time::{Duration, Instant};

/// How often a repeating warning is logged.
pub const REPEATED_WARNING_EVERY: Duration = Duration::from_secs(10);

/// Whether a repeated occurrence is logged now. Time is an argument, so it is a pure counter.
#[derive(Debug)]
pub struct Repeats {
    every: Duration,
    /// When it was last logged, if it is still happening.
    logged_at: Option<Instant>,
    /// Occurrences since (the logged one not counted).
    since: u64,
}

impl Repeats {
    pub const fn new(every: Duration) -> Self {
        Repeats {
            every,
            logged_at: None,
            since: 0,
        }
    }

    /// One more occurrence at `now`: `Some(n)` when it is to be logged now, `n` being the
    /// occurrences this log stands for (itself and those not logged since the last).
    pub fn occurred(&mut self, now: Instant) -> Option<u64> {
        self.since += 1;
        match self.logged_at {
            Some(at) if now.saturating_duration_since(at) < self.every => None,
            _ => {
                self.logged_at = Some(now);
                Some(std::mem::take(&mut self.since))
            }
        }
    }

    /// It stopped happening: the occurrences never logged (`Some` if any), and the next
    /// occurrence is logged at once.
    pub fn stopped(&mut self) -> Option<u64> {
        self.logged_at = None;
        Some(std::mem::take(&mut self.since)).filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeating_warning_is_logged_once_per_interval_with_its_count() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut repeats = Repeats::new(REPEATED_WARNING_EVERY);
        assert_eq!(
            repeats.occurred(at(0)),
            Some(1),
            "the first is logged at once"
        );
        // Every 200 ms for 10 s: none logged until the interval has passed.
        let logged: Vec<(u64, u64)> = (1..=100)
            .map(|i| i * 200)
            .filter_map(|ms| repeats.occurred(at(ms)).map(|n| (ms, n)))
            .collect();
        assert_eq!(logged, [(10_000, 50), (20_000, 50)]);
        assert_eq!(repeats.stopped(), None, "each occurrence was in a log");
        assert_eq!(
            repeats.occurred(at(20_100)),
            Some(1),
            "after a stop, at once"
        );
        assert_eq!(repeats.occurred(at(20_300)), None);
        assert_eq!(repeats.stopped(), Some(1), "one not logged");
        assert_eq!(repeats.stopped(), None);
    }
}
