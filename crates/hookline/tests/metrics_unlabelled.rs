//! `metrics.per_subscriber_labels = false` and `per_tenant_labels = false`: latency without a
//! subscriber label and nothing by tenant, for fleets too large for one series per subscriber
//! or tenant. Its own test binary: the recorder is process-wide.

mod common;

use common::*;

#[tokio::test]
async fn latency_without_subscriber_labels() {
    let rx = Receiver::start(|_, _| 200).await;
    let app =
        TestApp::start("[metrics]\nper_subscriber_labels = false\nper_tenant_labels = false").await;
    app.subscriber("s1", &rx.url("/ok")).await;
    app.publish("e1", "t").await;
    app.delivery_when("e1:s1", "delivered", |d| state(d) == "delivered")
        .await;
    let text = app.text("/metrics").await;
    let counts: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hookline_delivery_latency_seconds_count"))
        .collect();
    assert_eq!(
        counts,
        ["hookline_delivery_latency_seconds_count 1"],
        "{text}"
    );
    assert!(!text.contains("subscriber=\""), "{text}");
    assert!(!text.contains("tenant=\""), "{text}");
    app.stop().await;
}
