//! A destination that hangs holds at most its cap of slots, and once one of its attempts is far
//! slower than usual it gets no new slot at all, while a healthy subscriber keeps being served.
//! These tests watch real time pass (slowness is about real time), bounded to a few seconds.

use std::time::Duration;

use crate::common::*;
use hookline_testkit::sink::{router, Signatures};
use serde_json::{json, Value};

async fn sink() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router(Signatures::Unchecked))
            .await
            .unwrap()
    });
    format!("http://{addr}")
}

/// Waits until events e0.. e{n-1} reached `subscriber`.
async fn all_delivered(app: &TestApp, subscriber: &str, n: usize) {
    for e in 0..n {
        app.delivery_when(&format!("e{e}:{subscriber}"), "a delivery", |d| {
            state(d) == "delivered"
        })
        .await;
    }
}

async fn received_on(sink: &str, path: &str) -> u64 {
    let stats: Value = reqwest::get(format!("{sink}/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["per_path"][path].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_subscriber_holds_at_most_its_cap() {
    let sink = sink().await;
    let app = TestApp::start("[delivery]\nattempt_timeout = \"2s\"\nslow_after = \"10s\"").await;
    let (code, _) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "hangs", "url": format!("{sink}/hang/x"), "max_in_flight": 2})),
        )
        .await;
    assert_eq!(code, 201);
    app.subscriber("healthy", &format!("{sink}/ok/y")).await;
    for e in 0..5 {
        app.publish(&format!("e{e}"), "t").await;
    }
    all_delivered(&app, "healthy", 5).await;
    assert_eq!(
        received_on(&sink, "/hang/x").await,
        2,
        "two slots, its own cap, and no more"
    );
    let count = |state: &'static str| {
        let app = &app;
        async move {
            let (_, page) = app
                .call(
                    "GET",
                    &format!("/v1/deliveries?subscriber_id=hangs&state={state}"),
                    None,
                )
                .await;
            page["items"].as_array().unwrap().len()
        }
    };
    assert_eq!((count("in_flight").await, count("scheduled").await), (2, 3));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_gets_no_new_slot_until_it_answers() {
    let sink = sink().await;
    let app = TestApp::start(
        "[delivery]\nattempt_timeout = \"3s\"\nslow_after = \"300ms\"\n\
         [metrics]\nrefresh_interval = \"100ms\"",
    )
    .await;
    app.subscriber("hangs", &format!("{sink}/hang/x")).await;
    app.subscriber("healthy", &format!("{sink}/ok/y")).await;
    app.publish("e0", "t").await;
    eventually("the first hanging attempt", async || {
        (received_on(&sink, "/hang/x").await == 1).then_some(())
    })
    .await;
    // Let the hanging attempt become far slower than `slow_after` (real time: that is what
    // slowness is), then publish more.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for e in 1..5 {
        app.publish(&format!("e{e}"), "t").await;
    }
    all_delivered(&app, "healthy", 5).await;
    assert_eq!(
        received_on(&sink, "/hang/x").await,
        1,
        "a suspect gets no new slot"
    );
    let d = app.delivery("e4:hangs").await;
    assert_eq!(
        (state(&d), d["attempts"].as_u64()),
        ("scheduled", Some(0)),
        "no attempt spent"
    );
    // The gauges count the held-back deliveries as waiting on `slow`, not as first attempts
    // ready for a worker: the ready gauge pages when workers are stuck, and they are not.
    let overview = eventually("the gauges to see the held-back deliveries", async || {
        let (_, o) = app.call("GET", "/v1/overview", None).await;
        o["oldest_waiting_age_s"]["slow"].is_number().then_some(o)
    })
    .await;
    assert_eq!(overview["oldest_ready_age_s"], Value::Null, "{overview}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_attempts_give_their_slots_back_to_healthy_subscribers() {
    let sink = sink().await;
    // Two slots, both about to be taken by attempts that would hang for a minute.
    let app = TestApp::start(
        "[delivery]\nconcurrency = 2\nattempt_timeout = \"60s\"\nslow_after = \"200ms\"",
    )
    .await;
    for id in ["hangs-1", "hangs-2"] {
        let url = format!("{sink}/hang/{id}");
        let body = json!({"id": id, "url": url, "event_types": ["h"]});
        assert_eq!(app.call("POST", "/v1/subscribers", Some(body)).await.0, 201);
    }
    let body = json!({"id": "healthy", "url": format!("{sink}/ok/y"), "event_types": ["t"]});
    assert_eq!(app.call("POST", "/v1/subscribers", Some(body)).await.0, 201);

    app.publish("hanging", "h").await;
    eventually("both hanging attempts", async || {
        let started =
            received_on(&sink, "/hang/hangs-1").await + received_on(&sink, "/hang/hangs-2").await;
        (started == 2).then_some(())
    })
    .await;
    for e in 0..5 {
        app.publish(&format!("e{e}"), "t").await;
    }
    // Served while both hanging attempts are still in flight: they moved to the slow lane.
    all_delivered(&app, "healthy", 5).await;
    for id in ["hanging:hangs-1", "hanging:hangs-2"] {
        assert_eq!(state(&app.delivery(id).await), "in_flight");
    }
    // No clean stop: it would wait out the hanging attempts.
}

/// A full slow lane sheds the attempt furthest past its subscriber's usual answer time: it ends
/// as a timeout (retryable; with one attempt allowed, dead `attempts_exhausted`) that says it
/// was shed, and is counted; a healthy subscriber keeps being served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_slow_lane_sheds_the_attempt_furthest_past_its_usual_time() {
    let sink = sink().await;
    // One slot for subscribers that have not answered, two places in the lane, and four
    // destinations that never answer: the fourth can only get in by shedding another.
    let app = TestApp::start(
        "[delivery]\nconcurrency = 8\nslow_lane = 2\nattempt_timeout = \"60s\"\n\
         [retry]\nmax_attempts = 1",
    )
    .await;
    for i in 0..4 {
        let id = format!("hangs-{i}");
        let body = json!({"id": id, "url": format!("{sink}/hang/{id}"), "event_types": ["h"]});
        assert_eq!(app.call("POST", "/v1/subscribers", Some(body)).await.0, 201);
    }
    let body = json!({"id": "healthy", "url": format!("{sink}/ok/y"), "event_types": ["t"]});
    assert_eq!(app.call("POST", "/v1/subscribers", Some(body)).await.0, 201);
    app.publish("hanging", "h").await;
    let shed = eventually("an attempt shed from the full lane", async || {
        for i in 0..4 {
            let d = app.delivery(&format!("hanging:hangs-{i}")).await;
            if state(&d) == "dead" {
                return Some(d);
            }
        }
        None
    })
    .await;
    assert_eq!(shed["dead_reason"], "attempts_exhausted", "{shed}");
    let attempt = &shed["attempt_history"][0];
    assert_eq!(attempt["outcome"], "retryable", "{shed}");
    assert!(
        attempt["error"].as_str().unwrap().starts_with("shed after"),
        "{shed}"
    );
    for e in 0..3 {
        app.publish(&format!("e{e}"), "t").await;
    }
    all_delivered(&app, "healthy", 3).await;
    let metrics = app.text("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hookline_attempts_shed_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    // No clean stop: it would wait out the hanging attempts.
}
