//! Every delivery path (success, retry, dead letter, replay, rescue, duplicates), end to end: real HTTP to a local receiver, the real SQLite store,
//! and a manual clock, so retry delays pass when the test says so and never by sleeping.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

fn ms(rfc3339: &Value) -> i64 {
    hookline_testkit::rfc3339_ms(rfc3339).unwrap()
}

fn attempts(d: &Value) -> u64 {
    d["attempts"].as_u64().unwrap()
}

/// The wait the policy chose after the last failed attempt (the clock did not move meanwhile).
fn last_delay_ms(d: &Value) -> i64 {
    let history = d["attempt_history"].as_array().unwrap();
    ms(&d["next_attempt_at"]) - ms(&history.last().unwrap()["started_at"])
}

fn verify(secret: &str, r: &Received) {
    standardwebhooks::Webhook::new(secret)
        .unwrap()
        .verify(&r.body, &r.headers())
        .expect("the reference Standard Webhooks verifier accepts the signature");
}

#[tokio::test]
async fn a_clean_first_attempt() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    let sub = app
        .subscriber("subscriber-731", &rx.url("/hooks/731"))
        .await;
    let secret = sub["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(sub["status"], "active");
    let receipt = app.publish("SHP-20418", "shipment.out_for_delivery").await;
    assert_eq!(
        receipt,
        json!({"id": "SHP-20418", "tenant_id": null, "type": "shipment.out_for_delivery",
               "ordering_key": null, "deliveries": 1, "unversioned": 0})
    );

    let id = "SHP-20418:subscriber-731";
    let d = app
        .delivery_when(id, "delivered", |d| state(d) == "delivered")
        .await;
    assert_eq!(attempts(&d), 1);
    assert_eq!(d["attempt_history"][0]["outcome"], "success");
    assert_eq!(d["attempt_history"][0]["status"], 200);
    // The policy that decided, on the attempt and (its latest) on the delivery.
    assert_eq!(d["attempt_history"][0]["policy"], "default");
    assert_eq!(d["policy"], "default");
    assert_eq!(d["next_attempt_at"], Value::Null);

    let got = rx.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.path, "/hooks/731");
    assert_eq!(r.webhook_id, id);
    assert_eq!(r.attempt, "1");
    assert_eq!(r.content_type, "application/json");
    assert!(r.user_agent.starts_with("hookline/"), "{}", r.user_agent);
    verify(secret, r);
    let body = r.json();
    assert_eq!(body["id"], "SHP-20418");
    assert_eq!(body["type"], "shipment.out_for_delivery");
    assert_eq!(body["payload_version"], 1);
    assert_eq!(
        body["data"],
        json!({"shipment": "SHP-20418", "status": "out_for_delivery"})
    );
    let (_, event) = app.call("GET", "/v1/events/SHP-20418", None).await;
    assert_eq!(body["timestamp"], event["accepted_at"]);
    assert_eq!(event["counts"]["delivered"], 1);
    app.stop().await;
}

