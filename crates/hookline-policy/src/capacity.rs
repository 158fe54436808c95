//! Capacity arithmetic: new attempts plus retry attempts against the throughput that sustains
//! them, and whether a backlog drains inside a window while new traffic goes on. The brief's
//! model, term by term: `new + retries < sustainable`.

/// Attempts one delivery costs on average when each attempt fails retryably with probability
/// `failure_rate` (independently) and the budget is `max_attempts`: 1 + p + p^2 + ... + p^(m-1).
pub fn expected_attempts(failure_rate: f64, max_attempts: u32) -> f64 {
    let p = failure_rate.clamp(0.0, 1.0);
    let m = max_attempts.max(1);
    if p >= 1.0 {
        return f64::from(m);
    }
    // p < 1 here: past i32::MAX attempts p^m is 0 as it is at i32::MAX.
    (1.0 - p.powi(i32::try_from(m).unwrap_or(i32::MAX))) / (1.0 - p)
}

/// Attempts per second a load asks for, new and retries counted apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demand {
    pub new_per_s: f64,
    pub retry_per_s: f64,
}

impl Demand {
    /// `events_per_s` events fanned out to `fanout` subscribers each, every attempt failing
    /// retryably with probability `failure_rate`, with `max_attempts` to spend.
    pub fn of(events_per_s: f64, fanout: f64, failure_rate: f64, max_attempts: u32) -> Demand {
        let new_per_s = (events_per_s * fanout).max(0.0);
        Demand {
            new_per_s,
            retry_per_s: new_per_s * (expected_attempts(failure_rate, max_attempts) - 1.0),
        }
    }

    pub fn total_per_s(&self) -> f64 {
        self.new_per_s + self.retry_per_s
    }
}

/// Attempts per second the slots sustain when a share `unanswered` of the attempts gets no
/// answer: the answered ones at `answered_per_s` (what a load of answered attempts showed),
/// each unanswered one holding one of `slots` for the whole `attempt_timeout_s`. A timeout
/// costs a timeout: with every attempt unanswered this is `slots / attempt_timeout_s`, the
/// default `min_service_rate`.
pub fn rate_with_unanswered(
    answered_per_s: f64,
    unanswered: f64,
    slots: f64,
    attempt_timeout_s: f64,
) -> f64 {
    let u = unanswered.clamp(0.0, 1.0);
    let per_answered = 1.0 / answered_per_s.max(f64::MIN_POSITIVE);
    let per_unanswered = attempt_timeout_s.max(0.0) / slots.max(1.0);
    1.0 / ((1.0 - u) * per_answered + u * per_unanswered).max(f64::MIN_POSITIVE)
}

/// How long a backlog of `backlog_attempts` takes to drain at `available_per_s` while
/// `ongoing_per_s` of new work keeps arriving; `None` when it never does (no surplus).
pub fn drain_seconds(
    backlog_attempts: f64,
    available_per_s: f64,
    ongoing_per_s: f64,
) -> Option<f64> {
    let surplus = available_per_s - ongoing_per_s;
    if backlog_attempts <= 0.0 {
        return Some(0.0);
    }
    (surplus > 0.0).then(|| backlog_attempts / surplus)
}

/// What the last minute measured, across every process.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Measured {
    /// Attempts completed per second.
    pub service_rate_per_s: f64,
    /// Of them, first attempts and retries.
    pub new_per_s: f64,
    pub retry_per_s: f64,
    /// The share of attempts that failed retryably.
    pub failure_rate: f64,
    /// The share of delivery slots busy, on average (the slow lane counted in).
    pub utilization: f64,
    /// The attempts per second the process can sustain: what it has shown it can do, or the
    /// floor before it has shown anything ([`Shown::sustainable_per_s`]).
    pub sustainable_per_s: f64,
}

impl Measured {
    /// How long `backlog` deliveries take to drain at the sustainable rate, each costing the
    /// attempts the measured failure rate implies: the throughput term.
    pub fn projected_drain_s(&self, backlog: u64, max_attempts: u32) -> f64 {
        backlog as f64 * expected_attempts(self.failure_rate, max_attempts)
            / self.sustainable_per_s.max(f64::MIN_POSITIVE)
    }

