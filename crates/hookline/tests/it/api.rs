//! The HTTP contract: every bad input gets a clear error and changes nothing; publishing is
//! idempotent by event id; dead letters are replayed by reason in bounded, audited batches, from
//! the API and from the `hookline dlq` command line.

use crate::common::*;
use serde_json::{json, Value};

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no error code>")
}

async fn raw_post(app: &TestApp, path: &str, body: &str) -> (u16, Value) {
    let resp = app
        .http
        .post(format!("{}{path}", app.base()))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn bad_inputs_get_clear_errors_and_change_nothing() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("max_payload_bytes = 1024").await;
    app.subscriber("s1", &rx.url("/ok")).await;

    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("/v1/events", "{\"type\": ".into(), 400, "malformed_json"),
        (
            "/v1/events",
            r#"{"payload": {}}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/events",
            r#"{"type": "t"}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/events",
            r#"{"type": "t", "payload": 1, "colour": 1}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/events",
            r#"{"id": "no spaces", "type": "t", "payload": 1}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/events",
            format!(r#"{{"type": "t", "payload": "{}"}}"#, "x".repeat(2000)),
            413,
            "payload_too_large",
        ),
        (
            "/v1/events",
            format!(r#"{{"type": "t", "payload": "{}"}}"#, "x".repeat(200_000)),
            413,
            "payload_too_large",
        ),
        ("/v1/subscribers", "not json".into(), 400, "malformed_json"),
        (
            "/v1/subscribers",
            r#"{"id": "s2"}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/subscribers",
            r#"{"url": "ftp://x.example/"}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/subscribers",
            r#"{"url": "not a url"}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/subscribers",
            format!(r#"{{"id": "a:b", "url": "{}"}}"#, rx.url("/x")),
            422,
            "invalid_request",
        ),
        (
            "/v1/subscribers",
            format!(r#"{{"url": "{}", "secret": "hunter2"}}"#, rx.url("/x")),
            422,
            "invalid_request",
        ),
        (
            "/v1/subscribers",
            format!(r#"{{"id": "s1", "url": "{}"}}"#, rx.url("/x")),
            409,
            "conflict",
        ),
        (
            "/v1/dead-letters/replay",
            r#"{"reason": "permanent_failure"}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/dead-letters/replay",
            r#"{"reason": "bored", "limit": 1}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/dead-letters/replay",
            r#"{"reason": "permanent_failure", "limit": 0}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/dead-letters/replay",
            r#"{"reason": "permanent_failure", "limit": 1001}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/dead-letters/replay",
            r#"{"reason": "permanent_failure", "limit": 5, "per_second": -1}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "/v1/dead-letters/replay",
            r#"{"reason": "permanent_failure", "limit": 5, "subscriber_id": "ghost"}"#.into(),
            404,
            "not_found",
        ),
    ];
    // Every bound an outsider can push against.
    let types: Vec<String> = (0..101).map(|i| format!("t{i}")).collect();
    let nested = format!(
        r#"{{"type": "t", "payload": {}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let limits: Vec<(&str, String, u16, &str)> = vec![
        (
            "/v1/events",
            format!(
                r#"{{"id": "{}", "type": "t", "payload": 1}}"#,
                "e".repeat(129)
            ),
            422,
            "invalid_request",
        ),
        (
            "/v1/events",
            format!(r#"{{"type": "{}", "payload": 1}}"#, "t".repeat(257)),
            422,
            "invalid_request",
        ),
        ("/v1/events", nested, 400, "malformed_json"),
        (
            "/v1/subscribers",
            format!(r#"{{"url": "http://a.example/{}"}}"#, "x".repeat(3000)),
            422,
            "invalid_request",
        ),
        (
            "/v1/subscribers",
            format!(
                r#"{{"url": "{}", "event_types": {}}}"#,
                rx.url("/x"),
                serde_json::to_string(&types).unwrap()
            ),
            422,
            "invalid_request",
        ),
        (
            "/v1/subscribers",
            format!(
                r#"{{"id": "{}", "url": "{}"}}"#,
                "s".repeat(129),
                rx.url("/x")
            ),
            422,
            "invalid_request",
        ),
    ];
    let limits: Vec<_> = limits
        .into_iter()
        .chain([
            (
                "/v1/subscribers",
                format!(r#"{{"url": "{}", "max_in_flight": 0}}"#, rx.url("/x")),
                422,
                "invalid_request",
            ),
            (
                "/v1/subscribers",
                format!(r#"{{"url": "{}", "max_in_flight": 5000}}"#, rx.url("/x")),
                422,
                "invalid_request",
            ),
            (
                "/v1/subscribers",
                format!(
                    r#"{{"url": "{}", "rate_limit_per_second": 0}}"#,
                    rx.url("/x")
                ),
                422,
                "invalid_request",
            ),
            (
                "/v1/subscribers",
                format!(
                    r#"{{"url": "{}", "rate_limit_per_second": "fast"}}"#,
                    rx.url("/x")
                ),
                422,
                "invalid_request",
            ),
        ])
        // Paces are bounded to [0.001, 100000]: past them a time could not be rendered.
        .chain(["1e-300", "1e-12", "0.0009", "100001", "-1"].into_iter().flat_map(|rate| {
            [
                (
                    "/v1/subscribers",
                    format!(
                        r#"{{"url": "{}", "rate_limit_per_second": {rate}}}"#,
                        rx.url("/x")
                    ),
                    422,
                    "invalid_request",
                ),
                (
                    "/v1/dead-letters/replay",
                    format!(
                        r#"{{"reason": "permanent_failure", "limit": 3, "per_second": {rate}}}"#
                    ),
                    422,
                    "invalid_request",
                ),
            ]
        }))
        .chain([
            (
                "/v1/subscribers",
                r#"{"url": "http://user:pw@127.0.0.1:9/hook"}"#.to_owned(),
                422,
                "invalid_request",
            ),
            // A key given twice: which one did the sender mean?
            (
                "/v1/events",
                r#"{"type": "t", "payload": {"dup": 1, "dup": 2}}"#.to_owned(),
                422,
                "invalid_request",
            ),
            (
                "/v1/subscribers",
                format!(r#"{{"url": "{}", "url": "{}"}}"#, rx.url("/a"), rx.url("/b")),
                422,
                "invalid_request",
            ),
        ])
        .collect();
    let cases: Vec<_> = cases.into_iter().chain(limits).collect();
    for (path, body, status, expected) in &cases {
        let (got, answer) = raw_post(&app, path, body).await;
        assert_eq!(
            (got, code(&answer)),
            (*status, *expected),
            "POST {path} {body:.80}: {answer}"
        );
        assert!(answer["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    for (path, status) in [
        ("/v1/events/nope", 404),
        ("/v1/deliveries/nope:s1", 404),
        ("/v1/subscribers/ghost", 404),
        ("/v1/replays/rpl_nope", 404),
        ("/v1/deliveries?state=happy", 422),
        ("/v1/deliveries?limit=0", 422),
        ("/v1/dead-letters?reason=bored", 422),
        ("/v1/dead-letters?cursor=xyz", 422),
        ("/v1/nothing-here", 404),
    ] {
        let (got, answer) = app.call("GET", path, None).await;
        assert_eq!(got, status, "GET {path}: {answer}");
        assert!(answer["error"]["code"].is_string(), "GET {path}: {answer}");
    }
    let (got, answer) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"status": "revoked"})),
        )
        .await;
    assert_eq!((got, code(&answer)), (422, "invalid_request"));

    // Nothing above was stored.
    let (_, subs) = app.call("GET", "/v1/subscribers", None).await;
    assert_eq!(subs["items"].as_array().unwrap().len(), 1);
    let (_, deliveries) = app.call("GET", "/v1/deliveries", None).await;
    assert_eq!(deliveries["items"], json!([]));
    let (_, replays) = app.call("GET", "/v1/replays", None).await;
    assert_eq!(replays["items"], json!([]));
    assert!(rx.received().is_empty());
    let (got, health) = app.call("GET", "/healthz", None).await;
    assert_eq!((got, health["status"].as_str()), (200, Some("ok")));
    app.stop().await;
}

#[tokio::test]
async fn private_destinations_are_refused_by_default() {
    let app = TestApp::start_guarded("").await;
    for url in [
        "http://127.0.0.1:9/x",
        "http://[::1]:9/x",
        "http://10.0.0.1/x",
        "http://169.254.169.254/latest",
    ] {
        let (got, answer) = app
            .call("POST", "/v1/subscribers", Some(json!({"url": url})))
            .await;
        assert_eq!(
            (got, code(&answer)),
            (422, "invalid_request"),
            "{url}: {answer}"
        );
        assert!(answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allow_private_destinations"));
    }
    app.stop().await;
}

#[tokio::test]
async fn publishing_is_idempotent_by_event_id() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    for id in ["a", "b"] {
        app.subscriber(id, &rx.url("/ok")).await;
    }
    let (_, filtered) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "invoices", "url": rx.url("/inv"), "event_types": ["invoice.paid"]})),
        )
        .await;
    assert_eq!(filtered["event_types"], json!(["invoice.paid"]));
    let body = json!({"id": "SHP-1", "type": "shipment.out_for_delivery", "payload": {"a": 1, "b": [1, 2]}});
    let (first, receipt) = app.call("POST", "/v1/events", Some(body.clone())).await;
    assert_eq!((first, receipt["deliveries"].as_u64()), (202, Some(2)));
    // The same event again, keys in another order: the original answer, nothing new.
    let reordered = json!({"payload": {"b": [1, 2], "a": 1}, "type": "shipment.out_for_delivery", "id": "SHP-1"});
    let (again, same) = app.call("POST", "/v1/events", Some(reordered)).await;
    assert_eq!((again, &same), (200, &receipt));
    let (changed, answer) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "SHP-1", "type": "shipment.out_for_delivery", "payload": {"a": 2}})),
        )
        .await;
    assert_eq!((changed, code(&answer)), (409, "conflict"));
    let (_, listed) = app.call("GET", "/v1/deliveries?event_id=SHP-1", None).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);
    let (_, event) = app.call("GET", "/v1/events/SHP-1", None).await;
    assert_eq!(event["payload"], json!({"a": 1, "b": [1, 2]}));
    assert_eq!(event["deliveries"], 2);
    // Without an id, hookline names the event.
    let (code_new, generated) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "invoice.paid", "payload": null})),
        )
        .await;
    assert_eq!(code_new, 202);
    assert!(generated["id"].as_str().unwrap().starts_with("evt_"));
    assert_eq!(generated["deliveries"], 3);
    app.stop().await;
}