#[tokio::test]
async fn a_retry_followed_by_success() {
    let rx = Receiver::start(|_, n| if n <= 2 { 503 } else { 200 }).await;
    let app = TestApp::start("[retry]\nbase_delay = \"2s\"\njitter = \"equal\"").await;
    let secret = app.subscriber("s1", &rx.url("/flaky")).await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    app.publish("e1", "t").await;
    let id = "e1:s1";

    let d = app
        .delivery_when(id, "first failure", |d| {
            attempts(d) == 1 && state(d) == "scheduled"
        })
        .await;
    assert_eq!(d["attempt_history"][0]["outcome"], "retryable");
    assert_eq!(d["attempt_history"][0]["status"], 503);
    // Equal jitter of a 2 s base: the first wait is within [1 s, 2 s].
    assert!((1000..=2000).contains(&last_delay_ms(&d)), "{d}");

    app.advance_to_next_attempt(id).await;
    let d = app
        .delivery_when(id, "second failure", |d| {
            attempts(d) == 2 && state(d) == "scheduled"
        })
        .await;
    assert!((2000..=4000).contains(&last_delay_ms(&d)), "{d}");

    app.advance_to_next_attempt(id).await;
    let d = app
        .delivery_when(id, "delivered", |d| state(d) == "delivered")
        .await;
    assert_eq!(attempts(&d), 3);
    let outcomes: Vec<&str> = d["attempt_history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["retryable", "retryable", "success"]);

    let got = rx.received_for(id);
    assert_eq!(got.len(), 3);
    let numbers: Vec<&str> = got.iter().map(|r| r.attempt.as_str()).collect();
    assert_eq!(numbers, ["1", "2", "3"]);
    for r in &got {
        verify(&secret, r);
    }
    app.stop().await;
}

#[tokio::test]
async fn a_permanent_failure_goes_straight_to_the_dead_letter_queue() {
    let rx = Receiver::start(|_, _| 400).await;
    let app = TestApp::start("").await;
    app.subscriber("s1", &rx.url("/bad")).await;
    app.publish("e1", "t").await;
    let d = app
        .delivery_when("e1:s1", "dead", |d| state(d) == "dead")
        .await;
    assert_eq!(d["dead_reason"], "permanent_failure");
    assert_eq!(attempts(&d), 1);
    assert_eq!(d["next_attempt_at"], Value::Null);
    assert_eq!(d["attempt_history"][0]["outcome"], "permanent");
    assert_eq!(d["attempt_history"][0]["status"], 400);

    let (_, dead) = app
        .call("GET", "/v1/dead-letters?reason=permanent_failure", None)
        .await;
    let items = dead["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["delivery_id"], "e1:s1");
    assert_eq!(items[0]["event_type"], "t");
    assert_eq!(items[0]["payload_version"], 1);
    assert_eq!(items[0]["attempt_history"].as_array().unwrap().len(), 1);
    assert_eq!(rx.received_for("e1:s1").len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn an_exhausted_retry_budget() {
    let rx = Receiver::start(|_, _| 503).await;
    let app = TestApp::start("[retry]\nmax_attempts = 3").await;
    app.subscriber("s1", &rx.url("/down")).await;
    app.publish("e1", "t").await;
    let id = "e1:s1";
    for n in 1..3 {
        app.delivery_when(id, "a failure", |d| {
            attempts(d) == n && state(d) == "scheduled"
        })
        .await;
        app.advance_to_next_attempt(id).await;
    }
    let d = app.delivery_when(id, "dead", |d| state(d) == "dead").await;
    assert_eq!(d["dead_reason"], "attempts_exhausted");
    assert_eq!(attempts(&d), 3);
    assert_eq!(d["attempt_history"].as_array().unwrap().len(), 3);
    assert_eq!(rx.received_for(id).len(), 3);
    app.stop().await;
}

#[tokio::test]
async fn gone_revokes_the_subscription() {
    let rx = Receiver::start(|path, _| if path == "/gone" { 410 } else { 200 }).await;
    // One slot per subscriber: the second delivery waits while the first gets its 410.
    let app = TestApp::start("[delivery]\nmax_in_flight_per_subscriber = 1").await;
    app.subscriber("gone", &rx.url("/gone")).await;
    app.subscriber("fine", &rx.url("/fine")).await;
    app.publish("e1", "t").await;
    app.publish("e2", "t").await;

    let (_, s) = eventually("revocation", async || {
        let (code, s) = app.call("GET", "/v1/subscribers/gone", None).await;
        (s["status"] == "revoked").then_some((code, s))
    })
    .await;
    assert!(s.get("secret").is_none(), "secrets stay out of reads");
    let mut reasons = Vec::new();
    for id in ["e1:gone", "e2:gone"] {
        let d = app.delivery_when(id, "dead", |d| state(d) == "dead").await;
        reasons.push((d["dead_reason"].as_str().unwrap().to_owned(), attempts(&d)));
    }
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("permanent_failure".to_owned(), 1),
            ("subscription_revoked".to_owned(), 0)
        ]
    );
    assert_eq!(
        rx.received().iter().filter(|r| r.path == "/gone").count(),
        1
    );
    // Never sent to again: a new event fans out to the remaining subscriber only.
    assert_eq!(app.publish("e3", "t").await["deliveries"], 1);
    app.stop().await;
}

#[tokio::test]
async fn the_delivery_window_ends_retries() {
    let rx = Receiver::start(|_, _| 503).await;

    // The window closes while the retry waits: window_expired, without a second attempt (an
    // attempt in flight at the window's end would be decided by its outcome instead).
    let app = TestApp::start(
        "[retry]\nbase_delay = \"2s\"\nmax_delay = \"2s\"\ndelivery_window = \"3s\"\njitter = \"none\"",
    )
    .await;
    app.subscriber("s1", &rx.url("/down")).await;
    app.publish("e1", "t").await;
    let d = app
        .delivery_when("e1:s1", "first failure", |d| {
            attempts(d) == 1 && state(d) == "scheduled"
        })
        .await;
    app.clock.set(ms(&d["first_seen"]) + 10_000);
    let d = app
        .delivery_when("e1:s1", "dead", |d| state(d) == "dead")
        .await;
    assert_eq!(d["dead_reason"], "window_expired");
    assert_eq!(attempts(&d), 1);
    assert_eq!(
        d["waiting_on"],
        Value::Null,
        "it waited for its own retry time"
    );
    assert_eq!(rx.received_for("e1:s1").len(), 1);
    app.stop().await;

    // A next delay that would end past the window: next_delay_exceeds_window.
    let app = TestApp::start(
        "[retry]\nbase_delay = \"4s\"\nmax_delay = \"4s\"\ndelivery_window = \"5s\"\njitter = \"none\"",
    )
    .await;
    app.subscriber("s1", &rx.url("/down")).await;
    app.publish("e2", "t").await;
    let d = app
        .delivery_when("e2:s1", "first failure", |d| {
            attempts(d) == 1 && state(d) == "scheduled"
        })
        .await;
    assert_eq!(last_delay_ms(&d), 4000);
    app.advance_to_next_attempt("e2:s1").await;
    let d = app
        .delivery_when("e2:s1", "dead", |d| state(d) == "dead")
        .await;
    assert_eq!(d["dead_reason"], "next_delay_exceeds_window");
    assert_eq!(attempts(&d), 2);
    app.stop().await;
}

/// A worker delivers, but its confirmation is lost (here: the answer comes only after its lease
/// ran out and the delivery was rescued and retried). The subscriber sees the same webhook-id
/// twice and, deduplicating by it, changes its state once.
#[tokio::test]
async fn a_duplicate_delivery_changes_subscriber_state_once() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("[delivery]\nattempt_timeout = \"5s\"").await;
    app.subscriber("s1", &rx.url("/dedup")).await;
    let gate = rx.hold().await;
    let sent_at =
        hookline_engine::clock::rfc3339(hookline_engine::clock::Clock::now_ms(&app.clock));
    app.publish("e1", "t").await;
    eventually("the first attempt to arrive", async || {
        (rx.received().len() == 1).then_some(())
    })
    .await;
    // Past the lease (attempt timeout + 5 s): the attempt is presumed lost and rescued.
    app.clock.advance(Duration::from_secs(11));
    let d = app
        .delivery_when("e1:s1", "rescue", |d| {
            state(d) == "scheduled" && attempts(d) == 1
        })
        .await;
    let lost = &d["attempt_history"][0];
    assert_eq!(lost["outcome"], "lost");
    assert_eq!(
        lost["started_at"],
        sent_at.as_str(),
        "when it was sent: {d}"
    );
    assert!(lost.get("status").is_none());
    assert!(
        lost["error"].as_str().unwrap().contains("lease expired"),
        "{d}"
    );
    app.advance_to_next_attempt("e1:s1").await;
    app.delivery_when("e1:s1", "delivered", |d| state(d) == "delivered")
        .await;
    drop(gate); // the first, stale attempt now answers 200 too
    eventually("the stale answer", async || {
        (rx.duplicates() == 1).then_some(())
    })
    .await;

    // The subscriber got the delivery twice, under one webhook-id and with the same body, so
    // its deduplication turned the two into one state change.
    let got = rx.received_for("e1:s1");
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].body, got[1].body,
        "a duplicate carries the same event"
    );
    assert_eq!(
        rx.state_changes(),
        vec![("e1:s1".to_owned(), got[0].body.clone())],
        "one visible state change"
    );
    let app = app.restart().await; // flushes every pending completion first
    let d = app.delivery("e1:s1").await;
    assert_eq!(state(&d), "delivered");
    assert_eq!(
        d["attempt_history"].as_array().unwrap().len(),
        2,
        "the stale completion changed nothing: {d}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_restart_does_not_change_run_at() {
    let rx = Receiver::start(|_, n| if n == 1 { 503 } else { 200 }).await;
    let app = TestApp::start("").await;
    app.subscriber("s1", &rx.url("/later")).await;
    app.publish("e1", "t").await;
    let before = app
        .delivery_when("e1:s1", "first failure", |d| {
            state(d) == "scheduled" && attempts(d) == 1
        })
        .await;
    let app = app.restart().await;
    let after = app.delivery("e1:s1").await;
    assert_eq!(
        before, after,
        "run_at, attempts and first_seen survive a restart"
    );
    app.advance_to_next_attempt("e1:s1").await;
    let d = app
        .delivery_when("e1:s1", "delivered", |d| state(d) == "delivered")
        .await;
    assert_eq!(d["first_seen"], before["first_seen"]);
    let ids: Vec<String> = rx.received().into_iter().map(|r| r.webhook_id).collect();
    assert_eq!(ids, ["e1:s1", "e1:s1"]);
    app.stop().await;
}

