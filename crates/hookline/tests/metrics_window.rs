//! Dead letters by subscriber count every way a subscriber's deliveries die while it is down:
//! attempts that fail, and deliveries whose window ends while they wait behind its open breaker
//! (the window sweep's, never attempted again). Its own test binary: the recorder and the series
//! are process-wide.

mod common;

use std::time::Duration;

use common::*;

/// The sum of the samples of `name` whose labels include `label`.
fn total(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_subscriber_down_behind_its_breaker_shows_its_dead_letters_by_name() {
    const EVENTS: usize = 12;
    let rx = Receiver::start(|_, _| 503).await;
    let app = TestApp::start(
        "[retry]\nbase_delay = \"200ms\"\nmax_delay = \"2m\"\nmax_attempts = 50\n\
         delivery_window = \"4s\"\n",
    )
    .await;
    app.subscriber("down", &rx.url("/down")).await;
    for e in 0..EVENTS {
        app.publish(&format!("e{e}"), "t").await;
    }
    app.until_breaker_open_and_idle("down").await;
    app.clock.advance(Duration::from_millis(4_100));
    let text = eventually("every death counted by subscriber", async || {
        let text = app.text("/metrics").await;
        let by_subscriber = total(
            &text,
            "hookline_subscriber_dead_letters_total",
            "subscriber=\"down\"",
        );
        (by_subscriber == EVENTS as f64).then_some(text)
    })
    .await;
    assert_eq!(
        total(&text, "hookline_dead_letters_total", ""),
        EVENTS as f64,
        "the same deaths as by reason:\n{text}"
    );
    let expired = total(
        &text,
        "hookline_subscriber_dead_letters_total",
        "reason=\"window_expired\"",
    );
    assert!(expired > 0.0, "the sweep's deaths are counted:\n{text}");
    let attempts = total(
        &text,
        "hookline_subscriber_attempts_total",
        "outcome=\"retryable\"",
    );
    assert_eq!(attempts, rx.received().len() as f64, "{text}");
    app.stop().await;
}
