//! The metrics an attempt records: attempts by ordinal, outcome and policy, their duration, the
//! first attempt's latency and the delivery's, the slots and the slow lane in use, origins at
//! their cap, attempts shed, store errors. Recorded through the `metrics` facade into whichever
//! recorder the process installed (the `hookline` crate's Prometheus exporter); the series
//! labelled by subscriber are kept in [`crate::subscriber_series`].

use hookline_policy::{DeadReason, Outcome, UnixMs};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use crate::subscriber_series::subscriber_series;

/// Seconds: from a fast local receiver (milliseconds) to a delivery window's worth of retries.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0,
];

/// The metrics the engine records, each name written once: recording, the `hookline` crate's
/// registration and its check of the alert rules and dashboard all use these.
pub mod names {
    pub const ATTEMPTS_TOTAL: &str = "hookline_attempts_total";
    pub const ATTEMPT_DURATION_SECONDS: &str = "hookline_attempt_duration_seconds";
    pub const ATTEMPTS_IN_FLIGHT: &str = "hookline_attempts_in_flight";
    pub const ATTEMPTS_SHED_TOTAL: &str = "hookline_attempts_shed_total";
    pub const BREAKER_OPEN: &str = "hookline_breaker_open";
    pub const DELIVERY_LATENCY_SECONDS: &str = "hookline_delivery_latency_seconds";
    pub const FIRST_ATTEMPT_LATENCY_SECONDS: &str = "hookline_first_attempt_latency_seconds";
    pub const HOSTS_AT_CAP: &str = "hookline_hosts_at_cap";
    pub const SLOW_LANE_ATTEMPTS: &str = "hookline_slow_lane_attempts";
    pub const STORE_ERRORS_TOTAL: &str = "hookline_store_errors_total";
    pub const SUBSCRIBER_ATTEMPTS_TOTAL: &str = "hookline_subscriber_attempts_total";
    pub const SUBSCRIBER_DEAD_LETTERS_TOTAL: &str = "hookline_subscriber_dead_letters_total";
}

/// Describes the metrics recorded here, for the recorder's `# HELP` lines.
pub fn describe() {
    describe_counter!(
        names::ATTEMPTS_TOTAL,
        "Delivery attempts by ordinal (1 = first attempt), outcome (success, retryable, permanent) and the policy that decided."
    );
    describe_gauge!(
        names::ATTEMPTS_IN_FLIGHT,
        "Attempts in flight in this process, by class: first (a first attempt in a slot), retry (a later attempt in a slot), slow_lane (waiting out of the slots)."
    );
    describe_counter!(
        names::ATTEMPTS_SHED_TOTAL,
        "Attempts ended early as timeouts to make room in a full slow lane: each was the furthest past its subscriber's usual answer time."
    );
    describe_gauge!(
        names::HOSTS_AT_CAP,
        "Destination origins this process has delivery.max_in_flight_per_host attempts in flight to."
    );
    describe_histogram!(
        names::FIRST_ATTEMPT_LATENCY_SECONDS,
        "From an event's acceptance to the start of a delivery's first attempt."
    );
    describe_gauge!(
        names::SLOW_LANE_ATTEMPTS,
        "Attempts far slower than their subscriber usually answers, waiting out of the delivery slots (at most delivery.slow_lane)."
    );
    describe_counter!(
        names::STORE_ERRORS_TOTAL,
        "Operations the store failed, by operation."
    );
}

/// Milliseconds as the seconds metrics are kept in (a negative span as none).
pub fn seconds(ms: i64) -> f64 {
    ms.max(0) as f64 / 1000.0
}

pub fn slow_lane(attempts: usize) {
    gauge!(names::SLOW_LANE_ATTEMPTS).set(attempts as f64);
}

pub fn hosts_at_cap(origins: usize) {
    gauge!(names::HOSTS_AT_CAP).set(origins as f64);
}

pub fn attempt_shed() {
    counter!(names::ATTEMPTS_SHED_TOTAL).increment(1);
}

