//! Resends over HTTP: a subscriber that lost what it was sent gets published events again,
//! under fresh webhook-ids its deduplication takes; previewed, confirmed, audited, from the
//! API and from `hookline resend`; every bad request refused, changing nothing.

use crate::common::*;
use hookline_engine::clock::{rfc3339, Clock};
use serde_json::{json, Value};

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

fn run_cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[tokio::test]
async fn a_resend_reaches_the_receiver_again_under_new_webhook_ids() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    app.subscriber("s", &rx.url("/s")).await;
    app.subscriber("other", &rx.url("/other")).await;
    let since = rfc3339(app.clock.now_ms());
    for i in 0..3 {
        app.publish(&format!("shp-{i}"), "shipment.delivered").await;
        app.clock.advance(std::time::Duration::from_millis(10));
    }
    app.publish("inv-1", "invoice.paid").await;
    eventually("the originals delivered", async || {
        (rx.received().len() == 8).then_some(())
    })
    .await;
    app.clock.advance(std::time::Duration::from_secs(1));
    let until = rfc3339(app.clock.now_ms());
    let asked = json!({"subscriber_id": "s", "since": since, "until": until,
        "event_types": ["shipment.delivered"], "limit": 10});

    // A dry run answers the events, oldest first, and changes nothing.
    let mut dry = asked.clone();
    dry["dry_run"] = json!(true);
    let (code, preview) = app.call("POST", "/v1/resends", Some(dry)).await;
    assert_eq!(code, 200, "{preview}");
    assert_eq!(preview["selected"], 3);
    assert_eq!(strings(&preview["event_ids"]), ["shp-0", "shp-1", "shp-2"]);
    let (_, audits) = app.call("GET", "/v1/resends", None).await;
    assert_eq!(audits["items"], json!([]));

    // Confirmed as previewed: new deliveries, each under its own webhook-id.
    let mut confirm = asked.clone();
    confirm["expected_event_ids"] = preview["event_ids"].clone();
    let (code, made) = app.call("POST", "/v1/resends", Some(confirm.clone())).await;
    assert_eq!(code, 202, "{made}");
    let ids = strings(&made["delivery_ids"]);
    assert_eq!(
        ids,
        ["shp-0:s:resend-1", "shp-1:s:resend-1", "shp-2:s:resend-1"]
    );
    assert_eq!(
        (&made["subscriber_id"], &made["since"], &made["until"]),
        (&json!("s"), &json!(since), &json!(until))
    );
    assert_eq!(made["event_types"], json!(["shipment.delivered"]));
    let resend_id = made["id"].as_str().unwrap().to_owned();
    for (id, original) in ids.iter().zip(["shp-0:s", "shp-1:s", "shp-2:s"]) {
        let got = eventually("the resent delivery to arrive", async || {
            let got = rx.received_for(id);
            (!got.is_empty()).then_some(got)
        })
        .await;
        assert_eq!(got[0].attempt, "1", "a fresh budget");
        let first = &rx.received_for(original)[0];
        assert_ne!(got[0].webhook_id, first.webhook_id);
        assert_eq!(got[0].json()["data"], first.json()["data"], "{id}");
        assert_eq!(got[0].json()["type"], "shipment.delivered");
    }
    assert_eq!(
        rx.state_changes().len(),
        8 + 3,
        "a deduplicating receiver takes each resend"
    );
    let audit = eventually("the audit to count them delivered", async || {
        let (_, audit) = app
            .call("GET", &format!("/v1/resends/{resend_id}"), None)
            .await;
        (audit["delivered"] == 3).then_some(audit)
    })
    .await;
    assert_eq!(
        (audit["selected"].as_u64(), audit["dead"].as_u64()),
        (Some(3), Some(0))
    );
    let d = app.delivery("shp-1:s:resend-1").await;
    assert_eq!(
        (&d["event_id"], &d["subscriber_id"]),
        (&json!("shp-1"), &json!("s"))
    );

    // The same confirm again: the selection still holds, numbered on.
    let (code, again) = app.call("POST", "/v1/resends", Some(confirm)).await;
    assert_eq!(code, 202, "{again}");
    assert_eq!(strings(&again["delivery_ids"])[0], "shp-0:s:resend-2");
    // A preview that no longer holds: 409, nothing made.
    let mut stale = asked.clone();
    stale["expected_event_ids"] = json!(["shp-1"]);
    let (code, refused) = app.call("POST", "/v1/resends", Some(stale)).await;
    assert_eq!(
        (code, refused["error"]["code"].as_str()),
        (409, Some("conflict"))
    );

    // The audit, newest first, by subscriber.
    let (_, page) = app
        .call("GET", "/v1/resends?subscriber_id=s&limit=1", None)
        .await;
    assert_eq!(page["items"][0]["id"], again["id"]);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let (_, older) = app
        .call(
            "GET",
            &format!("/v1/resends?subscriber_id=s&limit=1&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(older["items"][0]["id"], json!(resend_id));
    let (_, none) = app
        .call("GET", "/v1/resends?subscriber_id=other", None)
        .await;
    assert_eq!(none["items"], json!([]));

    // From the command line: a preview, and without --yes or a terminal, nothing more.
    let base = app.base();
    let cli = |extra: &'static [&'static str]| {
        let (base, since, until) = (base.clone(), since.clone(), until.clone());
        tokio::task::spawn_blocking(move || {
            let mut args = vec![
                "resend",
                "--api",
                &base,
                "--subscriber",
                "other",
                "--since",
                &since,
                "--until",
                &until,
                "--event-type",
                "invoice.paid",
                "--limit",
                "5",
            ];
            args.extend_from_slice(extra);
            run_cli(&args)
        })
    };
    let (ok, out) = cli(&["--dry-run"]).await.unwrap();
    assert!(ok, "{out}");
    assert!(
        out.contains("WOULD RESEND") && out.contains("inv-1"),
        "{out}"
    );
    assert!(out.contains("dry run: 1 event(s) would be resent"), "{out}");
    let (ok, out) = cli(&[]).await.unwrap();
    assert!(!ok && out.contains("pass --yes"), "{out}");
    let (ok, out) = cli(&["--yes"]).await.unwrap();
    assert!(ok, "{out}");
    assert!(out.contains("inv-1:other:resend-1"), "{out}");
    assert!(
        out.contains("1 event(s) resent to subscriber other"),
        "{out}"
    );
    eventually("the CLI's resend to arrive", async || {
        (!rx.received_for("inv-1:other:resend-1").is_empty()).then_some(())
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn a_paused_subscriber_s_resend_waits_for_its_resume() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    app.subscriber("s", &rx.url("/s")).await;
    let since = rfc3339(app.clock.now_ms());
    app.publish("e1", "t").await;
    app.delivery_when("e1:s", "delivered", |d| d["state"] == "delivered")
        .await;
    app.clock.advance(std::time::Duration::from_secs(1));
    let (code, _) = app
        .call(
            "PATCH",
            "/v1/subscribers/s",
            Some(json!({"status": "paused"})),
        )
        .await;
    assert_eq!(code, 200);
    let body = json!({"subscriber_id": "s", "since": since, "limit": 10});
    let (code, made) = app.call("POST", "/v1/resends", Some(body)).await;
    assert_eq!(code, 202, "{made}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        rx.received_for("e1:s:resend-1").is_empty(),
        "held while paused"
    );
    let (code, _) = app
        .call(
            "PATCH",
            "/v1/subscribers/s",
            Some(json!({"status": "active"})),
        )
        .await;
    assert_eq!(code, 200);
    app.delivery_when("e1:s:resend-1", "delivered", |d| d["state"] == "delivered")
        .await;
    app.stop().await;
}

#[tokio::test]
async fn bad_resends_are_refused_and_change_nothing() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    app.subscriber("s", &rx.url("/s")).await;
    app.subscriber("gone", &rx.url("/gone")).await;
    app.publish("e1", "t").await;
    let (code, _) = app.call("DELETE", "/v1/subscribers/gone", None).await;
    assert_eq!(code, 200);
    let now = app.clock.now_ms();
    let (since, until) = (rfc3339(now - 60_000), rfc3339(now + 60_000));
    let good = json!({"subscriber_id": "s", "since": since, "until": until, "limit": 10});
    let with = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        body
    };
    let too_many_types: Vec<String> = (0..101).map(|i| format!("t{i}")).collect();
    for (body, status, code, says) in [
        (
            with("subscriber_id", json!("nobody")),
            404,
            "not_found",
            "nobody",
        ),
        (
            with("subscriber_id", json!("gone")),
            409,
            "subscriber_revoked",
            "revoked",
        ),
        (
            with("subscriber_id", json!("a:b")),
            422,
            "invalid_request",
            "subscriber id",
        ),
        (
            with("since", json!("yesterday")),
            422,
            "invalid_request",
            "since",
        ),
        (
            with("until", json!("2026-08-15")),
            422,
            "invalid_request",
            "until",
        ),
        (
            with("until", json!(since)),
            422,
            "invalid_request",
            "until must be after since",
        ),
        (
            with("since", json!(rfc3339(now - 40 * 86_400_000))),
            422,
            "invalid_request",
            "days",
        ),
        (with("limit", json!(0)), 422, "invalid_request", "limit"),
        (with("limit", json!(1001)), 422, "invalid_request", "limit"),
        (with("limit", json!(-1)), 422, "invalid_request", "-1"),
        (
            with("per_second", json!(0)),
            422,
            "invalid_request",
            "per_second",
        ),
        (
            with("event_types", json!(too_many_types)),
            422,
            "invalid_request",
            "event_types",
        ),
        (
            with("event_types", json!([""])),
            422,
            "invalid_request",
            "event type",
        ),
        (
            with("expected_event_ids", json!([])),
            422,
            "invalid_request",
            "expected_event_ids",
        ),
        (
            with("expected_event_ids", json!(vec!["e1"; 11])),
            422,
            "invalid_request",
            "expected_event_ids",
        ),
        (
            with("surprise", json!(1)),
            422,
            "invalid_request",
            "surprise",
        ),
        (
            json!({"subscriber_id": "s", "since": since, "limit": 1, "dry_run": true,
                   "expected_event_ids": ["e1"]}),
            422,
            "invalid_request",
            "dry run",
        ),
        (
            json!({"since": since, "limit": 1}),
            422,
            "invalid_request",
            "subscriber_id",
        ),
    ] {
        let (got, answer) = app.call("POST", "/v1/resends", Some(body.clone())).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
    for (query, says) in [
        ("order=sideways", "order"),
        ("limit=0", "limit"),
        ("cursor=x", "cursor"),
        ("subscriber_id=a:b", "subscriber id"),
        ("surprise=1", "surprise"),
    ] {
        let (got, answer) = app.call("GET", &format!("/v1/resends?{query}"), None).await;
        assert_eq!(got, 422, "{query}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(says),
            "{query}: {answer}"
        );
    }
    let (got, _) = app.call("GET", "/v1/resends/rsd_nope", None).await;
    assert_eq!(got, 404);
    let (_, audits) = app.call("GET", "/v1/resends", None).await;
    assert_eq!(audits["items"], json!([]), "nothing was made");
    let (_, d) = app
        .call("GET", "/v1/deliveries?subscriber_id=s", None)
        .await;
    assert_eq!(d["items"].as_array().unwrap().len(), 1);
    app.stop().await;
}
