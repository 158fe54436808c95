//! The portal in a real browser (driven as `console.rs` drives the console): a platform makes
//! tenants acme and globex with endpoints and a portal session for acme; the session's link
//! opens acme's view, which shows acme's endpoints only; the customer adds one, sends it a test
//! event and sees it delivered by a real local receiver, changes it, reads a delivery's
//! attempts and replays a dead letter it previewed. A read session shows no write control, the
//! platform's page embeds the portal from its configured origin (and no other page can), and
//! once its session expires the link shows "this link has expired" and nothing else. The
//! screenshots are `docs/console/portal-*.png`.

use std::collections::HashMap;

use axum::extract::Query;
use axum::response::Html;
use serde_json::{json, Value};

use crate::browser::{screenshots, Browser};
use crate::common::{api_token, external_tool, Receiver, TestApp};

const OPS: &str = "hl_portal_platform_ops";

/// Every write control the portal has: none may show for a read session.
const WRITE_CONTROLS: &str = "#subscriber-new, #subscriber-edit, #pause, #resume, \
                              #rotate-secret, #send-test-event, #replay-form, button.replay-group";

/// The platform's own page, embedding the portal at `?src=` in a frame (`iframe#portal`; its
/// `data-loaded` is set once the frame loaded, whatever it shows).
async fn start_platform_page() -> std::net::SocketAddr {
    async fn embed(Query(q): Query<HashMap<String, String>>) -> Html<String> {
        Html(format!(
            "<!doctype html><title>platform</title>\
             <iframe id=\"portal\" src=\"{}\" width=\"1000\" height=\"700\" \
             onload=\"this.dataset.loaded = 'yes'\"></iframe>",
            q["src"]
        ))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/embed", axum::routing::get(embed));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn ops(app: &TestApp, method: &str, path: &str, body: Option<Value>) -> Value {
    let (code, answer) = app.call_as(Some(OPS), method, path, body).await;
    assert!(
        (200..300).contains(&code),
        "{method} {path}: {code} {answer}"
    );
    answer
}

/// A new portal session for `tenant`: its link, absolute.
async fn session(app: &TestApp, tenant: &str, scope: &str) -> String {
    let path = format!("/v1/tenants/{tenant}/portal-sessions");
    let made = ops(app, "POST", &path, Some(json!({"scope": scope}))).await;
    format!("{}{}", app.base(), made["url"].as_str().unwrap())
}

async fn delivery_reaches(app: &TestApp, id: &str, state: &str) {
    crate::common::eventually(&format!("{id} {state}"), async || {
        let d = ops(app, "GET", &format!("/v1/deliveries/{id}"), None).await;
        (d["state"] == state).then_some(())
    })
    .await;
}

/// The ids of the endpoints the page lists.
const LISTED: &str =
    "return [...document.querySelectorAll('tr[data-subscriber-id]')].map(tr => tr.dataset.subscriberId)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_link_opens_its_tenant_s_endpoints_until_it_expires() {
    let Some(chromedriver) = external_tool("chromedriver") else {
        return;
    };
    let platform = start_platform_page().await;
    let config = format!(
        "{}[portal]\nframe_ancestors = [\"http://{platform}\"]\n",
        api_token("ops", OPS, "admin", None)
    );
    let app = TestApp::start(&config).await;
    // acme's refunds endpoint refuses (400: permanent) until it is fixed.
    let receiver = Receiver::start(|path, _| if path == "/acme-refunds" { 400 } else { 200 }).await;
    for (tenant, id, types) in [
        ("acme", "acme-orders", json!(["order.paid"])),
        ("acme", "acme-refunds", json!([])),
        ("globex", "globex-orders", json!([])),
    ] {
        if app
            .call_as(Some(OPS), "GET", &format!("/v1/tenants/{tenant}"), None)
            .await
            .0
            == 404
        {
            ops(&app, "POST", "/v1/tenants", Some(json!({"id": tenant}))).await;
        }
        let body = json!({"id": id, "tenant_id": tenant, "url": receiver.url(&format!("/{id}")), "event_types": types});
        ops(&app, "POST", "/v1/subscribers", Some(body)).await;
    }
    for (tenant, event) in [("acme", "ORD-1"), ("globex", "ORD-2")] {
        let body = json!({"id": event, "tenant_id": tenant, "type": "order.paid", "payload": {"order": event}});
        ops(&app, "POST", "/v1/events", Some(body)).await;
    }
    delivery_reaches(&app, "ORD-1:acme-refunds", "dead").await;
    delivery_reaches(&app, "ORD-1:acme-orders", "delivered").await;

    let shots = screenshots(&app);
    let browser = Browser::start(&chromedriver).await;

    // The link opens acme's endpoints, and leaves the address bar without its token.
    let link = session(&app, "acme", "admin").await;
    browser.open(&link).await;
    browser.ready("subscribers").await;
    let address = browser.eval("return location.href").await;
    assert_eq!(
        address,
        json!(format!("{}/portal#/subscribers", app.base()))
    );
    assert_eq!(browser.text("#whoami").await, "acme · admin");
    assert_eq!(
        browser.eval(LISTED).await,
        json!(["acme-orders", "acme-refunds"])
    );
    browser.screenshot(&shots, "portal-endpoints").await;

    // It adds an endpoint (its secret shown once), and sends it a test event, delivered.
    browser
        .type_into("#subscriber-new-url", &receiver.url("/acme-new"))
        .await;
    browser
        .type_into("#subscriber-new-types", "order.paid, order.refunded")
        .await;
    browser.type_into("#subscriber-new-id", "acme-new").await;
    browser.click("#subscriber-create").await;
    browser.ready("subscriber").await;
    assert!(browser
        .text("#shown-secret-value")
        .await
        .starts_with("whsec_"));
    let added = ops(&app, "GET", "/v1/subscribers/acme-new", None).await;
    assert_eq!(added["tenant_id"], "acme");
    assert_eq!(
        added["event_types"],
        json!(["order.paid", "order.refunded"])
    );
    browser.click("#send-test-event").await;
    browser
        .until(
            "the test event delivered",
            "document.querySelector('#test-event-state')?.textContent === 'delivered'",
        )
        .await;
    browser
        .until(
            "the delivery log with the test event delivered, 200",
            "document.querySelector(\"#deliveries tr[data-state='delivered'] td.last-attempt\")\
             ?.textContent.includes('200')",
        )
        .await;
    let sent: Vec<_> = receiver
        .received()
        .into_iter()
        .filter(|r| r.path == "/acme-new")
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].json()["type"], "hookline.test");
    // Tall enough to show the delivery log below the endpoint.
    browser
        .post("/window/rect", json!({"width": 1280, "height": 1500}))
        .await;
    browser.screenshot(&shots, "portal-endpoint").await;
    browser
        .post("/window/rect", json!({"width": 1280, "height": 900}))
        .await;

    // Its URL and event types change; it pauses, resumes, and rotates its secret.
    browser
        .type_into("#subscriber-edit-url", &receiver.url("/acme-new-v2"))
        .await;
    browser
        .type_into("#subscriber-edit-types", "order.paid")
        .await;
    browser.click("#subscriber-save").await;
    browser
        .until(
            "the change saved",
            "document.querySelector('#subscriber')?.textContent.includes('/acme-new-v2')",
        )
        .await;
    let changed = ops(&app, "GET", "/v1/subscribers/acme-new", None).await;
    assert_eq!(changed["url"], receiver.url("/acme-new-v2"));
    assert_eq!(changed["event_types"], json!(["order.paid"]));
    browser.click("#pause").await;
    browser
        .until(
            "paused",
            "document.querySelector('#subscriber-status')?.textContent === 'paused'",
        )
        .await;
    browser.click("#resume").await;
    browser
        .until(
            "resumed",
            "document.querySelector('#subscriber-status')?.textContent === 'active'",
        )
        .await;
    browser.click("#rotate-secret").await;
    browser.click("#rotate-confirm").await;
    browser.element("#shown-secret-value").await;
    let rotated = ops(&app, "GET", "/v1/subscribers/acme-new/secret", None).await;
    assert_eq!(browser.text("#shown-secret-value").await, rotated["secret"]);

    // A delivery's attempts: status, duration, the receiver's answer.
    browser
        .click("#deliveries tr[data-state='delivered'] a.delivery-link")
        .await;
    browser.ready("delivery").await;
    assert_eq!(browser.text("tr.attempt td.attempt-status").await, "200");
    assert!(browser
        .text("tr.attempt td.attempt-duration")
        .await
        .ends_with(" ms"));
    browser.screenshot(&shots, "portal-delivery").await;

    // Its dead letters only; a replay previewed, then released once the endpoint is fixed.
    browser.click("a[data-nav='dead-letters']").await;
    browser.ready("dead-letters").await;
    let groups =
        "return [...document.querySelectorAll('tr.dead-group')].map(tr => tr.dataset.subscriberId)";
    assert_eq!(browser.eval(groups).await, json!(["acme-refunds"]));
    browser
        .click("tr.dead-group[data-subscriber-id='acme-refunds'] button.replay-group")
        .await;
    browser.click("#replay-preview").await;
    browser
        .until(
            "the replay's preview",
            "document.querySelector('#replay-selected')?.textContent === '1'",
        )
        .await;
    browser.screenshot(&shots, "portal-dead-letters").await;
    receiver.set_behaviour(|_, _| 200);
    browser.click("#replay-confirm").await;
    browser
        .until(
            "the replay's result",
            "document.querySelector('#replay-result')?.textContent.includes('released 1')",
        )
        .await;
    delivery_reaches(&app, "ORD-1:acme-refunds", "delivered").await;

    // At a phone's width no portal page scrolls sideways.
    browser
        .post("/window/rect", json!({"width": 375, "height": 800}))
        .await;
    for (hash, page) in [
        ("#/subscribers", "subscribers"),
        ("#/subscribers/acme-new", "subscriber"),
        ("#/deliveries/ORD-1%3Aacme-refunds", "delivery"),
        ("#/dead-letters", "dead-letters"),
    ] {
        browser.open(&format!("{}/portal{hash}", app.base())).await;
        browser.ready(page).await;
        assert_eq!(browser.scrolls_sideways().await, json!(false), "{page}");
    }
    browser
        .post("/window/rect", json!({"width": 1280, "height": 900}))
        .await;

    // The platform's page embeds it; a page of another origin cannot.
    let framed = session(&app, "acme", "admin").await;
    let embed = |host: &str| {
        format!(
            "http://{host}:{}/embed?src={}",
            platform.port(),
            urlencoding(&framed)
        )
    };
    browser.open(&embed("127.0.0.1")).await;
    browser.frame(Some("iframe#portal")).await;
    browser.ready("subscribers").await;
    assert_eq!(
        browser.eval(LISTED).await,
        json!(["acme-orders", "acme-refunds", "acme-new"])
    );
    browser.frame(None).await;
    browser.open(&embed("localhost")).await;
    browser
        .until(
            "the frame loaded",
            "document.querySelector('iframe#portal')?.dataset.loaded",
        )
        .await;
    browser.frame(Some("iframe#portal")).await;
    let refused = browser
        .eval("return [location.href, document.querySelector('#view') === null]")
        .await;
    assert_eq!(
        refused[1],
        json!(true),
        "a page of another origin showed the portal: {refused}"
    );
    browser.frame(None).await;

    // A read session sees its tenant's endpoints, and no write control anywhere. Opened in
    // the same tab, the new link takes over from the old one.
    browser.open(&link).await;
    browser.ready("subscribers").await;
    let read = session(&app, "acme", "read").await;
    browser.open(&read).await;
    browser
        .until(
            "the read session in use",
            "document.querySelector('#whoami').textContent === 'acme · read only'",
        )
        .await;
    browser.ready("subscribers").await;
    assert_eq!(
        browser.eval(LISTED).await,
        json!(["acme-orders", "acme-refunds", "acme-new"])
    );
    let controls = format!("return document.querySelectorAll({WRITE_CONTROLS:?}).length");
    assert_eq!(browser.eval(&controls).await, json!(0));
    for (hash, page) in [
        ("#/subscribers/acme-refunds", "subscriber"),
        ("#/dead-letters", "dead-letters"),
    ] {
        browser.open(&format!("{}/portal{hash}", app.base())).await;
        browser.ready(page).await;
        assert_eq!(browser.eval(&controls).await, json!(0), "{page}");
    }
    // Another tenant's endpoint is as absent as one that never was.
    browser
        .open(&format!("{}/portal#/subscribers/globex-orders", app.base()))
        .await;
    browser.ready("error").await;
    assert!(browser.text("#view").await.contains("not_found"));

    // Expired: the page says so and shows nothing else, however it is opened.
    app.clock.advance(std::time::Duration::from_secs(3601));
    browser.refresh().await;
    browser.ready("expired").await;
    let shown = browser
        .eval(
            "return [[...document.querySelector('main').children].map(e => e.id), \
             document.querySelector('#expired').textContent, \
             document.querySelector('.nav').hidden, \
             document.querySelector('#whoami').textContent, \
             document.querySelector('#flash').hidden]",
        )
        .await;
    assert_eq!(
        shown,
        json!([
            ["expired"],
            "This link has expiredAsk for a new one.",
            true,
            "",
            true
        ])
    );
    browser.screenshot(&shots, "portal-expired").await;
    browser.open(&format!("{}/console", app.base())).await;
    browser.open(&link).await;
    browser.ready("expired").await;
    assert_eq!(
        browser.eval("return location.href").await,
        json!(format!("{}/portal#/subscribers", app.base())),
        "an expired link's token leaves the address bar too"
    );

    browser.quit().await;
    app.stop().await;
}

/// The portal's page says who may frame it; the console's says no one may.
#[tokio::test]
async fn the_portal_may_be_framed_by_the_configured_origins_only() {
    let app = TestApp::start(
        "[portal]\nframe_ancestors = [\"https://platform.example\", \"https://admin.platform.example:8443\"]\n",
    )
    .await;
    let policy = async |path: &str| {
        let answer = app
            .http
            .get(format!("{}{path}", app.base()))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        answer.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let console = policy("/console").await;
    assert!(console.ends_with("; frame-ancestors 'none'"), "{console}");
    let portal = policy("/portal").await;
    assert_eq!(
        portal,
        console.replace(
            "frame-ancestors 'none'",
            "frame-ancestors https://platform.example https://admin.platform.example:8443"
        )
    );
    assert!(portal.contains("script-src 'self'") && portal.contains("default-src 'self'"));
    assert!(app.text("/portal").await.contains("data-mode=\"portal\""));
    // The same file serves both pages: the portal is the console in tenant mode.
    assert!(app
        .text("/portal")
        .await
        .contains("src=\"/console/app.js\""));
    app.stop().await;
}

/// `text` as one query value.
fn urlencoding(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
