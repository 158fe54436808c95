//! Reacting to slowness, not only to failures. A destination that hangs until the attempt
//! timeout fails only when the timeout fires; by then it may have taken many slots. So the
//! dispatcher watches how long each subscriber's attempts are in flight, compared with how fast
//! that subscriber usually answers: once one of its attempts has been in flight far longer
//! (`slow_after`, or four times its usual answer time if that is longer), the subscriber is a
//! suspect and gets no new slot until the slow attempt ends. Its limit is, in effect, the one
//! slot it is already holding; a quick answer lifts it. The same threshold moves the slow attempt
//! itself out of the dispatcher's slots (see [`crate::slots`]).
//!
//! Only answers teach it a subscriber's usual answer time. A timeout or a lost connection says
//! nothing about how fast the subscriber answers, and learning from it would make a subscriber
//! that hung once "usually slow" (one 10 s timeout would put its threshold at 40 s, past the
//! timeout itself), so the slow lane and the exclusion would stop protecting anyone from it.
//! For the same reason the threshold stays below the attempt timeout. What a missing answer
//! does say is "expect the next one to hang too": until the subscriber answers again, its
//! attempts go to the slow lane at once and it gets no new slot while one is in flight, so a
//! destination that hangs through timeout after timeout does not hold a slot for `slow_after`
//! on every attempt (with short attempt timeouts, that alone kept healthy first attempts
//! waiting).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::slots::Standing;

/// How much a new answer time moves a subscriber's usual answer time.
const SMOOTHING: f64 = 0.2;
/// "Far longer than usual".
const SLOW_FACTOR: f64 = 4.0;
/// An attempt of a subscriber that answers gives its slot back after four times its usual time,
/// or this long if that is shorter: moving to the slow lane costs nothing to the attempt, and a
/// slot held for `slow_after` by each of thousands of destinations that all stopped answering
/// at once would keep healthy subscribers' first attempts waiting.
const LANE_FLOOR: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct Watch {
    /// When each of its attempts in flight started.
    in_flight: Vec<Instant>,
    /// Its usual answer time, smoothed; none until it has answered once.
    usual_ms: Option<f64>,
    /// Its last attempt got no answer (a timeout, a failed connection).
    unanswered: bool,
}

/// How an attempt ended, as far as slowness is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The subscriber answered (any status) after this long.
    Answered(Duration),
    /// No answer: a timeout, a refused or reset connection, a DNS failure.
    NoAnswer,
}

#[derive(Debug)]
pub struct Slowness {
    slow_after: Duration,
    /// No threshold reaches this: an attempt must be able to turn slow before it times out.
    cap: Duration,
    subscribers: HashMap<String, Watch>,
}

impl Slowness {
    /// `attempt_timeout` caps every threshold at three quarters of it, even `slow_after`: an
    /// attempt must be able to turn slow before it times out.
    pub fn new(slow_after: Duration, attempt_timeout: Duration) -> Self {
        Self {
            slow_after,
            cap: attempt_timeout.mul_f64(0.75),
            subscribers: HashMap::new(),
        }
    }

    pub fn started(&mut self, subscriber: &str, at: Instant) {
        self.subscribers
            .entry(subscriber.to_owned())
            .or_default()
            .in_flight
            .push(at);
    }

    /// An attempt that started at `started` ended.
    pub fn finished(&mut self, subscriber: &str, started: Instant, ended: Ended) {
        let Some(watch) = self.subscribers.get_mut(subscriber) else {
            return;
        };
        if let Some(i) = watch.in_flight.iter().position(|t| *t == started) {
            watch.in_flight.swap_remove(i);
        }
        let Ended::Answered(took) = ended else {
            watch.unanswered = true;
            return;
        };
        watch.unanswered = false;
        let ms = took.as_secs_f64() * 1000.0;
        watch.usual_ms = Some(match watch.usual_ms {
            Some(usual) => usual + SMOOTHING * (ms - usual),
            None => ms,
        });
    }

    fn threshold(&self, watch: &Watch) -> Duration {
        if watch.unanswered {
            return Duration::ZERO;
        }
        let usual = watch.usual_ms.map_or(Duration::ZERO, |ms| {
            Duration::from_secs_f64(SLOW_FACTOR * ms / 1000.0)
        });
        self.slow_after.max(usual).min(self.cap)
    }

    /// How long an attempt to this subscriber may be in flight before it is far slower than
    /// usual.
    pub fn patience(&self, subscriber: &str) -> Duration {
        self.subscribers
            .get(subscriber)
            .map_or(self.slow_after, |w| self.threshold(w))
    }

    /// Whether the subscriber has shown how fast it answers: one that has not (never answered
    /// here, or no answer to its last attempt) holds only a small share of the slots.
    pub fn standing(&self, subscriber: &str) -> Standing {
        match self.subscribers.get(subscriber) {
            Some(w) if w.usual_ms.is_some() && !w.unanswered => Standing::Answering,
            _ => Standing::Unproven,
        }
    }

    /// How fast the subscriber usually answers; zero until it has answered, or when its last
    /// attempt got no answer. What ranks its attempts in a full slow lane.
    pub fn usual(&self, subscriber: &str) -> Duration {
        match self.subscribers.get(subscriber) {
            Some(w) if !w.unanswered => w
                .usual_ms
                .map_or(Duration::ZERO, |ms| Duration::from_secs_f64(ms / 1000.0)),
            _ => Duration::ZERO,
        }
    }