#[tokio::test]
async fn a_paused_subscriber_waits_without_spending_attempts() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    app.subscriber("s1", &rx.url("/p")).await;
    app.subscriber("s2", &rx.url("/q")).await;
    let (code, s) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"status": "paused"})),
        )
        .await;
    assert_eq!((code, s["status"].as_str()), (200, Some("paused")));
    app.publish("e1", "t").await;
    // The active subscriber's delivery, due at the same moment, proves a claim looked at both.
    app.delivery_when("e1:s2", "the active subscriber's delivery", |d| {
        state(d) == "delivered"
    })
    .await;
    let d = app.delivery("e1:s1").await;
    assert_eq!((state(&d), attempts(&d)), ("scheduled", 0));
    app.call(
        "PATCH",
        "/v1/subscribers/s1",
        Some(json!({"status": "active"})),
    )
    .await;
    app.delivery_when("e1:s1", "delivered after resume", |d| {
        state(d) == "delivered"
    })
    .await;
    assert_eq!(rx.received_for("e1:s1").len(), 1);
    app.stop().await;
}

/// A subscriber that answers 503 with `Retry-After: 120` is not retried before two minutes,
/// although our own backoff would have come back after one or two seconds.
#[tokio::test]
async fn retry_after_is_honoured() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let busy = axum::Router::new().fallback(|| async {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "120")],
            "busy",
        )
    });
    tokio::spawn(async move { axum::serve(listener, busy).await.unwrap() });
    let app = TestApp::start("").await;
    app.subscriber("s1", &format!("http://{addr}/busy")).await;
    app.publish("e1", "t").await;
    let d = app
        .delivery_when("e1:s1", "the 503", |d| {
            attempts(d) == 1 && state(d) == "scheduled"
        })
        .await;
    assert_eq!(last_delay_ms(&d), 120_000, "{d}");
    assert_eq!(d["attempt_history"][0]["response_body"], "busy");
    app.stop().await;
}

