//! The event type catalog over HTTP: types registered, listed, changed; publishes checked
//! against their type's schemas before anything is stored; unregistered types refused when
//! the server requires registration; deprecated types named to their subscribers.

use crate::common::*;
use serde_json::{json, Value};

const OPS: &str = "hl_catalog-ops";
const ACME: &str = "hl_catalog-acme";

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no error code>")
}

/// A shipment's payload: version 1 a flat object, version 2 with a list of parcels.
fn shipment_type() -> Value {
    json!({
        "name": "shipment.out_for_delivery",
        "description": "The parcel left the depot with a driver",
        "schemas": {
            "1": {
                "type": "object",
                "required": ["shipment", "status"],
                "properties": {"shipment": {"type": "string"}, "status": {"enum": ["out_for_delivery"]}}
            },
            "2": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "required": ["shipment", "parcels"],
                "properties": {
                    "shipment": {"type": "string", "pattern": "^SHP-[0-9]+$"},
                    "parcels": {"type": "array", "items": {"$ref": "#/$defs/parcel"}}
                },
                "$defs": {"parcel": {"type": "object", "required": ["weight_g"],
                    "properties": {"weight_g": {"type": "integer", "minimum": 1}}}}
            }
        }
    })
}

/// The event `id` is not stored: nothing answers for it.
async fn not_stored(app: &TestApp, id: &str) {
    let (status, body) = app.call("GET", &format!("/v1/events/{id}"), None).await;
    assert_eq!(status, 404, "event {id} was stored: {body}");
}