/// The attempts in flight by class, read from the slots.
pub fn in_flight(slots: &crate::slots::Slots) {
    let (first, retries) = slots.busy_by_kind();
    for (class, n) in [
        ("first", first),
        ("retry", retries),
        ("slow_lane", slots.in_slow_lane()),
    ] {
        gauge!(names::ATTEMPTS_IN_FLIGHT, "class" => class).set(n as f64);
    }
}

pub fn store_error(operation: &'static str) {
    counter!(names::STORE_ERRORS_TOTAL, "operation" => operation).increment(1);
}

/// One finished attempt.
pub struct AttemptSeen<'a> {
    pub ordinal: u32,
    pub outcome: Outcome,
    pub subscriber_id: &'a str,
    /// When the event was accepted.
    pub accepted_at: UnixMs,
    /// When the delivery's current window opened: the acceptance, or a replay's release.
    pub window_start: UnixMs,
    pub started_at: UnixMs,
    pub finished_at: UnixMs,
    /// How long it took (for a lost attempt, from its claim to its rescue).
    pub duration: std::time::Duration,
    /// A first attempt of the delivery's life (not of a replay's fresh budget).
    pub first_ever: bool,
    /// The policy that decided what followed.
    pub policy: &'a str,
    /// Its subscriber's tenant.
    pub tenant: Option<&'a str>,
}

/// Whether delivery latency, attempt durations, attempts and dead letters are labelled by
/// subscriber (`metrics.per_subscriber_labels`): one series per subscriber is too many for very
/// large fleets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyLabels {
    PerSubscriber,
    Unlabelled,
}

/// Whether attempts, first-attempt latency and publishes carry a `tenant` label
/// (`metrics.per_tenant_labels`): a series per tenant, `""` for what has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantLabels {
    PerTenant,
    Unlabelled,
}

impl TenantLabels {
    /// The `tenant` label of `tenant`'s series, if labelled.
    pub fn label(self, tenant: Option<&str>) -> Vec<metrics::Label> {
        match self {
            TenantLabels::PerTenant => {
                vec![metrics::Label::new(
                    "tenant",
                    tenant.unwrap_or("").to_owned(),
                )]
            }
            TenantLabels::Unlabelled => Vec::new(),
        }
    }
}

/// How the dispatcher's metrics are labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Labels {
    pub latency: LatencyLabels,
    pub tenant: TenantLabels,
}

pub fn attempt(a: &AttemptSeen<'_>, labels: Labels) {
    let tenant = labels.tenant.label(a.tenant);
    let mut attempt_labels = vec![
        metrics::Label::new("ordinal", a.ordinal.to_string()),
        metrics::Label::new("outcome", a.outcome.as_str()),
        metrics::Label::new("policy", a.policy.to_owned()),
    ];
    attempt_labels.extend(tenant.iter().cloned());
    counter!(names::ATTEMPTS_TOTAL, attempt_labels).increment(1);
    let series = subscriber_series();
    let subscriber = (labels.latency == LatencyLabels::PerSubscriber).then_some(a.subscriber_id);
    series.attempt_duration(subscriber, a.outcome, a.duration.as_secs_f64());
    if let Some(subscriber) = subscriber {
        series.attempt(subscriber, a.outcome);
    }
    if a.first_ever {
        histogram!(names::FIRST_ATTEMPT_LATENCY_SECONDS, tenant)
            .record(seconds(a.started_at - a.accepted_at));
    }
    if a.outcome == Outcome::Success {
        // A replayed delivery is measured from its release, not from an acceptance hours ago.
        series.delivery_latency(subscriber, seconds(a.finished_at - a.window_start));
    }
}

/// A delivery of `subscriber` that entered the dead-letter queue (an attempt's decision, once
/// its completion is applied, or the window sweep), for `hookline_subscriber_dead_letters_total`
/// (labelled by subscriber only: without the label, `hookline_dead_letters_total` already counts
/// every death).
pub fn dead_letter(subscriber: &str, reason: DeadReason, labels: Labels) {
    if labels.latency == LatencyLabels::PerSubscriber {
        subscriber_series().dead_letter(subscriber, reason);
    }
}