/// `POST /v1/events` with an `Idempotency-Key` header.
async fn publish_keyed(app: &TestApp, key: &str, body: Value) -> (u16, Value) {
    let answer = app
        .http
        .post(format!("{}/v1/events", app.base()))
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

/// A publish without an `id` retried after a lost answer, with the same `Idempotency-Key`:
/// one event, the retry answered 200 with the original receipt; a key and an id that differ
/// are refused and store nothing.
async fn the_idempotency_key_names_the_event(app: &TestApp, rx: &Receiver) {
    app.subscriber("keyed", &rx.url("/ok")).await;
    let body = json!({"type": "invoice.paid", "payload": {"invoice": "INV-7"}});
    let (first, receipt) = publish_keyed(app, "INV-7:paid", body.clone()).await;
    assert_eq!(
        (first, &receipt["id"]),
        (202, &json!("INV-7:paid")),
        "{receipt}"
    );
    let (retry, again) = publish_keyed(app, "INV-7:paid", body.clone()).await;
    assert_eq!((retry, &again), (200, &receipt));
    let (_, listed) = app
        .call("GET", "/v1/deliveries?event_id=INV-7:paid", None)
        .await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    // The same in the body and the header is one name.
    let named =
        json!({"id": "INV-7:paid", "type": "invoice.paid", "payload": {"invoice": "INV-7"}});
    let (same, answer) = publish_keyed(app, "INV-7:paid", named).await;
    assert_eq!((same, &answer), (200, &receipt));
    let differ = json!({"id": "INV-8:paid", "type": "invoice.paid", "payload": {}});
    let (status, refused) = publish_keyed(app, "INV-9:paid", differ).await;
    assert_eq!(
        (status, code(&refused)),
        (422, "invalid_request"),
        "{refused}"
    );
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("differ"));
    let (status, refused) = publish_keyed(app, "no spaces", body).await;
    assert_eq!(
        (status, code(&refused)),
        (422, "invalid_request"),
        "{refused}"
    );
    for id in ["INV-8:paid", "INV-9:paid"] {
        let (status, _) = app.call("GET", &format!("/v1/events/{id}"), None).await;
        assert_eq!(status, 404, "{id} was stored");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_retried_with_its_idempotency_key_makes_one_event() {
    let rx = Receiver::start(|_, _| 200).await;
    let sqlite = TestApp::start("").await;
    the_idempotency_key_names_the_event(&sqlite, &rx).await;
    sqlite.stop().await;
    if let Some(postgres) = TestApp::start_on_postgres("").await {
        the_idempotency_key_names_the_event(&postgres, &rx).await;
        postgres.stop().await;
    }
}

/// Numbers reach subscribers and API answers with every digit the publisher wrote, and a
/// re-publish that differs only in the 23rd digit is a different event.
#[tokio::test]
async fn payload_numbers_are_delivered_as_written() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    app.subscriber("s1", &rx.url("/ok")).await;
    let payload = r#"{"amount":0.10,"big":12345678901234567890123,"tiny":1.0e-400}"#;
    let body = format!(r#"{{"id":"n1","type":"t","payload":{payload}}}"#);
    assert_eq!(raw_post(&app, "/v1/events", &body).await.0, 202);
    let delivered = eventually("the delivery", async || rx.received().pop()).await;
    let text = String::from_utf8(delivered.body).unwrap();
    // The exponent is spelled canonically; the digits are untouched.
    let stored = r#"{"amount":0.10,"big":12345678901234567890123,"tiny":1.0e-400}"#;
    assert!(text.ends_with(&format!(r#""data":{stored}}}"#)), "{text}");
    let answer = app.text("/v1/events/n1").await;
    assert!(
        answer.contains(&format!(r#""payload":{stored}"#)),
        "{answer}"
    );
    assert_eq!(raw_post(&app, "/v1/events", &body).await.0, 200);
    let changed = body.replace("890123", "890124");
    let (status, answer) = raw_post(&app, "/v1/events", &changed).await;
    assert_eq!((status, code(&answer)), (409, "conflict"));
    app.stop().await;
}

/// A destination that needs static credentials gets them as headers with every attempt; they
/// are shown to admins only, never in subscriber answers, and cannot replace hookline's own.
#[tokio::test]
async fn subscriber_headers_go_with_every_attempt_and_stay_private() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    let (status, created) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s1", "url": rx.url("/ok"),
                        "headers": {"Authorization": "Basic dTpwdw==", "X-Tenant": "t-7"}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["header_names"],
        json!(["authorization", "x-tenant"])
    );
    for path in ["/v1/subscribers/s1", "/v1/subscribers"] {
        let (_, answer) = app.call("GET", path, None).await;
        assert!(!answer.to_string().contains("dTpwdw"), "{path}: {answer}");
    }
    let (_, headers) = app.call("GET", "/v1/subscribers/s1/headers", None).await;
    assert_eq!(
        headers,
        json!({"headers": {"authorization": "Basic dTpwdw==", "x-tenant": "t-7"}})
    );
    for refused in [
        json!({"webhook-signature": "v1,forged"}),
        json!({"Content-Type": "text/plain"}),
        json!({"host": "elsewhere.example"}),
        json!({"x-a": "one\r\ntwo"}),
        json!({"x-a": 5}),
    ] {
        let (status, answer) = app
            .call(
                "PATCH",
                "/v1/subscribers/s1",
                Some(json!({"headers": refused})),
            )
            .await;
        assert_eq!(
            (status, code(&answer)),
            (422, "invalid_request"),
            "{refused}"
        );
    }

    app.publish("e1", "t").await;
    let first = eventually("the first delivery", async || rx.received().pop()).await;
    let sent = |r: &Received, name: &str| {
        r.all_headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(
        sent(&first, "authorization").as_deref(),
        Some("Basic dTpwdw==")
    );
    assert_eq!(sent(&first, "x-tenant").as_deref(), Some("t-7"));
    assert_eq!(first.all_headers.get_all("content-type").iter().count(), 1);

    let (status, patched) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"headers": {"x-api-key": "k2"}})),
        )
        .await;
    assert_eq!(
        (status, &patched["header_names"]),
        (200, &json!(["x-api-key"]))
    );
    app.publish("e2", "t").await;
    let second = eventually("the second delivery", async || {
        rx.received_for("e2:s1").pop()
    })
    .await;
    assert_eq!(sent(&second, "authorization"), None);
    assert_eq!(sent(&second, "x-api-key").as_deref(), Some("k2"));
    let (_, cleared) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"headers": null})),
        )
        .await;
    assert_eq!(cleared["header_names"], json!([]));
    app.stop().await;
}

