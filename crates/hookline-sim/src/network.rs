//! The simulated subscribers: how each answers, drawn per seed, and what the network saw.

use std::collections::BTreeMap;
use std::time::Duration;

use hookline_policy::AttemptResult;

use crate::prng::Prng;

/// A subscriber's habit, drawn once per seed; each attempt then draws its answer from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 2xx, now and then a 503.
    Healthy,
    /// 2xx or 503, evenly.
    Flaky,
    /// 503 always.
    Down,
    /// No answer until the attempt timeout, mostly.
    Hangs,
    /// 2xx after seconds.
    Slow,
    /// 429 with a `Retry-After`, else 2xx.
    Throttling,
    /// 400 now and then, else 2xx.
    Rejecting,
    /// 410 Gone now and then, else 2xx.
    Leaving,
}

impl Behaviour {
    const ALL: [Behaviour; 8] = [
        Behaviour::Healthy,
        Behaviour::Flaky,
        Behaviour::Down,
        Behaviour::Hangs,
        Behaviour::Slow,
        Behaviour::Throttling,
        Behaviour::Rejecting,
        Behaviour::Leaving,
    ];

    pub fn draw(rng: &mut Prng) -> Behaviour {
        *rng.pick(&Self::ALL).expect("behaviours")
    }
}

/// One attempt's answer as the subscriber gives it.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub result: AttemptResult,
    pub retry_after: Option<Duration>,
    /// From the request to the answer (or to the attempt timeout).
    pub after_ms: i64,
}

impl Answer {
    pub fn draw(behaviour: Behaviour, attempt_timeout_ms: i64, rng: &mut Prng) -> Answer {
        let quick = i64::try_from(rng.between(5, 300)).unwrap_or(5);
        let status = |code| Answer {
            result: AttemptResult::Status(code),
            retry_after: None,
            after_ms: quick,
        };
        let hang = Answer {
            result: AttemptResult::Timeout,
            retry_after: None,
            after_ms: attempt_timeout_ms,
        };
        match behaviour {
            Behaviour::Healthy if rng.percent(5) => status(503),
            Behaviour::Flaky if rng.percent(50) => status(503),
            Behaviour::Down => status(503),
            Behaviour::Hangs if rng.percent(80) => hang,
            Behaviour::Slow => {
                let after_ms = i64::try_from(rng.between(1_000, 9_000)).unwrap_or(1_000);
                // Slower than the attempt timeout: the attempt gives up first.
                if after_ms >= attempt_timeout_ms {
                    hang
                } else {
                    Answer {
                        after_ms,
                        ..status(200)
                    }
                }
            }
            Behaviour::Throttling if rng.percent(60) => Answer {
                retry_after: Some(Duration::from_secs(rng.between(1, 30))),
                ..status(429)
            },
            Behaviour::Rejecting if rng.percent(30) => status(400),
            Behaviour::Leaving if rng.percent(15) => status(410),
            _ => status(200),
        }
    }
}

/// What the network saw of one delivery.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The `webhook-id` its first request carried: every later one must carry it too.
    pub webhook_id: String,
    /// Requests sent.
    pub sent: u32,
    /// Of them, those whose worker was lost before recording an outcome (a crash, a commit
    /// refused by a full disk): the store records them as `lost` once rescued.
    pub orphaned: u32,
    /// Claims whose worker died before sending them: no request, an attempt recorded `lost`.
    pub unsent: u32,
}

/// Every request the simulated network carried, by delivery key.
#[derive(Debug, Default)]
pub struct NetworkLog {
    pub by_key: BTreeMap<i64, Seen>,
}
