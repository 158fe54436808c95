//! The retry decision: capped exponential backoff with deterministic jitter, inside an attempt
//! budget and a delivery window. "Try again" without a budget is a bug, so every path through
//! [`RetryPolicy::decide`] either delivers, reschedules at a time inside the window, or names
//! the reason the delivery is dead.

use std::fmt;
use std::time::Duration;

use crate::{Outcome, UnixMs};

/// How the nominal delay is spread so a failed batch does not come back at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in `[d/2, d]`: keeps most of the backoff while spreading the herd.
    Equal,
    /// Uniform in `[0, d]`.
    Full,
    /// Exactly `d`.
    None,
}

impl Jitter {
    pub const ALL: [Jitter; 3] = [Jitter::Equal, Jitter::Full, Jitter::None];
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "equal" => Jitter::Equal,
            "full" => Jitter::Full,
            "none" => Jitter::None,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Jitter::Equal => "equal",
            Jitter::Full => "full",
            Jitter::None => "none",
        }
    }

    /// The smallest and largest delay this jitter can turn `nominal` into.
    pub fn bounds(self, nominal: Duration) -> (Duration, Duration) {
        match self {
            Jitter::Equal => (nominal / 2, nominal),
            Jitter::Full => (Duration::ZERO, nominal),
            Jitter::None => (nominal, nominal),
        }
    }
}

/// Why a delivery ended without being delivered. The names are an API contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadReason {
    PermanentFailure,
    AttemptsExhausted,
    WindowExpired,
    NextDelayExceedsWindow,
    SubscriptionRevoked,
}

impl DeadReason {
    pub const ALL: [DeadReason; 5] = [
        DeadReason::PermanentFailure,
        DeadReason::AttemptsExhausted,
        DeadReason::WindowExpired,
        DeadReason::NextDelayExceedsWindow,
        DeadReason::SubscriptionRevoked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::PermanentFailure => "permanent_failure",
            DeadReason::AttemptsExhausted => "attempts_exhausted",
            DeadReason::WindowExpired => "window_expired",
            DeadReason::NextDelayExceedsWindow => "next_delay_exceeds_window",
            DeadReason::SubscriptionRevoked => "subscription_revoked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an attempt leaves its delivery: delivered, due again at `run_at`, or dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Delivered,
    Reschedule { run_at: UnixMs },
    Dead(DeadReason),
}

/// An attempt that just ended, as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Attempted<'a> {
    /// Seeds the jitter, so a delivery's schedule is the same wherever it is computed.
    pub delivery_id: &'a str,
    pub outcome: Outcome,
    /// Its number, 1-based, counted within the current budget.
    pub number: u32,
    /// When the delivery window opened: the first time the delivery was seen, or the moment a
    /// replay released it.
    pub window_start: UnixMs,
    /// When it ended.
    pub now: UnixMs,
    /// The subscriber's own `Retry-After`.
    pub retry_after: Option<Duration>,
}

/// A policy that could never deliver anything, refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("retry.max_attempts must be at least 1")]
    MaxAttemptsZero,
    #[error("retry.base_delay must be greater than zero")]
    BaseDelayZero,
    #[error("retry.base_delay must not exceed retry.max_delay")]
    BaseAboveMax,
    #[error("retry.delivery_window must be greater than zero")]
    WindowZero,
}

impl PolicyError {
    /// The setting at fault.
    pub fn key(&self) -> &'static str {
        match self {
            PolicyError::MaxAttemptsZero => "retry.max_attempts",
            PolicyError::BaseDelayZero | PolicyError::BaseAboveMax => "retry.base_delay",
            PolicyError::WindowZero => "retry.delivery_window",
        }
    }
}

/// The retry budget of every delivery. Built only through [`RetryPolicy::new`], so an
/// impossible policy (no attempts, a base above its cap) can never reach the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    base_delay: Duration,
    max_delay: Duration,
    max_attempts: u32,
    delivery_window: Duration,
    jitter: Jitter,
}

