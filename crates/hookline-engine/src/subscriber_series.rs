//! The metric series labelled by subscriber (`hookline_attempt_duration_seconds`,
//! `hookline_delivery_latency_seconds`, `hookline_breaker_open`,
//! `hookline_subscriber_attempts_total`, `hookline_subscriber_dead_letters_total`), kept here
//! rather than in the Prometheus exporter's registry, which can add a series but never remove
//! one: with it, `/metrics` grew with every subscriber ever seen, revoked ones included. Here a
//! subscriber's series go when it does (`forget`: the gauges' refresh asks the store which of
//! the subscribers kept are gone, in every process, wherever they were revoked), and the
//! families are rendered after the exporter's text. Without per-subscriber labels
//! (`metrics.per_subscriber_labels = false`) the two histograms are kept here too, as one
//! series without the label, so each family has one owner; the two counters are not kept at
//! all (`hookline_attempts_total` and `hookline_dead_letters_total` count them without it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use hookline_policy::{DeadReason, Outcome};
use metrics_exporter_prometheus::formatting::sanitize_label_value;

use crate::telemetry::{names, LATENCY_BUCKETS};

/// Seconds an attempt takes: from a fast local receiver to the longest attempt timeout.
const ATTEMPT_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

const ATTEMPT_DURATION_HELP: &str = "How long attempts took, from sending to an answer or giving up, by outcome (and by subscriber unless switched off).";
const DELIVERY_LATENCY_HELP: &str = "From an event's acceptance (or a replay's release) to a delivery's success, by subscriber (unless switched off).";
const BREAKER_OPEN_HELP: &str =
    "1 while a subscriber's circuit breaker is open or half-open, 0 once it closes.";
const ATTEMPTS_HELP: &str =
    "Delivery attempts by subscriber and outcome (success, retryable, permanent, lost).";
const DEAD_LETTERS_HELP: &str = "Deliveries that entered the dead-letter queue by an attempt's decision or a window that ended while waiting, by subscriber and terminal reason (hookline_dead_letters_total counts every path, by reason).";

/// Every series of one subscriber (or, `None`, of all of them without the label).
type Key = Option<String>;

/// The process's series by subscriber.
#[derive(Default)]
pub struct SubscriberSeries {
    by_subscriber: RwLock<BTreeMap<Key, Arc<Series>>>,
}

/// The process's one registry, as the exporter's recorder is one per process.
pub fn subscriber_series() -> &'static SubscriberSeries {
    static SERIES: OnceLock<SubscriberSeries> = OnceLock::new();
    SERIES.get_or_init(Default::default)
}

struct Series {
    /// By outcome, in `Outcome::ALL`'s order.
    attempt_duration: [Histogram; Outcome::ALL.len()],
    delivery_latency: Histogram,
    /// `BREAKER_UNSET`, or the gauge's value plus one.
    breaker_open: AtomicU8,
    /// By outcome, in `Outcome::ALL`'s order.
    attempts: [AtomicU64; Outcome::ALL.len()],
    /// By reason, in `DeadReason::ALL`'s order.
    dead_letters: [AtomicU64; DeadReason::ALL.len()],
}

const BREAKER_UNSET: u8 = 0;

impl Default for Series {
    fn default() -> Self {
        Series {
            attempt_duration: std::array::from_fn(|_| Histogram::new(ATTEMPT_DURATION_BUCKETS)),
            delivery_latency: Histogram::new(LATENCY_BUCKETS),
            breaker_open: AtomicU8::new(BREAKER_UNSET),
            attempts: Default::default(),
            dead_letters: Default::default(),
        }
    }
}

/// A Prometheus histogram: counts per bucket (not cumulative; the last is `+Inf`) and the sum.
struct Histogram {
    bounds: &'static [f64],
    counts: Box<[AtomicU64]>,
    /// The sum's `f64` bits.
    sum: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    fn record(&self, value: f64) {
        // A bucket counts what is at most its bound (`le`).
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }

    fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Its `_bucket`, `_sum` and `_count` lines, with `labels` (each `name="value"`).
    fn render(&self, out: &mut String, name: &str, labels: &[String]) {
        let mut cumulative = 0;
        let bounds = self.bounds.iter().map(|b| b.to_string());
        for (count, le) in self.counts.iter().zip(bounds.chain(["+Inf".to_owned()])) {
            cumulative += count.load(Ordering::Relaxed);
            let mut with_le = labels.to_vec();
            with_le.push(format!("le=\"{le}\""));
            let _ = writeln!(out, "{name}_bucket{} {cumulative}", braces(&with_le));
        }
        let sum = f64::from_bits(self.sum.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {cumulative}", braces(labels));
    }
}

/// The `subscriber` label of `subscriber`'s series (none for the unlabelled ones).
fn label_of(subscriber: &Key) -> Vec<String> {
    subscriber
        .iter()
        .map(|id| format!("subscriber=\"{}\"", sanitize_label_value(id)))
        .collect()
}

/// A counter family's lines for `subscriber`, one per `label` value counted (none for zero).
fn counter_lines(
    lines: &mut String,
    name: &str,
    subscriber: &Key,
    label: &str,
    values: &[(&str, &AtomicU64)],
) {
    for (value, count) in values {
        let count = count.load(Ordering::Relaxed);
        if count > 0 {
            let mut labels = label_of(subscriber);
            labels.push(format!("{label}=\"{value}\""));
            let _ = writeln!(lines, "{name}{} {count}", braces(&labels));
        }
    }
}

/// `{a="1",b="2"}`, or nothing without labels.
fn braces(labels: &[String]) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", labels.join(","))
    }
}

impl SubscriberSeries {
    fn series(&self, subscriber: Option<&str>) -> Arc<Series> {
        let key = subscriber.map(str::to_owned);
        if let Some(series) = self.by_subscriber.read().unwrap().get(&key) {
            return series.clone();
        }
        self.by_subscriber
            .write()
            .unwrap()
            .entry(key)
            .or_default()
            .clone()
    }

    /// One attempt's duration (seconds), by its outcome, labelled with `subscriber` if given.
    pub fn attempt_duration(&self, subscriber: Option<&str>, outcome: Outcome, seconds: f64) {
        let at = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.series(subscriber).attempt_duration[at].record(seconds);
    }

    /// One delivery's latency (seconds), labelled with `subscriber` if given.
    pub fn delivery_latency(&self, subscriber: Option<&str>, seconds: f64) {
        self.series(subscriber).delivery_latency.record(seconds);
    }

    /// One attempt of `subscriber`'s deliveries, by its outcome.
    pub fn attempt(&self, subscriber: &str, outcome: Outcome) {
        let at = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.series(Some(subscriber)).attempts[at].fetch_add(1, Ordering::Relaxed);
    }

    /// One of `subscriber`'s deliveries dead for `reason`.
    pub fn dead_letter(&self, subscriber: &str, reason: DeadReason) {
        let at = DeadReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.series(Some(subscriber)).dead_letters[at].fetch_add(1, Ordering::Relaxed);
    }

    pub fn breaker_open(&self, subscriber: &str, open: bool) {
        self.series(Some(subscriber))
            .breaker_open
            .store(u8::from(open) + 1, Ordering::Relaxed);
    }

    /// The subscribers that have series now.
    pub fn subscribers(&self) -> Vec<String> {
        let kept = self.by_subscriber.read().unwrap();
        kept.keys().flatten().cloned().collect()
    }

    /// Drops every series of `subscriber` (revoked, or gone from the store).
    pub fn forget(&self, subscriber: &str) {
        self.by_subscriber
            .write()
            .unwrap()
            .remove(&Some(subscriber.to_owned()));
    }

