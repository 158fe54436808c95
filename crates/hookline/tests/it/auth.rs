//! API tokens: 401 without a valid one, 403 outside its scope, and the caller's name recorded
//! where the audit needs it.

use crate::common::*;
use serde_json::{json, Value};

const ADMIN: &str = "hl_admin-token-for-tests";
const PUBLISH: &str = "hl_publish-token-for-tests";
const OTHER_PUBLISH: &str = "hl_other-publisher";
const READ: &str = "hl_read-token-for-tests";

fn tokens() -> String {
    [
        ("ops", ADMIN, "admin"),
        ("ci", PUBLISH, "publish"),
        ("billing", OTHER_PUBLISH, "publish"),
        ("dash", READ, "read"),
    ]
    .iter()
    .map(|(name, token, scope)| api_token(name, token, scope, None))
    .collect()
}

#[tokio::test]
async fn tokens_and_scopes() {
    let rx = Receiver::start(|_, _| 400).await;
    let app = TestApp::start(&tokens()).await;
    let sub = json!({"id": "s1", "url": rx.url("/x")});

    // Without a token, or with a wrong one: 401, and nothing happens.
    for token in [None, Some("hl_nope")] {
        let (code, body) = app
            .call_as(token, "POST", "/v1/subscribers", Some(sub.clone()))
            .await;
        assert_eq!(
            (code, body["error"]["code"].as_str()),
            (401, Some("unauthorized"))
        );
        assert_eq!(
            app.call_as(token, "GET", "/v1/subscribers", None).await.0,
            401
        );
    }
    // Health and metrics stay open for load balancers and Prometheus.
    assert_eq!(app.call_as(None, "GET", "/healthz", None).await.0, 200);
    let metrics = app
        .http
        .get(format!("{}/metrics", app.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);

    // Outside the scope: 403.
    for (token, method, path) in [
        (READ, "POST", "/v1/subscribers"),
        (READ, "POST", "/v1/events"),
        (PUBLISH, "POST", "/v1/subscribers"),
        (PUBLISH, "GET", "/v1/subscribers"),
        (PUBLISH, "GET", "/v1/dead-letters"),
        (PUBLISH, "POST", "/v1/dead-letters/replay"),
        (READ, "POST", "/v1/dead-letters/replay"),
        (READ, "GET", "/v1/subscribers/s1/secret"),
        (READ, "GET", "/v1/subscribers/s1/headers"),
    ] {
        let (code, body) = app
            .call_as(Some(token), method, path, Some(json!({})))
            .await;
        assert_eq!(
            (code, body["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{method} {path}"
        );
    }
    assert_eq!(
        app.call_as(Some(READ), "GET", "/v1/subscribers", None)
            .await
            .1["items"],
        json!([])
    );

    // Inside it.
    assert_eq!(
        app.call_as(Some(ADMIN), "POST", "/v1/subscribers", Some(sub))
            .await
            .0,
        201
    );
    let event = json!({"id": "e1", "type": "t", "payload": {}});
    assert_eq!(
        app.call_as(Some(PUBLISH), "POST", "/v1/events", Some(event))
            .await
            .0,
        202
    );
    let other = json!({"id": "e2", "type": "t", "payload": {}});
    assert_eq!(
        app.call_as(Some(OTHER_PUBLISH), "POST", "/v1/events", Some(other))
            .await
            .0,
        202
    );
    // A publisher reads its own events, not another publisher's.
    assert_eq!(
        app.call_as(Some(PUBLISH), "GET", "/v1/events/e1", None)
            .await
            .0,
        200
    );
    assert_eq!(
        app.call_as(Some(PUBLISH), "GET", "/v1/events/e2", None)
            .await
            .0,
        404
    );
    assert_eq!(
        app.call_as(Some(READ), "GET", "/v1/events/e2", None)
            .await
            .0,
        200
    );

    // The replay audit names the token that asked.
    eventually("the permanent failure", async || {
        let (_, d) = app
            .call_as(Some(READ), "GET", "/v1/deliveries/e1:s1", None)
            .await;
        (d["state"] == "dead").then_some(())
    })
    .await;
    let (code, replay) = app
        .call_as(
            Some(ADMIN),
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "limit": 1})),
        )
        .await;
    assert_eq!(code, 202);
    let (_, audit) = app
        .call_as(
            Some(READ),
            "GET",
            &format!("/v1/replays/{}", replay["replay_id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(audit["requested_by"], "ops");

    // The command line passes its token.
    let base = app.base();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args(["dlq", "list", "--api", &base])
            .env("HOOKLINE_TOKEN", READ)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    app.stop().await;
}

#[tokio::test]
async fn an_open_api_only_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let open = hookline::config::Config::from_toml(&format!(
        "listen = \"0.0.0.0:0\"\ndatabase = \"sqlite://{}\"\n",
        db.display()
    ))
    .unwrap();
    let clock = std::sync::Arc::new(hookline_engine::clock::SystemClock);
    let refused = hookline::app::start(&open, clock.clone(), hookline::app::Role::All).await;
    let message = refused
        .err()
        .expect("an open API on every interface is refused")
        .to_string();
    assert!(message.contains("api_tokens"), "{message}");
    let guarded = hookline::config::Config::from_toml(&format!(
        "listen = \"0.0.0.0:0\"\ndatabase = \"sqlite://{}\"\n{}",
        db.display(),
        tokens()
    ))
    .unwrap();
    let running = hookline::app::start(&guarded, clock, hookline::app::Role::All)
        .await
        .unwrap();
    running.shutdown().await;
}

#[test]
fn token_new_prints_a_token_and_its_hash() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(["token", "new", "--name", "ci", "--scope", "publish"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text
        .split_whitespace()
        .find(|w| w.starts_with("hl_"))
        .expect("a token");
    let hex = hookline::tokens::sha256_hex(token);
    assert!(text.contains(&format!("sha256 = \"{hex}\"")), "{text}");
    assert!(
        text.contains("scope = \"publish\"") && text.contains("name = \"ci\""),
        "{text}"
    );
    // What it printed is a config the server accepts.
    let config = &text[text.find("[[api_tokens]]").unwrap()..];
    let parsed = hookline::config::Config::from_toml(config).unwrap();
    assert_eq!(parsed.api_tokens[0].name, "ci");

    // A tenant's token: the same, with its tenant; a tenant id that breaks the rules is refused.
    let tenant = |id: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args([
                "token", "new", "--name", "acme", "--scope", "admin", "--tenant", id,
            ])
            .output()
            .unwrap()
    };
    let out = tenant("merchant-acme");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[metrics] open = false"), "{text}");
    let config = &text[text.find("[[api_tokens]]").unwrap()..];
    let config = format!("{config}\n[metrics]\nopen = false\n");
    let parsed = hookline::config::Config::from_toml(&config).unwrap();
    assert_eq!(
        parsed.api_tokens[0].tenant.as_deref(),
        Some("merchant-acme")
    );
    let refused = tenant("a:b");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--tenant"));
}

#[tokio::test]
async fn metrics_can_require_a_token() {
    let app = TestApp::start(&format!("{}[metrics]\nopen = false\n", tokens())).await;
    let url = format!("{}/metrics", app.base());
    assert_eq!(app.http.get(&url).send().await.unwrap().status(), 401);
    let with = app.http.get(&url).bearer_auth(READ).send().await.unwrap();
    assert_eq!(with.status(), 200);
    app.stop().await;
}

/// A re-publish tells a publisher nothing about another's event: only the token that
/// published an id gets its receipt back (200); any other token, admin included, gets the same
/// 409 whatever the body, as it would for a different body.
async fn a_republish_answers_only_its_publisher(app: &TestApp) {
    let event = json!({"id": "INV-7:paid", "type": "invoice.paid", "payload": {"amount": 12}});
    let guess = json!({"id": "INV-7:paid", "type": "invoice.paid", "payload": {"amount": 13}});
    let publish = async |token, body: &Value| {
        app.call_as(Some(token), "POST", "/v1/events", Some(body.clone()))
            .await
    };
    assert_eq!(publish(OTHER_PUBLISH, &event).await.0, 202);
    let (code, receipt) = publish(OTHER_PUBLISH, &event).await;
    assert_eq!((code, receipt["id"].as_str()), (200, Some("INV-7:paid")));
    assert_eq!(publish(OTHER_PUBLISH, &guess).await.0, 409);
    for token in [PUBLISH, ADMIN] {
        let same = publish(token, &event).await;
        let different = publish(token, &guess).await;
        assert_eq!(same.0, 409, "{same:?}");
        assert_eq!(same, different, "the same answer whatever the body");
    }
}

on_both_backends!(
    a_republish_answers_only_its_publisher_on_sqlite,
    a_republish_answers_only_its_publisher_on_postgres,
    &tokens(),
    a_republish_answers_only_its_publisher
);

/// A URL's query values may be credentials (`?api_key=...`): a read token sees them masked and
/// cannot find a subscriber by them; admin sees and finds them.
async fn query_values_are_admin_only(app: &TestApp) {
    let url = "http://127.0.0.1:9/hooks?api_key=sk_live_Q7x9&region=eu";
    let sub = json!({"id": "keyed", "url": url});
    let (code, created) = app
        .call_as(Some(ADMIN), "POST", "/v1/subscribers", Some(sub))
        .await;
    assert_eq!((code, created["url"].as_str()), (201, Some(url)));
    let masked = "http://127.0.0.1:9/hooks?api_key=***&region=***";
    for (token, shown) in [(READ, masked), (ADMIN, url)] {
        let (_, one) = app
            .call_as(Some(token), "GET", "/v1/subscribers/keyed", None)
            .await;
        assert_eq!(one["url"], shown);
        let (_, page) = app
            .call_as(Some(token), "GET", "/v1/subscribers", None)
            .await;
        assert_eq!(page["items"][0]["url"], shown);
    }
    let found = async |token, text: &str| {
        let path = format!("/v1/subscribers?contains={text}");
        let (code, page) = app.call_as(Some(token), "GET", &path, None).await;
        assert_eq!(code, 200, "{page}");
        page["items"].as_array().unwrap().len()
    };
    assert_eq!(found(READ, "sk_live").await, 0);
    assert_eq!(found(READ, "Q7x9").await, 0);
    assert_eq!(found(READ, "/hooks").await, 1);
    assert_eq!(found(ADMIN, "sk_live").await, 1);
    // The console shows what the API answers: nothing more to check there.
    let (_, patched) = app
        .call_as(
            Some(ADMIN),
            "PATCH",
            "/v1/subscribers/keyed",
            Some(json!({"status": "paused"})),
        )
        .await;
    assert_eq!(patched["url"], url);
}

on_both_backends!(
    query_values_are_admin_only_on_sqlite,
    query_values_are_admin_only_on_postgres,
    &tokens(),
    query_values_are_admin_only
);
