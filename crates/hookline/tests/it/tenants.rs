//! Tenants over HTTP: their records and quotas, and what a tenant's token can see and change:
//! its own objects, never another tenant's (404, as an id that does not exist) nor the
//! platform's routes (403).

use crate::common::*;
use serde_json::{json, Value};

const OPS: &str = "hl_platform-ops-token";
const ACME: &str = "hl_acme-admin-token";
const ACME_PUBLISH: &str = "hl_acme-publish-token";
const GLOBEX: &str = "hl_globex-admin-token";
const INITECH: &str = "hl_initech-not-yet-a-tenant";

/// Tokens for the platform and three tenants (one not created yet), with `/metrics` behind a
/// token as it must be wherever tenants reach the API: open, it needs none at all.
fn tokens() -> String {
    [
        "[metrics]\nopen = false\n".to_owned(),
        api_token("ops", OPS, "admin", None),
        api_token("acme-admin", ACME, "admin", Some("acme")),
        api_token("acme-ci", ACME_PUBLISH, "publish", Some("acme")),
        api_token("globex-admin", GLOBEX, "admin", Some("globex")),
        api_token("initech-admin", INITECH, "admin", Some("initech")),
    ]
    .concat()
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a page: {page}"))
        .iter()
        .map(|i| {
            i["id"]
                .as_str()
                .or(i["delivery_id"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn tenants_are_created_changed_quota_d_and_deleted() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    let (code, acme) = app
        .call(
            "POST",
            "/v1/tenants",
            Some(json!({"id": "acme", "name": "Acme Parcels", "max_subscribers": 1})),
        )
        .await;
    assert_eq!(code, 201, "{acme}");
    assert_eq!(acme["name"], "Acme Parcels");
    assert_eq!(acme["max_subscribers"], 1);
    assert_eq!(acme["max_events_per_second"], Value::Null);
    // Bad input: a clear error, and nothing changes.
    for (body, says) in [
        (json!({"id": "acme"}), "not reused"),
        (json!({"id": "a:b"}), "tenant id"),
        (json!({"id": "x", "max_subscribers": 0}), "max_subscribers"),
        (
            json!({"id": "x", "max_events_per_second": 0}),
            "max_events_per_second",
        ),
        (json!({"id": "x", "name": ""}), "name"),
        (json!({"id": "x", "quota": 3}), "quota"),
    ] {
        let (code, err) = app.call("POST", "/v1/tenants", Some(body.clone())).await;
        assert!(matches!(code, 409 | 422), "{body} -> {code} {err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(says),
            "{err}"
        );
    }
    let (_, listed) = app.call("GET", "/v1/tenants", None).await;
    assert_eq!(ids(&listed), ["acme"]);
    let (code, _) = app.call("GET", "/v1/tenants/x", None).await;
    assert_eq!(code, 404);

    // A subscriber names its tenant; an unknown one is refused; the quota holds.
    let (code, err) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s0", "url": rx.url("/s0"), "tenant_id": "nobody"})),
        )
        .await;
    assert_eq!(code, 422, "{err}");
    let (code, s1) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s1", "url": rx.url("/s1"), "tenant_id": "acme"})),
        )
        .await;
    assert_eq!(
        (code, s1["tenant_id"].as_str()),
        (201, Some("acme")),
        "{s1}"
    );
    let (code, err) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s2", "url": rx.url("/s2"), "tenant_id": "acme"})),
        )
        .await;
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (422, Some("over_quota"))
    );
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_subscribers"));
    let (code, changed) = app
        .call(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"max_subscribers": null, "name": null})),
        )
        .await;
    assert_eq!(code, 200, "{changed}");
    assert_eq!(
        (changed["max_subscribers"].clone(), changed["name"].clone()),
        (Value::Null, Value::Null)
    );
    app.subscriber("plain", &rx.url("/plain")).await;

    // Its events reach its subscribers only, and say whose they are.
    let (code, receipt) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "e1", "type": "t", "payload": {}, "tenant_id": "acme"})),
        )
        .await;
    assert_eq!(
        (
            code,
            receipt["tenant_id"].as_str(),
            receipt["deliveries"].as_u64()
        ),
        (202, Some("acme"), Some(1))
    );
    let d = app
        .delivery_when("e1:s1", "its delivery", |d| state(d) == "delivered")
        .await;
    assert_eq!(d["tenant_id"], "acme");
    let (_, event) = app.call("GET", "/v1/events/e1", None).await;
    assert_eq!(event["tenant_id"], "acme");
    let (_, deliveries) = app.call("GET", "/v1/deliveries?tenant_id=acme", None).await;
    assert_eq!(ids(&deliveries), ["e1:s1"]);
    let (code, err) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "e2", "type": "t", "payload": {}, "tenant_id": "nobody"})),
        )
        .await;
    assert_eq!(code, 422, "{err}");

    // Deleting it revokes its subscribers and nobody else's; its id is not used again.
    let (code, _) = app.call("DELETE", "/v1/tenants/acme", None).await;
    assert_eq!(code, 200);
    let (_, s1) = app.call("GET", "/v1/subscribers/s1", None).await;
    assert_eq!(s1["status"], "revoked");
    let (_, plain) = app.call("GET", "/v1/subscribers/plain", None).await;
    assert_eq!(plain["status"], "active");
    for (method, path) in [("GET", "/v1/tenants/acme"), ("DELETE", "/v1/tenants/acme")] {
        assert_eq!(app.call(method, path, None).await.0, 404, "{method} {path}");
    }
    let (code, _) = app
        .call("POST", "/v1/tenants", Some(json!({"id": "acme"})))
        .await;
    assert_eq!(code, 409);
    app.stop().await;
}

