//! Reacting to slowness, not only to failures. A destination that hangs until the attempt
//! timeout fails only when the timeout fires; by then it may have taken many slots. So the
//! dispatcher watches how long each subscriber's attempts are in flight, compared with how fast
//! that subscriber usually answers: once one of its attempts has been in flight far longer
//! (`slow_after`, or four times its usual answer time if that is longer), the subscriber is a
//! suspect and gets no new slot until the slow attempt ends. Its limit is, in effect, the one
//! slot it is already holding; a quick answer lifts it. The same threshold moves the slow attempt
//! itself out of the dispatcher's slots (see [`crate::slots`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How much a new answer time moves a subscriber's usual answer time.
const SMOOTHING: f64 = 0.2;
/// "Far longer than usual".
const SLOW_FACTOR: f64 = 4.0;

#[derive(Debug, Default)]
struct Watch {
    /// When each of its attempts in flight started.
    in_flight: Vec<Instant>,
    /// Its usual answer time, smoothed; none until it has answered once.
    usual_ms: Option<f64>,
}

#[derive(Debug)]
pub struct Slowness {
    slow_after: Duration,
    subscribers: HashMap<String, Watch>,
}

impl Slowness {
    pub fn new(slow_after: Duration) -> Self {
        Self {
            slow_after,
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

    /// An attempt that started at `started` ended after `took`.
    pub fn finished(&mut self, subscriber: &str, started: Instant, took: Duration) {
        let Some(watch) = self.subscribers.get_mut(subscriber) else {
            return;
        };
        if let Some(i) = watch.in_flight.iter().position(|t| *t == started) {
            watch.in_flight.swap_remove(i);
        }
        let ms = took.as_secs_f64() * 1000.0;
        watch.usual_ms = Some(match watch.usual_ms {
            Some(usual) => usual + SMOOTHING * (ms - usual),
            None => ms,
        });
    }

    fn threshold(&self, watch: &Watch) -> Duration {
        let usual = watch.usual_ms.map_or(Duration::ZERO, |ms| {
            Duration::from_secs_f64(SLOW_FACTOR * ms / 1000.0)
        });
        self.slow_after.max(usual)
    }

    /// How long an attempt to this subscriber may be in flight before it is far slower than
    /// usual.
    pub fn patience(&self, subscriber: &str) -> Duration {
        self.subscribers
            .get(subscriber)
            .map_or(self.slow_after, |w| self.threshold(w))
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
        let mut s = Slowness::new(Duration::from_secs(1));
        s.started("hangs", t0);
        s.started("fast", t0);
        s.finished("fast", t0, Duration::from_millis(5));
        assert!(s.suspects(t0 + Duration::from_millis(900)).is_empty());
        assert_eq!(s.suspects(t0 + Duration::from_millis(1_100)), ["hangs"]);
        // The slow attempt ends (a timeout): no longer holding a slot, no longer a suspect.
        s.finished("hangs", t0, Duration::from_secs(10));
        assert!(s.suspects(t0 + Duration::from_secs(11)).is_empty());
    }

    #[test]
    fn slow_is_relative_to_how_a_subscriber_usually_answers() {
        let t0 = Instant::now();
        let mut s = Slowness::new(Duration::from_secs(1));
        // Usually 2 s: 4 x 2 s = 8 s before an attempt counts as far slower than usual.
        s.started("steady", t0);
        s.finished("steady", t0, Duration::from_secs(2));
        s.started("steady", t0);
        assert_eq!(s.patience("steady"), Duration::from_secs(8));
        assert_eq!(s.patience("never seen"), Duration::from_secs(1));
        assert!(s.suspects(t0 + Duration::from_secs(7)).is_empty());
        assert_eq!(s.suspects(t0 + Duration::from_secs(9)), ["steady"]);
    }
}
