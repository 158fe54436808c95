//! Operational events (hookline's own signed webhooks to the operational endpoint) and the
//! endpoint lifecycle (`[lifecycle] disable_after`), end to end: real receivers, the reference
//! Standard Webhooks verifier, the manual clock for every wait that is a time.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{eventually, Received, Receiver, TestApp};

const CONFIG: &str = "[operational]\nfailing_after = 2\ndead_letter_spike = 3\n\
                      spike_window = \"5m\"\n[lifecycle]\ndisable_after = \"2m\"\n";

/// The operational events `ops` received, in order, each verified with `secret` by the
/// reference verifier: `(type, data)`.
fn told(ops: &Receiver, secret: &str) -> Vec<(String, Value)> {
    ops.received()
        .iter()
        .filter(|r| r.path == "/ops")
        .map(|r: &Received| {
            standardwebhooks::Webhook::new(secret)
                .unwrap()
                .verify(&r.body, &r.headers())
                .expect("the reference verifier accepts an operational event");
            let body = r.json();
            (
                body["type"].as_str().unwrap().to_owned(),
                body["data"].clone(),
            )
        })
        .collect()
}

async fn told_of(ops: &Receiver, secret: &str, event_type: &str, subject: &str) -> Value {
    eventually(&format!("{event_type} about {subject}"), async || {
        told(ops, secret).into_iter().find_map(|(t, data)| {
            let about = data["subscriber_id"] == subject
                || data["reason"] == subject
                || data["replay_id"] == subject;
            (t == event_type && about).then_some(data)
        })
    })
    .await
}

/// Points the operational endpoint at `rx`'s `/ops` through the API: its answer (201, with the
/// generated secret).
async fn set_endpoint(app: &TestApp, rx: &Receiver) -> Value {
    let (status, ops) = app
        .call(
            "POST",
            "/v1/operational-endpoint",
            Some(json!({"url": rx.url("/ops")})),
        )
        .await;
    assert_eq!(status, 201, "{ops}");
    ops
}