#[tokio::test]
async fn a_tenant_over_its_publish_rate_is_told_to_wait_and_others_are_not() {
    let app = TestApp::start("").await;
    for body in [
        json!({"id": "acme", "max_events_per_second": 2}),
        json!({"id": "globex"}),
    ] {
        assert_eq!(app.call("POST", "/v1/tenants", Some(body)).await.0, 201);
    }
    let publish = async |tenant: &str, id: &str| {
        let url = format!("{}/v1/events", app.base());
        let body = json!({"id": id, "type": "t", "payload": {}, "tenant_id": tenant});
        app.http.post(url).json(&body).send().await.unwrap()
    };
    // The test clock stands still: two at once, then the third waits.
    for id in ["a1", "a2"] {
        assert_eq!(publish("acme", id).await.status(), 202);
    }
    let refused = publish("acme", "a3").await;
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=1).contains(&wait), "{wait}");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(
        app.call("GET", "/v1/events/a3", None).await.0,
        404,
        "nothing stored"
    );
    for i in 0..10 {
        assert_eq!(publish("globex", &format!("g{i}")).await.status(), 202);
    }
    // A retry of an accepted event gets its receipt, limited or not.
    assert_eq!(publish("acme", "a1").await.status(), 200);
    app.clock.advance(std::time::Duration::from_millis(500));
    assert_eq!(publish("acme", "a3").await.status(), 202);
    app.stop().await;
}