async fn publishes_are_checked_against_their_schemas(app: &TestApp) {
    let rx = Receiver::start(|_, _| 200).await;
    app.subscriber("s1", &rx.url("/ok")).await;
    let (status, created) = app
        .call("POST", "/v1/event-types", Some(shipment_type()))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["revision"], 1);
    assert_eq!(
        created["schemas"]["2"]["$defs"]["parcel"]["required"],
        json!(["weight_g"])
    );

    // Valid: accepted.
    let valid = json!({"id": "e-valid", "type": "shipment.out_for_delivery",
        "payload": {"shipment": "SHP-1", "status": "out_for_delivery"}});
    let (status, body) = app.call("POST", "/v1/events", Some(valid)).await;
    assert_eq!(status, 202, "{body}");

    // Invalid: 422 naming the version, the pointer and the rule; nothing stored.
    let invalid = json!({"id": "e-invalid", "type": "shipment.out_for_delivery",
        "payload": {"shipment": "SHP-1", "status": "delivered"}});
    let (status, body) = app.call("POST", "/v1/events", Some(invalid)).await;
    assert_eq!((status, code(&body)), (422, "schema_violation"), "{body}");
    let details = &body["error"]["details"];
    assert_eq!(details["event_type"], "shipment.out_for_delivery");
    assert_eq!(details["payload_version"], 1);
    assert_eq!(details["pointer"], "/status");
    assert_eq!(details["keyword"], "enum");
    assert_eq!(details["schema_path"], "/properties/status/enum");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("/status") && message.contains("enum"),
        "{message}"
    );
    assert!(
        !message.contains("delivered"),
        "the payload's values are not echoed: {message}"
    );
    not_stored(app, "e-invalid").await;

    // Several versions: each is checked against its own schema; a version without one is not.
    let both = |id: &str, v2: Value| {
        json!({"id": id, "type": "shipment.out_for_delivery", "payloads": {
            "1": {"shipment": "SHP-2", "status": "out_for_delivery"},
            "2": v2,
            "3": "anything at all"}})
    };
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(both(
                "e-both",
                json!({"shipment": "SHP-2", "parcels": [{"weight_g": 900}]}),
            )),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(both(
                "e-both-bad",
                json!({"shipment": "SHP-2", "parcels": [{"weight_g": 900}, {"weight_g": 0}]}),
            )),
        )
        .await;
    assert_eq!((status, code(&body)), (422, "schema_violation"), "{body}");
    let details = &body["error"]["details"];
    assert_eq!(
        (
            details["payload_version"].clone(),
            details["pointer"].clone()
        ),
        (json!(2), json!("/parcels/1/weight_g"))
    );
    assert_eq!(details["keyword"], "minimum");
    not_stored(app, "e-both-bad").await;

    // A type without a schema for the version published, or not in the catalog: not checked.
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "e-v9", "type": "shipment.out_for_delivery", "payload_version": 9, "payload": 1})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "e-other", "type": "invoice.paid", "payload": 1})),
        )
        .await;
    assert_eq!(status, 202, "{body}");

    // A schema tightened since: a retry of an event accepted before is answered as a retry
    // (200, its receipt), not refused; a new event with that payload is refused.
    let tighter = json!({"schemas": {"1": {"type": "object", "required": ["shipment", "eta"]}}});
    let (status, body) = app
        .call(
            "PATCH",
            "/v1/event-types/shipment.out_for_delivery",
            Some(tighter),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let retry = json!({"id": "e-valid", "type": "shipment.out_for_delivery",
        "payload": {"shipment": "SHP-1", "status": "out_for_delivery"}});
    let (status, body) = app.call("POST", "/v1/events", Some(retry)).await;
    assert_eq!(status, 200, "{body}");
    let fresh = json!({"id": "e-fresh", "type": "shipment.out_for_delivery",
        "payload": {"shipment": "SHP-1", "status": "out_for_delivery"}});
    let (status, body) = app.call("POST", "/v1/events", Some(fresh)).await;
    assert_eq!((status, code(&body)), (422, "schema_violation"), "{body}");

    // Schemas are refused when registered: too large, not a schema, or referring outside.
    let oversized = json!({"name": "big", "schemas": {"1": {"description": "x".repeat(70_000)}}});
    let (status, body) = app.call("POST", "/v1/event-types", Some(oversized)).await;
    assert_eq!((status, code(&body)), (413, "payload_too_large"), "{body}");
    for (schema, says) in [
        (json!({"type": "objekt"}), "schemas.1"),
        (
            json!({"$ref": "https://schemas.example/s.json"}),
            "fetches nothing",
        ),
        (
            json!({"$schema": "http://json-schema.org/draft-07/schema#"}),
            "2020-12",
        ),
        (
            json!({"properties": {"a": {"pattern": "(?=a)"}}}),
            "schemas.1",
        ),
    ] {
        let body = json!({"name": "refused", "schemas": {"1": schema}});
        let (status, answer) = app.call("POST", "/v1/event-types", Some(body)).await;
        assert_eq!(
            (status, code(&answer)),
            (422, "invalid_schema"),
            "{schema}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{schema}: {message}");
    }
    let (status, _) = app.call("GET", "/v1/event-types/refused", None).await;
    assert_eq!(status, 404, "a refused type is not registered");
    let (status, _) = app.call("GET", "/v1/event-types/big", None).await;
    assert_eq!(status, 404);
}

on_both_backends!(
    publishes_are_checked_against_their_schemas_on_sqlite,
    publishes_are_checked_against_their_schemas_on_postgres,
    "",
    publishes_are_checked_against_their_schemas
);