/// Lets the watcher take a look: it looks once a (manual) second.
async fn tick(app: &TestApp) {
    app.clock.advance(Duration::from_millis(1_100));
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn publish_to(app: &TestApp, id: &str, event_type: &str) {
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": id, "type": event_type, "payload": {}})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test]
async fn operators_are_told_what_happens_to_subscribers_and_failing_ones_are_disabled() {
    let rx = Receiver::start(|path, nth| match path {
        "/bad" => 404,
        "/flaky" if nth == 1 => 503,
        _ => 200,
    })
    .await;
    let app = TestApp::start(CONFIG).await;
    let ops = set_endpoint(&app, &rx).await;
    assert_eq!(ops["set_by"], "api");
    let secret = ops["secret"].as_str().unwrap().to_owned();
    let (status, again) = app.call("GET", "/v1/operational-endpoint", None).await;
    assert_eq!((status, again.get("secret")), (200, None));
    for (id, path) in [("bad", "/bad"), ("flaky", "/flaky"), ("good", "/good")] {
        let (status, body) = app
            .call(
                "POST",
                "/v1/subscribers",
                Some(json!({"id": id, "url": rx.url(path), "event_types": [format!("{id}.*")]})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }

    // Three 404s in a row: failing (the breaker, counting retryable failures only, stays
    // closed), and a spike of permanent failures.
    for i in 0..3 {
        publish_to(&app, &format!("b{i}"), "bad.shipment").await;
    }
    eventually("bad's three dead letters", async || {
        let (_, page) = app
            .call("GET", "/v1/dead-letters?subscriber_id=bad", None)
            .await;
        (page["items"].as_array().unwrap().len() == 3).then_some(())
    })
    .await;
    tick(&app).await;
    let failing = told_of(&rx, &secret, "subscriber.failing", "bad").await;
    assert_eq!(failing["failed_attempts"], 3);
    assert_eq!(failing["breaker_open"], false);
    let spike = told_of(&rx, &secret, "dead_letters.spike", "permanent_failure").await;
    assert_eq!(
        (spike["count"].as_u64(), spike["threshold"].as_u64()),
        (Some(3), Some(3))
    );

    // Two retryable failures make flaky failing; its retries' successes, recovered.
    publish_to(&app, "f1", "flaky.shipment").await;
    publish_to(&app, "f2", "flaky.shipment").await;
    app.delivery_when("f2:flaky", "flaky's first failure", |d| {
        d["attempts"] == 1 && d["state"] == "scheduled"
    })
    .await;
    app.delivery_when("f1:flaky", "flaky's first failure", |d| {
        d["attempts"] == 1 && d["state"] == "scheduled"
    })
    .await;
    tick(&app).await;
    told_of(&rx, &secret, "subscriber.failing", "flaky").await;
    // Both retries due at once (moving to the first could send both: the second would no
    // longer be scheduled to move to).
    let mut retries = Vec::new();
    for id in ["f1:flaky", "f2:flaky"] {
        let d = app.delivery(id).await;
        retries.push(hookline_testkit::rfc3339_ms(&d["next_attempt_at"]).expect("scheduled"));
    }
    app.clock.set(retries.into_iter().max().unwrap());
    app.delivery_when("f2:flaky", "flaky's retry", |d| d["state"] == "delivered")
        .await;
    tick(&app).await;
    let recovered = told_of(&rx, &secret, "subscriber.recovered", "flaky").await;
    assert_eq!(recovered["failed_attempts"], 0);

    // Two minutes of nothing but failures: bad is paused by hookline, and its next delivery
    // waits as a paused subscriber's does.
    app.clock.advance(Duration::from_secs(121));
    tick(&app).await;
    let disabled = told_of(&rx, &secret, "subscriber.disabled", "bad").await;
    assert_eq!(disabled["status_reason"], "auto_disabled");
    let (_, bad) = app.call("GET", "/v1/subscribers/bad", None).await;
    assert_eq!(
        (bad["status"].as_str(), bad["status_reason"].as_str()),
        (Some("paused"), Some("auto_disabled"))
    );
    publish_to(&app, "b3", "bad.shipment").await;
    tick(&app).await;
    let held = app.delivery("b3:bad").await;
    assert_eq!(
        (held["state"].as_str(), held["attempts"].as_u64()),
        (Some("scheduled"), Some(0))
    );
    // Resumed the ordinary way, it starts afresh (not paused again at once).
    rx.set_behaviour(|_, _| 200);
    let (status, resumed) = app
        .call(
            "PATCH",
            "/v1/subscribers/bad",
            Some(json!({"status": "active"})),
        )
        .await;
    assert_eq!(status, 200, "{resumed}");
    // Still failing, its streak counted from the resume, until an attempt succeeds: then
    // recovered.
    assert_eq!(resumed["status_reason"], Value::Null);
    assert_ne!(resumed["failing_since"], bad["failing_since"]);
    assert_eq!(resumed["failed_attempts"], bad["failed_attempts"]);
    app.delivery_when("b3:bad", "bad's held delivery", |d| {
        d["state"] == "delivered"
    })
    .await;
    tick(&app).await;
    told_of(&rx, &secret, "subscriber.recovered", "bad").await;

    // A replay that ends is told; a revocation is told with why.
    let (status, replay) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "subscriber_id": "bad", "limit": 10})),
        )
        .await;
    assert_eq!(status, 202, "{replay}");
    let replay_id = replay["replay_id"].as_str().unwrap().to_owned();
    eventually("the replay's deliveries", async || {
        let (_, r) = app
            .call("GET", &format!("/v1/replays/{replay_id}"), None)
            .await;
        (r["delivered"] == 3).then_some(())
    })
    .await;
    tick(&app).await;
    let finished = told_of(&rx, &secret, "replay.finished", &replay_id).await;
    assert_eq!(
        (
            finished["selected"].as_u64(),
            finished["delivered"].as_u64()
        ),
        (Some(3), Some(3))
    );
    let (status, _) = app.call("DELETE", "/v1/subscribers/good", None).await;
    assert_eq!(status, 200);
    tick(&app).await;
    let revoked = told_of(&rx, &secret, "subscriber.revoked", "good").await;
    assert_eq!(revoked["status_reason"], "deleted");

    // Each change was told once, and never about the endpoint itself; each went to the
    // endpoint alone, its deliveries those of its own subscriber. (A few more looks first: a
    // second telling would have time to arrive.)
    for _ in 0..3 {
        tick(&app).await;
    }
    eventually("nothing on its way to the endpoint", async || {
        let path = "/v1/deliveries?subscriber_id=hookline.operational&state=scheduled";
        let (_, page) = app.call("GET", path, None).await;
        page["items"].as_array().unwrap().is_empty().then_some(())
    })
    .await;
    let all = told(&rx, &secret);
    let mut kinds: Vec<String> = all
        .iter()
        .map(|(t, d)| {
            format!(
                "{t} {}",
                d["subscriber_id"]
                    .as_str()
                    .or(d["reason"].as_str())
                    .unwrap_or("replay")
            )
        })
        .collect();
    kinds.sort();
    let mut deduped = kinds.clone();
    deduped.dedup();
    assert_eq!(kinds, deduped, "each told once: {all:#?}");
    assert!(all
        .iter()
        .all(|(_, d)| d["subscriber_id"] != "hookline.operational"));
    assert!(rx.received().iter().filter(|r| r.path != "/ops").all(|r| {
        let t = r.json()["type"].as_str().unwrap().to_owned();
        !t.starts_with("subscriber.")
            && !t.starts_with("dead_letters.")
            && !t.starts_with("replay.")
    }));
    app.stop().await;
}

