//! The live capacity model and admission. Each process meters the attempts it completes and
//! how busy its delivery slots are (`Meter`, the last minute by the injected clock), records
//! that in the store once a second, and reads back the sum over every process with the
//! backlog: the `Estimate` that `GET /v1/capacity` shows and that admission holds a publish to.
//!
//! Admission is decided in the publish's own transaction: the API passes the room left
//! (`NewEvent::admit_at_most`) and the store refuses a fan-out that does not fit, storing
//! nothing. The backlog is counted once a second (less often when counting takes long); what
//! this process accepted since is added to it, so a burst between two counts cannot overshoot.

pub use hookline_api::{CapacityView, DrainTermsView};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use hookline_engine::clock::Clock;
use hookline_engine::meter::{Meter, MINUTE_S};
use hookline_engine::slots::Slots;
use hookline_policy::{
    duration_ms, retry_after_s, room, AdmissionLimits, BacklogWaits, Drain, Measured, Refusal,
    Shown, UnixMs, WaitTerms, Window,
};
use hookline_store::{Backlog, MeterReading, Store, StoreError};
use tokio::sync::watch;

use crate::config::AdmissionConfig;
use crate::rollouts::Policies;

/// "Near a limit": less room than this many of the largest fan-outs, or this many deliveries.
const NEAR_FAN_OUTS: u64 = 16;
const NEAR_DELIVERIES: u64 = 10_000;
/// How often a process records its meter and reads everyone's.
const EVERY_MS: i64 = 1_000;
/// Meters recorded longer ago than this belong to processes that stopped.
const ALIVE_MS: i64 = 5_000;
/// At most this share of the time goes to counting the backlog: a count that takes longer than
/// a tenth of a second is repeated less often than once a second.
const COUNTING_SHARE: u32 = 10;

/// What every process measured, with the backlog, at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Estimate {
    pub at: UnixMs,
    pub measured: Measured,
    /// What the process has shown it can do (`None`: nothing yet; the floor applies).
    pub shown: Option<Shown>,
    pub backlog: Backlog,
    /// What the deliveries waiting for a time or a rate limit add to a drain.
    pub waits: WaitTerms,
}

/// The backlog as last counted: its totals, and what of it waits.
#[derive(Debug, Clone, Default)]
pub struct BacklogCount {
    pub backlog: Backlog,
    pub waits: BacklogWaits,
}

impl BacklogCount {
    async fn of(store: &dyn Store, now: UnixMs) -> Result<BacklogCount, StoreError> {
        Ok(BacklogCount {
            backlog: store.backlog(now).await?,
            waits: store.backlog_waits(now).await?,
        })
    }
}

/// The last minute as evidence of what the slots can do.
fn window(t: &MeterReading) -> Window {
    Window {
        answered_per_s: t.answered_attempts as f64 / MINUTE_S as f64,
        held_share: if t.slot_samples > 0 {
            t.held_slot_samples as f64 / t.slot_samples as f64
        } else {
            0.0
        },
        answered_share: match t.new_attempts.saturating_add(t.retry_attempts) {
            0 => 0.0,
            ended => t.answered_attempts as f64 / ended as f64,
        },
    }
}

impl Estimate {
    /// The estimate from the meters' totals, what was shown before them and the floor.
    fn from_totals(
        at: UnixMs,
        t: MeterReading,
        shown: Option<Shown>,
        floor: f64,
        counted: &BacklogCount,
    ) -> Estimate {
        let attempts = t.new_attempts.saturating_add(t.retry_attempts);
        let per_s = |n: u64| n as f64 / MINUTE_S as f64;
        let shown = Shown::learn(shown, window(&t));
        let sustainable_per_s = Shown::sustainable_per_s(shown, floor);
        Estimate {
            at,
            shown,
            waits: WaitTerms::of(&counted.waits, sustainable_per_s),
            measured: Measured {
                service_rate_per_s: per_s(attempts),
                new_per_s: per_s(t.new_attempts),
                retry_per_s: per_s(t.retry_attempts),
                failure_rate: if attempts > 0 {
                    t.failed_attempts as f64 / attempts as f64
                } else {
                    0.0
                },
                // Over 1 when attempts wait in the slow lane beside full slots.
                utilization: if t.slot_samples > 0 {
                    (t.busy_slot_samples as f64 / t.slot_samples as f64).min(1.0)
                } else {
                    0.0
                },
                sustainable_per_s,
            },
            backlog: counted.backlog,
        }
    }

