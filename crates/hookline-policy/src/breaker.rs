//! The per-subscriber circuit breaker, as a pure state machine: after `failures` consecutive
//! retryable failures a subscriber is open for a cool-down (doubling while it keeps failing,
//! capped); while open its deliveries wait without spending attempts; once the cool-down is
//! over one probe attempt decides between closed and open again.
//!
//! Once a probe closes it, the subscriber starts slowly (TCP's slow start): its allowance of
//! deliveries in flight is 1, one more after every answer that shows it up, so it doubles with
//! each round of answers until the claim finds it at the subscriber's cap. A subscriber that
//! just came back, or a host whose subscribers all did, gets one probe's worth of traffic, then
//! two, four, ..., not its whole cap at once.
//!
//! Each open period is jittered by a hash of the subscriber and the time it opened: subscribers
//! behind one host fail together, and without jitter they would half-open together and probe
//! (then flood) it at one instant when it comes back.

use std::time::Duration;

use crate::retry::{duration_ms, fnv1a64};
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
    /// Slow start after it closed: how many deliveries the subscriber may have in flight (1
    /// after the answer that closed it, one more after each answer since). `None`: not ramping,
    /// its cap applies. Only the claim knows the cap in force (a subscriber's own or the
    /// default), so the claim takes the smaller of the two and ends the ramp (`None`) once the
    /// allowance reaches it; the breaker only counts.
    pub allowance: Option<u32>,
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

    /// The breaker of `subscriber` after an attempt ended with `outcome` at `now`. Any answer
    /// that is not a retryable failure (a success, or a permanent 4xx) shows the subscriber is
    /// up: closed, with an allowance of 1 if it was open or half-open (slow start), one more if
    /// it was ramping. A retryable failure while ramping leaves the allowance where it is;
    /// opening ends it (the next close starts again from 1). A lost attempt (the worker
    /// crashed) says nothing about the subscriber: no change. An open period is [`jittered`]
    /// (the nominal cool-down is what doubles).
    pub fn after(
        self,
        config: &BreakerConfig,
        subscriber: &str,
        outcome: Outcome,
        now: UnixMs,
    ) -> Breaker {
        if outcome == Outcome::Lost {
            return self;
        }
        if outcome != Outcome::Retryable {
            let allowance = match self.open_until {
                Some(_) => Some(1),
                None => self.allowance.map(|a| a.saturating_add(1)),
            };
            return Breaker {
                allowance,
                ..Breaker::default()
            };
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
            open_until: Some(now.saturating_add(jittered(cool_down, max, subscriber, now))),
            cool_down_ms: cool_down,
            allowance: None,
        }
    }
}