impl RetryPolicy {
    pub fn new(
        base_delay: Duration,
        max_delay: Duration,
        max_attempts: u32,
        delivery_window: Duration,
        jitter: Jitter,
    ) -> Result<Self, PolicyError> {
        if max_attempts == 0 {
            return Err(PolicyError::MaxAttemptsZero);
        }
        if base_delay.is_zero() {
            return Err(PolicyError::BaseDelayZero);
        }
        if base_delay > max_delay {
            return Err(PolicyError::BaseAboveMax);
        }
        if delivery_window.is_zero() {
            return Err(PolicyError::WindowZero);
        }
        Ok(Self {
            base_delay,
            max_delay,
            max_attempts,
            delivery_window,
            jitter,
        })
    }

    pub fn base_delay(&self) -> Duration {
        self.base_delay
    }
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
    pub fn delivery_window(&self) -> Duration {
        self.delivery_window
    }
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// `min(base_delay * 2^(n-1), max_delay)` for the wait after the n-th failed attempt.
    pub fn nominal_delay(&self, failed_attempt: u32) -> Duration {
        let doublings = failed_attempt.saturating_sub(1).min(63);
        let base = self.base_delay.as_millis();
        let max = self.max_delay.as_millis();
        let ms = base
            .checked_shl(doublings)
            .filter(|v| v >> doublings == base);
        Duration::from_millis(u64::try_from(ms.map_or(max, |v| v.min(max))).unwrap_or(u64::MAX))
    }

    /// The nominal delay with jitter applied. The jitter is a hash of (delivery id, attempt), so
    /// a failed batch spreads out, yet a restart or a re-computation gives the same answer.
    pub fn jittered_delay(&self, delivery_id: &str, failed_attempt: u32) -> Duration {
        let nominal = self.nominal_delay(failed_attempt);
        let (low, high) = self.jitter.bounds(nominal);
        let span = u64::try_from((high - low).as_millis()).unwrap_or(u64::MAX);
        if span == 0 {
            return low;
        }
        let h = fnv1a64(delivery_id.as_bytes(), failed_attempt);
        low + Duration::from_millis(h % (span + 1))
    }

    /// Where `attempt` leaves its delivery. A retry is no earlier than the subscriber's
    /// `Retry-After` asks (clamped to `max_delay`), and always inside the window.
    pub fn decide(&self, attempt: &Attempted<'_>) -> Transition {
        let Attempted {
            delivery_id,
            outcome,
            number: attempt,
            window_start,
            now,
            retry_after,
        } = *attempt;
        match outcome {
            Outcome::Success => Transition::Delivered,
            Outcome::Permanent => Transition::Dead(DeadReason::PermanentFailure),
            // A lost attempt spends its place in the budget like a retryable failure.
            Outcome::Retryable | Outcome::Lost => {
                if attempt >= self.max_attempts {
                    return Transition::Dead(DeadReason::AttemptsExhausted);
                }
                let window_end = window_start.saturating_add(duration_ms(self.delivery_window));
                if now >= window_end {
                    return Transition::Dead(DeadReason::WindowExpired);
                }
                let asked = retry_after.unwrap_or_default().min(self.max_delay);
                let delay = self.jittered_delay(delivery_id, attempt).max(asked);
                let run_at = now.saturating_add(duration_ms(delay));
                if run_at > window_end {
                    return Transition::Dead(DeadReason::NextDelayExceedsWindow);
                }
                Transition::Reschedule { run_at }
            }
        }
    }
}

