//! What operators watch, in Prometheus text format on `GET /metrics`: what tells them whether
//! subscribers are served on time (age of the oldest ready and delayed deliveries, attempts by ordinal, terminal reasons, dead-letter
//! inflow, latency by subscriber) rather than raw queue depth alone.
//!
//! Counters and histograms are recorded where things happen (the API, the engine's dispatcher,
//! and the store for dead-letter inflow); gauges that need a query are refreshed on an interval by
//! [`refresh_gauges`], never per scrape.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hookline_engine::clock::Clock;
use hookline_engine::dispatcher::HeldBack;
use hookline_engine::subscriber_series::subscriber_series;
use hookline_engine::telemetry::{seconds, store_error, LATENCY_BUCKETS};
use hookline_policy::UnixMs;
use hookline_store::{DeliveryState, InFlightCaps, QueueStats, Store, WaitingOn};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

/// Every metric hookline exports, each name written once: registration, recording and the
/// check of the alert rules and dashboard all use these (the engine's are written there).
pub mod names {
    pub use hookline_engine::telemetry::names::*;
    pub const ADMISSION_REFUSED_TOTAL: &str = "hookline_admission_refused_total";
    pub const API_REQUESTS_TOTAL: &str = "hookline_api_requests_total";
    pub const API_REQUEST_DURATION_SECONDS: &str = "hookline_api_request_duration_seconds";
    pub const BUILD_INFO: &str = "hookline_build_info";
    pub const CAPACITY_DELIVERY_WINDOW_SECONDS: &str = "hookline_capacity_delivery_window_seconds";
    pub const CAPACITY_PROJECTED_DRAIN_SECONDS: &str = "hookline_capacity_projected_drain_seconds";
    pub const CAPACITY_SERVICE_RATE_PER_SECOND: &str = "hookline_capacity_service_rate_per_second";
    pub const CAPACITY_UTILIZATION_RATIO: &str = "hookline_capacity_utilization_ratio";
    /// Recorded by the store, where every path that kills a delivery passes.
    pub use hookline_store::DEAD_LETTERS_METRIC as DEAD_LETTERS_TOTAL;
    pub const DELAYED_OLDEST_AGE_SECONDS: &str = "hookline_delayed_oldest_age_seconds";
    pub const DELIVERIES: &str = "hookline_deliveries";
    pub const EVENTS_ACCEPTED_TOTAL: &str = "hookline_events_accepted_total";
    pub const FANOUT_DELIVERIES_TOTAL: &str = "hookline_fanout_deliveries_total";
    pub const HTTP_CONNECTIONS: &str = "hookline_http_connections";
    pub const HTTP_CONNECTIONS_CLOSED_TOTAL: &str = "hookline_http_connections_closed_total";
    pub const READY_OLDEST_AGE_SECONDS: &str = "hookline_ready_oldest_age_seconds";
    pub const REPLAYED_TOTAL: &str = "hookline_replayed_total";
    pub const WAITING_OLDEST_AGE_SECONDS: &str = "hookline_waiting_oldest_age_seconds";
}

/// The process-wide recorder. A process has one; in-process tests share it.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("latency_seconds".into()), LATENCY_BUCKETS)
            .expect("buckets are not empty")
            .set_buckets_for_metric(
                Matcher::Full(names::API_REQUEST_DURATION_SECONDS.into()),
                API_REQUEST_BUCKETS,
            )
            .expect("buckets are not empty")
            .install_recorder()
            .expect("the metrics recorder is installed once, here");
        describe();
        handle
    })
}