/// What a subscriber answered is kept with the attempt, up to 4 KiB.
#[tokio::test]
async fn the_start_of_each_answer_is_kept() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let verbose = axum::Router::new()
        .fallback(|| async { (axum::http::StatusCode::BAD_REQUEST, "é".repeat(6_000)) });
    tokio::spawn(async move { axum::serve(listener, verbose).await.unwrap() });
    let app = TestApp::start("").await;
    app.subscriber("s1", &format!("http://{addr}/verbose"))
        .await;
    app.publish("e1", "t").await;
    let d = app
        .delivery_when("e1:s1", "dead", |d| state(d) == "dead")
        .await;
    let kept = d["attempt_history"][0]["response_body"].as_str().unwrap();
    assert!(
        kept.len() <= 4096 + 3 && kept.len() >= 4090,
        "{}",
        kept.len()
    );
    assert!(kept.starts_with("éé"));
    let (_, dead) = app.call("GET", "/v1/dead-letters", None).await;
    assert_eq!(
        dead["items"][0]["attempt_history"][0]["response_body"],
        kept
    );
    app.stop().await;
}

/// A rotated secret: during the grace period every request carries both signatures, and the
/// reference verifier accepts it with either secret; afterwards only the new one verifies.
#[tokio::test]
async fn secret_rotation_signs_with_both_during_the_grace_period() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    let old = app.subscriber("s1", &rx.url("/r")).await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, rotated) = app
        .call(
            "POST",
            "/v1/subscribers/s1/secret/rotate",
            Some(json!({"grace_period": "60s"})),
        )
        .await;
    assert_eq!(code, 200, "{rotated}");
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    let (_, listed) = app.call("GET", "/v1/subscribers", None).await;
    assert!(
        !listed.to_string().contains("whsec_"),
        "no secret in lists: {listed}"
    );

    app.publish("e1", "t").await;
    app.delivery_when("e1:s1", "delivered", |d| state(d) == "delivered")
        .await;
    let during = &rx.received_for("e1:s1")[0];
    assert_eq!(
        during.signature.split(' ').count(),
        2,
        "{}",
        during.signature
    );
    verify(&new, during);
    verify(&old, during);

    app.clock.advance(Duration::from_secs(61));
    app.publish("e2", "t").await;
    app.delivery_when("e2:s1", "delivered", |d| state(d) == "delivered")
        .await;
    let after = &rx.received_for("e2:s1")[0];
    assert_eq!(after.signature.split(' ').count(), 1);
    verify(&new, after);
    assert!(standardwebhooks::Webhook::new(&old)
        .unwrap()
        .verify(&after.body, &after.headers())
        .is_err());

    for (body, status) in [
        (json!({"grace_period": "soon"}), 422),
        (json!({"grace_period": "90d"}), 422),
        (json!({"secret": "nope"}), 422),
        (json!({"colour": 1}), 422),
    ] {
        let (code, answer) = app
            .call(
                "POST",
                "/v1/subscribers/s1/secret/rotate",
                Some(body.clone()),
            )
            .await;
        assert_eq!(code, status, "{body}: {answer}");
    }
    assert_eq!(
        app.call(
            "POST",
            "/v1/subscribers/ghost/secret/rotate",
            Some(json!({}))
        )
        .await
        .0,
        404
    );
    let (_, still) = app.call("GET", "/v1/subscribers/s1/secret", None).await;
    assert_eq!(
        still["secret"],
        new.as_str(),
        "refused rotations changed nothing"
    );
    app.stop().await;
}

