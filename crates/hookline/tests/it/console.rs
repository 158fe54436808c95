//! The console in a real browser: headless Chromium, driven by ChromeDriver over the W3C
//! WebDriver protocol, against a hookline serving the console from its binary. An operator
//! pastes a token, finds the subscriber whose deliveries died, reads a dead letter's attempts,
//! previews a replay, confirms it and sees the delivery delivered; a read token sees no write
//! control. Each page's screenshot goes to `HOOKLINE_CONSOLE_SCREENSHOTS` when set (how
//! `docs/console/` is made), else to a temporary directory.

use std::path::Path;

use crate::browser::{screenshots, Browser};
use crate::common::{api_token, external_tool, Receiver, TestApp};
use serde_json::{json, Value};

const ADMIN: &str = "hl_console_admin_token";
const READER: &str = "hl_console_read_token";

/// A drill report in the shape `hookline drill --json` writes, and a chart beside it that
/// carries what a hostile file could (a script, an event handler, a link): the console must
/// draw the lines and drop the rest.
fn write_drill_report(dir: &Path) {
    let summary = |n, p50, p95, p99| json!({"n": n, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99});
    let report = json!({
        "passed": true,
        "checks": [
            {"check": "healthy p99 first-attempt latency 180 ms <= 1.25 x baseline 150 ms + 50 ms", "passed": true},
            {"check": "the backlog drained (2310 ms)", "passed": true},
        ],
        "phases": {
            "baseline": {"first_attempt": summary(2000, 61.0, 120.0, 150.0)},
            "failure": {"healthy_first_attempt": summary(1800, 70.0, 140.0, 180.0),
                        "unavailable_first_attempt": summary(200, 10000.0, 10010.0, 10020.0)},
            "restore": {"drain_ms": 2310, "retry_amplification": 1.4},
        },
    });
    std::fs::write(dir.join("drill.json"), report.to_string()).unwrap();
    std::fs::write(
        dir.join("drill.svg"),
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"120\" onload=\"window.hostile=1\">\
         <script>window.hostile=2</script>\
         <a href=\"javascript:window.hostile=3\"><text x=\"5\" y=\"15\">p99</text></a>\
         <polyline points=\"0,100 100,80 200,90 300,40 400,60\" fill=\"none\" stroke=\"#2a6\" \
         stroke-width=\"3\"/></svg>",
    )
    .unwrap();
}