/// A store that answers reads but cannot commit (here: another process holds SQLite's write
/// lock) makes `/healthz` say so within seconds, and recovers when the lock goes.
#[tokio::test]
async fn health_reports_a_store_that_cannot_commit() {
    let app = TestApp::start("").await;
    let (status, health) = app.call("GET", "/healthz", None).await;
    assert_eq!(
        (status, health),
        (
            200,
            json!({"status": "ok", "store": "ok", "dispatcher": "running"})
        )
    );
    let other = rusqlite::Connection::open(TestApp::db_path(&app.dir)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let degraded = eventually("/healthz to notice", async || {
        let (status, health) = app.call("GET", "/healthz", None).await;
        (status == 503).then_some(health)
    })
    .await;
    assert_eq!(degraded["status"], "degraded");
    assert_eq!(degraded["dispatcher"], "running");
    assert_ne!(degraded["store"], "ok", "{degraded}");
    // Reads still work: this is exactly what a read-only probe would have missed.
    assert_eq!(app.call("GET", "/v1/subscribers", None).await.0, 200);
    other.execute_batch("ROLLBACK").unwrap();
    eventually("/healthz to recover", async || {
        let (status, _) = app.call("GET", "/healthz", None).await;
        (status == 200).then_some(())
    })
    .await;
    app.stop().await;
}

/// Named policies: created whole from what is given and the default for the rest, never
/// changed, refused with the field named, and their schedule printed by the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_are_named_whole_and_never_change() {
    let app = TestApp::start("").await;
    let cloudflare = json!({"name": "retry-cloudflare",
                            "classification": {"retryable": [408, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524]},
                            "retry": {"max_attempts": 4, "delivery_window": "10m"}});
    let (status, created) = app
        .call("POST", "/v1/policies", Some(cloudflare.clone()))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["classification"]["revoke"], json!([410]));
    assert_eq!(
        created["retry"]["base_delay"], "30s",
        "taken from the default"
    );
    assert_eq!(created["retry"]["max_attempts"], 4);
    assert_eq!(
        created["breaker"],
        json!({"failures": 5, "cool_down": "30s"})
    );
    assert!(created["created_at"].is_string());
    let (status, again) = app.call("POST", "/v1/policies", Some(cloudflare)).await;
    assert_eq!((status, code(&again)), (409, "conflict"));
    let (status, default) = app.call("GET", "/v1/policies/default", None).await;
    assert_eq!(
        (status, &default["retry"]["max_attempts"]),
        (200, &json!(23))
    );
    assert!(default["created_at"].is_null());
    for (body, field) in [
        (
            json!({"name": "x", "classification": {"retryable": [204]}}),
            "classification",
        ),
        (
            json!({"name": "x", "retry": {"max_attempts": 12, "delivery_window": "1m"}}),
            "retry",
        ),
        (
            json!({"name": "x", "breaker": {"cool_down": "soon"}}),
            "breaker.cool_down",
        ),
        (json!({"name": "a b"}), "policy name"),
        (json!({"name": "x", "colour": "red"}), "colour"),
    ] {
        let (status, answer) = app.call("POST", "/v1/policies", Some(body.clone())).await;
        assert_eq!((status, code(&answer)), (422, "invalid_request"), "{body}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
    }
    let (status, answer) = app
        .call("POST", "/v1/policies", Some(json!({"name": "default"})))
        .await;
    assert_eq!((status, code(&answer)), (409, "conflict"));
    let (_, listed) = app.call("GET", "/v1/policies", None).await;
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["retry-cloudflare"], "refused ones stored nothing");
    assert_eq!(app.call("GET", "/v1/policies/nope", None).await.0, 404);

    let base = app.base();
    let (ok, text) = tokio::task::spawn_blocking(move || {
        run_cli(&["policy", "schedule", "retry-cloudflare", "--api", &base])
    })
    .await
    .unwrap();
    assert!(ok, "{text}");
    assert!(
        text.contains("retryable 408 429 500 502 503 504 520 521 522 523 524"),
        "{text}"
    );
    assert!(text.contains("max_attempts 4"), "{text}");
    assert!(
        text.contains("worst case: 4 attempts per delivery"),
        "{text}"
    );
    app.stop().await;
}

