//! Wildcard subscriptions and ordering keys over real HTTP, on both backends: a `shipment.*`
//! subscriber receives an ordered pair of shipment updates in publish order although the first
//! fails once, and what a subscription or an event may not say is refused.

use crate::common::*;
use serde_json::{json, Value};

async fn ordered_pair_arrives_in_order(app: &TestApp) {
    // The first update's first attempt fails: the second waits behind its retry.
    let rx = Receiver::start(|_, _| 500).await;
    for (id, types) in [
        ("tracker", json!(["shipment.*"])),
        ("billing", json!(["invoice.*"])),
    ] {
        let (code, body) = app
            .call(
                "POST",
                "/v1/subscribers",
                Some(json!({"id": id, "url": rx.url(&format!("/{id}")), "event_types": types})),
            )
            .await;
        assert_eq!(code, 201, "{body}");
    }
    let publish = async |id: &str, ty: &str| {
        let (code, receipt) = app
            .call(
                "POST",
                "/v1/events",
                Some(
                    json!({"id": id, "type": ty, "payload": {"shipment": "SHP-20418"},
                            "ordering_key": "SHP-20418"}),
                ),
            )
            .await;
        assert_eq!(code, 202, "{receipt}");
        assert_eq!(receipt["deliveries"], 1, "the wildcard subscriber only");
        assert_eq!(receipt["ordering_key"], "SHP-20418");
    };
    publish("out", "shipment.out_for_delivery").await;
    app.delivery_when("out:tracker", "the first attempt to fail", |d| {
        d["state"] == "scheduled" && d["attempts"] == 1
    })
    .await;
    rx.set_behaviour(|_, _| 200);
    publish("done", "shipment.delivered").await;
    let waiting = app.delivery("done:tracker").await;
    assert_eq!(waiting["state"], "scheduled", "{waiting}");
    assert_eq!(waiting["waiting_on"], "ordering", "{waiting}");
    assert_eq!(waiting["attempts"], 0, "{waiting}");
    app.advance_to_next_attempt("out:tracker").await;
    app.delivery_when("done:tracker", "the second to be delivered", |d| {
        d["state"] == "delivered"
    })
    .await;
    let arrived: Vec<(String, String)> = rx
        .received()
        .iter()
        .map(|r| (r.webhook_id.clone(), r.attempt.clone()))
        .collect();
    assert_eq!(
        arrived,
        [
            ("out:tracker".to_owned(), "1".to_owned()),
            ("out:tracker".to_owned(), "2".to_owned()),
            ("done:tracker".to_owned(), "1".to_owned()),
        ]
    );
    let (_, event) = app.call("GET", "/v1/events/done", None).await;
    assert_eq!(event["ordering_key"], "SHP-20418", "{event}");
}

on_both_backends!(
    an_ordered_pair_arrives_in_publish_order_on_sqlite,
    an_ordered_pair_arrives_in_publish_order_on_postgres,
    "",
    ordered_pair_arrives_in_order
);

#[tokio::test]
async fn wildcards_and_keys_outside_their_rules_are_refused() {
    let app = TestApp::start("").await;
    let refused = |code: u16, body: &Value, says: &str| {
        assert_eq!(code, 422, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    };
    for pattern in ["shipment*", "*.delivered", "a.*.b", ".*", "**"] {
        let (code, body) = app
            .call(
                "POST",
                "/v1/subscribers",
                Some(json!({"url": "https://hooks.example.com/x", "event_types": [pattern]})),
            )
            .await;
        refused(code, &body, pattern);
    }
    for (event, says) in [
        (json!({"type": "shipment*", "payload": 1}), "`*`"),
        (
            json!({"type": "t", "payload": 1, "ordering_key": ""}),
            "ordering_key",
        ),
        (
            json!({"type": "t", "payload": 1, "ordering_key": "k".repeat(129)}),
            "ordering_key",
        ),
        (
            json!({"type": "t", "payload": 1, "ordering_key": 7}),
            "ordering_key",
        ),
    ] {
        let (code, body) = app.call("POST", "/v1/events", Some(event)).await;
        refused(code, &body, says);
    }
    let (_, subscribers) = app.call("GET", "/v1/subscribers", None).await;
    assert_eq!(subscribers["items"], json!([]));
    let (_, events) = app.call("GET", "/v1/events", None).await;
    assert_eq!(events["items"], json!([]));
    app.stop().await;
}