async fn api(app: &TestApp, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let request = app
        .http
        .request(method, format!("{}{path}", app.base()))
        .bearer_auth(ADMIN);
    let request = if body.is_null() {
        request
    } else {
        request.json(&body)
    };
    let answer = request.send().await.unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

/// Waits until the delivery is in `state`.
async fn delivery_reaches(app: &TestApp, id: &str, state: &str) {
    crate::common::eventually(&format!("{id} {state}"), async || {
        let (_, d) = api(
            app,
            reqwest::Method::GET,
            &format!("/v1/deliveries/{id}"),
            Value::Null,
        )
        .await;
        (d["state"] == state).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_replays_a_dead_letter_from_the_console() {
    let Some(chromedriver) = external_tool("chromedriver") else {
        return;
    };
    let drills = tempfile::tempdir().unwrap();
    write_drill_report(drills.path());
    let config = format!(
        "{}{}[console]\ndrill_reports = {:?}\n[metrics]\nrefresh_interval = \"1s\"\n",
        api_token("ops", ADMIN, "admin", None),
        api_token("dashboards", READER, "read", None),
        drills.path().display().to_string(),
    );
    let app = TestApp::start(&config).await;
    // The broken subscriber's endpoint refuses (400: permanent) until it is fixed.
    let receiver = Receiver::start(|path, _| if path.contains("broken") { 400 } else { 200 }).await;
    for (id, path) in [("shop-eu", "/ok"), ("billing-broken", "/broken")] {
        let body = json!({"id": id, "url": receiver.url(path)});
        let (status, _) = api(&app, reqwest::Method::POST, "/v1/subscribers", body).await;
        assert_eq!(status, 201);
    }
    for n in 0..3 {
        let event = json!({"id": format!("SHP-2041{n}"), "type": "shipment.out_for_delivery",
                           "payload": {"shipment": format!("SHP-2041{n}")}});
        let (status, _) = api(&app, reqwest::Method::POST, "/v1/events", event).await;
        assert_eq!(status, 202);
    }
    let dead = "SHP-20410:billing-broken";
    delivery_reaches(&app, dead, "dead").await;
    let shipment_type = json!({"name": "shipment.out_for_delivery", "deprecated": true,
        "description": "The parcel left the depot",
        "schemas": {"1": {"type": "object", "required": ["shipment"]}, "2": true}});
    let (status, _) = api(
        &app,
        reqwest::Method::POST,
        "/v1/event-types",
        shipment_type,
    )
    .await;
    assert_eq!(status, 201);

    let shots = screenshots(&app);
    let browser = Browser::start(&chromedriver).await;
    let console = format!("{}/console", app.base());

    // The token is pasted once.
    browser.open(&console).await;
    browser.token_form().await;
    browser.type_into("#token-input", ADMIN).await;
    browser.click("#token-save").await;
    browser.ready("overview").await;
    assert!(browser.text("#whoami").await.contains("ops"));
    browser
        .until(
            "the dead letters in the inflow",
            "document.querySelector('#dead-inflow').textContent.includes('permanent_failure')",
        )
        .await;
    browser
        .until(
            "the dead deliveries among the queue's depths",
            "document.querySelector(\"#queue-depths [data-state='dead']\").textContent.includes('3')",
        )
        .await;
    browser.screenshot(&shots, "overview").await;

    // The subscriber whose deliveries died.
    browser.click("a[data-nav='subscribers']").await;
    browser.ready("subscribers").await;
    browser.type_into("#subscriber-search", "broken").await;
    browser.click("#subscriber-search-go").await;
    // hookline searched: only the subscriber whose id or URL holds "broken" is listed.
    browser
        .until(
            "the search's one match",
            "document.querySelectorAll('tr[data-subscriber-id]').length === 1",
        )
        .await;
    browser
        .click("tr[data-subscriber-id='billing-broken'] a.subscriber-link")
        .await;
    browser.ready("subscriber").await;
    assert_eq!(browser.text("#subscriber-status").await, "active");
    browser
        .until(
            "its dead deliveries",
            "document.querySelectorAll(\"tr[data-delivery-id][data-state='dead']\").length === 3",
        )
        .await;
    let newest = browser
        .eval("return document.querySelector('tr[data-delivery-id]').dataset.deliveryId")
        .await;
    assert_eq!(
        newest, "SHP-20412:billing-broken",
        "recent deliveries, newest first"
    );
    browser.screenshot(&shots, "subscriber").await;

    // A dead letter's attempts.
    browser
        .click(&format!("tr[data-delivery-id='{dead}'] a.delivery-link"))
        .await;
    browser.ready("delivery").await;
    assert_eq!(browser.text("#delivery-state").await, "dead");
    assert_eq!(browser.text("tr.attempt td.attempt-status").await, "400");
    assert_eq!(
        browser.text("tr.attempt td.attempt-outcome").await,
        "permanent"
    );
    browser.screenshot(&shots, "delivery").await;

    // Its event, and the event search by type prefix.
    browser.click("a.event-link").await;
    browser.ready("event").await;
    assert!(browser.text("#event-payload").await.contains("SHP-20410"));
    browser
        .until(
            "the event's two deliveries",
            "document.querySelectorAll('#event tr[data-delivery-id]').length === 2",
        )
        .await;
    browser.click("a[data-nav='events']").await;
    browser.ready("events").await;
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('tr[data-event-id]').length")
            .await,
        json!(3)
    );
    browser
        .type_into("#events-type", "shipment.delivered")
        .await;
    browser.click("#events-search button[type='submit']").await;
    browser
        .until(
            "no event of that type",
            "document.body.dataset.ready === 'events' && document.querySelectorAll('tr[data-event-id]').length === 0",
        )
        .await;
    browser
        .open(&format!("{console}#/events?type_prefix=shipment."))
        .await;
    browser.ready("events").await;
    assert_eq!(
        browser
            .eval("return document.querySelector('tr[data-event-id]').dataset.eventId")
            .await,
        json!("SHP-20412"),
        "newest first"
    );
    browser.screenshot(&shots, "events").await;

    // A replay, previewed, then confirmed, once the endpoint is fixed.
    browser.click("a[data-nav='dead-letters']").await;
    browser.ready("dead-letters").await;
    browser
        .click("tr.dead-group[data-reason='permanent_failure'][data-subscriber-id='billing-broken'] button.replay-group")
        .await;
    browser.type_into("#replay-limit", "2").await;
    browser.type_into("#replay-per-second", "10").await;
    browser.click("#replay-preview").await;
    browser
        .until(
            "the replay's preview",
            "document.querySelectorAll('#replay-preview-result li[data-delivery-id]').length === 2",
        )
        .await;
    assert_eq!(browser.text("#replay-selected").await, "2");
    let previewed = browser
        .eval("return [...document.querySelectorAll('#replay-preview-result li[data-delivery-id]')].map(li => li.dataset.deliveryId)")
        .await;
    // Oldest dead first, as the replay selects: exactly what it will release.
    let (_, listed) = api(
        &app,
        reqwest::Method::POST,
        "/v1/dead-letters/replay",
        json!({"reason": "permanent_failure", "subscriber_id": "billing-broken", "limit": 2, "dry_run": true}),
    )
    .await;
    assert_eq!(previewed, listed["delivery_ids"]);
    browser.screenshot(&shots, "dead-letters").await;
    receiver.set_behaviour(|_, _| 200);
    browser.click("#replay-confirm").await;
    browser
        .until(
            "the replay's result",
            "document.querySelector('#replay-result').textContent.includes('released 2')",
        )
        .await;
    let released = previewed[0].as_str().unwrap().to_owned();
    delivery_reaches(&app, &released, "delivered").await;
    browser
        .open(&format!(
            "{console}#/deliveries/{}",
            released.replace(':', "%3A")
        ))
        .await;
    browser.ready("delivery").await;
    assert_eq!(browser.text("#delivery-state").await, "delivered");

    // A subscriber that lost what it was sent gets its events again: a resend from its page,
    // previewed, then confirmed, under new webhook-ids.
    browser
        .open(&format!("{console}#/subscribers/shop-eu"))
        .await;
    browser.ready("subscriber").await;
    browser.element("#resend-form").await;
    let until = hookline_engine::clock::rfc3339(
        hookline_engine::clock::Clock::now_ms(&app.clock) + 3_600_000,
    );
    browser.type_into("#resend-until", &until).await;
    browser
        .type_into("#resend-types", "shipment.out_for_delivery")
        .await;
    browser.type_into("#resend-limit", "2").await;
    browser.click("#resend-preview").await;
    browser
        .until(
            "the resend's preview",
            "document.querySelectorAll('#resend-preview-result li[data-event-id]').length === 2",
        )
        .await;
    assert_eq!(browser.text("#resend-selected").await, "2");
    let would = browser
        .eval("return [...document.querySelectorAll('#resend-preview-result li[data-event-id]')].map(li => li.dataset.eventId)")
        .await;
    assert_eq!(would, json!(["SHP-20410", "SHP-20411"]), "oldest first");
    browser.screenshot(&shots, "resend").await;
    browser.click("#resend-confirm").await;
    browser
        .until(
            "the resend's result",
            "document.querySelector('#resend-result').textContent.includes('made 2')",
        )
        .await;
    browser.element("#resends tr[data-resend-id]").await;
    delivery_reaches(&app, "SHP-20411:shop-eu:resend-1", "delivered").await;
    assert_eq!(
        receiver.received_for("SHP-20410:shop-eu:resend-1").len(),
        1,
        "sent under its own webhook-id"
    );

    // The replay's audit, and the drill report.
    browser.click("a[data-nav='replays']").await;
    browser.ready("replays").await;
    browser.element("tr[data-replay-id]").await;
    browser.screenshot(&shots, "replays").await;

    // The event type catalog, and a type's schemas.
    browser.click("a[data-nav='event-types']").await;
    browser.ready("event-types").await;
    let row = "tr[data-event-type='shipment.out_for_delivery']";
    assert_eq!(browser.text(&format!("{row} td.versions")).await, "1, 2");
    assert!(browser.text(row).await.contains("deprecated"));
    browser.screenshot(&shots, "event-types").await;
    browser.click(&format!("{row} a.event-type-link")).await;
    browser.ready("event-type").await;
    let schema = browser.text("pre.schema[data-version='1']").await;
    let schema: Value = serde_json::from_str(&schema).unwrap();
    assert_eq!(schema, json!({"type": "object", "required": ["shipment"]}));
    assert_eq!(browser.text("pre.schema[data-version='2']").await, "true");
    browser.screenshot(&shots, "event-type").await;

    browser.click("a[data-nav='drill']").await;
    browser.ready("drill").await;
    assert!(browser.text("#drill-verdict").await.contains("PASS"));
    browser
        .until(
            "the drill chart",
            "document.querySelector('svg#drill-chart polyline') !== null",
        )
        .await;
    let hostile = browser
        .eval(
            "return [window.hostile === undefined, \
             document.querySelectorAll('#drill-chart script, #drill-chart a, #drill-chart [onload]').length]",
        )
        .await;
    assert_eq!(
        hostile,
        json!([true, 0]),
        "the chart keeps only its drawing"
    );
    browser.screenshot(&shots, "drill").await;

    // A read token sees no write control.
    browser.click("#token-forget").await;
    browser.token_form().await;
    browser.type_into("#token-input", READER).await;
    browser.click("#token-save").await;
    browser
        .until(
            "the read token in use",
            "document.querySelector('#whoami').textContent.includes('dashboards')",
        )
        .await;
    browser
        .open(&format!("{console}#/subscribers/billing-broken"))
        .await;
    browser.ready("subscriber").await;
    let controls = "return document.querySelectorAll('#pause, #resume, #rotate-secret, \
                    #replay-form, button.replay-group, #resend-form').length";
    assert_eq!(browser.eval(controls).await, json!(0));
    browser.open(&format!("{console}#/dead-letters")).await;
    browser.ready("dead-letters").await;
    browser.element("tr.dead-group").await;
    assert_eq!(browser.eval(controls).await, json!(0));

    browser.quit().await;
    app.stop().await;
}

/// What a breaker does not say: a subscriber whose every delivery dies 404 (its breaker
/// closed) shows its last outcome and its dead letters of the last hour; the overview counts
/// what waits behind an open breaker (deferred, so no due delivery waits on it); a revoked
/// subscriber's dead letters are offered no replay, and a replay naming it is refused; a
/// preview of nothing says so and nothing else; at phone width no page scrolls sideways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_a_closed_breaker_hides_and_fits_a_phone() {
    let Some(chromedriver) = external_tool("chromedriver") else {
        return;
    };
    let app = TestApp::start("[metrics]\nrefresh_interval = \"1s\"\n").await;
    let receiver = Receiver::start(|path, _| match path {
        p if p.starts_with("/missing") => 404,
        p if p.starts_with("/flaky") => 503,
        p if p.starts_with("/refused") => 400,
        _ => 200,
    })
    .await;
    for (id, path) in [
        ("gone-404", "/missing"),
        ("flaky-503", "/flaky"),
        ("leaving", "/refused"),
    ] {
        app.subscriber(id, &receiver.url(path)).await;
    }
    for n in 0..8 {
        app.publish(&format!("INV-{n}"), "invoice.paid").await;
    }
    for n in 0..8 {
        delivery_reaches(&app, &format!("INV-{n}:gone-404"), "dead").await;
        delivery_reaches(&app, &format!("INV-{n}:leaving"), "dead").await;
    }
    // 8 retryable failures at once open the breaker; the retries wait (the clock stands still).
    crate::common::eventually("flaky-503's breaker open", async || {
        let (_, s) = app.call("GET", "/v1/subscribers/flaky-503", None).await;
        (s["breaker"]["state"] == "open").then_some(())
    })
    .await;
    let (status, _) = app.call("DELETE", "/v1/subscribers/leaving", None).await;
    assert_eq!(status, 200);
    let wide = json!({"name": "invoice.paid", "description": "d".repeat(300),
        "schemas": {"1": {"description": "w".repeat(400), "type": "object"}}});
    assert_eq!(app.call("POST", "/v1/event-types", Some(wide)).await.0, 201);

    let browser = Browser::start(&chromedriver).await;
    let console = format!("{}/console", app.base());
    browser.open(&console).await;
    browser.ready("overview").await;
    browser
        .until(
            "what waits behind the open breaker",
            "document.querySelector('#held-by-breakers').textContent\
             .includes('8 deliveries behind 1 open breaker')",
        )
        .await;

    // The 404 subscriber: breaker closed, no failure counted, yet every delivery died.
    browser.open(&format!("{console}#/subscribers")).await;
    browser.ready("subscribers").await;
    let row = "tr[data-subscriber-id='gone-404']";
    let breaker = browser.text(&format!("{row} td:nth-child(5)")).await;
    assert_eq!(breaker, "closed");
    let last = browser.text(&format!("{row} td.last-outcome")).await;
    assert!(last.contains("permanent 404"), "{last}");
    assert_eq!(browser.text(&format!("{row} td.dead-last-hour")).await, "8");
    browser
        .open(&format!("{console}#/subscribers/gone-404"))
        .await;
    browser.ready("subscriber").await;
    let page = browser.text("#subscriber").await;
    assert!(page.contains("permanent 404"), "{page}");

    // A revoked subscriber's dead letters: no replay offered; one asked for is refused.
    browser.open(&format!("{console}#/dead-letters")).await;
    browser.ready("dead-letters").await;
    let groups = "tr.dead-group[data-reason='permanent_failure']";
    browser
        .element(&format!(
            "{groups}[data-subscriber-id='gone-404'] button.replay-group"
        ))
        .await;
    let offered = browser
        .eval(&format!(
            "return [document.querySelectorAll(\"{groups}[data-subscriber-id='leaving']\").length, \
             document.querySelectorAll(\"{groups}[data-subscriber-id='leaving'] button\").length]"
        ))
        .await;
    assert_eq!(offered, json!([1, 0]), "listed, with no replay");
    browser.type_into("#replay-subscriber", "leaving").await;
    browser.click("#replay-preview").await;
    browser
        .until(
            "the refusal",
            "document.querySelector('#flash').textContent.includes('is revoked')",
        )
        .await;
    // A preview that selects nothing says so, and nothing more.
    browser.type_into("#replay-subscriber", "gone-404").await;
    browser
        .eval(
            "const r = document.querySelector('#replay-reason'); r.value = 'window_expired'; \
             r.dispatchEvent(new Event('change', {bubbles: true})); return null",
        )
        .await;
    browser.click("#replay-preview").await;
    browser
        .until(
            "an empty preview",
            "document.querySelector('#replay-selected')?.textContent === '0'",
        )
        .await;
    let preview = browser.text("#replay-preview-result").await;
    assert_eq!(preview, "A replay would release 0 dead letters.");

    // Phone width: every page fits (wide tables scroll inside their own box).
    browser
        .post("/window/rect", json!({"width": 375, "height": 800}))
        .await;
    let width = browser.eval("return window.innerWidth").await;
    assert!(width.as_u64() <= Some(400), "a phone's width: {width}");
    for (hash, page) in [
        ("#/overview", "overview"),
        ("#/subscribers", "subscribers"),
        ("#/subscribers/gone-404", "subscriber"),
        ("#/deliveries/INV-0%3Agone-404", "delivery"),
        ("#/dead-letters", "dead-letters"),
        ("#/replays", "replays"),
        ("#/events", "events"),
        ("#/event-types", "event-types"),
        ("#/event-types/invoice.paid", "event-type"),
        ("#/drill", "drill"),
    ] {
        browser.open(&format!("{console}{hash}")).await;
        browser.ready(page).await;
        assert_eq!(browser.scrolls_sideways().await, json!(false), "{page}");
    }
    browser.quit().await;
    app.stop().await;
}