#[test]
fn config_defaults_prints_the_documented_file() {
    let (ok, text) = run_cli(&["config", "defaults"]);
    assert!(ok, "{text}");
    assert_eq!(text, hookline::config::DEFAULTS);
    assert!(hookline::config::Config::from_toml(&text).is_ok());
}

fn run_cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[tokio::test]
async fn dead_letters_replay_by_reason_in_bounded_audited_batches() {
    let rx = Receiver::start(|_, _| 400).await;
    let app = TestApp::start("").await;
    for id in ["a", "b"] {
        app.subscriber(id, &rx.url(&format!("/{id}"))).await;
    }
    for i in 0..4 {
        app.publish(&format!("e{i}"), "t").await;
    }
    eventually("8 dead letters", async || {
        let (_, dead) = app
            .call("GET", "/v1/dead-letters?reason=permanent_failure", None)
            .await;
        (dead["items"].as_array().unwrap().len() == 8).then_some(())
    })
    .await;

    // The operator's view, from the command line.
    let base = app.base();
    let (ok, table) = tokio::task::spawn_blocking({
        let base = base.clone();
        move || {
            run_cli(&[
                "dlq",
                "list",
                "--api",
                &base,
                "--reason",
                "permanent_failure",
                "--limit",
                "5",
            ])
        }
    })
    .await
    .unwrap();
    assert!(ok, "{table}");
    assert!(
        table.contains("REASON") && table.contains("permanent_failure"),
        "{table}"
    );
    assert!(
        table.contains("5 dead letter(s) shown; more with --cursor"),
        "{table}"
    );

    rx.set_behaviour(|_, _| 200); // the subscribers are fixed
    let (got, answer) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "limit": 3})),
        )
        .await;
    assert_eq!((got, answer["selected"].as_u64()), (202, Some(3)));
    let replay_id = answer["replay_id"].as_str().unwrap().to_owned();
    let audit = eventually("the replay to deliver", async || {
        let (_, audit) = app
            .call("GET", &format!("/v1/replays/{replay_id}"), None)
            .await;
        (audit["delivered"] == 3).then_some(audit)
    })
    .await;
    assert_eq!(
        audit["filter"],
        json!({"reason": "permanent_failure", "subscriber_id": null})
    );
    assert_eq!(
        (
            audit["limit"].as_u64(),
            audit["selected"].as_u64(),
            audit["dead"].as_u64()
        ),
        (Some(3), Some(3), Some(0))
    );
    let replayed: Vec<String> = audit["delivery_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(replayed.len(), 3);
    for id in &replayed {
        // Same webhook-id on the replayed attempt as on the original.
        let got = rx.received_for(id);
        assert_eq!(got.len(), 2, "{id}");
        assert_eq!(got[1].attempt, "1", "a fresh budget starts at attempt 1");
        let d = app.delivery(id).await;
        assert_eq!(d["state"], "delivered");
        assert_eq!(d["attempt_history"].as_array().unwrap().len(), 2);
    }
    assert_eq!(rx.received().len(), 8 + 3, "exactly the limit was replayed");
    let (_, left) = app
        .call("GET", "/v1/dead-letters?reason=permanent_failure", None)
        .await;
    assert_eq!(left["items"].as_array().unwrap().len(), 5);

    // Paced: 2 per second releases the second 500 ms after the first (on the manual clock).
    let (_, paced) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "subscriber_id": "b", "limit": 2, "per_second": 2})),
        )
        .await;
    let (_, audit) = app
        .call(
            "GET",
            &format!("/v1/replays/{}", paced["replay_id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(audit["per_second"], 2.0);
    let mut release: Vec<String> = Vec::new();
    for id in audit["delivery_ids"].as_array().unwrap() {
        let id = id.as_str().unwrap();
        assert!(id.ends_with(":b"), "{id}");
        release.push(
            app.delivery(id).await["window_start"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    release.sort();
    let ms = |t: &str| humantime::parse_rfc3339(t).unwrap();
    assert_eq!(
        ms(&release[1])
            .duration_since(ms(&release[0]))
            .unwrap()
            .as_millis(),
        500
    );

    // And from the command line: the rest of the reason, printed with its replay id.
    let (ok, out) = tokio::task::spawn_blocking(move || {
        run_cli(&[
            "dlq",
            "replay",
            "--api",
            &base,
            "--reason",
            "permanent_failure",
            "--limit",
            "1000",
        ])
    })
    .await
    .unwrap();
    assert!(ok, "{out}");
    assert!(out.contains("replay rpl_"), "{out}");
    assert!(
        out.contains("3 dead letter(s) with reason permanent_failure"),
        "{out}"
    );
    let (_, replays) = app.call("GET", "/v1/replays", None).await;
    assert_eq!(replays["items"].as_array().unwrap().len(), 3);
    app.stop().await;
}

#[test]
fn every_command_has_help_and_the_binary_a_version() {
    let (ok, version) = run_cli(&["--version"]);
    assert!(ok && version.starts_with("hookline "), "{version}");
    for args in [
        vec!["--help"],
        vec!["serve", "--help"],
        vec!["schedule", "--help"],
        vec!["dlq", "--help"],
        vec!["dlq", "list", "--help"],
        vec!["dlq", "replay", "--help"],
    ] {
        let (ok, help) = run_cli(&args);
        assert!(ok && help.contains("Usage:"), "{args:?}: {help}");
    }
    let (ok, schedule) = run_cli(&["schedule"]);
    assert!(
        ok && schedule.contains("worst case: 23 attempts"),
        "{schedule}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[retry]\nmax_attempts = 0\n").unwrap();
    let (ok, error) = run_cli(&["schedule", "--config", bad.to_str().unwrap()]);
    assert!(!ok && error.contains("retry.max_attempts"), "{error}");
    // The environment works like the flag.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .arg("schedule")
        .env("HOOKLINE_CONFIG", &bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("retry.max_attempts"));
    let (ok, error) = run_cli(&["serve", "--listen", "nowhere"]);
    assert!(!ok && error.contains("`listen`"), "{error}");
}

#[tokio::test]
async fn per_subscriber_caps_and_rate_limits_round_trip() {
    let app = TestApp::start("").await;
    let (code, s) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s1", "url": "http://127.0.0.1:9/x", "max_in_flight": 2, "rate_limit_per_second": 0.5})),
        )
        .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(
        (
            s["max_in_flight"].as_u64(),
            s["rate_limit_per_second"].as_f64()
        ),
        (Some(2), Some(0.5))
    );
    // Leaving a field out keeps it; null clears it.
    let (_, s) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"max_in_flight": 4})),
        )
        .await;
    assert_eq!(
        (
            s["max_in_flight"].as_u64(),
            s["rate_limit_per_second"].as_f64()
        ),
        (Some(4), Some(0.5))
    );
    let (_, s) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"rate_limit_per_second": null})),
        )
        .await;
    assert_eq!(
        (
            s["max_in_flight"].as_u64(),
            s["rate_limit_per_second"].clone()
        ),
        (Some(4), Value::Null)
    );
    assert_eq!(s["breaker"]["state"], "closed");
    let (code, _) = app
        .call(
            "PATCH",
            "/v1/subscribers/s1",
            Some(json!({"max_in_flight": -1})),
        )
        .await;
    assert_eq!(code, 422);
    app.stop().await;
}