/// What the isolation tests share: two tenants with a subscriber, an event, a delivery, a
/// dead letter and a replay each, made by the platform.
async fn two_tenants(app: &TestApp, rx: &Receiver) {
    for t in ["acme", "globex"] {
        let (code, body) = app
            .call_as(Some(OPS), "POST", "/v1/tenants", Some(json!({"id": t})))
            .await;
        assert_eq!(code, 201, "{body}");
        for (sub, path) in [(format!("{t}-ok"), "/ok"), (format!("{t}-dead"), "/dead")] {
            let body = json!({"id": sub, "url": rx.url(path), "tenant_id": t});
            let (code, created) = app
                .call_as(Some(OPS), "POST", "/v1/subscribers", Some(body))
                .await;
            assert_eq!(code, 201, "{created}");
        }
        let event = json!({"id": format!("{t}-e1"), "type": "t", "payload": {}, "tenant_id": t});
        let (code, receipt) = app
            .call_as(Some(OPS), "POST", "/v1/events", Some(event))
            .await;
        assert_eq!(
            (code, receipt["deliveries"].as_u64()),
            (202, Some(2)),
            "{receipt}"
        );
    }
    for t in ["acme", "globex"] {
        let dead = format!("{t}-e1:{t}-dead");
        eventually("the 400 to die", async || {
            let (_, d) = app
                .call_as(Some(OPS), "GET", &format!("/v1/deliveries/{dead}"), None)
                .await;
            (state(&d) == "dead").then_some(())
        })
        .await;
    }
    let replay = json!({"reason": "permanent_failure", "subscriber_id": "globex-dead", "limit": 1});
    let (code, started) = app
        .call_as(Some(OPS), "POST", "/v1/dead-letters/replay", Some(replay))
        .await;
    assert_eq!(code, 202, "{started}");
    eventually("the replay to die again", async || {
        let (_, d) = app
            .call_as(
                Some(OPS),
                "GET",
                "/v1/deliveries/globex-e1:globex-dead",
                None,
            )
            .await;
        (state(&d) == "dead").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_tenant_s_token_sees_its_own_and_nothing_else() {
    let rx = Receiver::start(|path, _| if path == "/dead" { 400 } else { 200 }).await;
    let app = TestApp::start(&tokens()).await;
    two_tenants(&app, &rx).await;
    let as_acme = async |method: &str, path: &str, body: Option<Value>| {
        app.call_as(Some(ACME), method, path, body).await
    };

    // Another tenant's objects answer exactly as ids that do not exist.
    for (theirs, nobodys) in [
        ("/v1/subscribers/globex-ok", "/v1/subscribers/nobody"),
        (
            "/v1/subscribers/globex-ok/secret",
            "/v1/subscribers/nobody/secret",
        ),
        (
            "/v1/subscribers/globex-ok/headers",
            "/v1/subscribers/nobody/headers",
        ),
        ("/v1/events/globex-e1", "/v1/events/nobody"),
        (
            "/v1/deliveries/globex-e1:globex-ok",
            "/v1/deliveries/nobody:nobody",
        ),
        ("/v1/tenants/globex", "/v1/tenants/nobody"),
    ] {
        let (code, body) = as_acme("GET", theirs, None).await;
        let (missing_code, missing) = as_acme("GET", nobodys, None).await;
        assert_eq!((code, missing_code), (404, 404), "{theirs}: {body}");
        assert_eq!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .replace("globex-ok", "nobody")
                .replace("globex-e1:globex-ok", "nobody:nobody")
                .replace("globex-e1", "nobody")
                .replace("globex", "nobody"),
            missing["error"]["message"].as_str().unwrap(),
        );
    }
    let (_, replays) = app.call_as(Some(OPS), "GET", "/v1/replays", None).await;
    let replay_id = ids(&replays)[0].clone();
    assert_eq!(
        as_acme("GET", &format!("/v1/replays/{replay_id}"), None)
            .await
            .0,
        404
    );

    // Its lists hold its own; asking for another tenant's is an empty list.
    for (path, mine) in [
        ("/v1/subscribers", vec!["acme-ok", "acme-dead"]),
        (
            "/v1/deliveries",
            vec!["acme-e1:acme-ok", "acme-e1:acme-dead"],
        ),
        ("/v1/dead-letters", vec!["acme-e1:acme-dead"]),
        ("/v1/replays", vec![]),
        ("/v1/resends", vec![]),
        ("/v1/tenants", vec!["acme"]),
    ] {
        let (code, page) = as_acme("GET", path, None).await;
        assert_eq!(code, 200, "{path}: {page}");
        let mut got = ids(&page);
        got.sort();
        let mut mine: Vec<String> = mine.into_iter().map(str::to_owned).collect();
        mine.sort();
        assert_eq!(got, mine, "{path}");
        if path != "/v1/tenants" {
            let (_, theirs) = as_acme("GET", &format!("{path}?tenant_id=globex"), None).await;
            assert!(ids(&theirs).is_empty(), "{path}?tenant_id=globex: {theirs}");
        }
    }
    let (_, groups) = as_acme("GET", "/v1/dead-letters/groups", None).await;
    let groups = groups["items"].as_array().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["subscriber_id"], "acme-dead");
    let (_, overview) = as_acme("GET", "/v1/overview", None).await;
    assert_eq!(overview["deliveries"]["delivered"], 1, "{overview}");
    assert_eq!(overview["deliveries"]["dead"], 1, "{overview}");
    assert_eq!(overview["capacity"], Value::Null);
    let (_, me) = as_acme("GET", "/v1/whoami", None).await;
    assert_eq!(me["tenant_id"], "acme");

    // What it creates is its own; naming another tenant is 403.
    for (path, body) in [
        (
            "/v1/subscribers",
            json!({"id": "acme-2", "url": rx.url("/ok"), "tenant_id": "globex"}),
        ),
        (
            "/v1/events",
            json!({"id": "x1", "type": "t", "payload": {}, "tenant_id": "globex"}),
        ),
        (
            "/v1/dead-letters/replay",
            json!({"reason": "permanent_failure", "limit": 5, "tenant_id": "globex"}),
        ),
    ] {
        let (code, err) = as_acme("POST", path, Some(body)).await;
        assert_eq!(
            (code, err["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{path}"
        );
    }
    let (code, created) = as_acme(
        "POST",
        "/v1/subscribers",
        Some(json!({"id": "acme-2", "url": rx.url("/ok")})),
    )
    .await;
    assert_eq!(
        (code, created["tenant_id"].as_str()),
        (201, Some("acme")),
        "{created}"
    );
    let (code, receipt) = app
        .call_as(
            Some(ACME_PUBLISH),
            "POST",
            "/v1/events",
            Some(json!({"id": "acme-e2", "type": "t", "payload": {}})),
        )
        .await;
    assert_eq!(
        (code, receipt["tenant_id"].as_str()),
        (202, Some("acme")),
        "{receipt}"
    );
    assert_eq!(
        receipt["deliveries"], 3,
        "its three subscribers, no one else"
    );
    // Its replay selects its dead letters only, and is listed as its own.
    let replay = json!({"reason": "permanent_failure", "limit": 10, "dry_run": true});
    let (_, preview) = as_acme("POST", "/v1/dead-letters/replay", Some(replay)).await;
    assert_eq!(preview["delivery_ids"], json!(["acme-e1:acme-dead"]));
    let replay = json!({"reason": "permanent_failure", "subscriber_id": "globex-dead", "limit": 1});
    assert_eq!(
        as_acme("POST", "/v1/dead-letters/replay", Some(replay))
            .await
            .0,
        404
    );
    // Its resends go to its subscribers only: another tenant's is the 404 of nobody's.
    let since = hookline_engine::clock::rfc3339(
        hookline_engine::clock::Clock::now_ms(&app.clock) - 3_600_000,
    );
    for (subscriber, status) in [("globex-ok", 404), ("nobody", 404), ("acme-ok", 200)] {
        let resend = json!({"subscriber_id": subscriber, "since": since, "limit": 1,
            "dry_run": true});
        let (code, answer) = as_acme("POST", "/v1/resends", Some(resend)).await;
        assert_eq!(code, status, "{subscriber}: {answer}");
    }

    // The platform's routes are not a tenant's.
    for (method, path) in [
        ("POST", "/v1/tenants"),
        ("PATCH", "/v1/tenants/acme"),
        ("DELETE", "/v1/tenants/acme"),
        ("GET", "/v1/policies"),
        ("GET", "/v1/rollouts"),
        ("GET", "/v1/capacity"),
        ("GET", "/metrics"),
    ] {
        let body = (method != "GET" && method != "DELETE").then(|| json!({"id": "x"}));
        assert_eq!(as_acme(method, path, body).await.0, 403, "{method} {path}");
    }

    // A token may name a tenant that does not exist yet: it sees nothing, and its publishes are
    // refused as for an unknown tenant.
    let as_initech = async |method: &str, path: &str, body: Option<Value>| {
        app.call_as(Some(INITECH), method, path, body).await
    };
    for path in [
        "/v1/subscribers",
        "/v1/deliveries",
        "/v1/dead-letters",
        "/v1/tenants",
    ] {
        let (code, page) = as_initech("GET", path, None).await;
        assert_eq!((code, ids(&page).len()), (200, 0), "{path}: {page}");
    }
    let (code, _) = as_initech(
        "POST",
        "/v1/events",
        Some(json!({"type": "t", "payload": {}})),
    )
    .await;
    assert_eq!(code, 422);
    app.stop().await;
}

/// Every route of the OpenAPI document, called with a tenant's admin token on another tenant's
/// objects: nothing is shown and nothing changes.
#[tokio::test]
async fn every_route_keeps_another_tenant_s_objects_from_a_tenant_s_token() {
    let rx = Receiver::start(|path, _| if path == "/dead" { 400 } else { 200 }).await;
    let app = TestApp::start(&tokens()).await;
    two_tenants(&app, &rx).await;
    let (_, replays) = app.call_as(Some(OPS), "GET", "/v1/replays", None).await;
    let replay_id = ids(&replays)[0].clone();
    let since = hookline_engine::clock::rfc3339(
        hookline_engine::clock::Clock::now_ms(&app.clock) - 3_600_000,
    );
    let resend = json!({"subscriber_id": "globex-ok", "since": since, "limit": 10});
    let (code, made) = app
        .call_as(Some(OPS), "POST", "/v1/resends", Some(resend.clone()))
        .await;
    assert_eq!(code, 202, "{made}");
    let resend_id = made["id"].as_str().unwrap().to_owned();
    let before = globex_as_seen_by_its_own_token(&app).await;
    let (_, document) = app.call("GET", "/openapi.json", None).await;
    let mut walked = 0;
    for (template, operations) in document["paths"].as_object().unwrap() {
        for method in operations.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let path = template
                .replace("/v1/subscribers/{id}", "/v1/subscribers/globex-ok")
                .replace("/v1/events/{id}", "/v1/events/globex-e1")
                .replace(
                    "/v1/deliveries/{id}",
                    "/v1/deliveries/globex-e1:globex-dead",
                )
                .replace("/v1/replays/{id}", &format!("/v1/replays/{replay_id}"))
                .replace("/v1/resends/{id}", &format!("/v1/resends/{resend_id}"))
                .replace("/v1/tenants/{id}", "/v1/tenants/globex")
                .replace("{id}", "r1")
                .replace("{name}", "default")
                .replace("{asset}", "app.js");
            // Bodies the platform's token would succeed with, where a route takes one.
            let body = match (method.as_str(), template.as_str()) {
                ("PATCH", "/v1/subscribers/{id}") => Some(json!({"status": "paused"})),
                ("PATCH", "/v1/tenants/{id}") => Some(json!({"max_subscribers": 1})),
                ("POST", "/v1/dead-letters/replay") => {
                    Some(json!({"reason": "permanent_failure", "limit": 1000}))
                }
                ("POST", "/v1/resends") => Some(resend.clone()),
                ("POST", "/v1/subscribers") => Some(json!({"url": rx.url("/ok")})),
                ("POST", "/v1/events") => Some(json!({"type": "t", "payload": {}})),
                ("POST", _) | ("PATCH", _) => Some(json!({})),
                _ => None,
            };
            let (code, answer) = app.call_as(Some(ACME), &method, &path, body).await;
            walked += 1;
            let names_globex = answer.to_string().contains("globex");
            let theirs = path.contains("globex")
                || path.contains(&replay_id)
                || path.contains(&resend_id)
                || template == "/v1/resends" && method == "POST";
            if theirs {
                assert!(
                    matches!(code, 403 | 404),
                    "{method} {path}: {code} {answer}"
                );
            } else {
                assert!(!names_globex, "{method} {path} shows globex's: {answer}");
            }
        }
    }
    assert!(walked > 30, "only {walked} operations in the document");
    let after = globex_as_seen_by_its_own_token(&app).await;
    assert_eq!(
        before, after,
        "a tenant's token changed another tenant's objects"
    );
    app.stop().await;
}

/// Everything the globex tenant's own token can read of its objects, for before and after.
async fn globex_as_seen_by_its_own_token(app: &TestApp) -> Vec<Value> {
    let mut seen = Vec::new();
    for path in [
        "/v1/tenants/globex",
        "/v1/subscribers/globex-ok",
        "/v1/subscribers/globex-ok/secret",
        "/v1/subscribers/globex-dead",
        "/v1/events/globex-e1",
        "/v1/deliveries/globex-e1:globex-dead",
        "/v1/dead-letters",
        "/v1/replays",
        "/v1/resends",
    ] {
        let (code, mut body) = app.call_as(Some(GLOBEX), "GET", path, None).await;
        assert_eq!(code, 200, "{path}: {body}");
        // What moves by itself: the activity a subscriber's answer reads at the time.
        if let Some(o) = body.as_object_mut() {
            o.remove("activity");
        }
        seen.push(body);
    }
    seen
}

/// A portal session is a short-lived token of its tenant: it acts as that tenant's token until
/// it expires or is revoked, and it is refused from then on.
#[tokio::test]
async fn portal_sessions_act_for_their_tenant_until_they_end() {
    let rx = Receiver::start(|path, _| if path == "/dead" { 400 } else { 200 }).await;
    let app = TestApp::start(&tokens()).await;
    two_tenants(&app, &rx).await;
    let sessions = "/v1/tenants/acme/portal-sessions";
    for (body, says) in [
        (json!({"ttl": "10s"}), "ttl"),
        (json!({"ttl": "25h"}), "ttl"),
        (json!({"scope": "owner"}), "scope"),
        (json!({"lifetime": "1h"}), "lifetime"),
    ] {
        let (code, err) = app.call_as(Some(OPS), "POST", sessions, Some(body)).await;
        assert_eq!(code, 422, "{err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(says),
            "{err}"
        );
    }
    let (code, _) = app
        .call_as(
            Some(OPS),
            "POST",
            "/v1/tenants/nobody/portal-sessions",
            None,
        )
        .await;
    assert_eq!(code, 404);
    // A tenant cannot make its own sessions (nor anyone else's).
    assert_eq!(app.call_as(Some(ACME), "POST", sessions, None).await.0, 403);

    let (code, made) = app
        .call_as(Some(OPS), "POST", sessions, Some(json!({"ttl": "1h"})))
        .await;
    assert_eq!(code, 201, "{made}");
    let token = made["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("hlp_"), "{made}");
    assert_eq!(made["url"], format!("/portal#token={token}"));
    assert_eq!(
        (made["tenant_id"].as_str(), made["scope"].as_str()),
        (Some("acme"), Some("admin"))
    );
    let portal = async |method: &str, path: &str, body: Option<Value>| {
        app.call_as(Some(&token), method, path, body).await
    };
    let (code, page) = portal("GET", "/v1/subscribers", None).await;
    assert_eq!(code, 200);
    let mut mine = ids(&page);
    mine.sort();
    assert_eq!(mine, ["acme-dead", "acme-ok"]);
    assert_eq!(
        portal("GET", "/v1/subscribers/globex-ok", None).await.0,
        404
    );
    assert_eq!(
        portal("POST", "/v1/tenants", Some(json!({"id": "x"})))
            .await
            .0,
        403
    );
    let (_, me) = portal("GET", "/v1/whoami", None).await;
    assert_eq!(me["tenant_id"], "acme");
    let created = json!({"id": "acme-portal", "url": rx.url("/ok")});
    let (code, s) = portal("POST", "/v1/subscribers", Some(created)).await;
    assert_eq!((code, s["tenant_id"].as_str()), (201, Some("acme")), "{s}");

    // A read session reads, and changes nothing.
    let (_, read) = app
        .call_as(Some(OPS), "POST", sessions, Some(json!({"scope": "read"})))
        .await;
    let read_token = read["token"].as_str().unwrap();
    let (code, _) = app
        .call_as(Some(read_token), "DELETE", "/v1/subscribers/acme-ok", None)
        .await;
    assert_eq!(code, 403);

    // Revoked: refused at once. Expired: refused from `expires_at` on.
    let revoke = format!("{sessions}/{}", read["id"].as_str().unwrap());
    let (code, revoked) = app.call_as(Some(OPS), "DELETE", &revoke, None).await;
    assert_eq!(code, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string());
    let (code, _) = app
        .call_as(Some(read_token), "GET", "/v1/subscribers", None)
        .await;
    assert_eq!(code, 401);
    let other = format!(
        "/v1/tenants/globex/portal-sessions/{}",
        made["id"].as_str().unwrap()
    );
    assert_eq!(app.call_as(Some(OPS), "DELETE", &other, None).await.0, 404);
    assert_eq!(portal("GET", "/v1/subscribers", None).await.0, 200);
    app.clock.advance(std::time::Duration::from_secs(3600));
    let (code, err) = portal("GET", "/v1/subscribers", None).await;
    assert_eq!(code, 401, "{err}");
    app.stop().await;
}

/// A test event goes to the one subscriber asked for, whatever its event types, as an event of
/// its tenant in the version it is pinned to; another tenant's subscriber is 404, a revoked
/// one 409, and a read session may not send one.
#[tokio::test]
async fn a_test_event_reaches_the_one_subscriber_asked_for() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start(&tokens()).await;
    for (tenant, id, types) in [
        ("acme", "acme-invoices", json!(["invoice.paid"])),
        ("acme", "acme-all", json!([])),
        ("globex", "globex-all", json!([])),
    ] {
        if app
            .call_as(Some(OPS), "GET", &format!("/v1/tenants/{tenant}"), None)
            .await
            .0
            == 404
        {
            let body = json!({"id": tenant});
            assert_eq!(
                app.call_as(Some(OPS), "POST", "/v1/tenants", Some(body))
                    .await
                    .0,
                201
            );
        }
        let body = json!({"id": id, "tenant_id": tenant, "url": rx.url(&format!("/{id}")), "event_types": types});
        let (code, created) = app
            .call_as(Some(OPS), "POST", "/v1/subscribers", Some(body))
            .await;
        assert_eq!(code, 201, "{created}");
    }
    let send = async |token: &str, id: &str| {
        app.call_as(
            Some(token),
            "POST",
            &format!("/v1/subscribers/{id}/test-event"),
            None,
        )
        .await
    };
    let (code, receipt) = send(ACME, "acme-invoices").await;
    assert_eq!(code, 202, "{receipt}");
    assert_eq!(
        (
            receipt["tenant_id"].as_str(),
            receipt["type"].as_str(),
            receipt["deliveries"].as_u64()
        ),
        (Some("acme"), Some("hookline.test"), Some(1)),
        "{receipt}"
    );
    let delivery = format!(
        "/v1/deliveries/{}:acme-invoices",
        receipt["id"].as_str().unwrap()
    );
    eventually("the test event delivered", async || {
        let (_, d) = app.call_as(Some(ACME), "GET", &delivery, None).await;
        (state(&d) == "delivered").then_some(())
    })
    .await;
    let received = rx.received();
    assert_eq!(
        received.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        ["/acme-invoices"],
        "to that subscriber alone"
    );
    let body = received[0].json();
    assert_eq!(body["type"], "hookline.test");
    assert_eq!(body["payload_version"], 1);
    assert_eq!(
        body["data"],
        json!({"test": true, "subscriber_id": "acme-invoices"})
    );

    // Pinned to a version: sent in that one.
    let pin = json!({"payload_version": 3});
    let (code, _) = app
        .call_as(
            Some(ACME),
            "PATCH",
            "/v1/subscribers/acme-invoices",
            Some(pin),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(send(ACME, "acme-invoices").await.0, 202);
    let pinned = eventually("the pinned test event", async || {
        rx.received().into_iter().nth(1)
    })
    .await;
    assert_eq!(pinned.json()["payload_version"], 3);

    // Another tenant's, or none: 404 as an id that does not exist. Revoked: 409.
    for (token, id) in [(ACME, "globex-all"), (GLOBEX, "acme-all"), (ACME, "nobody")] {
        let (code, err) = send(token, id).await;
        assert_eq!(code, 404, "{id}: {err}");
    }
    let (code, _) = app
        .call_as(Some(ACME), "DELETE", "/v1/subscribers/acme-all", None)
        .await;
    assert_eq!(code, 200);
    let (code, err) = send(ACME, "acme-all").await;
    assert_eq!(code, 409, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revoked"),
        "{err}"
    );
    let (_, read) = app
        .call_as(
            Some(OPS),
            "POST",
            "/v1/tenants/acme/portal-sessions",
            Some(json!({"scope": "read"})),
        )
        .await;
    assert_eq!(
        send(read["token"].as_str().unwrap(), "acme-invoices")
            .await
            .0,
        403
    );
    assert_eq!(rx.received().len(), 2, "nothing else was sent");
    app.stop().await;
}

/// An open `/metrics` needs no token, but a tenant's token (here a portal session's, in open
/// mode) is refused there: its series name every tenant's subscribers.
#[tokio::test]
async fn a_tenant_s_token_never_reads_open_metrics() {
    let app = TestApp::start("").await;
    assert_eq!(
        app.call("POST", "/v1/tenants", Some(json!({"id": "acme"})))
            .await
            .0,
        201
    );
    let (_, made) = app
        .call("POST", "/v1/tenants/acme/portal-sessions", None)
        .await;
    let token = made["token"].as_str().unwrap();
    let url = format!("{}/metrics", app.base());
    let anonymous = app.http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 200);
    let tenant = app.http.get(&url).bearer_auth(token).send().await.unwrap();
    assert_eq!(tenant.status(), 403);
    app.stop().await;
}

/// What the platform opens for its own subscribers (`allowed_networks`) is not a tenant's to
/// reach: a tenant's subscriber is held to public addresses, at creation and on a change.
#[tokio::test]
async fn a_tenant_s_subscriber_may_not_point_where_the_platform_s_may() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start_guarded("allowed_networks = [\"127.0.0.0/8\"]").await;
    assert_eq!(
        app.call("POST", "/v1/tenants", Some(json!({"id": "acme"})))
            .await
            .0,
        201
    );
    let platform = json!({"id": "own", "url": rx.url("/own")});
    assert_eq!(
        app.call("POST", "/v1/subscribers", Some(platform)).await.0,
        201
    );
    let tenant = json!({"id": "acme-1", "url": rx.url("/acme"), "tenant_id": "acme"});
    let (code, err) = app.call("POST", "/v1/subscribers", Some(tenant)).await;
    assert_eq!(code, 422, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("internal"),
        "{err}"
    );
    let public = json!({"id": "acme-2", "url": "https://93.184.216.34/x", "tenant_id": "acme"});
    assert_eq!(
        app.call("POST", "/v1/subscribers", Some(public)).await.0,
        201
    );
    let (code, _) = app
        .call(
            "PATCH",
            "/v1/subscribers/acme-2",
            Some(json!({"url": rx.url("/acme")})),
        )
        .await;
    assert_eq!(code, 422);
    app.stop().await;
}