    /// Which term the sustainable rate comes from.
    pub fn sustainable_from(&self) -> &'static str {
        match self.shown {
            Some(s)
                if Shown::sustainable_per_s(Some(s), 0.0) >= self.measured.sustainable_per_s =>
            {
                s.evidence.as_str()
            }
            _ => "min_service_rate",
        }
    }
}

/// This process's view of capacity, and the admission it applies.
pub struct Capacity {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    policies: Arc<Policies>,
    /// Names this process's meter in the store.
    owner: String,
    pub meter: Arc<Meter>,
    admission: AdmissionConfig,
    /// The estimate and what this process accepted since its backlog was counted, changed
    /// together so that no reader sees accepted work in neither.
    state: RwLock<Counted>,
    /// This process's delivery slots (none in an api-only process), sampled every tick.
    slots: OnceLock<Arc<Slots>>,
    /// The largest fan-out this process accepted, and the turn near a limit.
    largest_fan_out: AtomicU64,
    one_at_a_time: tokio::sync::Mutex<()>,
}

struct Counted {
    estimate: Estimate,
    /// The last count, kept for the refreshes between counts.
    count: BacklogCount,
    accepted_since: u64,
}

/// Why nothing more fits now, and when to try again.
pub struct OverCapacity {
    pub reason: Refusal,
    /// The refusal's terms, for its message.
    pub why: String,
    pub retry_after_s: u64,
}

impl Capacity {
    /// Counts the backlog and reads the meters once, so admission starts from what is there.
    pub async fn start(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        policies: Arc<Policies>,
        admission: AdmissionConfig,
    ) -> Result<Arc<Capacity>, StoreError> {
        let now = clock.now_ms();
        let shown = store.shown().await?;
        let count = BacklogCount::of(&*store, now).await?;
        let capacity = Arc::new(Capacity {
            owner: format!(
                "{}:{}:{:08x}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "hookline".into()),
                std::process::id(),
                rand::random::<u32>()
            ),
            meter: Arc::new(Meter::new(now)),
            state: RwLock::new(Counted {
                estimate: Estimate::from_totals(
                    now,
                    MeterReading::default(),
                    shown,
                    admission.min_service_rate,
                    &count,
                ),
                count,
                accepted_since: 0,
            }),
            store,
            clock,
            policies,
            admission,
            slots: OnceLock::new(),
            largest_fan_out: AtomicU64::new(0),
            one_at_a_time: tokio::sync::Mutex::new(()),
        });
        Ok(capacity)
    }

    /// Samples these slots (the dispatcher's) once a second.
    pub fn sample(&self, slots: Arc<Slots>) {
        let _ = self.slots.set(slots);
    }

    fn limits(&self) -> AdmissionLimits {
        let window = self.policies.current().delivery_window();
        AdmissionLimits {
            max_backlog: self.admission.max_backlog,
            max_projected_drain_s: self.admission.max_projected_drain(window).as_secs_f64(),
        }
    }

    fn max_attempts(&self) -> u32 {
        self.policies.current().default.retry.max_attempts()
    }

    pub fn estimate(&self) -> Estimate {
        self.state.read().unwrap().estimate
    }

    /// The estimate, and the backlog as last counted plus what this process accepted since.
    /// (A publish that committed during a count is in both until the next count: the error is
    /// on the side of refusing.)
    fn now(&self) -> (Estimate, u64) {
        let state = self.state.read().unwrap();
        let e = state.estimate;
        (e, e.backlog.not_ended.saturating_add(state.accepted_since))
    }

    /// How many deliveries a publish may create now, and what limits it.
    pub fn room(&self) -> (u64, Refusal) {
        let (e, backlog) = self.now();
        room(
            self.limits(),
            &e.measured,
            backlog,
            e.backlog.held,
            self.max_attempts(),
        )
    }