/// The circuit breaker, end to end: after `failures` consecutive retryable failures the
/// subscriber is open (visible on GET), new deliveries wait for the half-open time without
/// spending attempts, and a failed probe opens it again for twice as long.
#[tokio::test]
async fn the_breaker_opens_and_defers_without_spending_attempts() {
    let rx = Receiver::start(|_, _| 503).await;
    let app = TestApp::start("[breaker]\nfailures = 2\ncool_down = \"1m\"").await;
    app.subscriber("s1", &rx.url("/down")).await;
    for e in ["e1", "e2"] {
        app.publish(e, "t").await;
        app.delivery_when(&format!("{e}:s1"), "a failure", |d| {
            attempts(d) == 1 && state(d) == "scheduled"
        })
        .await;
    }
    let (_, s) = app.call("GET", "/v1/subscribers/s1", None).await;
    assert_eq!(s["breaker"]["state"], "open", "{s}");
    assert_eq!(s["breaker"]["consecutive_failures"], 2);
    let open_until = s["breaker"]["open_until"].clone();

    app.publish("e3", "t").await;
    let d = app
        .delivery_when("e3:s1", "deferral", |d| d["next_attempt_at"] == open_until)
        .await;
    assert_eq!(attempts(&d), 0, "waiting for the breaker spends no attempt");
    assert_eq!(rx.received_for("e3:s1").len(), 0);

    // Half-open: one probe; it fails, so the breaker opens again for 2 minutes (jittered
    // within a fifth).
    app.clock.set(ms(&open_until));
    let s = eventually("the failed probe", async || {
        let (_, s) = app.call("GET", "/v1/subscribers/s1", None).await;
        (s["breaker"]["consecutive_failures"] == 3).then_some(s)
    })
    .await;
    assert_eq!(s["breaker"]["state"], "open");
    let reopened_for = ms(&s["breaker"]["open_until"]) - ms(&open_until);
    assert!(
        (96_000..=144_000).contains(&reopened_for),
        "{reopened_for} ms"
    );
    assert_eq!(rx.received().len(), 3, "exactly one probe went out");
    app.stop().await;
}