/// The endpoint is a subscriber of hookline's own: an outsider can neither use its names nor
/// change it but through its own route; the file's endpoint wins over the API's.
#[tokio::test]
async fn the_operational_endpoint_is_hookline_s_own() {
    let rx = Receiver::start(|_, _| 200).await;
    let secret = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";
    let app = TestApp::start(&format!(
        "[operational]\nurl = \"{}\"\nsecret = \"{secret}\"\n",
        rx.url("/ops")
    ))
    .await;
    let (status, ops) = app.call("GET", "/v1/operational-endpoint", None).await;
    assert_eq!(
        (status, ops["set_by"].as_str()),
        (200, Some("file")),
        "{ops}"
    );
    let (status, body) = app
        .call(
            "POST",
            "/v1/operational-endpoint",
            Some(json!({"url": rx.url("/other")})),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        app.call("DELETE", "/v1/operational-endpoint", None).await.0,
        409
    );
    for (method, path, body) in [
        (
            "PATCH",
            "/v1/subscribers/hookline.operational",
            Some(json!({"status": "paused"})),
        ),
        ("DELETE", "/v1/subscribers/hookline.operational", None),
        (
            "POST",
            "/v1/subscribers/hookline.operational/secret/rotate",
            None,
        ),
    ] {
        let (status, body) = app.call(method, path, body).await;
        assert_eq!(status, 409, "{method} {path}: {body}");
    }
    for (path, body) in [
        (
            "/v1/subscribers",
            json!({"id": "hookline.mine", "url": rx.url("/x")}),
        ),
        (
            "/v1/events",
            json!({"id": "hookline.1", "type": "x", "payload": {}}),
        ),
        (
            "/v1/events",
            json!({"type": "hookline.operational", "payload": {}}),
        ),
    ] {
        let (status, answer) = app.call("POST", path, Some(body)).await;
        assert_eq!(status, 422, "{path}: {answer}");
    }
    // A publisher's event taking every type does not reach the endpoint.
    app.subscriber("everything", &rx.url("/all")).await;
    app.publish("e1", "shipment.delivered").await;
    eventually("the delivery", async || {
        (!rx.received().is_empty()).then_some(())
    })
    .await;
    let (_, deliveries) = app
        .call(
            "GET",
            "/v1/deliveries?subscriber_id=hookline.operational",
            None,
        )
        .await;
    assert_eq!(deliveries["items"], json!([]));
    app.stop().await;

    // Without a file's endpoint, the API sets one; a bad URL or secret changes nothing.
    let app = TestApp::start_guarded("").await;
    for body in [
        json!({"url": "http://127.0.0.1:9/ops"}),
        json!({"url": "https://ops.example/", "secret": "nope"}),
        json!({"secret": "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}),
    ] {
        let (status, answer) = app
            .call("POST", "/v1/operational-endpoint", Some(body))
            .await;
        assert!(status == 422 || status == 400, "{status} {answer}");
    }
    assert_eq!(
        app.call("GET", "/v1/operational-endpoint", None).await.0,
        404
    );
    app.stop().await;
}

/// An endpoint that fails is not told about, paused or revoked for it: a 410 there is a dead
/// letter, replayed like any once it answers again.
#[tokio::test]
async fn the_endpoint_is_never_told_about_itself_nor_revoked_by_its_answers() {
    let rx = Receiver::start(|path, _| if path == "/ops" { 410 } else { 404 }).await;
    let app =
        TestApp::start(&CONFIG.replace("dead_letter_spike = 3", "dead_letter_spike = 2")).await;
    let ops = set_endpoint(&app, &rx).await;
    let secret = ops["secret"].as_str().unwrap().to_owned();
    app.subscriber("bad", &rx.url("/bad")).await;
    app.publish("b1", "shipment.delivered").await;
    app.publish("b2", "shipment.delivered").await;
    // bad is failing and its dead letters a spike: two events, each answered 410.
    eventually("two operational events refused", async || {
        let (_, page) = app
            .call(
                "GET",
                "/v1/dead-letters?subscriber_id=hookline.operational",
                None,
            )
            .await;
        tick(&app).await;
        (page["items"].as_array().unwrap().len() == 2).then_some(())
    })
    .await;
    // Failing by its own measure, and for longer than disable_after: still set, still active.
    app.clock.advance(Duration::from_secs(121));
    tick(&app).await;
    tick(&app).await;
    let (_, ops) = app.call("GET", "/v1/operational-endpoint", None).await;
    assert_eq!(ops["status"], "active", "{ops}");
    assert_eq!(ops["status_reason"], Value::Null);
    assert!(ops["failed_attempts"].as_u64().unwrap() >= 2, "{ops}");
    let (_, bad) = app.call("GET", "/v1/subscribers/bad", None).await;
    assert_eq!(bad["status_reason"], "auto_disabled");
    // Answering again, it gets what it refused (bad failing, the spike, bad disabled) when
    // replayed; none about itself.
    rx.set_behaviour(|path, _| if path == "/ops" { 200 } else { 404 });
    let (status, replay) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "subscriber_id": "hookline.operational", "limit": 10})),
        )
        .await;
    assert_eq!(
        (status, replay["selected"].as_u64()),
        (202, Some(3)),
        "{replay}"
    );
    told_of(&rx, &secret, "subscriber.failing", "bad").await;
    told_of(&rx, &secret, "dead_letters.spike", "permanent_failure").await;
    told_of(&rx, &secret, "subscriber.disabled", "bad").await;
    tick(&app).await;
    let about: Vec<Value> = told(&rx, &secret)
        .into_iter()
        .map(|(_, data)| data["subscriber_id"].clone())
        .collect();
    assert!(!about.contains(&json!("hookline.operational")), "{about:?}");
    app.stop().await;
}