#[tokio::test]
async fn types_are_registered_listed_paged_and_changed() {
    let app = TestApp::start("").await;
    for name in ["a.one", "a.two", "a.three"] {
        let (status, body) = app
            .call("POST", "/v1/event-types", Some(json!({"name": name})))
            .await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(
            (
                body["description"].clone(),
                body["schemas"].clone(),
                body["deprecated"].clone()
            ),
            (Value::Null, json!({}), json!(false))
        );
    }
    let (status, body) = app
        .call("POST", "/v1/event-types", Some(json!({"name": "a.one"})))
        .await;
    assert_eq!((status, code(&body)), (409, "conflict"), "{body}");
    for bad in [
        json!({"name": "a.*"}),
        json!({"name": ""}),
        json!({"name": "hookline.test"}),
        json!({"name": "x", "colour": "red"}),
        json!({"name": "x", "description": "d".repeat(1025)}),
        json!({"name": "x", "schemas": {"v1": {}}}),
        json!({"name": "x", "deprecated": "yes"}),
    ] {
        let (status, body) = app.call("POST", "/v1/event-types", Some(bad.clone())).await;
        assert_eq!(status, 422, "{bad}: {body}");
    }

    // Paged in the order registered.
    let (_, first) = app.call("GET", "/v1/event-types?limit=2", None).await;
    let names = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&first), ["a.one", "a.two"]);
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, rest) = app
        .call(
            "GET",
            &format!("/v1/event-types?limit=2&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(
        (names(&rest), rest["next_cursor"].clone()),
        (vec!["a.three".to_owned()], Value::Null)
    );
    let (status, body) = app.call("GET", "/v1/event-types?colour=red", None).await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = app.call("GET", "/v1/event-types/a.nine", None).await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, body) = app
        .call(
            "PATCH",
            "/v1/event-types/a.nine",
            Some(json!({"deprecated": true})),
        )
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");

    // A change: a description, a schema added (checked from the next publish on), deprecated.
    let (status, changed) = app
        .call(
            "PATCH",
            "/v1/event-types/a.one",
            Some(json!({"description": "the first", "schemas": {"1": {"type": "string"}}})),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        (changed["description"].clone(), changed["revision"].clone()),
        (json!("the first"), json!(2))
    );
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "a.one", "payload": 5})),
        )
        .await;
    assert_eq!((status, code(&body)), (422, "schema_violation"), "{body}");
    let (status, changed) = app
        .call(
            "PATCH",
            "/v1/event-types/a.one",
            Some(json!({"schemas": {"2": true}, "deprecated": true})),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        changed["schemas"],
        json!({"1": {"type": "string"}, "2": true})
    );
    assert_eq!(changed["description"], "the first", "left out: kept");
    assert_eq!(changed["deprecated"], true);
    // A version's schema is never removed; a refused change changes nothing.
    for bad in [
        json!({"schemas": {"1": null}}),
        json!({"schemas": {"1": {"type": "nope"}}, "description": "changed"}),
        json!({"name": "renamed"}),
    ] {
        let (status, body) = app
            .call("PATCH", "/v1/event-types/a.one", Some(bad.clone()))
            .await;
        assert_eq!(status, 422, "{bad}: {body}");
    }
    let (_, kept) = app.call("GET", "/v1/event-types/a.one", None).await;
    assert_eq!(kept, changed);
    let (status, cleared) = app
        .call(
            "PATCH",
            "/v1/event-types/a.one",
            Some(json!({"description": null})),
        )
        .await;
    assert_eq!((status, cleared["description"].clone()), (200, Value::Null));

    // The catalog is kept: a restart reads it again and checks with it.
    let app = app.restart().await;
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "a.one", "payload": 5})),
        )
        .await;
    assert_eq!((status, code(&body)), (422, "schema_violation"), "{body}");
    app.stop().await;
}