    /// How long the `draining` deliveries (the backlog but the held) take to end: the longest
    /// of the throughput term and what waits for a time or a rate limit.
    pub fn projected_drain(&self, draining: u64, waits: &WaitTerms, max_attempts: u32) -> Drain {
        let throughput_s = self.projected_drain_s(draining, max_attempts);
        let (seconds, by) = [
            (throughput_s, DrainTerm::Throughput),
            (waits.retries_s, DrainTerm::Retries),
            (waits.breaker_deferred_s, DrainTerm::BreakerDeferred),
            (waits.rate_limited_s, DrainTerm::RateLimited),
        ]
        .into_iter()
        .fold((0.0, DrainTerm::Throughput), |best, t| {
            if t.0 > best.0 {
                t
            } else {
                best
            }
        });
        Drain {
            seconds,
            by,
            throughput_s,
        }
    }
}

/// Why deliveries in the backlog cannot start before a later time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeferCause {
    /// A retry's backoff (or a deferral that outlived its breaker): `run_at` is later.
    Retry,
    /// Their subscriber's breaker is open until its cool-down ends.
    OpenBreaker,
}

/// Deliveries that can start no earlier than `after_ms` from now, all for one cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferred {
    pub cause: DeferCause,
    pub after_ms: u64,
    pub deliveries: u64,
}

/// The backlog's deliveries that do not wait only for capacity, as the store counts them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BacklogWaits {
    /// Deliveries that start later, grouped by cause and time (a few hundred groups at most).
    pub deferred: Vec<Deferred>,
    /// Deliveries of subscribers with a rate limit.
    pub rate_limited: u64,
    /// How long the most loaded rate-limited subscriber takes to work through its deliveries at
    /// its own rate, from when it may next start one.
    pub rate_limited_longest_ms: u64,
}

/// The term a projected drain comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainTerm {
    /// The work: every delivery not held, each costing the attempts the failure rate implies,
    /// at the sustainable rate. The only term a fan-out lengthens, so the one admission refuses
    /// on.
    Throughput,
    /// Waiting for scheduled retries, then the work due from then on.
    Retries,
    /// Waiting for open breakers' cool-downs, then the work due from then on.
    BreakerDeferred,
    /// A subscriber's own rate limit.
    RateLimited,
}

impl DrainTerm {
    pub const ALL: [DrainTerm; 4] = [
        DrainTerm::Throughput,
        DrainTerm::Retries,
        DrainTerm::BreakerDeferred,
        DrainTerm::RateLimited,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DrainTerm::Throughput => "throughput",
            DrainTerm::Retries => "retries",
            DrainTerm::BreakerDeferred => "breaker_deferred",
            DrainTerm::RateLimited => "rate_limited",
        }
    }
}

/// The terms of a projected drain that do not depend on this moment's backlog count: what the
/// deliveries waiting for a time or a rate limit add, in seconds from now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WaitTerms {
    pub retries_s: f64,
    pub breaker_deferred_s: f64,
    pub rate_limited_s: f64,
    /// How many deliveries each waits for.
    pub retries: u64,
    pub breaker_deferred: u64,
    pub rate_limited: u64,
}