#[tokio::test]
async fn each_subscriber_receives_the_payload_version_it_is_pinned_to() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    let mut secrets = HashMap::new();
    for (id, pin) in [("latest", json!(null)), ("v1", json!(1)), ("v0", json!(0))] {
        let (status, body) = app
            .call(
                "POST",
                "/v1/subscribers",
                Some(json!({"id": id, "url": rx.url(&format!("/{id}")), "payload_version": pin})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["payload_version"], pin);
        secrets.insert(id, body["secret"].as_str().unwrap().to_owned());
    }
    let (status, receipt) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "SHP-1", "type": "shipment.out_for_delivery",
                        "payloads": {"1": {"eta": "17:00"}, "2": {"eta": "2026-11-30T17:00:00Z"}}})),
        )
        .await;
    assert_eq!(status, 202, "{receipt}");
    assert_eq!(
        (
            receipt["deliveries"].as_u64(),
            receipt["unversioned"].as_u64()
        ),
        (Some(3), Some(1))
    );
    for (id, version, eta) in [("latest", 2, "2026-11-30T17:00:00Z"), ("v1", 1, "17:00")] {
        let d = app
            .delivery_when(&format!("SHP-1:{id}"), "delivered", |d| {
                state(d) == "delivered"
            })
            .await;
        assert_eq!(d["payload_version"], version);
        let got = rx.received_for(&format!("SHP-1:{id}"));
        let body = got[0].json();
        assert_eq!(
            (body["payload_version"].clone(), body["data"]["eta"].clone()),
            (json!(version), json!(eta))
        );
        verify(&secrets[id], &got[0]);
    }
    let dead = app.delivery("SHP-1:v0").await;
    assert_eq!(
        (
            state(&dead),
            dead["dead_reason"].as_str(),
            dead["error"].as_str()
        ),
        (
            "dead",
            Some("permanent_failure"),
            Some("no payload version at or below 0")
        )
    );
    assert!(rx.received_for("SHP-1:v0").is_empty());
    let (_, event) = app.call("GET", "/v1/events/SHP-1", None).await;
    assert_eq!(event["payload_version"], 2);
    assert_eq!(event["payloads"]["1"], json!({"eta": "17:00"}));
    // The same event again answers as before; other versions are another event.
    let (status, again) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "SHP-1", "type": "shipment.out_for_delivery",
                        "payloads": {"2": {"eta": "2026-11-30T17:00:00Z"}, "1": {"eta": "17:00"}}})),
        )
        .await;
    assert_eq!((status, again), (200, receipt));
    let (status, _) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "SHP-1", "type": "shipment.out_for_delivery",
                        "payloads": {"2": {"eta": "2026-11-30T17:00:00Z"}}})),
        )
        .await;
    assert_eq!(status, 409);
    app.stop().await;
}

