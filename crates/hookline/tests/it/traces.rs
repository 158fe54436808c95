//! OpenTelemetry traces, end to end: an OTLP/HTTP receiver written here records the spans
//! hookline exports; a real receiver subscriber records the `traceparent` each attempt sends.
//! A publish continues its request's `traceparent`, its attempts join its trace, and each
//! attempt tells its subscriber its own span. Off, nothing is exported and nothing is sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use serde_json::json;

use crate::common::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// A span as the collector received it (ids in lower-case hex, as `traceparent` writes them).
#[derive(Debug, Clone)]
struct Recorded {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    /// The span ids it links to.
    links: Vec<String>,
    attributes: HashMap<String, String>,
    /// Its resource's `service.name`.
    service: String,
}

/// An OTLP/HTTP collector on 127.0.0.1: `POST /v1/traces`, protobuf, every span kept.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Recorded>>>,
}

impl Collector {
    async fn start() -> (Self, String) {
        let collector = Collector::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(collector.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (collector, url)
    }

    fn spans(&self) -> Vec<Recorded> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans named `name` whose `attribute` is `value`.
    fn named(&self, name: &str, attribute: &str, value: &str) -> Vec<Recorded> {
        self.spans()
            .into_iter()
            .filter(|s| {
                s.name == name && s.attributes.get(attribute).map(String::as_str) == Some(value)
            })
            .collect()
    }

    /// The one span named `name` whose `attribute` is `value`, once exported.
    async fn one(&self, name: &str, attribute: &str, value: &str) -> Recorded {
        eventually(&format!("the {name} span of {value}"), async || {
            let found = self.named(name, attribute, value);
            (!found.is_empty()).then(|| {
                assert_eq!(found.len(), 1, "{found:?}");
                found[0].clone()
            })
        })
        .await
    }
}

async fn export(State(c): State<Collector>, body: axum::body::Bytes) -> (StatusCode, Vec<u8>) {
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    let mut spans = c.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.unwrap_or_default();
        let service = text_of(&resource.attributes)
            .remove("service.name")
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(Recorded {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    links: span.links.iter().map(|l| hex(&l.span_id)).collect(),
                    attributes: text_of(&span.attributes),
                    service: service.clone(),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    (StatusCode::OK, Vec::new())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Attributes as text (strings as they are, numbers as they print).
fn text_of(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .filter_map(|kv| {
            let text = match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => s.clone(),
                AnyValue::IntValue(i) => i.to_string(),
                AnyValue::BoolValue(b) => b.to_string(),
                other => format!("{other:?}"),
            };
            Some((kv.key.clone(), text))
        })
        .collect()
}

/// Publishes event `id` with the `traceparent` given (if any); 202.
async fn publish_with(app: &TestApp, id: &str, traceparent: Option<&str>) {
    let request = app
        .http
        .post(format!("{}/v1/events", app.base()))
        .json(&json!({"id": id, "type": "shipment.out_for_delivery", "payload": {"id": id}}));
    let request = match traceparent {
        Some(t) => request.header("traceparent", t),
        None => request,
    };
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
}

/// The `traceparent` the subscriber got with the first attempt of `delivery`.
async fn sent_traceparent(subscriber: &Receiver, delivery: &str) -> Option<String> {
    let got = eventually("the attempt", async || {
        subscriber.received_for(delivery).into_iter().next()
    })
    .await;
    let mut values = got.all_headers.get_all("traceparent").iter();
    let value = values.next().map(|v| v.to_str().unwrap().to_owned());
    assert!(values.next().is_none(), "one traceparent at most");
    value
}

/// The promise on whichever backend `start` opens hookline on (given its extra config).
async fn a_publish_s_trace_reaches_its_attempts(app: TestApp, collector: Collector) {
    let subscriber = Receiver::start(|_, _| 200).await;
    app.subscriber("s1", &subscriber.url("/hook")).await;
    let incoming = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    publish_with(&app, "traced", Some(&incoming)).await;
    // An invalid traceparent is no error: the publish starts a trace of its own.
    publish_with(&app, "untraced", Some("00-not-a-trace-01")).await;
    let traced = sent_traceparent(&subscriber, "traced:s1").await.unwrap();
    let untraced = sent_traceparent(&subscriber, "untraced:s1").await.unwrap();
    app.delivery_when("traced:s1", "delivered", |d| state(d) == "delivered")
        .await;
    app.delivery_when("untraced:s1", "delivered", |d| state(d) == "delivered")
        .await;
    let (_, event) = app.call("GET", "/v1/events/traced", None).await;
    let stored = event["traceparent"].as_str().unwrap().to_owned();
    // Stopping exports what the batch holds.
    app.stop().await;

    let publish = collector
        .one("publish", "hookline.event.id", "traced")
        .await;
    assert_eq!(publish.trace_id, TRACE_ID, "{publish:?}");
    assert_eq!(publish.parent_span_id, PARENT_ID, "{publish:?}");
    assert_eq!(publish.service, "hookline");
    assert_eq!(publish.attributes["http.response.status_code"], "202");
    assert_eq!(stored, format!("00-{TRACE_ID}-{}-01", publish.span_id));
    let fan_out = eventually("the fan-out span", async || {
        collector
            .spans()
            .into_iter()
            .find(|s| s.name == "fan_out" && s.parent_span_id == publish.span_id)
    })
    .await;
    assert_eq!(fan_out.trace_id, TRACE_ID);
    assert_eq!(fan_out.attributes["hookline.deliveries"], "1");

    let attempt = collector
        .one("attempt", "hookline.event.id", "traced")
        .await;
    assert_eq!(attempt.trace_id, TRACE_ID, "{attempt:?}");
    assert_eq!(attempt.parent_span_id, publish.span_id, "{attempt:?}");
    assert_eq!(attempt.attributes["hookline.delivery.id"], "traced:s1");
    assert_eq!(attempt.attributes["http.response.status_code"], "200");
    assert_eq!(traced, format!("00-{TRACE_ID}-{}-01", attempt.span_id));
    // The claim that took it: a span of its own trace, linked from the attempt.
    let claim = eventually("the claim span", async || {
        collector
            .spans()
            .into_iter()
            .find(|s| s.name == "claim" && attempt.links.contains(&s.span_id))
    })
    .await;
    assert_ne!(claim.trace_id, TRACE_ID);

    let publish = collector
        .one("publish", "hookline.event.id", "untraced")
        .await;
    assert_ne!(publish.trace_id, TRACE_ID);
    assert_eq!(publish.parent_span_id, "");
    let attempt = collector
        .one("attempt", "hookline.event.id", "untraced")
        .await;
    assert_eq!(attempt.parent_span_id, publish.span_id);
    assert_eq!(
        untraced,
        format!("00-{}-{}-01", publish.trace_id, attempt.span_id)
    );
}

fn telemetry(collector_url: &str) -> String {
    format!("[telemetry]\notlp_endpoint = \"{collector_url}\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_s_trace_reaches_its_attempts_on_sqlite() {
    let (collector, url) = Collector::start().await;
    let app = TestApp::start(&telemetry(&url)).await;
    a_publish_s_trace_reaches_its_attempts(app, collector).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_s_trace_reaches_its_attempts_on_postgres() {
    let (collector, url) = Collector::start().await;
    let Some(app) = TestApp::start_on_postgres(&telemetry(&url)).await else {
        return;
    };
    a_publish_s_trace_reaches_its_attempts(app, collector).await;
}

/// Without `otlp_endpoint`, nothing is exported and no attempt carries a `traceparent`, not
/// even one the publish was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_no_span_and_no_traceparent() {
    let (collector, _) = Collector::start().await;
    let app = TestApp::start("").await;
    let subscriber = Receiver::start(|_, _| 200).await;
    app.subscriber("s1", &subscriber.url("/hook")).await;
    publish_with(
        &app,
        "traced",
        Some(&format!("00-{TRACE_ID}-{PARENT_ID}-01")),
    )
    .await;
    assert_eq!(sent_traceparent(&subscriber, "traced:s1").await, None);
    let (_, event) = app.call("GET", "/v1/events/traced", None).await;
    assert_eq!(
        event["traceparent"],
        serde_json::Value::Null,
        "nothing stored"
    );
    app.delivery_when("traced:s1", "delivered", |d| state(d) == "delivered")
        .await;
    app.stop().await;
    assert!(collector.spans().is_empty());
}