crate::on_both_backends!(
    racing_watchers_tell_each_change_once_on_sqlite,
    racing_watchers_tell_each_change_once_on_postgres,
    CONFIG,
    racing_watchers_tell_each_change_once
);

/// Watchers of several processes look at once: each change is published once (one event id),
/// and recorded told once.
async fn racing_watchers_tell_each_change_once(app: &TestApp) {
    let rx = Receiver::start(|path, _| if path == "/ops" { 200 } else { 404 }).await;
    set_endpoint(app, &rx).await;
    app.subscriber("bad", &rx.url("/bad")).await;
    for i in 0..3 {
        app.publish(&format!("b{i}"), "shipment.delivered").await;
    }
    eventually("bad's three dead letters", async || {
        let (_, page) = app
            .call("GET", "/v1/dead-letters?subscriber_id=bad", None)
            .await;
        (page["items"].as_array().unwrap().len() == 3).then_some(())
    })
    .await;
    let store = app.app.as_ref().unwrap().store.clone();
    let watcher = || hookline::operational::Watcher {
        store: store.clone(),
        clock: std::sync::Arc::new(app.clock.clone()),
        config: app.config.operational.clone(),
        wake: Default::default(),
        spikes_told: Default::default(),
    };
    let [a, b, c, d] = [watcher(), watcher(), watcher(), watcher()];
    let now = hookline_engine::clock::Clock::now_ms(&app.clock);
    let looks = tokio::join!(
        a.watch_once(now),
        b.watch_once(now),
        c.watch_once(now),
        d.watch_once(now)
    );
    for look in [looks.0, looks.1, looks.2, looks.3] {
        look.unwrap();
    }
    for event_type in ["subscriber.failing", "dead_letters.spike"] {
        let (_, page) = app
            .call("GET", &format!("/v1/events?type={event_type}"), None)
            .await;
        assert_eq!(
            page["items"].as_array().unwrap().len(),
            1,
            "{event_type}: {page}"
        );
    }
    let told = store.watched_subscribers(None, 10).await.unwrap();
    let bad = told.iter().find(|w| w.subscriber.id == "bad").unwrap();
    assert_eq!(bad.told, Some(hookline_store::health::Condition::Failing));
}