impl WaitTerms {
    /// The drain as a queue that work joins at known times: the backlog ends no earlier than
    /// any group's start plus the work that starts at or after it, at `per_s`. Each waiting
    /// delivery costs one attempt here: it is projected as the destinations answering from
    /// its next attempt on (what the backlog does once an outage ends); the cost of further
    /// failures is the throughput term's.
    pub fn of(waits: &BacklogWaits, per_s: f64) -> WaitTerms {
        let per_s = per_s.max(f64::MIN_POSITIVE);
        let mut groups = waits.deferred.clone();
        groups.sort_by_key(|g| std::cmp::Reverse(g.after_ms));
        let mut terms = WaitTerms {
            rate_limited: waits.rate_limited,
            rate_limited_s: if waits.rate_limited > 0 {
                waits.rate_limited_longest_ms as f64 / 1000.0
            } else {
                0.0
            },
            ..WaitTerms::default()
        };
        let mut from_then_on = 0u64;
        for g in groups {
            from_then_on = from_then_on.saturating_add(g.deliveries);
            let s = g.after_ms as f64 / 1000.0 + from_then_on as f64 / per_s;
            let (term, count) = match g.cause {
                DeferCause::Retry => (&mut terms.retries_s, &mut terms.retries),
                DeferCause::OpenBreaker => {
                    (&mut terms.breaker_deferred_s, &mut terms.breaker_deferred)
                }
            };
            *term = term.max(s);
            *count = count.saturating_add(g.deliveries);
        }
        terms
    }
}

/// A projected drain, and the term it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drain {
    pub seconds: f64,
    pub by: DrainTerm,
    /// The throughput term, the one admission holds a publish to.
    pub throughput_s: f64,
}

/// The share of the slots that attempts which answered from them must have kept busy over a
/// window for its completion rate to be what the process can do now, not just a lower bound.
pub const SATURATED: f64 = 0.9;
/// A minute measures the process only when nearly every attempt that ended in it got an answer:
/// slots held by attempts that hang until their timeout measure their destinations' time, and
/// an outage of a few known-good destinations would otherwise set a rate far below what the
/// process can do (and admission would refuse on it long after).
pub const ANSWERED_TO_MEASURE: f64 = 0.9;

/// One window (the last minute, every process) as evidence of what the slots can do. Only
/// attempts that got an answer count: one that hangs to its timeout measures its destination,
/// not the process; and the slow lane, where hanging attempts wait, is not in `held_share`, so
/// however many wait there they cannot make a window look saturated.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Window {
    /// Attempts that got an answer, per second.
    pub answered_per_s: f64,
    /// The share of the slots held by attempts (the slow lane left out), on average.
    pub held_share: f64,
    /// Of the attempts that ended, the share that got an answer.
    pub answered_share: f64,
}

/// How much a [`Shown`] rate says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// Completed while the slots had room: the process can do at least this much.
    AtLeast,
    /// Measured with the slots full: what the process can do, up or down.
    Saturated,
}

impl Evidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::AtLeast => "at_least",
            Evidence::Saturated => "saturated",
        }
    }

    pub fn parse(s: &str) -> Option<Evidence> {
        [Evidence::AtLeast, Evidence::Saturated]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

/// The rate the process has shown it can sustain, kept in the store so a restart starts from
/// it instead of from nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shown {
    pub per_s: f64,
    pub evidence: Evidence,
}

impl Shown {
    /// What `previous` becomes after `window`. A saturated window measures the process as it
    /// is now and replaces the estimate, lower or higher (fewer workers, slower subscribers
    /// that still answer). Any other window only shows that the process did at least its
    /// rate, so the estimate never falls on one: an idle minute, or slots emptied because
    /// attempts wait in the slow lane, say nothing about what the slots can do.
    pub fn learn(previous: Option<Shown>, window: Window) -> Option<Shown> {
        let rate = window.answered_per_s.max(0.0);
        if window.held_share >= SATURATED
            && window.answered_share >= ANSWERED_TO_MEASURE
            && rate > 0.0
        {
            // Scaled to every slot: at most 1/SATURATED more than measured.
            return Some(Shown {
                per_s: rate / window.held_share.min(1.0),
                evidence: Evidence::Saturated,
            });
        }
        match previous {
            Some(p) if p.per_s >= rate => Some(p),
            Some(p) => Some(Shown { per_s: rate, ..p }),
            None => (rate > 0.0).then_some(Shown {
                per_s: rate,
                evidence: Evidence::AtLeast,
            }),
        }
    }

