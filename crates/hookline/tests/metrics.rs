//! `GET /metrics`: the names, labels and values move as deliveries happen. Its own test binary,
//! so the process-wide recorder holds only what this test did.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

/// The value of the first sample of `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn scrape(app: &TestApp) -> String {
    let r = app
        .http
        .get(format!("{}/metrics", app.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    r.text().await.unwrap()
}

#[tokio::test]
async fn metrics_move_as_deliveries_happen() {
    let rx = Receiver::start(|path, n| match path {
        "/ok" => 200,
        "/bad" => 400,
        _ if n == 1 => 503,
        _ => 200,
    })
    .await;
    let app = TestApp::start(
        "[metrics]\nrefresh_interval = \"20ms\"\n[delivery]\nslow_after = \"100ms\"",
    )
    .await;
    for (id, path) in [("ok", "/ok"), ("bad", "/bad"), ("flaky", "/flaky")] {
        app.subscriber(id, &rx.url(path)).await;
    }
    app.publish("e1", "t").await;
    app.delivery_when("e1:flaky", "the first failure", |d| {
        state(d) == "scheduled" && d["attempts"] == 1
    })
    .await;
    app.delivery_when("e1:bad", "the permanent failure", |d| state(d) == "dead")
        .await;
    app.delivery_when("e1:ok", "the delivery", |d| state(d) == "delivered")
        .await;

    // Half a second on: the retry (1 to 2 s away) still waits; the gauges see it.
    app.clock.advance(Duration::from_millis(500));
    let text = eventually("the gauges to refresh", async || {
        let text = scrape(&app).await;
        (sample(&text, "hookline_delayed_oldest_age_seconds", &[]) == Some(0.5)).then_some(text)
    })
    .await;
    for name in [
        "hookline_ready_oldest_age_seconds",
        "hookline_waiting_oldest_age_seconds",
        "hookline_delayed_oldest_age_seconds",
        "hookline_deliveries",
        "hookline_attempts_total",
        "hookline_dead_letters_total",
        "hookline_first_attempt_latency_seconds",
        "hookline_delivery_latency_seconds",
        "hookline_events_accepted_total",
        "hookline_fanout_deliveries_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{text}"
        );
    }
    assert_eq!(
        sample(&text, "hookline_deliveries", &[("state", "scheduled")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_deliveries", &[("state", "delivered")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_deliveries", &[("state", "dead")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_ready_oldest_age_seconds", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "hookline_events_accepted_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_fanout_deliveries_total", &[]),
        Some(3.0)
    );
    assert_eq!(attempts_in(&text, "1", "success"), Some(1.0));
    assert_eq!(attempts_in(&text, "1", "permanent"), Some(1.0));
    assert_eq!(attempts_in(&text, "1", "retryable"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            "hookline_dead_letters_total",
            &[("reason", "permanent_failure")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_first_attempt_latency_seconds_count", &[]),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "hookline_delivery_latency_seconds_count",
            &[("subscriber", "ok")]
        ),
        Some(1.0)
    );
    // A subscriber failing every delivery shows by name: its attempts and its dead letters.
    let bad = [("subscriber", "bad"), ("outcome", "permanent")];
    assert_eq!(
        sample(&text, "hookline_subscriber_attempts_total", &bad),
        Some(1.0)
    );
    let flaky = [("subscriber", "flaky"), ("outcome", "retryable")];
    assert_eq!(
        sample(&text, "hookline_subscriber_attempts_total", &flaky),
        Some(1.0)
    );
    eventually(
        "bad's dead letter, counted once its completion commits",
        async || {
            let text = scrape(&app).await;
            let labels = [("subscriber", "bad"), ("reason", "permanent_failure")];
            (sample(&text, "hookline_subscriber_dead_letters_total", &labels) == Some(1.0))
                .then_some(())
        },
    )
    .await;
    // What the build and the process say about themselves.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        sample(&text, "hookline_build_info", &[("version", version)]),
        Some(1.0)
    );
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            sample(&text, name, &[]).is_some_and(|v| v > 0.0),
            "no {name}:\n{text}"
        );
    }
    // API requests by route template, method and status class: the subscribers created, the
    // scrapes before this one.
    let created = [
        ("route", "/v1/subscribers"),
        ("method", "POST"),
        ("status_class", "2xx"),
    ];
    assert_eq!(
        sample(&text, "hookline_api_requests_total", &created),
        Some(3.0)
    );
    assert!(
        sample(
            &text,
            "hookline_api_request_duration_seconds_count",
            &created
        ) == Some(3.0)
    );
    let scraped = [("route", "/metrics"), ("status_class", "2xx")];
    assert!(sample(&text, "hookline_api_requests_total", &scraped).is_some_and(|n| n >= 1.0));

    // The retry succeeds; a replay and a revocation show up too.
    app.advance_to_next_attempt("e1:flaky").await;
    app.delivery_when("e1:flaky", "the retry", |d| state(d) == "delivered")
        .await;
    rx.set_behaviour(|_, _| 200);
    // Replayed an hour after it was accepted: its latency runs from the replay.
    app.clock.advance(Duration::from_secs(3600));
    let (code, _) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "limit": 5})),
        )
        .await;
    assert_eq!(code, 202);
    app.delivery_when("e1:bad", "the replay", |d| state(d) == "delivered")
        .await;
    let text = scrape(&app).await;
    assert_eq!(
        sample(
            &text,
            "hookline_delivery_latency_seconds_bucket",
            &[("subscriber", "bad"), ("le", "5")]
        ),
        Some(1.0),
        "measured from the replay, not from the acceptance an hour ago"
    );
    app.call(
        "PATCH",
        "/v1/subscribers/ok",
        Some(json!({"status": "paused"})),
    )
    .await;
    app.publish("e2", "t").await;
    app.delivery_when("e2:flaky", "e2", |d| state(d) == "delivered")
        .await;
    app.call("DELETE", "/v1/subscribers/ok", None).await;
    let (code, _) = app.call("GET", "/v1/subscribers/nobody", None).await;
    assert_eq!(code, 404);
    let (code, _) = app.call("GET", "/v1/no/such/route", None).await;
    assert_eq!(code, 404);
    let text = eventually("the counters", async || {
        let text = scrape(&app).await;
        (sample(&text, "hookline_deliveries", &[("state", "scheduled")]) == Some(0.0))
            .then_some(text)
    })
    .await;
    assert_eq!(attempts_in(&text, "2", "success"), Some(1.0));
    assert_eq!(sample(&text, "hookline_replayed_total", &[]), Some(1.0));
    // By template, never by the id in the path; no route is `unmatched`.
    let changed = [
        ("route", "/v1/subscribers/{id}"),
        ("method", "PATCH"),
        ("status_class", "2xx"),
    ];
    assert_eq!(
        sample(&text, "hookline_api_requests_total", &changed),
        Some(1.0)
    );
    let missing = [
        ("route", "/v1/subscribers/{id}"),
        ("method", "GET"),
        ("status_class", "4xx"),
    ];
    assert_eq!(
        sample(&text, "hookline_api_requests_total", &missing),
        Some(1.0)
    );
    let unmatched = [("route", "unmatched"), ("status_class", "4xx")];
    assert_eq!(
        sample(&text, "hookline_api_requests_total", &unmatched),
        Some(1.0)
    );
    assert!(!text.contains("route=\"/v1/subscribers/ok\""), "{text}");
    assert_eq!(
        sample(
            &text,
            "hookline_dead_letters_total",
            &[("reason", "subscription_revoked")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_events_accepted_total", &[]),
        Some(2.0)
    );

    // Attempts far slower than usual wait in the slow lane, and leave it when they end.
    let gate = rx.hold().await;
    app.publish("e3", "t").await;
    eventually("two attempts in the slow lane", async || {
        let text = scrape(&app).await;
        let in_lane = [("class", "slow_lane")];
        (sample(&text, "hookline_slow_lane_attempts", &[]) == Some(2.0)
            && sample(&text, "hookline_attempts_in_flight", &in_lane) == Some(2.0))
        .then_some(())
    })
    .await;
    drop(gate);
    eventually("the slow lane to empty", async || {
        let text = scrape(&app).await;
        (sample(&text, "hookline_slow_lane_attempts", &[]) == Some(0.0)).then_some(())
    })
    .await;
    // Every attempt's duration, by outcome (and subscriber); none was shed.
    let text = scrape(&app).await;
    let count = |outcome| {
        let labels = [("outcome", outcome), ("subscriber", "flaky")];
        sample(&text, "hookline_attempt_duration_seconds_count", &labels)
    };
    assert_eq!(
        (count("retryable"), count("success")),
        (Some(1.0), Some(3.0))
    );
    assert_eq!(sample(&text, "hookline_attempts_shed_total", &[]), None);

    // A tenant's publishes, attempts and first-attempt latency are counted under its name.
    app.call("POST", "/v1/tenants", Some(json!({"id": "acme"})))
        .await;
    let (code, _) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "acme-ok", "url": rx.url("/ok"), "tenant_id": "acme"})),
        )
        .await;
    assert_eq!(code, 201);
    let event = json!({"id": "e4", "type": "t", "payload": {}, "tenant_id": "acme"});
    assert_eq!(app.call("POST", "/v1/events", Some(event)).await.0, 202);
    app.delivery_when("e4:acme-ok", "delivered", |d| state(d) == "delivered")
        .await;
    let text = scrape(&app).await;
    let acme = [("tenant", "acme")];
    assert_eq!(
        sample(&text, "hookline_events_accepted_total", &acme),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_fanout_deliveries_total", &acme),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hookline_first_attempt_latency_seconds_count", &acme),
        Some(1.0)
    );
    let labels = [("ordinal", "1"), ("outcome", "success"), ("tenant", "acme")];
    assert_eq!(sample(&text, "hookline_attempts_total", &labels), Some(1.0));
    promtool_accepts(&text);
    app.stop().await;
}

fn attempts_in(text: &str, ordinal: &str, outcome: &str) -> Option<f64> {
    sample(
        text,
        "hookline_attempts_total",
        &[("ordinal", ordinal), ("outcome", outcome)],
    )
}

/// Prometheus's own linter (`promtool check metrics`, installed by `.ci/run`) finds nothing to
/// say about the exposition: names, units, help texts, histogram series.
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let Some(promtool) = external_tool("promtool") else {
        return;
    };
    let mut check = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
}