    /// Near a limit, one publish at a time in this process (from its room to its commit), so
    /// concurrent publishes cannot each take the same room; far from one, no waiting. Across
    /// processes the limit holds to within what the others accepted since the last count.
    pub async fn admission_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        let (room, _) = self.room();
        let largest = self.largest_fan_out.load(Ordering::Relaxed);
        let near = room < (largest.saturating_mul(NEAR_FAN_OUTS)).max(NEAR_DELIVERIES);
        if near {
            Some(self.one_at_a_time.lock().await)
        } else {
            None
        }
    }

    pub fn accepted(&self, deliveries: u64) {
        let mut state = self.state.write().unwrap();
        state.accepted_since = state.accepted_since.saturating_add(deliveries);
        self.largest_fan_out
            .fetch_max(deliveries, Ordering::Relaxed);
    }

    /// The projected drain of the backlog now (held deliveries left out).
    fn drain(&self) -> (Estimate, u64, Drain) {
        let (e, backlog) = self.now();
        let draining = backlog.saturating_sub(e.backlog.held);
        let drain = e
            .measured
            .projected_drain(draining, &e.waits, self.max_attempts());
        (e, backlog, drain)
    }

    /// A fan-out of `deliveries` that did not fit `room`: counted, told why in terms of the
    /// limit it reached, and when to retry.
    pub fn refused(&self, deliveries: u64, room: u64, reason: Refusal) -> OverCapacity {
        crate::telemetry::admission_refused(reason.as_str());
        let (e, backlog, _) = self.drain();
        let limits = self.limits();
        let why = match reason {
            Refusal::Backlog => format!(
                "max_backlog: {backlog} deliveries are not ended and the limit is {}",
                limits.max_backlog
            ),
            Refusal::ProjectedDrain => {
                let draining = backlog.saturating_sub(e.backlog.held);
                let with_these = e
                    .measured
                    .projected_drain_s(draining.saturating_add(deliveries), self.max_attempts());
                format!(
                    "max_projected_drain: the backlog's {draining} deliveries ({} due now, {} \
                     waiting for a retry, {} behind open breakers, {} rate-limited; {} held for \
                     paused subscribers are not counted) and these {deliveries} need {} at the \
                     sustainable {:.1} attempts/s, over the limit of {}",
                    e.backlog.due,
                    e.waits.retries,
                    e.waits.breaker_deferred,
                    e.waits.rate_limited,
                    e.backlog.held,
                    seconds(with_these),
                    e.measured.sustainable_per_s,
                    seconds(limits.max_projected_drain_s),
                )
            }
        };
        OverCapacity {
            reason,
            why,
            retry_after_s: retry_after_s(
                &e.measured,
                deliveries.saturating_sub(room),
                self.max_attempts(),
            ),
        }
    }

    /// What `GET /v1/capacity` answers.
    pub fn view(&self) -> CapacityView {
        let (e, backlog, drain) = self.drain();
        let m = &e.measured;
        let (room, reason) = self.room();
        CapacityView {
            service_rate_per_s: m.service_rate_per_s,
            new_attempts_per_s: m.new_per_s,
            retry_attempts_per_s: m.retry_per_s,
            failure_rate: m.failure_rate,
            sustainable_rate_per_s: Some(m.sustainable_per_s),
            sustainable_from: e.sustainable_from().to_owned(),
            shown_rate_per_s: e.shown.map(|s| s.per_s),
            min_service_rate_per_s: self.admission.min_service_rate,
            backlog,
            due_backlog: e.backlog.due,
            projected_drain_s: Some(drain.seconds).filter(|s| s.is_finite()),
            projected_drain_by: drain.by.as_str().to_owned(),
            drain_terms: DrainTermsView {
                throughput_s: finite(drain.throughput_s),
                retries_s: finite(e.waits.retries_s),
                breaker_deferred_s: finite(e.waits.breaker_deferred_s),
                rate_limited_s: finite(e.waits.rate_limited_s),
            },
            retry_backlog: e.waits.retries,
            breaker_deferred_backlog: e.waits.breaker_deferred,
            rate_limited_backlog: e.waits.rate_limited,
            held_backlog: e.backlog.held,
            delivery_window_s: self.policies.current().delivery_window().as_secs_f64(),
            max_attempts: self.max_attempts(),
            utilization: m.utilization,
            admitting: room > 0,
            refusing_reason: (room == 0).then(|| reason.as_str().to_owned()),
            room,
            max_backlog: self.admission.max_backlog,
            max_projected_drain_s: self.limits().max_projected_drain_s,
            measured_at: hookline_engine::clock::rfc3339(e.at),
        }
    }

    /// Records this process's meter, reads everyone's, and counts the backlog when it is due.
    async fn refresh(&self, count_backlog: bool) -> Result<Duration, StoreError> {
        let now = self.clock.now_ms();
        if let Some(slots) = self.slots.get() {
            let (busy, total) = slots.occupancy();
            self.meter.slots(now, busy, slots.busy(), total);
        }
        self.store
            .record_meter(&self.owner, now, self.meter.last_minute(now))
            .await?;
        let totals = self.store.meter_totals(now - ALIVE_MS).await?;
        let counted = Instant::now();
        // What this process accepted before the count is in it; what it accepts during the
        // count stays added until the next one. Both change under one lock, so no reader ever
        // sees accepted work in neither.
        let accepted_before = self.state.read().unwrap().accepted_since;
        let count = if count_backlog {
            BacklogCount::of(&*self.store, now).await?
        } else {
            self.state.read().unwrap().count.clone()
        };
        let took = counted.elapsed();
        let before = self.estimate().shown;
        let e = Estimate::from_totals(now, totals, before, self.admission.min_service_rate, &count);
        if e.shown != before {
            if let Some(shown) = e.shown {
                self.store.record_shown(now, shown).await?;
            }
        }
        {
            let mut state = self.state.write().unwrap();
            state.estimate = e;
            if count_backlog {
                state.accepted_since = state.accepted_since.saturating_sub(accepted_before);
                state.count = count;
            }
        }
        let window = self.policies.current().delivery_window().as_secs_f64();
        let (e, _, drain) = self.drain();
        // The gauge is the term admission refuses on, so that its alert ("admission is refusing
        // fan-out, or about to") stays true; the other terms are in `/v1/capacity`.
        crate::telemetry::capacity(
            &e.measured,
            Some(drain.throughput_s).filter(|s| s.is_finite()),
            window,
        );
        Ok(took)
    }
}

