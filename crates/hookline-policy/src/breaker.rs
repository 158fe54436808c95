//! The per-subscriber circuit breaker, as a pure state machine: after `failures` consecutive
//! retryable failures a subscriber is open for a cool-down (doubling while it keeps failing,
//! capped); while open its deliveries wait without spending attempts; once the cool-down is
//! over one probe attempt decides between closed and open again.

use std::time::Duration;

use crate::retry::duration_ms;
use crate::{Outcome, UnixMs};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive retryable failures that open the breaker.
    pub failures: u32,
    pub cool_down: Duration,
    /// The cool-down never grows past this (the retry policy's `max_delay`).
    pub max_cool_down: Duration,
}

/// What a subscriber's breaker remembers; persisted with the subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Breaker {
    pub consecutive_failures: u32,
    /// Set while open or half-open: attempts wait until then.
    pub open_until: Option<UnixMs>,
    /// The cool-down last used, doubled on every failed probe.
    pub cool_down_ms: i64,
}

/// Where a breaker stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// Nothing is attempted before `until`.
    Open {
        until: UnixMs,
    },
    /// The cool-down is over: one probe attempt may go.
    HalfOpen,
}

impl BreakerState {
    /// What [`BreakerState::as_str`] can answer.
    pub const NAMES: [&'static str; 3] = ["closed", "open", "half_open"];
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open { .. } => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

impl Breaker {
    pub fn state(&self, now: UnixMs) -> BreakerState {
        match self.open_until {
            None => BreakerState::Closed,
            Some(until) if now < until => BreakerState::Open { until },
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// The breaker after an attempt ended with `outcome` at `now`. Any answer that is not a
    /// retryable failure (a success, or a permanent 4xx) shows the subscriber is up: closed.
    /// A lost attempt (the worker crashed) says nothing about the subscriber: no change.
    pub fn after(self, config: &BreakerConfig, outcome: Outcome, now: UnixMs) -> Breaker {
        if outcome == Outcome::Lost {
            return self;
        }
        if outcome != Outcome::Retryable {
            return Breaker::default();
        }
        let failures = self.consecutive_failures.saturating_add(1);
        let max = duration_ms(config.max_cool_down);
        let cool_down = match self.state(now) {
            // A failed probe: open again, for twice as long.
            BreakerState::HalfOpen => self.cool_down_ms.saturating_mul(2).min(max),
            BreakerState::Closed if failures >= config.failures => {
                duration_ms(config.cool_down).min(max)
            }
            // Still counting, or an attempt that was already in flight when it opened.
            _ => {
                return Breaker {
                    consecutive_failures: failures,
                    ..self
                }
            }
        };
        Breaker {
            consecutive_failures: failures,
            open_until: Some(now.saturating_add(cool_down)),
            cool_down_ms: cool_down,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CONFIG: BreakerConfig = BreakerConfig {
        failures: 3,
        cool_down: Duration::from_secs(30),
        max_cool_down: Duration::from_secs(100),
    };

    #[test]
    fn opens_probes_doubles_and_closes() {
        let t = 1_000_000;
        let mut b = Breaker::default();
        for i in 1..3 {
            b = b.after(&CONFIG, Outcome::Retryable, t);
            assert_eq!(
                (b.consecutive_failures, b.state(t)),
                (i, BreakerState::Closed)
            );
        }
        b = b.after(&CONFIG, Outcome::Retryable, t);
        assert_eq!(b.state(t), BreakerState::Open { until: t + 30_000 });
        assert_eq!(
            b.state(t + 29_999),
            BreakerState::Open { until: t + 30_000 }
        );
        assert_eq!(b.state(t + 30_000), BreakerState::HalfOpen);
        // The probe fails: open again for 60 s, then 100 s (capped), ...
        b = b.after(&CONFIG, Outcome::Retryable, t + 30_000);
        assert_eq!(
            b.state(t + 30_000),
            BreakerState::Open { until: t + 90_000 }
        );
        b = b.after(&CONFIG, Outcome::Retryable, t + 90_000);
        assert_eq!(
            b.state(t + 90_000),
            BreakerState::Open { until: t + 190_000 }
        );
        // ... until a probe succeeds.
        b = b.after(&CONFIG, Outcome::Success, t + 190_000);
        assert_eq!(b, Breaker::default());
        assert_eq!(b.state(t + 190_000), BreakerState::Closed);
    }

    #[test]
    fn a_permanent_answer_means_the_subscriber_is_up() {
        let b = Breaker {
            consecutive_failures: 2,
            ..Breaker::default()
        };
        assert_eq!(b.after(&CONFIG, Outcome::Permanent, 0), Breaker::default());
    }

    /// Five attempts in flight when a worker crashed are no sign the subscriber is down, nor up.
    #[test]
    fn lost_attempts_neither_open_nor_close_it() {
        let mut b = Breaker {
            consecutive_failures: 2,
            ..Breaker::default()
        };
        for _ in 0..5 {
            b = b.after(&CONFIG, Outcome::Lost, 0);
        }
        assert_eq!(b.consecutive_failures, 2);
        assert_eq!(b.state(0), BreakerState::Closed);
        let open = Breaker::default()
            .after(&CONFIG, Outcome::Retryable, 0)
            .after(&CONFIG, Outcome::Retryable, 0)
            .after(&CONFIG, Outcome::Retryable, 0);
        assert_eq!(open.after(&CONFIG, Outcome::Lost, 40_000), open);
    }

    #[test]
    fn late_failures_while_open_do_not_extend_it() {
        let open = Breaker::default()
            .after(&CONFIG, Outcome::Retryable, 0)
            .after(&CONFIG, Outcome::Retryable, 0)
            .after(&CONFIG, Outcome::Retryable, 0);
        let late = open.after(&CONFIG, Outcome::Retryable, 1_000);
        assert_eq!(late.open_until, open.open_until);
        assert_eq!(late.consecutive_failures, 4);
    }

    proptest! {
        #[test]
        fn the_cool_down_never_exceeds_its_cap(outcomes in proptest::collection::vec(0u8..4, 0..60), step in 0i64..200_000) {
            let mut b = Breaker::default();
            let mut now = 0;
            for o in outcomes {
                let outcome = [Outcome::Success, Outcome::Retryable, Outcome::Permanent, Outcome::Lost][o as usize];
                b = b.after(&CONFIG, outcome, now);
                if let Some(until) = b.open_until {
                    prop_assert!(until - now <= 100_000);
                }
                now += step;
            }
        }
    }
}