/// A list's unknown query parameter is a typo to report (422 naming it), not a filter to drop.
#[tokio::test]
async fn unknown_query_parameters_are_refused_by_name() {
    let app = TestApp::start("").await;
    for path in [
        "/v1/deliveries?stat=dead",
        "/v1/dead-letters?reasons=permanent_failure",
        "/v1/subscribers?limt=5",
        "/v1/replays?page=2",
    ] {
        let (status, body) = app.call("GET", path, None).await;
        assert_eq!(status, 422, "{path}: {body}");
        let unknown = path.split(['?', '=']).nth(1).unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains(unknown),
            "{path}: {body}"
        );
    }
    let (status, _) = app
        .call("GET", "/v1/deliveries?state=dead&limit=5", None)
        .await;
    assert_eq!(status, 200);
    // Routes that read no parameters refuse them too.
    for (method, path) in [
        ("GET", "/v1/events/e1?verbose=1"),
        ("GET", "/v1/deliveries/e1:s1?include=history"),
        ("DELETE", "/v1/subscribers/s1?force=true"),
    ] {
        let (status, body) = app.call(method, path, None).await;
        assert_eq!(status, 422, "{method} {path}: {body}");
        let unknown = path.split(['?', '=']).nth(1).unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains(unknown),
            "{path}: {body}"
        );
    }
    app.stop().await;
}

