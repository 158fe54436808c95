//! Metric series labelled by subscriber follow the live subscribers: a revoked subscriber's
//! series leave `/metrics` (they used to stay for good: 13.9 MB after 10,000 revoked
//! subscribers). Its own test binary: the recorder and the series are process-wide.

mod common;

use common::*;

/// The lines of `/metrics` that name `subscriber`.
fn naming(text: &str, subscriber: &str) -> Vec<String> {
    let label = format!("subscriber=\"{subscriber}\"");
    text.lines()
        .filter(|l| l.contains(&label))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_subscribers_series_leave_metrics() {
    const REVOKED: usize = 20;
    let rx = Receiver::start(|path, _| if path == "/down" { 503 } else { 200 }).await;
    let app =
        TestApp::start("[metrics]\nrefresh_interval = \"20ms\"\n[breaker]\nfailures = 1").await;
    for n in 0..REVOKED {
        app.subscriber(&format!("revoked-{n}"), &rx.url("/ok"))
            .await;
    }
    app.subscriber("revoked-down", &rx.url("/down")).await;
    app.subscriber("kept", &rx.url("/ok")).await;
    app.publish("e1", "t").await;
    let text = eventually("every subscriber's series", async || {
        let text = app.text("/metrics").await;
        let all_delivered = (0..REVOKED)
            .all(|n| !naming(&text, &format!("revoked-{n}")).is_empty())
            && !naming(&text, "kept").is_empty();
        let breaker = "hookline_breaker_open{subscriber=\"revoked-down\"} 1";
        (all_delivered && text.lines().any(|l| l == breaker)).then_some(text)
    })
    .await;
    assert!(
        naming(&text, "revoked-0")
            .iter()
            .any(|l| l.starts_with("hookline_delivery_latency_seconds_count")),
        "{text}"
    );
    for n in 0..REVOKED {
        let (status, _) = app
            .call("DELETE", &format!("/v1/subscribers/revoked-{n}"), None)
            .await;
        assert_eq!(status, 200);
    }
    let (status, _) = app
        .call("DELETE", "/v1/subscribers/revoked-down", None)
        .await;
    assert_eq!(status, 200);
    let text = eventually("the revoked subscribers' series to go", async || {
        let text = app.text("/metrics").await;
        (!text.contains("subscriber=\"revoked-")).then_some(text)
    })
    .await;
    assert!(
        naming(&text, "kept")
            .iter()
            .any(|l| l.starts_with("hookline_attempt_duration_seconds_count")),
        "a live subscriber keeps its series:\n{text}"
    );
    app.stop().await;
}
