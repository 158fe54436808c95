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
    (1.0 - p.powi(m as i32)) / (1.0 - p)
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
    /// The share of delivery slots busy, on average.
    pub utilization: f64,
}

/// Below this share of busy slots a measured rate says little about what the slots could do.
const MEASURABLE_UTILIZATION: f64 = 0.01;

impl Measured {
    /// The attempts per second the slots would complete fully busy, at the attempt durations
    /// measured: the service rate over the busy share. `None` without a measured rate (idle,
    /// just started).
    pub fn sustainable_per_s(&self) -> Option<f64> {
        (self.service_rate_per_s > 0.0)
            .then(|| self.service_rate_per_s / self.utilization.clamp(MEASURABLE_UTILIZATION, 1.0))
    }

    /// How long `backlog` deliveries take to drain at the sustainable rate, each costing the
    /// attempts the measured failure rate implies; `None` without a measured rate.
    pub fn projected_drain_s(&self, backlog: u64, max_attempts: u32) -> Option<f64> {
        let sustainable = self.sustainable_per_s()?;
        Some(backlog as f64 * expected_attempts(self.failure_rate, max_attempts) / sustainable)
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
/// `max_backlog` (for all `backlog`), and (with a measured rate) under `max_projected_drain`
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
    let by_drain = measured.sustainable_per_s().map(|sustainable| {
        let per_delivery = expected_attempts(measured.failure_rate, max_attempts);
        let fits = limits.max_projected_drain_s * sustainable / per_delivery;
        (fits.max(0.0).floor() as u64).saturating_sub(draining)
    });
    match by_drain {
        Some(d) if d < by_backlog => (d, Refusal::ProjectedDrain),
        _ => (by_backlog, Refusal::Backlog),
    }
}

/// When to try again after a refusal: the time to drain `excess` deliveries at the sustainable
/// rate, at least a second and at most an hour (a minute without a measured rate).
pub fn retry_after_s(measured: &Measured, excess: u64, max_attempts: u32) -> u64 {
    match measured.projected_drain_s(excess, max_attempts) {
        Some(s) if s.is_finite() => (s.ceil() as u64).clamp(1, 3_600),
        _ => 60,
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
        let idle = Measured::default();
        assert_eq!(room(limits, &idle, 400, 0, 5), (600, Refusal::Backlog));
        // 20/s with half the slots busy: 40/s sustainable, 400 fit in 10 s.
        let busy = Measured {
            service_rate_per_s: 20.0,
            utilization: 0.5,
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
        assert_eq!(retry_after_s(&idle, 80, 5), 60);
    }

    proptest! {
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
        fn what_room_admits_fits_both_limits(backlog in 0u64..100_000, rate in 0.0f64..10_000.0, busy in 0.0f64..=1.0, fail in 0.0f64..=1.0, max_backlog in 0u64..200_000, drain in 1.0f64..100_000.0) {
            let limits = AdmissionLimits { max_backlog, max_projected_drain_s: drain };
            let m = Measured { service_rate_per_s: rate, utilization: busy, failure_rate: fail, ..Measured::default() };
            let (n, _) = room(limits, &m, backlog, 0, 5);
            prop_assert!(backlog + n <= max_backlog.max(backlog));
            if n > 0 {
                let projected = m.projected_drain_s(backlog + n, 5).unwrap_or(0.0);
                prop_assert!(projected <= drain * (1.0 + 1e-9) + 1e-9, "{projected} > {drain}");
            }
        }
    }
}