/// A duration as a span of [`UnixMs`](crate::UnixMs), in whole milliseconds: saturating, as a
/// duration past `i64::MAX` ms (292 million years) means "never" anyway.
pub fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// FNV-1a over the id, a separator and the attempt number: cheap, stable across platforms and
/// releases (unlike std's SipHash keys), and well enough spread for jitter.
/// FNV-1a of `id:salt`: the deterministic stand-in for randomness (retry jitter by delivery
/// and attempt, breaker jitter by subscriber and opening time).
pub(crate) fn fnv1a64(id: &[u8], salt: impl std::fmt::Display) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let salt = salt.to_string();
    for b in id.iter().chain(b":").chain(salt.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(jitter: Jitter) -> RetryPolicy {
        RetryPolicy::new(
            Duration::from_secs(2),
            Duration::from_secs(300),
            6,
            Duration::from_secs(1800),
            jitter,
        )
        .unwrap()
    }

    #[test]
    fn impossible_policies_are_refused() {
        let s = Duration::from_secs;
        let j = Jitter::Equal;
        assert_eq!(
            RetryPolicy::new(s(1), s(2), 0, s(9), j),
            Err(PolicyError::MaxAttemptsZero)
        );
        assert_eq!(
            RetryPolicy::new(s(3), s(2), 1, s(9), j),
            Err(PolicyError::BaseAboveMax)
        );
        assert_eq!(
            RetryPolicy::new(s(0), s(2), 1, s(9), j),
            Err(PolicyError::BaseDelayZero)
        );
        assert_eq!(
            RetryPolicy::new(s(1), s(2), 1, s(0), j),
            Err(PolicyError::WindowZero)
        );
    }

    #[test]
    fn nominal_delay_doubles_then_caps() {
        let p = policy(Jitter::None);
        let secs: Vec<u64> = (1..=10).map(|n| p.nominal_delay(n).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(p.nominal_delay(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn the_four_terminal_paths() {
        let p = policy(Jitter::None);
        let t0 = 1_000_000;
        assert_eq!(
            p.decide(&Attempted {
                delivery_id: "d",
                outcome: Outcome::Success,
                number: 1,
                window_start: t0,
                now: t0,
                retry_after: None
            }),
            Transition::Delivered
        );
        assert_eq!(
            p.decide(&Attempted {
                delivery_id: "d",
                outcome: Outcome::Permanent,
                number: 1,
                window_start: t0,
                now: t0,
                retry_after: None
            }),
            Transition::Dead(DeadReason::PermanentFailure)
        );
        assert_eq!(
            p.decide(&Attempted {
                delivery_id: "d",
                outcome: Outcome::Retryable,
                number: 1,
                window_start: t0,
                now: t0 + 10,
                retry_after: None
            }),
            Transition::Reschedule {
                run_at: t0 + 10 + 2000
            }
        );
        assert_eq!(
            p.decide(&Attempted {
                delivery_id: "d",
                outcome: Outcome::Retryable,
                number: 6,
                window_start: t0,
                now: t0,
                retry_after: None
            }),
            Transition::Dead(DeadReason::AttemptsExhausted)
        );
        assert_eq!(
            p.decide(&Attempted {
                delivery_id: "d",
                outcome: Outcome::Retryable,
                number: 2,
                window_start: t0,
                now: t0 + 1_800_000,
                retry_after: None
            }),
            Transition::Dead(DeadReason::WindowExpired)
        );
        // 4 s of delay would end 1 s past the window.
        assert_eq!(
            p.decide(&Attempted {
                delivery_id: "d",
                outcome: Outcome::Retryable,
                number: 2,
                window_start: t0,
                now: t0 + 1_797_000,
                retry_after: None
            }),
            Transition::Dead(DeadReason::NextDelayExceedsWindow)
        );
    }

    #[test]
    fn retry_after_is_honoured_clamped_and_windowed() {
        let p = policy(Jitter::None);
        let t0 = 1_000_000;
        let at = |asked: u64, now: i64| {
            p.decide(&Attempted {
                delivery_id: "d",
                outcome: Outcome::Retryable,
                number: 1,
                window_start: t0,
                now,
                retry_after: Some(Duration::from_secs(asked)),
            })
        };
        assert_eq!(
            at(120, t0),
            Transition::Reschedule {
                run_at: t0 + 120_000
            }
        );
        // Shorter than our own backoff: ours wins.
        assert_eq!(at(1, t0), Transition::Reschedule { run_at: t0 + 2_000 });
        // Longer than max_delay: clamped.
        assert_eq!(
            at(86_400, t0),
            Transition::Reschedule {
                run_at: t0 + 300_000
            }
        );
        // Past the window: dead, as any other delay would be.
        assert_eq!(
            at(300, t0 + 1_600_000),
            Transition::Dead(DeadReason::NextDelayExceedsWindow)
        );
    }

    #[test]
    fn reason_names_round_trip() {
        for r in DeadReason::ALL {
            assert_eq!(DeadReason::parse(r.as_str()), Some(r));
        }
        assert_eq!(DeadReason::parse("bored"), None);
    }

    fn any_policy() -> impl Strategy<Value = RetryPolicy> {
        (
            1u64..120_000,
            0u64..3_600_000,
            1u32..20,
            1u64..86_400_000,
            prop_oneof![Just(Jitter::Equal), Just(Jitter::Full), Just(Jitter::None)],
        )
            .prop_map(|(base, extra, attempts, window, jitter)| {
                RetryPolicy::new(
                    Duration::from_millis(base),
                    Duration::from_millis(base + extra),
                    attempts,
                    Duration::from_millis(window),
                    jitter,
                )
                .unwrap()
            })
    }

    proptest! {
        #[test]
        fn delay_never_exceeds_max_and_stays_in_jitter_bounds(
            p in any_policy(), id in "[a-z0-9:_-]{1,40}", n in 1u32..64
        ) {
            let nominal = p.nominal_delay(n);
            prop_assert!(nominal <= p.max_delay());
            prop_assert!(nominal >= p.base_delay());
            let d = p.jittered_delay(&id, n);
            let (low, high) = p.jitter().bounds(nominal);
            prop_assert!(d >= low && d <= high, "{d:?} outside {low:?}..={high:?}");
            prop_assert!(d <= p.max_delay());
        }

        #[test]
        fn jitter_is_deterministic(p in any_policy(), id in ".{1,40}", n in 1u32..64) {
            prop_assert_eq!(p.jittered_delay(&id, n), p.jittered_delay(&id, n));
        }

        #[test]
        fn a_reschedule_never_leaves_the_window(
            p in any_policy(), id in "[a-z0-9]{1,20}", n in 1u32..30,
            start in 0i64..1_000_000_000_000, elapsed in 0i64..100_000_000
        ) {
            let now = start + elapsed;
            match p.decide(&Attempted { delivery_id: &id, outcome: Outcome::Retryable, number: n, window_start: start, now, retry_after: None }) {
                Transition::Reschedule { run_at } => {
                    prop_assert!(n < p.max_attempts());
                    prop_assert!(run_at >= now);
                    prop_assert!(run_at <= start + duration_ms(p.delivery_window()));
                    prop_assert!(run_at - now <= duration_ms(p.max_delay()));
                }
                Transition::Dead(r) => prop_assert!(matches!(
                    r,
                    DeadReason::AttemptsExhausted
                        | DeadReason::WindowExpired
                        | DeadReason::NextDelayExceedsWindow
                )),
                Transition::Delivered => prop_assert!(false, "a failure was delivered"),
            }
        }

        /// Following the decisions from the first attempt always ends, within the budget.
        #[test]
        fn retry_after_never_breaks_the_bounds(
            p in any_policy(), id in "[a-z0-9]{1,20}", n in 1u32..30,
            start in 0i64..1_000_000_000, elapsed in 0i64..100_000_000, asked in 0u64..10_000_000
        ) {
            let now = start + elapsed;
            let asked = Duration::from_millis(asked);
            if let Transition::Reschedule { run_at } = p.decide(&Attempted { delivery_id: &id, outcome: Outcome::Retryable, number: n, window_start: start, now, retry_after: Some(asked) }) {
                prop_assert!(run_at - now >= duration_ms(asked.min(p.max_delay())));
                prop_assert!(run_at - now <= duration_ms(p.max_delay()));
                prop_assert!(run_at <= start + duration_ms(p.delivery_window()));
            }
        }

        #[test]
        fn every_delivery_ends(p in any_policy(), id in "[a-z0-9]{1,20}", start in 0i64..1_000_000_000) {
            let mut now = start;
            let mut attempt = 1;
            loop {
                match p.decide(&Attempted { delivery_id: &id, outcome: Outcome::Retryable, number: attempt, window_start: start, now, retry_after: None }) {
                    Transition::Reschedule { run_at } => { now = run_at; attempt += 1; }
                    Transition::Dead(_) => break,
                    Transition::Delivered => unreachable!(),
                }
                prop_assert!(attempt <= p.max_attempts());
            }
        }
    }
}