#[tokio::test]
async fn unregistered_types_are_refused_when_the_server_requires_registration() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("[events]\nrequire_registered_types = true").await;
    app.subscriber("s1", &rx.url("/ok")).await;
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "e1", "type": "invoice.paid", "payload": {}})),
        )
        .await;
    assert_eq!((status, code(&body)), (422, "unregistered_type"), "{body}");
    not_stored(&app, "e1").await;
    let (status, _) = app
        .call(
            "POST",
            "/v1/event-types",
            Some(json!({"name": "invoice.paid"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, body) = app
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": "e1", "type": "invoice.paid", "payload": {}})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // A test event is hookline's own, never in the catalog: it goes through.
    let (status, body) = app
        .call("POST", "/v1/subscribers/s1/test-event", None)
        .await;
    assert_eq!(status, 202, "{body}");
    app.stop().await;
}

#[tokio::test]
async fn subscribing_to_a_deprecated_type_warns() {
    let rx = Receiver::start(|_, _| 200).await;
    let app = TestApp::start("").await;
    for (name, deprecated) in [("order.placed", true), ("order.paid", false)] {
        let body = json!({"name": name, "deprecated": deprecated});
        assert_eq!(app.call("POST", "/v1/event-types", Some(body)).await.0, 201);
    }
    let (status, created) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s1", "url": rx.url("/ok"), "event_types": ["order.paid", "order.placed"]})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["warnings"].as_array().unwrap().len(),
        1,
        "{created}"
    );
    assert_eq!(created["warnings"][0]["code"], "deprecated_event_type");
    assert_eq!(created["warnings"][0]["event_type"], "order.placed");
    // Nothing to heed: no warnings at all.
    let (_, quiet) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s2", "url": rx.url("/ok"), "event_types": ["order.paid"]})),
        )
        .await;
    assert!(quiet.get("warnings").is_none(), "{quiet}");
    let (_, read) = app.call("GET", "/v1/subscribers/s1", None).await;
    assert!(
        read.get("warnings").is_none(),
        "only answers to a change warn: {read}"
    );
    // A change warns about the subscriber's deprecated types, and about one deprecated since.
    let deprecate = json!({"deprecated": true});
    let (status, _) = app
        .call("PATCH", "/v1/event-types/order.paid", Some(deprecate))
        .await;
    assert_eq!(status, 200);
    let (status, changed) = app
        .call(
            "PATCH",
            "/v1/subscribers/s2",
            Some(json!({"status": "paused"})),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        changed["warnings"][0]["event_type"], "order.paid",
        "{changed}"
    );
    // A wildcard names every deprecated type under it; a list of every type names none.
    let (_, wild) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s3", "url": rx.url("/ok"), "event_types": ["order.*"]})),
        )
        .await;
    let named: Vec<&str> = wild["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["order.paid", "order.placed"], "{wild}");
    let (_, everything) = app
        .call(
            "POST",
            "/v1/subscribers",
            Some(json!({"id": "s4", "url": rx.url("/ok")})),
        )
        .await;
    assert!(everything.get("warnings").is_none(), "{everything}");
    app.stop().await;
}

#[tokio::test]
async fn tenants_read_the_catalog_and_only_the_platform_changes_it() {
    let tokens = format!(
        "[metrics]\nopen = false\n{}{}",
        api_token("ops", OPS, "admin", None),
        api_token("acme", ACME, "admin", Some("acme"))
    );
    let app = TestApp::start(&tokens).await;
    let (status, body) = app
        .call_as(Some(OPS), "POST", "/v1/event-types", Some(shipment_type()))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["created_by"], "ops");
    for path in [
        "/v1/event-types",
        "/v1/event-types/shipment.out_for_delivery",
    ] {
        let (status, body) = app.call_as(Some(ACME), "GET", path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let writes = [
        ("POST", "/v1/event-types", json!({"name": "acme.thing"})),
        (
            "PATCH",
            "/v1/event-types/shipment.out_for_delivery",
            json!({"deprecated": true}),
        ),
    ];
    for (method, path, body) in writes {
        let (status, answer) = app.call_as(Some(ACME), method, path, Some(body)).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
    }
    let (_, kept) = app
        .call_as(
            Some(OPS),
            "GET",
            "/v1/event-types/shipment.out_for_delivery",
            None,
        )
        .await;
    assert_eq!(kept["deprecated"], false);
    // A tenant's publishes are checked like anyone's.
    let (status, body) = app
        .call_as(
            Some(ACME),
            "POST",
            "/v1/events",
            Some(json!({"type": "shipment.out_for_delivery", "payload": {}})),
        )
        .await;
    assert_eq!((status, code(&body)), (422, "schema_violation"), "{body}");
    app.stop().await;
}

/// On PostgreSQL another process may change the catalog: this one checks publishes with the
/// change once it is notified, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_s_change_to_the_catalog_is_checked_at_once() {
    let Some(app) = TestApp::start_on_postgres("").await else {
        return;
    };
    let other = hookline_store::open(&app.config.database).await.unwrap();
    other
        .create_event_type(
            hookline_store::NewEventType {
                name: "order.placed".into(),
                description: None,
                schemas: [(1, r#"{"type":"object"}"#.to_owned())].into(),
                deprecated: false,
                created_by: None,
            },
            unix_ms_now(),
        )
        .await
        .unwrap();
    eventually("the other process's type is checked", async || {
        let (status, _) = app
            .call(
                "POST",
                "/v1/events",
                Some(json!({"type": "order.placed", "payload": 1})),
            )
            .await;
        (status == 422).then_some(())
    })
    .await;
    drop(other);
    app.stop().await;
}