/// The issue's reproducer: a subscriber answering 503, a 4 s window, 50 attempts allowed and a
/// breaker that opens after five failures. Deliveries deferred behind the open breaker still
/// end when their window does, as `window_expired`, saying they waited on the breaker; none is
/// sent after its window.
#[tokio::test]
async fn a_long_outage_behind_the_breaker_ends_in_window_expired() {
    let rx = Receiver::start(|_, _| 503).await;
    let app = TestApp::start(
        "[retry]\nbase_delay = \"200ms\"\nmax_delay = \"2m\"\nmax_attempts = 50\n\
         delivery_window = \"4s\"\n",
    )
    .await;
    app.subscriber("s1", &rx.url("/down")).await;
    for e in 0..30 {
        app.publish(&format!("e{e}"), "t").await;
    }
    app.until_breaker_open_and_idle("s1").await;
    let sent = rx.received().len();
    app.clock.advance(Duration::from_millis(4_100));
    for e in 0..30 {
        let d = app
            .delivery_when(&format!("e{e}:s1"), "the window's end", |d| {
                state(d) == "dead"
            })
            .await;
        assert_eq!(d["dead_reason"], "window_expired", "{d}");
        assert_eq!(d["waiting_on"], "breaker", "{d}");
    }
    assert_eq!(
        rx.received().len(),
        sent,
        "nothing was sent after its window"
    );
    let (_, letters) = app
        .call("GET", "/v1/dead-letters?reason=window_expired", None)
        .await;
    assert_eq!(letters["items"].as_array().unwrap().len(), 30);
    assert_eq!(letters["items"][0]["waiting_on"], "breaker");
    app.stop().await;
}

/// A paused subscriber's deliveries wait, and expire when their window ends (to be replayed
/// once it is resumed).
#[tokio::test]
async fn a_paused_subscribers_deliveries_expire_with_their_window() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("[retry]\ndelivery_window = \"1m\"\n").await;
    app.subscriber("s1", &rx.url("/ok")).await;
    let (status, _) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"status": "paused"})),
        )
        .await;
    assert_eq!(status, 200);
    app.publish("e1", "t").await;
    app.clock.advance(Duration::from_secs(61));
    let d = app
        .delivery_when("e1:s1", "the window's end", |d| state(d) == "dead")
        .await;
    assert_eq!(
        (d["dead_reason"].as_str(), d["waiting_on"].as_str()),
        (Some("window_expired"), Some("paused"))
    );
    assert!(rx.received().is_empty());
    app.stop().await;
}

