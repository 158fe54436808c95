//! What one process did in the last minute, for the capacity model: the attempts it completed
//! (first or retry, failed or not, answered or not) and how busy its delivery slots were, in
//! one-second buckets of the injected clock. The dispatcher writes it; the `hookline` crate's
//! capacity model records it in the store and sums every process's.

use std::sync::Mutex;

use hookline_policy::{Outcome, UnixMs};
use hookline_store::MeterReading;

use crate::slots::AttemptKind;

/// Seconds a meter covers.
pub const MINUTE_S: i64 = 60;

/// A meter's buckets, one per second of [`MINUTE_S`].
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 60.
const BUCKETS: usize = MINUTE_S as usize;

/// The bucket of `second`.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // In 0..MINUTE_S.
fn bucket(second: i64) -> usize {
    second.rem_euclid(MINUTE_S) as usize
}

/// One process's last minute, in one-second buckets of the injected clock.
pub struct Meter {
    buckets: Mutex<[(i64, MeterReading); BUCKETS]>,
    started_s: i64,
}

impl Meter {
    pub fn new(now: UnixMs) -> Self {
        Meter {
            buckets: Mutex::new([(i64::MIN, MeterReading::default()); BUCKETS]),
            started_s: now.div_euclid(1000),
        }
    }

    fn add(&self, now: UnixMs, reading: MeterReading) {
        let second = now.div_euclid(1000);
        let mut buckets = self.buckets.lock().unwrap();
        let slot = &mut buckets[bucket(second)];
        if slot.0 != second {
            *slot = (second, MeterReading::default());
        }
        slot.1 = slot.1 + reading;
    }

    /// An attempt completed: a first attempt or a retry, with its outcome, answered from its
    /// slot or not.
    pub fn attempt(&self, now: UnixMs, kind: AttemptKind, outcome: Outcome, showing: Showing) {
        let first = kind == AttemptKind::First;
        self.add(
            now,
            MeterReading {
                new_attempts: u64::from(first),
                retry_attempts: u64::from(!first),
                failed_attempts: u64::from(outcome == Outcome::Retryable),
                answered_attempts: u64::from(showing == Showing::Answered),
                ..MeterReading::default()
            },
        );
    }

    /// How busy the delivery slots are now: attempts under way (the slow lane counted in) and
    /// slots held, of how many slots.
    pub fn slots(&self, now: UnixMs, busy: usize, held: usize, total: usize) {
        self.add(
            now,
            MeterReading {
                busy_slot_samples: busy as u64,
                held_slot_samples: held as u64,
                slot_samples: total as u64,
                ..MeterReading::default()
            },
        );
    }

    /// The last minute; in a process younger than that, what it measured so far scaled to a
    /// minute, so a restart does not read as a slowdown.
    pub fn last_minute(&self, now: UnixMs) -> MeterReading {
        let second = now.div_euclid(1000);
        let sum = self
            .buckets
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _)| *s > second - MINUTE_S && *s <= second)
            .fold(MeterReading::default(), |a, (_, r)| a + *r);
        let covered = (second - self.started_s + 1)
            .clamp(1, MINUTE_S)
            .cast_unsigned();
        let scale = |v: u64| v.saturating_mul(MINUTE_S as u64) / covered;
        MeterReading {
            new_attempts: scale(sum.new_attempts),
            retry_attempts: scale(sum.retry_attempts),
            failed_attempts: scale(sum.failed_attempts),
            answered_attempts: scale(sum.answered_attempts),
            ..sum
        }
    }
}

/// Whether a completed attempt shows what the slots can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Showing {
    /// Answered (from a slot or from the slow lane: either way the process did the work).
    Answered,
    /// No answer: a timeout, a shed, a refused connection, a lost attempt.
    Hung,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_keeps_the_last_minute() {
        let t0 = 1_800_000_000_000;
        let m = Meter::new(t0);
        let kind = |s: i64| [AttemptKind::First, AttemptKind::Retry][usize::from(s % 2 != 0)];
        let outcome = |s: i64| [Outcome::Retryable, Outcome::Success][usize::from(s % 4 != 0)];
        for s in 0..120 {
            m.attempt(t0 + s * 1000, kind(s), outcome(s), Showing::Answered);
            m.slots(t0 + s * 1000, 1, 1, 4);
        }
        let r = m.last_minute(t0 + 119_000);
        assert_eq!(
            (r.new_attempts, r.retry_attempts, r.failed_attempts),
            (30, 30, 15)
        );
        assert_eq!((r.busy_slot_samples, r.slot_samples), (60, 240));
        // Ten seconds in: what it saw, scaled to a minute.
        let young = Meter::new(t0);
        for s in 0..10 {
            young.attempt(
                t0 + s * 1000,
                AttemptKind::First,
                Outcome::Success,
                Showing::Hung,
            );
        }
        assert_eq!(young.last_minute(t0 + 9_000).new_attempts, 60);
    }
}