    /// The five families in Prometheus' text format, each with its `HELP` and `TYPE` once
    /// (and not at all while it has no series).
    pub fn render(&self) -> String {
        let kept: Vec<(Key, Arc<Series>)> = {
            let by_subscriber = self.by_subscriber.read().unwrap();
            by_subscriber
                .iter()
                .map(|(k, s)| (k.clone(), s.clone()))
                .collect()
        };
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, body: &dyn Fn(&mut String)| {
            let mut lines = String::new();
            body(&mut lines);
            if !lines.is_empty() {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                out.push_str(&lines);
                out.push('\n');
            }
        };
        family(
            names::ATTEMPT_DURATION_SECONDS,
            "histogram",
            ATTEMPT_DURATION_HELP,
            &|lines| {
                for (subscriber, series) in &kept {
                    for (outcome, histogram) in Outcome::ALL.iter().zip(&series.attempt_duration) {
                        if histogram.count() > 0 {
                            let mut labels = vec![format!("outcome=\"{}\"", outcome.as_str())];
                            labels.extend(label_of(subscriber));
                            histogram.render(lines, names::ATTEMPT_DURATION_SECONDS, &labels);
                        }
                    }
                }
            },
        );
        family(
            names::DELIVERY_LATENCY_SECONDS,
            "histogram",
            DELIVERY_LATENCY_HELP,
            &|lines| {
                for (subscriber, series) in &kept {
                    if series.delivery_latency.count() > 0 {
                        let name = names::DELIVERY_LATENCY_SECONDS;
                        series
                            .delivery_latency
                            .render(lines, name, &label_of(subscriber));
                    }
                }
            },
        );
        family(names::BREAKER_OPEN, "gauge", BREAKER_OPEN_HELP, &|lines| {
            for (subscriber, series) in &kept {
                let value = series.breaker_open.load(Ordering::Relaxed);
                if value != BREAKER_UNSET {
                    let labels = braces(&label_of(subscriber));
                    let _ = writeln!(lines, "{}{labels} {}", names::BREAKER_OPEN, value - 1);
                }
            }
        });
        family(
            names::SUBSCRIBER_ATTEMPTS_TOTAL,
            "counter",
            ATTEMPTS_HELP,
            &|lines| {
                for (subscriber, series) in &kept {
                    let by: Vec<(&str, &AtomicU64)> = Outcome::ALL
                        .iter()
                        .map(|o| o.as_str())
                        .zip(&series.attempts)
                        .collect();
                    counter_lines(
                        lines,
                        names::SUBSCRIBER_ATTEMPTS_TOTAL,
                        subscriber,
                        "outcome",
                        &by,
                    );
                }
            },
        );
        family(
            names::SUBSCRIBER_DEAD_LETTERS_TOTAL,
            "counter",
            DEAD_LETTERS_HELP,
            &|lines| {
                for (subscriber, series) in &kept {
                    let by: Vec<(&str, &AtomicU64)> = DeadReason::ALL
                        .iter()
                        .map(|r| r.as_str())
                        .zip(&series.dead_letters)
                        .collect();
                    counter_lines(
                        lines,
                        names::SUBSCRIBER_DEAD_LETTERS_TOTAL,
                        subscriber,
                        "reason",
                        &by,
                    );
                }
            },
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_subscriber_leaves_no_series() {
        let series = SubscriberSeries::default();
        series.attempt_duration(Some("a"), Outcome::Success, 0.02);
        series.attempt_duration(Some("a"), Outcome::Retryable, 7.0);
        series.delivery_latency(Some("a"), 0.02);
        series.breaker_open("a", true);
        series.attempt("a", Outcome::Permanent);
        series.attempt("a", Outcome::Permanent);
        series.dead_letter("a", DeadReason::PermanentFailure);
        series.attempt_duration(Some("b\"q"), Outcome::Success, 0.001);
        let text = series.render();
        for line in [
            "# TYPE hookline_attempt_duration_seconds histogram",
            "hookline_attempt_duration_seconds_bucket{outcome=\"success\",subscriber=\"a\",le=\"0.01\"} 0",
            "hookline_attempt_duration_seconds_bucket{outcome=\"success\",subscriber=\"a\",le=\"0.025\"} 1",
            "hookline_attempt_duration_seconds_bucket{outcome=\"retryable\",subscriber=\"a\",le=\"+Inf\"} 1",
            "hookline_attempt_duration_seconds_count{outcome=\"retryable\",subscriber=\"a\"} 1",
            "hookline_attempt_duration_seconds_sum{outcome=\"retryable\",subscriber=\"a\"} 7",
            "hookline_delivery_latency_seconds_count{subscriber=\"a\"} 1",
            "hookline_breaker_open{subscriber=\"a\"} 1",
            "hookline_subscriber_attempts_total{subscriber=\"a\",outcome=\"permanent\"} 2",
            "hookline_subscriber_dead_letters_total{subscriber=\"a\",reason=\"permanent_failure\"} 1",
            "hookline_attempt_duration_seconds_count{outcome=\"success\",subscriber=\"b\\\"q\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE").count(), 5, "{text}");
        assert_eq!(series.subscribers(), ["a", "b\"q"]);
        series.forget("a");
        series.forget("b\"q");
        assert_eq!(series.render(), "", "no series, no family");
        assert!(series.subscribers().is_empty());
        series.delivery_latency(None, 1.0);
        let unlabelled = series.render();
        assert!(
            unlabelled.contains("\nhookline_delivery_latency_seconds_count 1\n"),
            "{unlabelled}"
        );
    }
}