/// `dlq list` and a dry-run replay name the same dead letters, oldest dead first, and the dry
/// run changes nothing (API and command line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_replay_names_what_dlq_list_lists_and_changes_nothing() {
    let rx = Receiver::start(|_, _| 400).await;
    let app = TestApp::start("").await;
    app.subscriber("s1", &rx.url("/bad")).await;
    for e in ["e1", "e2", "e3"] {
        app.publish(e, "t").await;
        app.delivery_when(&format!("{e}:s1"), "dead", |d| state(d) == "dead")
            .await;
        app.clock.advance(Duration::from_secs(1));
    }
    let (status, preview) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "limit": 2, "dry_run": true})),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        preview,
        json!({"selected": 2, "delivery_ids": ["e1:s1", "e2:s1"]})
    );
    assert_eq!(state(&app.delivery("e1:s1").await), "dead");
    let (_, replays) = app.call("GET", "/v1/replays", None).await;
    assert_eq!(replays["items"], json!([]), "a dry run is no replay");

    // The command line talks to the in-process API: run it off the test's runtime threads.
    let cli = async |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"));
        command
            .args(["dlq"])
            .args(args)
            .args(["--api", &app.base()]);
        let out = tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = cli(&["list", "--reason", "permanent_failure", "--limit", "2"]).await;
    let would = cli(&[
        "replay",
        "--reason",
        "permanent_failure",
        "--limit",
        "2",
        "--dry-run",
    ])
    .await;
    for id in ["e1:s1", "e2:s1"] {
        assert!(
            listed.contains(id) && would.contains(id),
            "{listed}\n{would}"
        );
    }
    assert!(
        !would.contains("e3:s1") && would.contains("nothing changed"),
        "{would}"
    );
    assert_eq!(state(&app.delivery("e2:s1").await), "dead");

    // Held to a preview: a stale one releases nothing (409), the one that holds exactly it.
    let held = |ids: Value| json!({"reason": "permanent_failure", "limit": 2, "expected_delivery_ids": ids});
    let (status, refused) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(held(json!(["e2:s1", "e3:s1"]))),
        )
        .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (409, &json!("conflict"))
    );
    assert_eq!(state(&app.delivery("e1:s1").await), "dead");
    let (status, _) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(held(json!(["e1:s1", "e2:s1", "e3:s1"]))),
        )
        .await;
    assert_eq!(status, 422, "more ids than the limit");
    let (status, started) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(held(preview["delivery_ids"].clone())),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let (_, replay) = app
        .call(
            "GET",
            &format!("/v1/replays/{}", started["replay_id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(replay["delivery_ids"], preview["delivery_ids"]);
    app.stop().await;
}

/// A clean stop records each attempt's outcome as the attempt ends, not once the last one has:
/// a delivery answered while another subscriber still hangs is committed before the stop ends
/// (otherwise its lease could run out meanwhile, and it be sent again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_records_each_outcome_as_its_attempt_ends() {
    use hookline_store::DeliveryState;
    let fast = Receiver::start(|_, _| 200).await;
    let hanging = Receiver::start(|_, _| 200).await;
    // The held attempt must not time out (real time) before the test releases it.
    let mut app = TestApp::start("[delivery]\nattempt_timeout = \"60s\"").await;
    app.subscriber("fast", &fast.url("/")).await;
    app.subscriber("hanging", &hanging.url("/")).await;
    let fast_gate = fast.hold().await;
    let hanging_gate = hanging.hold().await;
    app.publish("SHP-20418", "shipment.out_for_delivery").await;
    eventually("both attempts under way", async || {
        (fast.received().len() == 1 && hanging.received().len() == 1).then_some(())
    })
    .await;
    let healthz = format!("{}/healthz", app.base());
    let stopping = tokio::spawn(app.app.take().unwrap().shutdown());
    eventually("the API to stop taking connections", async || {
        reqwest::Client::new()
            .get(&healthz)
            .send()
            .await
            .is_err()
            .then_some(())
    })
    .await;
    // The dispatcher is told to stop right after the API: give that a moment to arrive, so
    // the attempt below ends during the stop. (Were it to end first, this test would pass
    // without testing anything; it cannot fail because of the wait.)
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(fast_gate);
    let store = hookline_store::open(&app.config.database).await.unwrap();
    eventually(
        "the answered delivery committed during the stop",
        async || {
            let d = store.get_delivery("SHP-20418:fast").await.ok()?;
            (d.state == DeliveryState::Delivered).then_some(())
        },
    )
    .await;
    assert!(!stopping.is_finished());
    let hung = store.get_delivery("SHP-20418:hanging").await.unwrap();
    assert_eq!(hung.state, DeliveryState::InFlight);
    drop(hanging_gate);
    stopping.await.unwrap();
    let d = store.get_delivery("SHP-20418:hanging").await.unwrap();
    assert_eq!(d.state, DeliveryState::Delivered);
}