/// Seconds an API request takes to answer: from a health probe to a large fan-out's commit.
const API_REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The commit this binary was built from, when the build said (`HOOKLINE_COMMIT`: `.ci/run`
/// sets it from git, the `Containerfile` from its build argument); a build that did not say
/// reads `unknown`. Nothing runs git at build time.
pub const COMMIT: &str = match option_env!("HOOKLINE_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// What `GET /metrics` answers: the exporter's families, then those labelled by subscriber
/// (`subscriber_series`), then the process's own (`process_*`, read when scraped).
pub fn render() -> String {
    let mut text = handle().render();
    text.push_str(&subscriber_series().render());
    text.push_str(&crate::process_metrics::render());
    text
}

fn describe() {
    hookline_engine::telemetry::describe();
    describe_gauge!(
        names::BUILD_INFO,
        "Always 1: the version and the commit this binary was built from, as labels."
    );
    gauge!(names::BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "commit" => COMMIT).set(1.0);
    describe_counter!(
        names::API_REQUESTS_TOTAL,
        "API requests answered, by route template (unmatched: no route), method and status class (2xx, 4xx, ...)."
    );
    describe_histogram!(
        names::API_REQUEST_DURATION_SECONDS,
        "How long the API took to answer a request (to its response's head), by route template, method and status class."
    );
    describe_gauge!(
        names::CAPACITY_SERVICE_RATE_PER_SECOND,
        "Attempts completed per second over the last minute, across every process."
    );
    describe_gauge!(
        names::CAPACITY_PROJECTED_DRAIN_SECONDS,
        "How long the backlog takes to drain at the sustainable rate, counting the retries the current failure rate implies."
    );
    describe_gauge!(
        names::CAPACITY_UTILIZATION_RATIO,
        "The share of delivery slots busy over the last minute, across every process."
    );
    describe_gauge!(
        names::CAPACITY_DELIVERY_WINDOW_SECONDS,
        "The delivery window in force, for alerts on the projected drain."
    );
    describe_counter!(
        names::ADMISSION_REFUSED_TOTAL,
        "Publishes refused by admission (503 over_capacity), by the limit: max_backlog, max_projected_drain."
    );
    describe_gauge!(
        names::READY_OLDEST_AGE_SECONDS,
        "How long the oldest first attempt a claim could take now has been due: first attempts waiting here mean the dispatcher is not keeping up."
    );
    describe_gauge!(
        names::WAITING_OLDEST_AGE_SECONDS,
        "How long the oldest due delivery no claim can take now has been waiting, by cause: cap (its subscriber has as many in flight as it may), host_cap (its origin has delivery.max_in_flight_per_host in flight), rate_limit, breaker (open or half-open), paused."
    );
    describe_gauge!(
        names::DELAYED_OLDEST_AGE_SECONDS,
        "Age since first seen of the oldest delivery waiting for a retry."
    );
    describe_gauge!(names::DELIVERIES, "Deliveries in the store, by state.");
    describe_counter!(
        names::DEAD_LETTERS_TOTAL,
        "Deliveries that entered the dead-letter queue, by terminal reason and the policy that decided (none: no attempt did)."
    );
    describe_counter!(
        names::REPLAYED_TOTAL,
        "Dead letters released again by replays."
    );
    describe_counter!(
        names::EVENTS_ACCEPTED_TOTAL,
        "Events accepted by POST /v1/events."
    );
    describe_counter!(
        names::FANOUT_DELIVERIES_TOTAL,
        "Deliveries created by accepted events (one per event and matching subscriber)."
    );
    describe_gauge!(
        names::HTTP_CONNECTIONS,
        "Client connections open to the API (at most http.max_connections)."
    );
    describe_counter!(
        names::HTTP_CONNECTIONS_CLOSED_TOTAL,
        "Client connections the server closed, by reason: header_timeout, body_timeout, idle_timeout, write_timeout (an answer not taken), evicted (displaced at http.max_connections)."
    );
}

/// One API request answered: `route` is the template it matched (never the raw path, whose
/// ids would make a series each), `method` one of the standard methods or `other`.
pub fn api_request(route: &str, method: &'static str, status: u16, seconds: f64) {
    let status_class = match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    let labels = [
        ("route", route.to_owned()),
        ("method", method.to_owned()),
        ("status_class", status_class.to_owned()),
    ];
    counter!(names::API_REQUESTS_TOTAL, &labels).increment(1);
    histogram!(names::API_REQUEST_DURATION_SECONDS, &labels).record(seconds);
}

pub fn http_connections(open: usize) {
    gauge!(names::HTTP_CONNECTIONS).set(open as f64);
}

pub fn http_connection_closed(reason: &'static str) {
    counter!(names::HTTP_CONNECTIONS_CLOSED_TOTAL, "reason" => reason).increment(1);
}

pub fn event_accepted(
    deliveries: u64,
    tenant: Option<&str>,
    labels: hookline_engine::telemetry::TenantLabels,
) {
    let tenant = labels.label(tenant);
    counter!(names::EVENTS_ACCEPTED_TOTAL, tenant.clone()).increment(1);
    counter!(names::FANOUT_DELIVERIES_TOTAL, tenant).increment(deliveries);
}

pub fn replayed(selected: u64) {
    counter!(names::REPLAYED_TOTAL).increment(selected);
}

/// A publish refused by admission.
pub fn admission_refused(reason: &'static str) {
    counter!(names::ADMISSION_REFUSED_TOTAL, "reason" => reason).increment(1);
}

/// The live capacity model, across every process. Without a measured rate the projected drain
/// is not exported (a gauge cannot say "unknown").
pub fn capacity(m: &hookline_policy::Measured, projected_drain_s: Option<f64>, window_s: f64) {
    gauge!(names::CAPACITY_SERVICE_RATE_PER_SECOND).set(m.service_rate_per_s);
    gauge!(names::CAPACITY_UTILIZATION_RATIO).set(m.utilization);
    gauge!(names::CAPACITY_DELIVERY_WINDOW_SECONDS).set(window_s);
    if let Some(s) = projected_drain_s {
        gauge!(names::CAPACITY_PROJECTED_DRAIN_SECONDS).set(s);
    }
}

/// The queue stats [`refresh_gauges`] read last and when, for the console's overview: they
/// count every row, so they are read on the gauges' interval, not per request.
#[derive(Default)]
pub struct QueueSnapshot(std::sync::RwLock<Option<(UnixMs, QueueStats)>>);

impl QueueSnapshot {
    pub fn latest(&self) -> Option<(UnixMs, QueueStats)> {
        self.0.read().unwrap().clone()
    }

    fn keep(&self, at: UnixMs, stats: QueueStats) {
        *self.0.write().unwrap() = Some((at, stats));
    }
}

/// What the queue gauges read, and how often.
pub struct QueueGauges {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub every: Duration,
    pub caps: InFlightCaps,
    /// This process's dispatcher's view of whom it holds back (none in an api-only process).
    pub held_back: Option<HeldBack>,
    /// Where what was read last is kept, for the console's overview.
    pub snapshot: Arc<QueueSnapshot>,
}

/// Refreshes the gauges that need a store query, every `every`, until `stop` changes, keeps
/// what it read in `snapshot`, and runs the exporter's upkeep.
pub async fn refresh_gauges(gauges: QueueGauges, mut stop: watch::Receiver<bool>) {
    let QueueGauges {
        store,
        clock,
        every,
        caps,
        held_back,
        snapshot,
    } = gauges;
    // Subscribers whose breaker gauge is at 1, to set back to 0 when it closes.
    let mut open: std::collections::HashSet<String> = Default::default();
    loop {
        let now = clock.now_ms();
        let held_back = held_back
            .as_ref()
            .map(HeldBack::subscribers)
            .unwrap_or_default();
        match store.queue_stats(now, caps, &held_back).await {
            Ok(stats) => {
                for state in DeliveryState::ALL {
                    let n = match state {
                        DeliveryState::Scheduled => stats.counts.scheduled,
                        DeliveryState::InFlight => stats.counts.in_flight,
                        DeliveryState::Delivered => stats.counts.delivered,
                        DeliveryState::Dead => stats.counts.dead,
                    };
                    gauge!(names::DELIVERIES, "state" => state.as_str()).set(n as f64);
                }
                let age = |since: Option<UnixMs>| since.map_or(0.0, |t| seconds(now - t));
                gauge!(names::READY_OLDEST_AGE_SECONDS).set(age(stats.oldest_ready_since));
                for cause in WaitingOn::ALL {
                    let since = stats
                        .oldest_waiting_since
                        .iter()
                        .find(|(c, _)| *c == cause)
                        .map(|(_, t)| *t);
                    gauge!(names::WAITING_OLDEST_AGE_SECONDS, "cause" => cause.as_str())
                        .set(age(since));
                }
                gauge!(names::DELAYED_OLDEST_AGE_SECONDS)
                    .set(age(stats.oldest_retrying_first_seen));
                let now_open: std::collections::HashSet<String> =
                    stats.open_breakers.iter().cloned().collect();
                for closed in open.difference(&now_open) {
                    subscriber_series().breaker_open(closed, false);
                }
                for id in &now_open {
                    subscriber_series().breaker_open(id, true);
                }
                open = now_open;
                snapshot.keep(now, stats);
            }
            Err(e) => {
                store_error("queue_stats");
                tracing::warn!(error = %e, "cannot refresh queue gauges");
            }
        }
        // Series follow the live subscribers, whichever process revoked them.
        let kept = subscriber_series().subscribers();
        if !kept.is_empty() {
            match store.gone_among(kept).await {
                Ok(gone) => {
                    for id in &gone {
                        subscriber_series().forget(id);
                        open.remove(id);
                    }
                }
                Err(e) => {
                    store_error("gone_among");
                    tracing::warn!(error = %e, "cannot tell which subscribers are gone");
                }
            }
        }
        // The exporter keeps each histogram's samples until they are drained into its buckets:
        // by a scrape, or here, so a process nobody scrapes does not grow with every request.
        handle().run_upkeep();
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Every metric hookline exports; the alert rules and the dashboard may use only these.
pub const METRIC_NAMES: &[&str] = &[
    names::READY_OLDEST_AGE_SECONDS,
    names::WAITING_OLDEST_AGE_SECONDS,
    names::DELAYED_OLDEST_AGE_SECONDS,
    names::DELIVERIES,
    names::ATTEMPTS_TOTAL,
    names::ATTEMPT_DURATION_SECONDS,
    names::ATTEMPTS_IN_FLIGHT,
    names::ATTEMPTS_SHED_TOTAL,
    names::HOSTS_AT_CAP,
    names::DEAD_LETTERS_TOTAL,
    names::REPLAYED_TOTAL,
    names::FIRST_ATTEMPT_LATENCY_SECONDS,
    names::DELIVERY_LATENCY_SECONDS,
    names::EVENTS_ACCEPTED_TOTAL,
    names::FANOUT_DELIVERIES_TOTAL,
    names::STORE_ERRORS_TOTAL,
    names::BREAKER_OPEN,
    names::SLOW_LANE_ATTEMPTS,
    names::HTTP_CONNECTIONS,
    names::HTTP_CONNECTIONS_CLOSED_TOTAL,
    names::CAPACITY_SERVICE_RATE_PER_SECOND,
    names::CAPACITY_PROJECTED_DRAIN_SECONDS,
    names::CAPACITY_UTILIZATION_RATIO,
    names::CAPACITY_DELIVERY_WINDOW_SECONDS,
    names::ADMISSION_REFUSED_TOTAL,
    names::BUILD_INFO,
    names::API_REQUESTS_TOTAL,
    names::API_REQUEST_DURATION_SECONDS,
    names::SUBSCRIBER_ATTEMPTS_TOTAL,
    names::SUBSCRIBER_DEAD_LETTERS_TOTAL,
];

#[cfg(test)]
mod tests {
    use super::METRIC_NAMES;

    /// The names a file uses, histogram series (`_bucket`, `_count`, `_sum`) reduced to theirs.
    fn used(text: &str) -> Vec<String> {
        let mut names = Vec::new();
        for (i, _) in text.match_indices("hookline_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let name = ["_bucket", "_count", "_sum"]
                .iter()
                .fold(name.clone(), |n, suffix| {
                    n.strip_suffix(suffix).map_or(n.clone(), str::to_owned)
                });
            names.push(name);
        }
        names
    }

    #[test]
    fn alerts_and_dashboard_use_only_exported_metrics() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
        for file in ["prometheus/alerts.yml", "grafana/hookline.json"] {
            let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
            let names = used(&text);
            assert!(!names.is_empty(), "{file} uses no metric");
            for name in names {
                assert!(
                    METRIC_NAMES.contains(&name.as_str()),
                    "{file} uses {name}, which hookline does not export"
                );
            }
        }
        let dashboard: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{root}/grafana/hookline.json")).unwrap(),
        )
        .unwrap();
        assert!(dashboard["panels"].as_array().unwrap().len() >= 10);
    }

    /// Every alert links its section of the runbook, and the section is there (GitHub's anchor
    /// of a heading is its text in lower case).
    #[test]
    fn every_alert_has_a_runbook_url_to_a_section_that_exists() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let alerts =
            std::fs::read_to_string(format!("{root}/deploy/prometheus/alerts.yml")).unwrap();
        let runbook = std::fs::read_to_string(format!("{root}/docs/RUNBOOK.md")).unwrap();
        let anchors: Vec<String> = runbook
            .lines()
            .filter_map(|l| l.strip_prefix("### "))
            .map(str::to_lowercase)
            .collect();
        let names: Vec<&str> = alerts
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- alert: "))
            .collect();
        let urls: Vec<&str> = alerts
            .lines()
            .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
            .map(|u| u.trim_matches('"'))
            .collect();
        assert!(!names.is_empty());
        assert_eq!(names.len(), urls.len(), "an alert without a runbook_url");
        for (name, url) in names.iter().zip(&urls) {
            assert_eq!(*url, format!("docs/RUNBOOK.md#{}", name.to_lowercase()));
            assert!(
                anchors.contains(&name.to_lowercase()),
                "no section {name} in RUNBOOK.md"
            );
        }
        assert!(!alerts.contains("job=\""), "a rule names a scrape job");
    }

    /// Every query of the dashboard follows its `job` and `instance` variables, so one dashboard
    /// serves every deployment a Prometheus scrapes.
    #[test]
    fn every_dashboard_query_is_scoped_by_job_and_instance() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
        let dashboard: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{root}/grafana/hookline.json")).unwrap(),
        )
        .unwrap();
        let variables: Vec<&str> = dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert_eq!(variables, ["datasource", "job", "instance"]);
        let scoped = r#"{job=~"$job",instance=~"$instance""#;
        let mut queries = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap();
                queries += 1;
                for prefix in ["hookline_", "process_"] {
                    for (i, _) in expr.match_indices(prefix) {
                        let name_end = expr[i..]
                            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .map_or(expr.len(), |n| i + n);
                        assert!(
                            expr[name_end..].starts_with(scoped),
                            "{expr}: {} is not scoped by $job and $instance",
                            &expr[i..name_end]
                        );
                    }
                }
            }
        }
        assert!(queries >= 10);
    }
}