    /// How long an attempt to this subscriber holds its slot before it moves to the slow lane:
    /// four times its usual time (at least [`LANE_FLOOR`]), never past its patience.
    pub fn slot_patience(&self, subscriber: &str) -> Duration {
        let Some(watch) = self.subscribers.get(subscriber) else {
            return self.slow_after;
        };
        let threshold = self.threshold(watch);
        match watch.usual_ms {
            Some(ms) if !watch.unanswered => Duration::from_secs_f64(SLOW_FACTOR * ms / 1000.0)
                .max(LANE_FLOOR)
                .min(threshold),
            _ => threshold,
        }
    }

    /// Subscribers that get no new slot now: one of their attempts is far slower than usual.
    pub fn suspects(&self, now: Instant) -> Vec<String> {
        self.subscribers
            .iter()
            .filter(|(_, w)| {
                let limit = self.threshold(w);
                w.in_flight.iter().any(|t| now.duration_since(*t) > limit)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hanging_subscriber_becomes_a_suspect_and_recovers() {
        let t0 = Instant::now();
        let mut s = Slowness::new(Duration::from_secs(1), Duration::from_secs(10));
        s.started("hangs", t0);
        s.started("fast", t0);
        s.finished("fast", t0, Ended::Answered(Duration::from_millis(5)));
        assert!(s.suspects(t0 + Duration::from_millis(900)).is_empty());
        assert_eq!(s.suspects(t0 + Duration::from_millis(1_100)), ["hangs"]);
        // The slow attempt ends (a timeout): no longer holding a slot, no longer a suspect.
        s.finished("hangs", t0, Ended::NoAnswer);
        assert!(s.suspects(t0 + Duration::from_secs(11)).is_empty());
    }

    #[test]
    fn slow_is_relative_to_how_a_subscriber_usually_answers() {
        let t0 = Instant::now();
        let mut s = Slowness::new(Duration::from_secs(1), Duration::from_secs(20));
        // Usually 2 s: 4 x 2 s = 8 s before an attempt counts as far slower than usual.
        s.started("steady", t0);
        s.finished("steady", t0, Ended::Answered(Duration::from_secs(2)));
        s.started("steady", t0);
        assert_eq!(s.patience("steady"), Duration::from_secs(8));
        assert_eq!(s.patience("never seen"), Duration::from_secs(1));
        assert!(s.suspects(t0 + Duration::from_secs(7)).is_empty());
        assert_eq!(s.suspects(t0 + Duration::from_secs(9)), ["steady"]);
        // Usually 4 s would mean 16 s: capped at three quarters of the 20 s timeout.
        for _ in 0..30 {
            s.finished("steady", t0, Ended::Answered(Duration::from_secs(4)));
        }
        assert_eq!(s.patience("steady"), Duration::from_secs(15));
    }

    /// An attempt holds its slot four times its subscriber's usual time, at least 50 ms and at
    /// most its patience; a subscriber that has not answered is on probation.
    #[test]
    fn an_attempt_holds_its_slot_for_about_its_usual_time() {
        let t0 = Instant::now();
        let mut s = Slowness::new(Duration::from_secs(1), Duration::from_secs(10));
        assert_eq!(s.standing("new"), Standing::Unproven);
        assert_eq!(s.slot_patience("new"), Duration::from_secs(1));
        for (id, usual) in [("fast", 5), ("steady", 40), ("slow", 2_000)] {
            s.started(id, t0);
            s.finished(id, t0, Ended::Answered(Duration::from_millis(usual)));
            assert_eq!(s.standing(id), Standing::Answering);
        }
        assert_eq!(s.slot_patience("fast"), Duration::from_millis(50));
        assert_eq!(s.slot_patience("steady"), Duration::from_millis(160));
        assert_eq!(s.slot_patience("slow"), s.patience("slow"));
        assert_eq!(s.usual("steady"), Duration::from_millis(40));
        assert_eq!(s.usual("new"), Duration::ZERO);
        s.started("fast", t0);
        s.finished("fast", t0, Ended::NoAnswer);
        assert_eq!(s.standing("fast"), Standing::Unproven);
        assert_eq!(s.slot_patience("fast"), Duration::ZERO);
    }

    /// A subscriber that answered fast, then hangs through timeout after timeout: its usual
    /// time stays fast, its first hanging attempt goes to the slow lane after `slow_after`, and
    /// every later one at once; it is excluded from new slots while an attempt hangs, and an
    /// answer ends all that.
    #[test]
    fn timeouts_teach_nothing_and_a_hanging_subscriber_stays_a_suspect() {
        let timeout = Duration::from_secs(10);
        let mut s = Slowness::new(Duration::from_secs(1), timeout);
        let mut t = Instant::now();
        for _ in 0..5 {
            s.started("flaky", t);
            s.finished("flaky", t, Ended::Answered(Duration::from_millis(20)));
        }
        s.started("flaky", t);
        assert_eq!(s.patience("flaky"), Duration::from_secs(1));
        assert!(s.suspects(t + Duration::from_millis(500)).is_empty());
        assert_eq!(s.suspects(t + Duration::from_secs(2)), ["flaky"]);
        s.finished("flaky", t, Ended::NoAnswer);
        for round in 0..5 {
            t += timeout;
            s.started("flaky", t);
            assert_eq!(s.patience("flaky"), Duration::ZERO, "round {round}");
            assert_eq!(
                s.suspects(t + Duration::from_millis(1)),
                ["flaky"],
                "round {round}"
            );
            s.finished("flaky", t, Ended::NoAnswer);
        }
        // Nothing in flight: no suspect. An answer: back to its usual patience.
        assert!(s.suspects(t + timeout).is_empty());
        s.started("flaky", t);
        s.finished("flaky", t, Ended::Answered(Duration::from_millis(20)));
        assert_eq!(s.patience("flaky"), Duration::from_secs(1));
    }
}