    /// The rate admission projects with: a saturated measurement as it is; otherwise no less
    /// than `floor` (`[admission] min_service_rate`), what a fresh install is trusted to do
    /// before it has shown more.
    pub fn sustainable_per_s(shown: Option<Shown>, floor: f64) -> f64 {
        match shown {
            Some(s) if s.evidence == Evidence::Saturated => s.per_s,
            Some(s) => s.per_s.max(floor),
            None => floor,
        }
    }
}

/// The limits admission holds a publish to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionLimits {
    pub max_backlog: u64,
    pub max_projected_drain_s: f64,
}

/// Why a publish is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Backlog,
    ProjectedDrain,
}

impl Refusal {
    pub const ALL: [Refusal; 2] = [Refusal::Backlog, Refusal::ProjectedDrain];
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Backlog => "max_backlog",
            Refusal::ProjectedDrain => "max_projected_drain",
        }
    }
}

/// How many more deliveries can be accepted now, and what limits it: the room under
/// `max_backlog` (for all `backlog`), and under `max_projected_drain` at the sustainable rate
/// (for the backlog but the `held` part: held for paused subscribers, it waits rather than
/// drains, and takes no capacity).
pub fn room(
    limits: AdmissionLimits,
    measured: &Measured,
    backlog: u64,
    held: u64,
    max_attempts: u32,
) -> (u64, Refusal) {
    let by_backlog = limits.max_backlog.saturating_sub(backlog);
    let draining = backlog.saturating_sub(held);
    let per_delivery = expected_attempts(measured.failure_rate, max_attempts);
    let fits = limits.max_projected_drain_s * measured.sustainable_per_s / per_delivery;
    let by_drain = saturating_u64(fits.max(0.0).floor()).saturating_sub(draining);
    if by_drain < by_backlog {
        (by_drain, Refusal::ProjectedDrain)
    } else {
        (by_backlog, Refusal::Backlog)
    }
}

/// A whole number of the arithmetic above as a count: `as` saturates (an infinite or huge value
/// is u64::MAX, a negative one or a NaN 0), which is what a count of room or seconds means.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn saturating_u64(whole: f64) -> u64 {
    whole as u64
}