/// The open period for a nominal `cool_down`: spread over 0.8 to 1.2 times it (never past
/// `max`, so at the cap 0.8 to 1.0 times it) by a hash of the subscriber and the time it
/// opened. Deterministic, so a re-computation agrees; different for subscribers that open at
/// the same instant, so they do not half-open at the same instant.
fn jittered(cool_down: i64, max: i64, subscriber: &str, opened_at: UnixMs) -> i64 {
    let fifth = cool_down / 5;
    let high = cool_down.saturating_add(fifth).min(max.max(cool_down));
    let low = cool_down.saturating_sub(fifth).min(high);
    let span = high.abs_diff(low);
    low.saturating_add_unsigned(fnv1a64(subscriber.as_bytes(), opened_at) % (span + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: &str = "subscriber-7";

    const CONFIG: BreakerConfig = BreakerConfig {
        failures: 3,
        cool_down: Duration::from_secs(30),
        max_cool_down: Duration::from_secs(100),
    };

    /// The open period it was given at `now`, checked to lie within 20% of `nominal` (and the
    /// cap).
    fn open_for(b: &Breaker, now: UnixMs, nominal: i64) -> i64 {
        let BreakerState::Open { until } = b.state(now) else {
            panic!("not open: {b:?}");
        };
        let period = until - now;
        let cap = duration_ms(CONFIG.max_cool_down);
        assert!(
            period >= nominal * 4 / 5 && period <= (nominal * 6 / 5).min(cap),
            "{period} ms for a {nominal} ms cool-down"
        );
        assert_eq!(
            b.cool_down_ms, nominal,
            "the nominal cool-down is what doubles"
        );
        period
    }

    #[test]
    fn opens_probes_doubles_and_closes() {
        let t = 1_000_000;
        let mut b = Breaker::default();
        for i in 1..3 {
            b = b.after(&CONFIG, S, Outcome::Retryable, t);
            assert_eq!(
                (b.consecutive_failures, b.state(t)),
                (i, BreakerState::Closed)
            );
        }
        b = b.after(&CONFIG, S, Outcome::Retryable, t);
        let open = open_for(&b, t, 30_000);
        assert_eq!(
            b.state(t + open - 1),
            BreakerState::Open { until: t + open }
        );
        assert_eq!(b.state(t + open), BreakerState::HalfOpen);
        // The probe fails: open again for about 60 s, then about 100 s (the cap), ...
        let t = t + open;
        b = b.after(&CONFIG, S, Outcome::Retryable, t);
        let open = open_for(&b, t, 60_000);
        let t = t + open;
        b = b.after(&CONFIG, S, Outcome::Retryable, t);
        let open = open_for(&b, t, 100_000);
        // ... until a probe succeeds: closed, starting slowly.
        b = b.after(&CONFIG, S, Outcome::Success, t + open);
        assert_eq!(
            b,
            Breaker {
                allowance: Some(1),
                ..Breaker::default()
            }
        );
        assert_eq!(b.state(t + open), BreakerState::Closed);
    }

    /// After the probe: 1 in flight, one more per answer (so 1, 2, 4, 8 per round of answers);
    /// a retryable failure keeps it; opening again ends it and the next close starts from 1.
    #[test]
    fn a_closed_breaker_ramps_up_from_one() {
        let t = 1_000_000;
        let open = (0..3).fold(Breaker::default(), |b, _| {
            b.after(&CONFIG, S, Outcome::Retryable, t)
        });
        let half_open = open.open_until.unwrap();
        let mut b = open.after(&CONFIG, S, Outcome::Success, half_open);
        assert_eq!(b.allowance, Some(1));
        // Rounds of as many answers as the allowance: it doubles.
        let mut rounds = vec![];
        for _ in 0..4 {
            let n = b.allowance.unwrap();
            rounds.push(n);
            for _ in 0..n {
                b = b.after(&CONFIG, S, Outcome::Success, half_open + 1);
            }
        }
        assert_eq!(rounds, [1, 2, 4, 8]);
        // A permanent answer shows it up too.
        b = b.after(&CONFIG, S, Outcome::Permanent, half_open + 2);
        assert_eq!(b.allowance, Some(17));
        // A retryable failure keeps it where it is (and counts), as does a lost attempt.
        b = b.after(&CONFIG, S, Outcome::Retryable, half_open + 3);
        b = b.after(&CONFIG, S, Outcome::Lost, half_open + 3);
        assert_eq!((b.allowance, b.consecutive_failures), (Some(17), 1));
        // Opening again ends the ramp; the next close starts it from 1 again.
        b = b.after(&CONFIG, S, Outcome::Retryable, half_open + 4);
        b = b.after(&CONFIG, S, Outcome::Retryable, half_open + 4);
        assert!(matches!(b.state(half_open + 4), BreakerState::Open { .. }));
        assert_eq!(b.allowance, None);
        let b = b.after(&CONFIG, S, Outcome::Success, b.open_until.unwrap());
        assert_eq!(b.allowance, Some(1));
        // A subscriber that never opened is not ramping, whatever it answers.
        let healthy = Breaker::default()
            .after(&CONFIG, S, Outcome::Retryable, t)
            .after(&CONFIG, S, Outcome::Success, t);
        assert_eq!(healthy, Breaker::default());
    }

    /// 200 subscribers behind one host open at the same instant: their half-open times spread
    /// over the whole +-20%, not one instant.
    #[test]
    fn subscribers_that_open_together_half_open_apart() {
        let t = 1_000_000;
        let until: Vec<i64> = (0..200)
            .map(|i| {
                let id = format!("sub-{i}");
                let mut b = Breaker::default();
                for _ in 0..3 {
                    b = b.after(&CONFIG, &id, Outcome::Retryable, t);
                }
                b.open_until.unwrap() - t
            })
            .collect();
        let (min, max) = (until.iter().min().unwrap(), until.iter().max().unwrap());
        assert!(*min < 25_000 && *max > 35_000, "{min}..{max}");
        let mut distinct = until.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 190, "{} distinct times", distinct.len());
        // The same subscriber opening at the same time gets the same period: reproducible.
        let again = Breaker::default()
            .after(&CONFIG, "sub-0", Outcome::Retryable, t)
            .after(&CONFIG, "sub-0", Outcome::Retryable, t)
            .after(&CONFIG, "sub-0", Outcome::Retryable, t);
        assert_eq!(again.open_until, Some(t + until[0]));
    }

    #[test]
    fn a_permanent_answer_means_the_subscriber_is_up() {
        let b = Breaker {
            consecutive_failures: 2,
            ..Breaker::default()
        };
        assert_eq!(
            b.after(&CONFIG, S, Outcome::Permanent, 0),
            Breaker::default()
        );
    }

    /// Five attempts in flight when a worker crashed are no sign the subscriber is down, nor up.
    #[test]
    fn lost_attempts_neither_open_nor_close_it() {
        let mut b = Breaker {
            consecutive_failures: 2,
            ..Breaker::default()
        };
        for _ in 0..5 {
            b = b.after(&CONFIG, S, Outcome::Lost, 0);
        }
        assert_eq!(b.consecutive_failures, 2);
        assert_eq!(b.state(0), BreakerState::Closed);
        let open = Breaker::default()
            .after(&CONFIG, S, Outcome::Retryable, 0)
            .after(&CONFIG, S, Outcome::Retryable, 0)
            .after(&CONFIG, S, Outcome::Retryable, 0);
        assert_eq!(open.after(&CONFIG, S, Outcome::Lost, 40_000), open);
    }

    #[test]
    fn late_failures_while_open_do_not_extend_it() {
        let open = Breaker::default()
            .after(&CONFIG, S, Outcome::Retryable, 0)
            .after(&CONFIG, S, Outcome::Retryable, 0)
            .after(&CONFIG, S, Outcome::Retryable, 0);
        let late = open.after(&CONFIG, S, Outcome::Retryable, 1_000);
        assert_eq!(late.open_until, open.open_until);
        assert_eq!(late.consecutive_failures, 4);
    }

    proptest! {
        /// The ramp's arithmetic over any sequence of outcomes: no allowance while open (nor
        /// half-open); an answer that closes an open breaker starts it at 1; an answer while
        /// ramping adds exactly one; a retryable failure that does not open it, or a lost
        /// attempt, leaves it where it was.
        #[test]
        fn the_allowance_starts_at_one_and_grows_by_one_per_answer(outcomes in proptest::collection::vec(0u8..4, 0..80), step in 0i64..50_000) {
            let mut b = Breaker::default();
            let mut now = 0;
            for o in outcomes {
                let outcome = [Outcome::Success, Outcome::Retryable, Outcome::Permanent, Outcome::Lost][o as usize];
                let before = b;
                b = b.after(&CONFIG, S, outcome, now);
                if b.open_until.is_some() {
                    prop_assert_eq!(b.allowance, None);
                }
                match outcome {
                    Outcome::Lost => prop_assert_eq!(b, before),
                    Outcome::Retryable if b.open_until == before.open_until => {
                        prop_assert_eq!(b.allowance, before.allowance)
                    }
                    Outcome::Retryable => prop_assert_eq!(b.allowance, None),
                    _ if before.open_until.is_some() => prop_assert_eq!(b.allowance, Some(1)),
                    _ => prop_assert_eq!(b.allowance, before.allowance.map(|a| a + 1)),
                }
                now += step;
            }
        }

        #[test]
        fn the_cool_down_never_exceeds_its_cap(outcomes in proptest::collection::vec(0u8..4, 0..60), step in 0i64..200_000) {
            let mut b = Breaker::default();
            let mut now = 0;
            for o in outcomes {
                let outcome = [Outcome::Success, Outcome::Retryable, Outcome::Permanent, Outcome::Lost][o as usize];
                let before = b;
                b = b.after(&CONFIG, S, outcome, now);
                if let Some(until) = b.open_until {
                    prop_assert!(until - now <= 100_000);
                    if b.open_until != before.open_until {
                        // Just opened: within a fifth of the nominal cool-down.
                        prop_assert!(until - now >= b.cool_down_ms * 4 / 5);
                        prop_assert!(until - now <= b.cool_down_ms * 6 / 5);
                    }
                }
                now += step;
            }
        }

        /// Any subscriber, any time, any cool-down: the open period lies in 0.8 to 1.2 times
        /// the nominal cool-down, never past the cap, and is the same when computed again.
        #[test]
        fn the_jitter_spreads_within_a_fifth_and_the_cap(id in "[a-z0-9-]{1,40}", now in 0i64..4_000_000_000_000, cool in 1i64..10_000_000, cap in 1i64..10_000_000) {
            let cool = cool.min(cap);
            let period = jittered(cool, cap, &id, now);
            prop_assert!(period >= cool - cool / 5);
            prop_assert!(period <= cool + cool / 5);
            prop_assert!(period <= cap);
            prop_assert_eq!(period, jittered(cool, cap, &id, now));
        }
    }
}