/// Web pages cannot use an open hookline: a `text/plain` body (a "simple request" any page may
/// send) gets 415, a cross-site `Origin` and a foreign `Host` (DNS rebinding) get 403, and
/// none of them changes anything.
#[tokio::test]
async fn browsers_cannot_drive_an_open_api() {
    let app = TestApp::start("").await;
    let base = app.base();
    let body = r#"{"id": "sneaky", "url": "http://127.0.0.1:9/x"}"#;
    let plain = app
        .http
        .post(format!("{base}/v1/subscribers"))
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
    let answer: Value = plain.json().await.unwrap();
    assert_eq!(code(&answer), "unsupported_media_type");
    let cross_site = app
        .http
        .post(format!("{base}/v1/subscribers"))
        .header("content-type", "application/json")
        .header("origin", "http://evil.example")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), 403);
    let (status, _) = app.call("GET", "/v1/subscribers/sneaky", None).await;
    assert_eq!(status, 404, "nothing was created");

    app.subscriber("s1", "http://127.0.0.1:9/x").await;
    let rebound = app
        .http
        .get(format!("{base}/v1/subscribers/s1/secret"))
        .header("host", "rebind.evil.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let text = rebound.text().await.unwrap();
    assert!(!text.contains("whsec_"), "{text}");
    // Its own pages and clients still work; health needs no loopback name.
    let local = app
        .http
        .get(format!("{base}/v1/subscribers/s1/secret"))
        .header("origin", "http://localhost:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(local.status(), 200);
    let health = app
        .http
        .get(format!("{base}/healthz"))
        .header("host", "lb.internal:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    app.stop().await;
}

/// A search for a NUL character gets one answer on every backend: 422 naming it (SQLite used to
/// match every subscriber, PostgreSQL to refuse it).
async fn a_search_for_nul_is_refused(app: &TestApp) {
    app.subscriber("s1", "http://127.0.0.1:9/hooks").await;
    for text in ["%00", "a%00b"] {
        let (status, answer) = app
            .call("GET", &format!("/v1/subscribers?contains={text}"), None)
            .await;
        assert_eq!(
            (status, code(&answer)),
            (422, "invalid_request"),
            "{answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("contains") && message.contains("NUL"),
            "{message}"
        );
    }
}

on_both_backends!(
    a_search_for_nul_is_refused_on_sqlite,
    a_search_for_nul_is_refused_on_postgres,
    "",
    a_search_for_nul_is_refused
);

/// A subscriber that answers by echoing the request (headers included) would put its own
/// credentials and the signature into the stored answer, which read tokens and the console
/// see: they are redacted before the answer is stored.
#[tokio::test]
async fn credentials_echoed_in_an_answer_are_redacted() {
    use axum::http::HeaderMap;
    let seen: std::sync::Arc<std::sync::Mutex<Option<HeaderMap>>> = Default::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let record = seen.clone();
    let echo = axum::Router::new().fallback(move |headers: HeaderMap| {
        let echoed: String = headers
            .iter()
            .map(|(name, value)| format!("{name}: {}\n", value.to_str().unwrap()))
            .collect();
        *record.lock().unwrap() = Some(headers);
        std::future::ready((axum::http::StatusCode::BAD_REQUEST, echoed))
    });
    tokio::spawn(async move { axum::serve(listener, echo).await.unwrap() });

    let app = TestApp::start("").await;
    let headers = json!({"authorization": "Bearer sk_live_4eC39HqLyjWDarjtT1zdp7dc",
                         "x-api-key": "key-2f9c1a7e", "x-tenant": "t-7"});
    let (status, created) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s1", "url": format!("http://{addr}/hooks"), "headers": headers})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    app.publish("e1", "t").await;
    let dead = app
        .delivery_when("e1:s1", "the 400", |d| state(d) == "dead")
        .await;
    let body = dead["attempt_history"][0]["response_body"]
        .as_str()
        .expect("the answer is kept")
        .to_owned();
    let sent = seen.lock().unwrap().clone().expect("the request arrived");
    let signature = sent["webhook-signature"].to_str().unwrap();
    let signature_value = signature.strip_prefix("v1,").unwrap();
    for secret in [
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "key-2f9c1a7e",
        "t-7",
        signature_value,
    ] {
        assert!(
            !body.contains(secret),
            "{secret:?} is in the stored answer:\n{body}"
        );
    }
    assert!(body.contains("authorization: [redacted]"), "{body}");
    assert!(body.contains("x-api-key: [redacted]"), "{body}");
    assert!(body.contains("webhook-signature: [redacted]"), "{body}");
    // What is not a credential is kept as it came.
    assert!(body.contains("webhook-id: e1:s1"), "{body}");
    app.stop().await;
}

/// Revoking is the emergency action for a compromised endpoint: on PostgreSQL it must succeed
/// while workers claim for the same subscribers (a claim holds due rows and then locks their
/// subscribers for their rate limiters; a revocation locked the subscriber, then its rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revoking_succeeds_while_workers_claim_on_postgres() {
    let Some(app) = TestApp::start_on_postgres("").await else {
        return;
    };
    let mut workers = Vec::new();
    for _ in 0..2 {
        let worker = hookline::app::start(
            &app.config,
            std::sync::Arc::new(app.clock.clone()),
            hookline::app::Role::Worker,
        )
        .await
        .unwrap();
        workers.push(worker);
    }
    let rx = Receiver::start(|_, _| 200).await;
    const SUBSCRIBERS: usize = 60;
    const ROUNDS: usize = 3;
    for round in 0..ROUNDS {
        for s in 0..SUBSCRIBERS {
            let (status, body) = app
                .call(
                    "POST",
                    "/v1/subscribers",
                    Some(json!({"id": format!("r{round}-s{s}"), "url": rx.url("/ok"),
                                "rate_limit_per_second": 20})),
                )
                .await;
            assert_eq!(status, 201, "{body}");
        }
        for e in 0..60 {
            app.publish(&format!("r{round}-e{e}"), "t").await;
        }
        // The limiters admit one attempt per subscriber every 50 ms of the clock: moving it
        // keeps every worker claiming (and locking subscribers) while the revocations run.
        let clock = app.clock.clone();
        let ticking = tokio::spawn(async move {
            loop {
                clock.advance(std::time::Duration::from_millis(50));
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        });
        eventually("claims under way", async || {
            (rx.received().len() > SUBSCRIBERS * (round + 1)).then_some(())
        })
        .await;
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut revokers = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (next, http, base) = (next.clone(), app.http.clone(), app.base());
            revokers.spawn(async move {
                let mut failed = Vec::new();
                loop {
                    let s = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if s >= SUBSCRIBERS {
                        return failed;
                    }
                    let url = format!("{base}/v1/subscribers/r{round}-s{s}");
                    let response = http.delete(url).send().await.unwrap();
                    if !response.status().is_success() {
                        failed.push((s, response.status(), response.text().await.unwrap()));
                    }
                }
            });
        }
        let failed: Vec<_> = revokers.join_all().await.into_iter().flatten().collect();
        ticking.abort();
        assert!(
            failed.is_empty(),
            "round {round}: revocations failed: {failed:?}"
        );
    }
    for worker in workers {
        worker.shutdown().await;
    }
    app.stop().await;
}

/// A full disk (here: the database capped at the size it has, so that SQLite answers
/// `SQLITE_FULL` as on a full disk): a publish is 503 `storage_full` with a `Retry-After` and
/// stores nothing, and `/healthz` is degraded from that first failed commit, although the
/// heartbeat's small write still goes through.
#[tokio::test]
async fn a_full_disk_answers_503_and_degrades_health_at_once() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    app.subscriber("s1", &rx.url("/ok")).await;
    let path = TestApp::db_path(&app.dir);
    let pages: u64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    hookline_store::testing::cap_sqlite_pages(path.to_str().unwrap(), pages);
    let app = app.restart().await;
    let event = json!({"id": "big", "type": "t", "payload": {"blob": "x".repeat(200_000)}});
    let response = app
        .http
        .post(format!("{}/v1/events", app.base()))
        .json(&event)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").cloned();
    let answer: Value = response.json().await.unwrap();
    assert_eq!((status, code(&answer)), (503, "storage_full"), "{answer}");
    assert_eq!(retry_after.unwrap().to_str().unwrap(), "30");
    let (status, health) = app.call("GET", "/healthz", None).await;
    assert_eq!(
        (status, &health["status"]),
        (503, &json!("degraded")),
        "{health}"
    );
    assert!(
        health["store"].as_str().unwrap().contains("full"),
        "{health}"
    );
    assert_eq!(app.call("GET", "/v1/events/big", None).await.0, 404);
    // Room made (here: the cap raised), the same publish goes through.
    hookline_store::testing::cap_sqlite_pages(path.to_str().unwrap(), pages * 1000);
    let app = app.restart().await;
    assert_eq!(app.call("POST", "/v1/events", Some(event)).await.0, 202);
    app.stop().await;
}