/// When to try again after a refusal: the time to drain `excess` deliveries at the sustainable
/// rate, at least a second and at most an hour.
pub fn retry_after_s(measured: &Measured, excess: u64, max_attempts: u32) -> u64 {
    let s = measured.projected_drain_s(excess, max_attempts);
    if s.is_finite() {
        saturating_u64(s.ceil()).clamp(1, 3_600)
    } else {
        3_600
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_briefs_example() {
        // 20 workers x 10 attempts/s: 200 attempts/s nominal. Six attempts at most: one
        // delivery can cost six.
        let nominal = 20.0 * 10.0;
        assert_eq!(expected_attempts(1.0, 6), 6.0);
        let d = Demand::of(1.0, 100.0, 0.0, 6);
        assert_eq!((d.new_per_s, d.retry_per_s), (100.0, 0.0));
        let worst = Demand::of(1.0, 100.0, 1.0, 6);
        assert_eq!(worst.total_per_s(), 600.0);
        assert!(worst.total_per_s() > nominal);
        // 10% failing: 1.11111 attempts per delivery.
        let ten = Demand::of(1.0, 100.0, 0.1, 6);
        assert!((ten.retry_per_s - 11.111).abs() < 1e-3, "{ten:?}");
        // A 10,000 backlog at 200/s with 111/s of new work: 112 s.
        let s = drain_seconds(10_000.0, nominal, ten.total_per_s()).unwrap();
        assert!((s - 112.5).abs() < 0.1, "{s}");
        assert_eq!(drain_seconds(1.0, nominal, worst.total_per_s()), None);
    }

    #[test]
    fn room_is_the_tighter_limit() {
        let limits = AdmissionLimits {
            max_backlog: 1_000,
            max_projected_drain_s: 10.0,
        };
        let fast = Measured {
            sustainable_per_s: 1e6,
            ..Measured::default()
        };
        assert_eq!(room(limits, &fast, 400, 0, 5), (600, Refusal::Backlog));
        // 40/s sustainable: 400 fit in 10 s.
        let busy = Measured {
            sustainable_per_s: 40.0,
            ..Measured::default()
        };
        assert_eq!(
            room(limits, &busy, 100, 0, 5),
            (300, Refusal::ProjectedDrain)
        );
        assert_eq!(room(limits, &busy, 500, 0, 5), (0, Refusal::ProjectedDrain));
        // Held deliveries count against the backlog limit only.
        assert_eq!(
            room(limits, &busy, 500, 400, 5),
            (300, Refusal::ProjectedDrain)
        );
        assert_eq!(room(limits, &busy, 950, 900, 5), (50, Refusal::Backlog));
        assert_eq!(retry_after_s(&busy, 80, 5), 2);
        assert_eq!(retry_after_s(&Measured::default(), 80, 5), 3_600);
    }

    #[test]
    fn an_idle_minute_keeps_what_was_shown() {
        // The incident: one trickle delivery, then a minute of quiet. The old model
        // extrapolated 1/60 s at 1% busy to 1.67/s; this one keeps the floor.
        let trickle = Window {
            answered_per_s: 1.0 / 60.0,
            held_share: 0.0002,
            answered_share: 1.0,
        };
        let shown = Shown::learn(None, trickle);
        assert_eq!(Shown::sustainable_per_s(shown, 51.2), 51.2);
        let idle = Shown::learn(shown, Window::default());
        assert_eq!(idle, shown);
        // 2,000 deliveries at 51.2/s: 39 s, inside any default drain limit.
        let m = Measured {
            sustainable_per_s: Shown::sustainable_per_s(idle, 51.2),
            ..Measured::default()
        };
        assert!(m.projected_drain_s(2_000, 6) < 40.0);
    }

    #[test]
    fn saturation_measures_up_and_down() {
        let fast = Shown::learn(
            None,
            Window {
                answered_per_s: 900.0,
                held_share: 1.0,
                answered_share: 1.0,
            },
        );
        assert_eq!(Shown::sustainable_per_s(fast, 50.0), 900.0);
        // Fewer workers, or subscribers that answer slowly: full slots, a lower rate.
        let slow = Shown::learn(
            fast,
            Window {
                answered_per_s: 9.0,
                held_share: 0.95,
                answered_share: 1.0,
            },
        );
        assert_eq!(slow.unwrap().evidence, Evidence::Saturated);
        assert!((Shown::sustainable_per_s(slow, 50.0) - 9.0 / 0.95).abs() < 1e-9);
        // Hanging attempts wait in the slow lane: the slots empty, the rate falls, the
        // estimate stays.
        let hanging = Shown::learn(
            fast,
            Window {
                answered_per_s: 30.0,
                held_share: 0.2,
                answered_share: 1.0,
            },
        );
        assert_eq!(hanging, fast);
        // Known-good destinations that start hanging hold the slots until they time out: full
        // slots, few answers among the attempts that ended. That measures the destinations,
        // not the process: the estimate stays.
        let outage = Shown::learn(
            fast,
            Window {
                answered_per_s: 0.05,
                held_share: 1.0,
                answered_share: 0.02,
            },
        );
        assert_eq!(outage, fast);
        assert_eq!(Evidence::parse("saturated"), Some(Evidence::Saturated));
        assert_eq!(Evidence::parse("at_least"), Some(Evidence::AtLeast));
    }

    #[test]
    fn an_outage_is_projected_from_its_cool_downs_and_retries() {
        // The incident: 200 subscribers behind one hanging host, their breakers open
        // for another 40 s, 100 retries due in 30 s. At 1,000/s the work is nothing; the
        // cool-downs decide.
        let waits = BacklogWaits {
            deferred: vec![
                Deferred {
                    cause: DeferCause::Retry,
                    after_ms: 30_000,
                    deliveries: 100,
                },
                Deferred {
                    cause: DeferCause::OpenBreaker,
                    after_ms: 40_000,
                    deliveries: 200,
                },
            ],
            rate_limited: 0,
            rate_limited_longest_ms: 0,
        };
        let terms = WaitTerms::of(&waits, 1_000.0);
        assert_eq!((terms.retries, terms.breaker_deferred), (100, 200));
        assert!((terms.breaker_deferred_s - 40.2).abs() < 1e-9, "{terms:?}");
        // The retries' term counts the deferred work after them too.
        assert!((terms.retries_s - 30.3).abs() < 1e-9, "{terms:?}");
        let m = Measured {
            sustainable_per_s: 1_000.0,
            failure_rate: 1.0,
            ..Measured::default()
        };
        let drain = m.projected_drain(300, &terms, 6);
        assert_eq!(drain.by, DrainTerm::BreakerDeferred);
        assert!((drain.throughput_s - 1.8).abs() < 1e-9, "{drain:?}");
        // A rate-limited subscriber with 600 deliveries at 10/s: a minute.
        let limited = WaitTerms::of(
            &BacklogWaits {
                rate_limited: 600,
                rate_limited_longest_ms: 60_000,
                ..waits
            },
            1_000.0,
        );
        assert_eq!(
            m.projected_drain(900, &limited, 6).by,
            DrainTerm::RateLimited
        );
        // Nothing waits: the old model.
        let idle = m.projected_drain(300, &WaitTerms::default(), 6);
        assert_eq!((idle.by, idle.seconds), (DrainTerm::Throughput, 1.8));
        assert_eq!(DrainTerm::BreakerDeferred.as_str(), "breaker_deferred");
    }

    fn cause() -> impl Strategy<Value = DeferCause> {
        prop_oneof![Just(DeferCause::Retry), Just(DeferCause::OpenBreaker)]
    }

    fn groups() -> impl Strategy<Value = Vec<Deferred>> {
        prop::collection::vec(
            (cause(), 0u64..100_000_000, 0u64..1_000_000).prop_map(
                |(cause, after_ms, deliveries)| Deferred {
                    cause,
                    after_ms,
                    deliveries,
                },
            ),
            0..20,
        )
    }

    #[test]
    fn a_timeout_costs_a_timeout() {
        // 512 slots, 10 s timeouts: 51.2/s when nothing answers, whatever answered ones do.
        assert!((rate_with_unanswered(12_000.0, 1.0, 512.0, 10.0) - 51.2).abs() < 1e-9);
        assert_eq!(rate_with_unanswered(12_000.0, 0.0, 512.0, 10.0), 12_000.0);
        // 5% timing out: each costs 10 s / 512 = 19.5 ms of the slots; the answered 95%
        // 1/12,000 s each. About 950/s.
        let r = rate_with_unanswered(12_000.0, 0.05, 512.0, 10.0);
        assert!((940.0..955.0).contains(&r), "{r}");
    }

    proptest! {
        #[test]
        fn unanswered_attempts_lower_the_rate_towards_the_slots(answered in 0.1f64..1e6, u in 0.0f64..=1.0, v in 0.0f64..=1.0, slots in 1.0f64..10_000.0, timeout in 0.01f64..600.0) {
            let floor = slots / timeout;
            let (lo, hi) = (u.min(v), u.max(v));
            let (a, b) = (rate_with_unanswered(answered, lo, slots, timeout), rate_with_unanswered(answered, hi, slots, timeout));
            // Between the two extremes, and moving from one towards the other.
            prop_assert!(a >= answered.min(floor) * (1.0 - 1e-9) && a <= answered.max(floor) * (1.0 + 1e-9));
            if floor <= answered {
                prop_assert!(b <= a * (1.0 + 1e-9));
            } else {
                prop_assert!(b >= a * (1.0 - 1e-9));
            }
        }

        #[test]
        fn a_drain_waits_for_every_group_and_all_the_work(deferred in groups(), per_s in 0.001f64..1e6, extra in 0u64..1_000) {
            let waits = BacklogWaits { deferred: deferred.clone(), ..BacklogWaits::default() };
            let terms = WaitTerms::of(&waits, per_s);
            let longest = terms.retries_s.max(terms.breaker_deferred_s);
            let total: u64 = deferred.iter().map(|g| g.deliveries).sum();
            for g in &deferred {
                prop_assert!(longest >= g.after_ms as f64 / 1000.0);
            }
            if let Some(first) = deferred.iter().map(|g| g.after_ms).min() {
                prop_assert!(longest >= first as f64 / 1000.0 + total as f64 / per_s - 1e-6);
            }
            prop_assert_eq!(terms.retries + terms.breaker_deferred, total);
            // More work at the latest time never shortens it.
            let mut more = deferred.clone();
            if let Some(last) = more.iter_mut().max_by_key(|g| g.after_ms) {
                last.deliveries += extra;
                let grown = WaitTerms::of(&BacklogWaits { deferred: more, ..BacklogWaits::default() }, per_s);
                prop_assert!(grown.retries_s.max(grown.breaker_deferred_s) >= longest);
            }
            let m = Measured { sustainable_per_s: per_s, ..Measured::default() };
            let drain = m.projected_drain(total, &terms, 5);
            prop_assert!(drain.seconds >= drain.throughput_s && drain.seconds >= longest);
        }

        #[test]
        fn retries_grow_with_the_failure_rate_and_stay_under_the_budget(p in 0.0f64..=1.0, q in 0.0f64..=1.0, m in 1u32..50) {
            let (lo, hi) = (p.min(q), p.max(q));
            let (a, b) = (expected_attempts(lo, m), expected_attempts(hi, m));
            prop_assert!(a <= b + 1e-9);
            prop_assert!((1.0..=f64::from(m) + 1e-9).contains(&b));
        }

        #[test]
        fn a_drain_exists_only_with_a_surplus(backlog in 0.0f64..1e9, available in 0.0f64..1e6, ongoing in 0.0f64..1e6) {
            match drain_seconds(backlog, available, ongoing) {
                Some(s) => prop_assert!(s >= 0.0 && (backlog == 0.0 || available > ongoing)),
                None => prop_assert!(available <= ongoing && backlog > 0.0),
            }
        }

        #[test]
        fn what_room_admits_fits_both_limits(backlog in 0u64..100_000, rate in 0.0f64..10_000.0, fail in 0.0f64..=1.0, max_backlog in 0u64..200_000, drain in 1.0f64..100_000.0) {
            let limits = AdmissionLimits { max_backlog, max_projected_drain_s: drain };
            let m = Measured { sustainable_per_s: rate, failure_rate: fail, ..Measured::default() };
            let (n, _) = room(limits, &m, backlog, 0, 5);
            prop_assert!(backlog + n <= max_backlog.max(backlog));
            if n > 0 {
                let projected = m.projected_drain_s(backlog + n, 5);
                prop_assert!(projected <= drain * (1.0 + 1e-9) + 1e-9, "{projected} > {drain}");
            }
        }

        #[test]
        fn only_a_saturated_window_lowers_the_estimate(before in 0.0f64..1e5, rate in 0.0f64..1e5, held in 0.0f64..=1.0, answered in 0.0f64..=1.0, floor in 0.1f64..1e3) {
            let previous = Shown { per_s: before, evidence: Evidence::AtLeast };
            let after = Shown::learn(Some(previous), Window { answered_per_s: rate, held_share: held, answered_share: answered }).unwrap();
            if held < SATURATED || answered < ANSWERED_TO_MEASURE {
                // Idle minutes and hanging attempts never lower it.
                prop_assert!(after.per_s >= before);
                prop_assert!(Shown::sustainable_per_s(Some(after), floor) >= floor);
            } else if rate > 0.0 {
                prop_assert_eq!(after.evidence, Evidence::Saturated);
                prop_assert!(after.per_s >= rate && after.per_s <= rate / SATURATED + 1e-9);
            }
            prop_assert!(after.per_s >= rate.min(before));
        }
    }
}