/// `s` seconds rounded up to whole ones, as a duration to print: none when negative, the most a
/// Duration counts in whole seconds when beyond it.
pub(crate) fn whole_seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0).ceil()).unwrap_or(Duration::from_secs(u64::MAX))
}

/// A number of seconds as people read it ("2m 30s"); "forever" when it does not end.
fn seconds(s: f64) -> String {
    if s.is_finite() {
        humantime::format_duration(whole_seconds(s)).to_string()
    } else {
        "forever".into()
    }
}

/// JSON has no infinity: a term that never ends is shown as the largest finite number.
fn finite(s: f64) -> f64 {
    if s.is_finite() {
        s
    } else {
        f64::MAX
    }
}

/// Keeps `capacity` current, once a second of the clock, until `stop` changes.
pub async fn keep_measuring(capacity: Arc<Capacity>, mut stop: watch::Receiver<bool>) {
    let mut next_count: UnixMs = 0;
    while !*stop.borrow() {
        let now = capacity.clock.now_ms();
        let count = now >= next_count;
        match capacity.refresh(count).await {
            Ok(took) if count => {
                let pause = (took * COUNTING_SHARE).max(Duration::from_millis(EVERY_MS as u64));
                next_count = now.saturating_add(duration_ms(pause));
            }
            Ok(_) => {}
            Err(e) => {
                hookline_engine::telemetry::store_error("capacity");
                tracing::warn!(error = %e, "cannot measure capacity; admission keeps the last estimate");
            }
        }
        tokio::select! {
            _ = capacity.clock.sleep_until(now + EVERY_MS) => {}
            _ = stop.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_is_rates_per_second() {
        let totals = MeterReading {
            new_attempts: 600,
            retry_attempts: 600,
            failed_attempts: 300,
            busy_slot_samples: 50,
            slot_samples: 100,
            answered_attempts: 1_140,
            held_slot_samples: 95,
        };
        let e = Estimate::from_totals(0, totals, None, 5.0, &BacklogCount::default());
        assert_eq!(e.measured.service_rate_per_s, 20.0);
        assert_eq!(e.measured.failure_rate, 0.25);
        // 19 answered a second (95% of the attempts that ended) with 95% of the slots held:
        // saturated, 19 / 0.95.
        assert!((e.measured.sustainable_per_s - 19.0 / 0.95).abs() < 1e-9);
        assert_eq!(e.sustainable_from(), "saturated");
        // Full slots held mostly by attempts that got no answer (destinations hanging until
        // their timeout) measure the destinations: what was answered is only a lower bound.
        let hanging = MeterReading {
            answered_attempts: 600,
            ..totals
        };
        let h = Estimate::from_totals(0, hanging, None, 5.0, &BacklogCount::default());
        assert_eq!(h.measured.sustainable_per_s, 10.0);
        assert_eq!(h.sustainable_from(), "at_least");
        // An idle minute after it keeps it; on a fresh install the floor applies.
        let idle = Estimate::from_totals(
            0,
            MeterReading::default(),
            e.shown,
            5.0,
            &BacklogCount::default(),
        );
        assert_eq!(
            idle.measured.sustainable_per_s,
            e.measured.sustainable_per_s
        );
        let fresh = Estimate::from_totals(
            0,
            MeterReading::default(),
            None,
            5.0,
            &BacklogCount::default(),
        );
        assert_eq!(fresh.measured.sustainable_per_s, 5.0);
        assert_eq!(fresh.sustainable_from(), "min_service_rate");
    }
}
