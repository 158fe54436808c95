//! Every route, driven with arbitrary JSON bodies and query strings over a real socket: each
//! request gets an answer (never a dropped connection), and no client input is answered 5xx.

use crate::common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{json, Map, Value};

/// Every operation the API serves (its OpenAPI document lists them all; `tests/it/openapi.rs`
/// holds the router to it), with `{id}` for a path parameter.
fn routes() -> Vec<(String, String)> {
    let document: Value = serde_json::from_str(hookline::api::openapi::document()).unwrap();
    let mut routes = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        let path = path
            .split('/')
            .map(|part| if part.starts_with('{') { "{id}" } else { part })
            .collect::<Vec<_>>()
            .join("/");
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// The field names the API reads, so that generated objects reach past "unknown field".
const FIELDS: &[&str] = &[
    "id",
    "type",
    "payload",
    "payload_version",
    "payloads",
    "url",
    "event_types",
    "secret",
    "max_in_flight",
    "rate_limit_per_second",
    "headers",
    "status",
    "grace_period",
    "reason",
    "subscriber_id",
    "limit",
    "per_second",
    "dry_run",
    "expected_delivery_ids",
    "order",
    "event_id",
    "state",
    "cursor",
    "name",
    "classification",
    "retryable",
    "revoke",
    "retry",
    "breaker",
    "base_delay",
    "max_attempts",
    "policy",
    "percent",
    "subscriber_ids",
    "abort_if",
    "terminal_rate_increase",
    "min_deliveries",
];

/// Strings without `:`, so no generated value is a URL hookline could deliver to: the only
/// destinations in this test are on 127.0.0.1.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_.\\-]{0,12}",
        "[^:]{0,24}",
        Just("http://127.0.0.1:9/fuzz".to_owned()),
        Just("permanent_failure".to_owned()),
        Just("s1".to_owned()),
        Just("e1".to_owned()),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "-?[0-9]{1,40}(\\.[0-9]{1,30})?(e[+-]?[0-9]{1,4})?"
            .prop_map(|n| serde_json::from_str(&n).unwrap_or(Value::Null)),
        (-3i64..2000).prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![prop::sample::select(FIELDS).prop_map(str::to_owned), text()],
                    inner
                ),
                0..6
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn query() -> impl Strategy<Value = String> {
    let pairs = prop::collection::vec(
        (
            prop_oneof![prop::sample::select(FIELDS).prop_map(str::to_owned), text()],
            prop_oneof![text(), number().prop_map(|n| n.to_string())],
        ),
        0..3,
    )
    .prop_map(|pairs| {
        pairs
            .iter()
            .map(|(k, v)| {
                let enc = |s: &str| {
                    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                };
                format!("{}={}", enc(k), enc(v))
            })
            .collect::<Vec<_>>()
            .join("&")
    });
    prop_oneof![3 => Just(String::new()), 1 => pairs]
}

/// The smallest valid body for a route, for generated fields to be added to.
fn template(route: &str) -> Value {
    match route {
        "/v1/events" => json!({"type": "t", "payload": {"n": 1}}),
        "/v1/subscribers" => json!({"url": "http://127.0.0.1:9/fuzz"}),
        "/v1/dead-letters/replay" => json!({"reason": "permanent_failure", "limit": 5}),
        "/v1/policies" => json!({"name": "p"}),
        "/v1/rollouts" => json!({"policy": "p", "percent": 50}),
        "/v1/rollouts/{id}" => json!({"percent": 10}),
        _ => json!({}),
    }
}

/// The route's valid body with arbitrary fields the API reads added (never replacing the
/// template's; often none), or anything at all.
fn body(route: &str) -> impl Strategy<Value = Value> {
    let fields = prop_oneof![
        Just(Default::default()),
        prop::collection::btree_map(
            prop::sample::select(FIELDS).prop_map(str::to_owned),
            prop_oneof![
                2 => text().prop_map(Value::String),
                1 => number(),
                1 => json_value(),
            ],
            1..4,
        ),
    ];
    let known = (Just(template(route)), fields).prop_map(|(template, fields)| {
        let mut body = template.as_object().cloned().unwrap_or_default();
        for (name, value) in fields {
            body.entry(name).or_insert(value);
        }
        Value::Object(body)
    });
    prop_oneof![3 => known, 1 => json_value()]
}

#[test]
fn every_route_answers_arbitrary_json_without_5xx() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let app = runtime.block_on(async {
        let app = TestApp::start("").await;
        app.subscriber("s1", "http://127.0.0.1:9/s1").await;
        app.publish("e1", "t").await;
        app
    });
    let base = app.base();
    let http = reqwest::Client::new();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 1_500,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let seen = std::sync::Mutex::new(std::collections::BTreeMap::<u16, u32>::new());
    let routes = routes();
    assert!(routes.len() >= 35, "{routes:?}");
    let case = prop::sample::select(routes).prop_flat_map(|route| {
        let body = body(&route.1);
        (
            Just(route),
            prop_oneof![text(), Just("s1".to_owned()), Just("e1:s1".to_owned())],
            prop::option::weighted(0.8, body),
            query(),
        )
    });
    runner
        .run(&case, |((method, route), id, body, query)| {
            let path = route.replace(
                "{id}",
                &url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>(),
            );
            let url = if query.is_empty() {
                format!("{base}{path}")
            } else {
                format!("{base}{path}?{query}")
            };
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut request = http.request(method.clone(), &url);
            if let Some(body) = &body {
                request = request.json(body);
            }
            // The whole answer, body included: one cut short is as bad as none.
            let answer = runtime.block_on(async {
                let response = request.send().await?;
                let status = response.status().as_u16();
                response.bytes().await.map(|_| status)
            });
            let status = answer.map_err(|e| {
                TestCaseError::fail(format!("{method} {url}: no answer ({e}); body {body:?}"))
            })?;
            *seen.lock().unwrap().entry(status).or_default() += 1;
            // `/healthz` says 503 about the store, not about the request.
            let about_the_server = route == "/healthz" && status == 503;
            prop_assert!(
                status < 500 || about_the_server,
                "{method} {url} with {body:?} answered {status}"
            );
            Ok(())
        })
        .unwrap();
    // The inputs reached past the parsers: some were accepted, some refused for their content.
    let seen = seen.into_inner().unwrap();
    for status in [200, 201, 202, 404, 422] {
        assert!(seen.contains_key(&status), "no {status} among {seen:?}");
    }
    eprintln!("answers by status: {seen:?}");
    runtime.block_on(app.stop());
}