/// `GET /v1/events`: newest first, by type, type prefix and time, paged; bad filters are
/// refused by name.
#[tokio::test]
async fn events_are_found_by_type_prefix_and_time() {
    let app = TestApp::start("").await;
    for (id, ty) in [
        ("e1", "shipment.delivered"),
        ("e2", "invoice.paid"),
        ("e3", "shipment.eta.changed"),
    ] {
        app.publish(id, ty).await;
        app.clock.advance(std::time::Duration::from_secs(1));
    }
    let ids = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (code, all) = app.call("GET", "/v1/events", None).await;
    assert_eq!(code, 200, "{all}");
    assert_eq!(ids(&all), ["e3", "e2", "e1"]);
    assert!(all["items"][0]["counts"].is_object());
    let (_, shipments) = app
        .call("GET", "/v1/events?type_prefix=shipment.", None)
        .await;
    assert_eq!(ids(&shipments), ["e3", "e1"]);
    let (_, paid) = app.call("GET", "/v1/events?type=invoice.paid", None).await;
    assert_eq!(ids(&paid), ["e2"]);
    let (_, first) = app.call("GET", "/v1/events?limit=2", None).await;
    assert_eq!(ids(&first), ["e3", "e2"]);
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, rest) = app
        .call("GET", &format!("/v1/events?limit=2&cursor={cursor}"), None)
        .await;
    assert_eq!(ids(&rest), ["e1"]);
    use hookline_engine::clock::Clock;
    let since = hookline_engine::clock::rfc3339(app.clock.now_ms() - 2_000);
    let (_, recent) = app
        .call("GET", &format!("/v1/events?since={since}"), None)
        .await;
    assert_eq!(ids(&recent), ["e3", "e2"]);
    for (query, says) in [
        ("since=yesterday", "since"),
        ("until=2026-12-05", "until"),
        ("limit=0", "limit"),
        ("cursor=nonsense", "cursor"),
        ("kind=x", "kind"),
    ] {
        let (code, err) = app.call("GET", &format!("/v1/events?{query}"), None).await;
        assert_eq!(code, 422, "{query}: {err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(says),
            "{err}"
        );
    }
    app.stop().await;
}
