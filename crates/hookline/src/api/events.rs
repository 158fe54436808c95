//! `/v1/events`: publish once, fan out to every matching subscriber.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Extension;
use axum::Json;
// The request bodies, beside the store's records of the same names.
use hookline_api as wire;
use hookline_api::EventQuery;
use hookline_engine::traces::{Span, TRACEPARENT};
use hookline_policy::UnixMs;
use hookline_store::{EventFilter, NewEvent, PublishOutcome, StoreError};
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;
use serde_json::{Map, Value};

use super::auth::{Caller, Scope};
use super::error::{parse_json, ErrorEnvelope};
use super::tenancy::{Listing, Tenancy};
use super::{page_limit, validate, views, Answer, ApiContext, ApiError, ApiState};

const TAG: &str = "events";

const FIELDS: [&str; 7] = [
    "id",
    "type",
    "payload",
    "payload_version",
    "payloads",
    "tenant_id",
    "ordering_key",
];

/// The most payload versions one event may carry.
pub const MAX_PAYLOAD_VERSIONS: usize = 16;

/// Canonical text (object keys sorted), so the same payload always compares equal.
fn canonical(payload: &Value) -> String {
    serde_json::to_string(payload).expect("a JSON value serializes")
}

fn version_number(v: Value, what: &str) -> Result<i64, ApiError> {
    v.as_i64()
        .filter(|v| *v >= 0)
        .ok_or_else(|| ApiError::invalid(format!("{what} must be a non-negative integer")))
}

/// The payload version an object's key names: a non-negative integer as it prints (`"01"` is
/// not one).
pub(super) fn version_key(key: &str) -> Option<i64> {
    key.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0 && v.to_string() == key)
}

/// The versions of `{"payloads": {"1": ..., "2": ...}}`, ascending.
fn versioned(payloads: Value) -> Result<Vec<(i64, String)>, ApiError> {
    let Value::Object(map) = payloads else {
        return Err(ApiError::invalid(
            "payloads must be an object of payload versions, e.g. {\"1\": {...}, \"2\": {...}}",
        ));
    };
    if map.is_empty() || map.len() > MAX_PAYLOAD_VERSIONS {
        return Err(ApiError::invalid(format!(
            "payloads must hold 1 to {MAX_PAYLOAD_VERSIONS} versions"
        )));
    }
    let mut versions = Vec::with_capacity(map.len());
    for (key, payload) in map {
        let version = version_key(&key).ok_or_else(|| {
            ApiError::invalid(format!(
                "payloads: {key:?} is not a payload version (a non-negative integer)"
            ))
        })?;
        versions.push((version, canonical(&payload)));
    }
    versions.sort_unstable_by_key(|(v, _)| *v);
    Ok(versions)
}

/// The header a publisher may name its event by instead of the body's `id`: what HTTP APIs
/// commonly take to make a retried POST safe.
pub(super) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` a request carries, if any: one header, as text (a repeated or
/// non-ASCII header is refused, not guessed at).
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let mut keys = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(key) = keys.next() else {
        return Ok(None);
    };
    if keys.next().is_some() {
        return Err(ApiError::invalid(
            "the Idempotency-Key header is given more than once; send it once",
        ));
    }
    let key = key.to_str().map_err(|_| {
        ApiError::invalid("the Idempotency-Key header must be an event id (A-Z a-z 0-9 . _ : -)")
    })?;
    validate::idempotency_key(key)?;
    Ok(Some(key))
}

/// The event's id: the body's `id`, else the `Idempotency-Key` header (a publisher's retry
/// after a lost answer then names the same event), else a fresh one. Both given must agree.
fn event_id(id: Option<Value>, key: Option<&str>, now: i64) -> Result<String, ApiError> {
    match (id, key) {
        (None | Some(Value::Null), None) => Ok(validate::generate("evt", now)),
        (None | Some(Value::Null), Some(key)) => Ok(key.to_owned()),
        (Some(Value::String(id)), key) => {
            validate::event_id(&id)?;
            match key {
                Some(key) if key != id => Err(ApiError::invalid(format!(
                    "the body's id {id:?} and the Idempotency-Key header {key:?} differ: send \
                     one of them, or the same in both"
                ))),
                _ => Ok(id),
            }
        }
        (Some(_), _) => Err(ApiError::invalid("id must be a string")),
    }
}

/// Reads the body by hand: `"payload": null` is a valid payload, which an `Option` field could
/// not tell apart from a missing one. `key` is the request's `Idempotency-Key`, validated.
pub(super) fn new_event(
    body: &[u8],
    key: Option<&str>,
    max_payload_bytes: usize,
    now: i64,
) -> Result<NewEvent, ApiError> {
    let mut fields: Map<String, Value> = match parse_json::<Value>(body)? {
        Value::Object(map) => map,
        _ => return Err(ApiError::invalid("request body must be a JSON object")),
    };
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!(
            "unknown field `{unknown}`, expected one of `id`, `type`, `payload`, \
             `payload_version`, `payloads`, `tenant_id`, `ordering_key`"
        )));
    }
    let ordering_key = match fields.remove("ordering_key") {
        None | Some(Value::Null) => None,
        Some(Value::String(key)) => {
            validate::ordering_key(&key)?;
            Some(key)
        }
        Some(_) => return Err(ApiError::invalid("ordering_key must be a string")),
    };
    let id = event_id(fields.remove("id"), key, now)?;
    let tenant_id = match fields.remove("tenant_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => {
            validate::tenant_id(&t)?;
            Some(t)
        }
        Some(_) => return Err(ApiError::invalid("tenant_id must be a string")),
    };
    let event_type = match fields.remove("type") {
        Some(Value::String(t)) => {
            validate::event_type(&t)?;
            t
        }
        None | Some(Value::Null) => return Err(ApiError::invalid("type is required")),
        Some(_) => return Err(ApiError::invalid("type must be a string")),
    };
    let mut versions = match (
        fields.remove("payload"),
        fields.remove("payload_version"),
        fields.remove("payloads"),
    ) {
        (Some(payload), version, None) => {
            let version = match version {
                None | Some(Value::Null) => 1,
                Some(v) => version_number(v, "payload_version")?,
            };
            vec![(version, canonical(&payload))]
        }
        (None, None, Some(payloads)) => versioned(payloads)?,
        (None, Some(_), Some(_)) | (Some(_), _, Some(_)) => {
            return Err(ApiError::invalid(
                "give either payload (with payload_version) or payloads, not both",
            ))
        }
        (None, _, None) => {
            return Err(ApiError::invalid(
                "payload is required (any JSON value), or payloads: one per version",
            ))
        }
    };
    let total: usize = versions.iter().map(|(_, p)| p.len()).sum();
    if total > max_payload_bytes {
        return Err(ApiError::too_large(format!(
            "payload is {total} bytes (all versions together); the limit is {max_payload_bytes}"
        )));
    }
    let (payload_version, payload) = versions.pop().expect("at least one version");
    Ok(NewEvent {
        tenant_id,
        id,
        event_type,
        payload,
        payload_version,
        earlier_payloads: versions,
        published_by: None,
        admit_at_most: None,
        only_subscriber: None,
        ordering_key,
        traceparent: None,
    })
}

/// Answers once the event and all its deliveries are committed.
#[utoipa::path(post, path = "/v1/events", operation_id = "publish_event", tag = TAG, request_body(content = wire::NewEvent, example = json!({
        "id": "SHP-20418:out_for_delivery", "type": "shipment.out_for_delivery",
        "payload": {"shipment": "SHP-20418", "status": "out_for_delivery"}})),
    params(("Idempotency-Key" = Option<String>, Header,
        description = "The event id when the body has no `id` (the same rules; both given must be equal, else 422): \
            a publish retried with the same key after a lost answer answers 200 with the original receipt \
            instead of making a second event",
        pattern = "^(?!\\.\\.?$)[A-Za-z0-9._:-]{1,128}$", example = "SHP-20418:out_for_delivery"),
        ("traceparent" = Option<String>, Header,
        description = "W3C trace context: with tracing on (`[telemetry] otlp_endpoint`), the publish's span \
            continues this trace and every attempt of the event joins it; a value that is not a valid \
            `traceparent` is ignored (a new trace starts), never refused",
        example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")),
    responses(
        (status = 202, description = "Accepted: the event and its deliveries are committed", body = views::Receipt),
        (status = 200, description = "Accepted before, with the same body: the original receipt", body = views::Receipt),
        (status = 409, description = "Accepted before with another type, payload, version or ordering key, or published by another token or for another tenant (whatever the body)", body = ErrorEnvelope),
        (status = 422, description = "Invalid, or refused by the event type catalog: `schema_violation` (a payload version does not match its type's schema; `details` names the version, the JSON pointer and the rule) or `unregistered_type` (with `[events] require_registered_types`); nothing was stored", body = ErrorEnvelope),
        (status = 429, description = "`rate_limited`: the tenant's `max_events_per_second` refuses it now; nothing was stored",
            body = ErrorEnvelope, headers(("retry-after" = u64, description = "Seconds to wait"))),
        (status = 503, description = "`over_capacity`: admission cannot take the fan-out now, or `storage_full`: the database's disk is full; nothing was stored",
            body = ErrorEnvelope, headers(("retry-after" = u64, description = "Seconds to wait"))),
    ))]
pub async fn publish(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Receipt> {
    // Started first: a refused publish has its span too, with its status.
    let span = publish_span(&ctx, &headers, "/v1/events");
    let published = checked_and_published(&ctx, caller, tenancy, &headers, body, &span).await;
    traced(&span, published)
}

/// What `POST /v1/events` answers, in the trace of `span`.
async fn checked_and_published(
    ctx: &ApiContext,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    span: &Span,
) -> Answer<views::Receipt> {
    let now = ctx.clock.now_ms();
    let key = idempotency_key(headers)?;
    let mut event = new_event(&body?, key, ctx.max_payload_bytes, now)?;
    if let Err(refused) = ctx.catalog.check(&event) {
        // A retry of an event accepted before a schema or a rule tightened is answered as
        // every retry is (the store's 200 with the receipt, or 409 for another body), not
        // refused: the publisher's retry must not turn an accepted event into a failure.
        match ctx.store.get_event(&event.id).await {
            Ok(_) => {}
            Err(StoreError::NotFound(_)) => return Err(refused.into()),
            Err(e) => return Err(e.into()),
        }
    }
    event.tenant_id = tenancy.owner(event.tenant_id.take())?;
    event.published_by = caller.map(|Extension(c)| c.name);
    if !span.is_none() {
        span.set(KeyValue::new("hookline.event.id", event.id.clone()));
        span.set(KeyValue::new(
            "hookline.event.type",
            event.event_type.clone(),
        ));
    }
    publish_admitted(ctx, event, now, span).await
}

/// The span of a publish through `route`: the child of the request's `traceparent` when it
/// carries one valid header of it, else the start of a trace (an invalid one is ignored, never
/// refused).
pub(super) fn publish_span(ctx: &ApiContext, headers: &HeaderMap, route: &'static str) -> Span {
    let mut given = headers.get_all(TRACEPARENT).iter();
    let traceparent = match (given.next(), given.next()) {
        (Some(one), None) => one.to_str().ok(),
        _ => None,
    };
    let span = ctx
        .traces
        .continuing("publish", SpanKind::Server, traceparent);
    span.set(KeyValue::new("http.request.method", "POST"));
    span.set(KeyValue::new("http.route", route));
    span
}

/// `answer`, its status recorded on the publish's span (failed on a 5xx: the server's fault).
pub(super) fn traced<T>(span: &Span, answer: Answer<T>) -> Answer<T> {
    let status = match &answer {
        Ok((status, _)) => *status,
        Err(e) => e.status,
    };
    span.set(KeyValue::new(
        "http.response.status_code",
        i64::from(status.as_u16()),
    ));
    if let (Err(e), true) = (&answer, status.is_server_error()) {
        span.fail(e.message.clone());
    }
    answer
}

/// Publishes `event` (checked, its tenant and publisher set) under admission, in the trace of
/// `publishing` (its span): what `POST /v1/events` and a test event
/// (`subscribers::send_test_event`) both answer. The event keeps the publish span's
/// `traceparent`, so its attempts' spans join that trace (`hookline_engine::traces`).
pub(super) async fn publish_admitted(
    ctx: &ApiContext,
    mut event: NewEvent,
    now: UnixMs,
    publishing: &Span,
) -> Answer<views::Receipt> {
    let id = event.id.clone();
    let turn = ctx.capacity.admission_turn().await;
    let (room, limit) = ctx.capacity.room();
    event.admit_at_most = Some(room);
    event.traceparent = publishing.traceparent();
    let fan_out = ctx
        .traces
        .start("fan_out", SpanKind::Internal, &publishing.context());
    let published = ctx.store.publish(event, now).await;
    match &published {
        Ok(PublishOutcome::Accepted(receipt)) => fan_out.set(KeyValue::new(
            "hookline.deliveries",
            i64::try_from(receipt.deliveries).unwrap_or(i64::MAX),
        )),
        Ok(_) => {}
        Err(e) => fan_out.fail(e.to_string()),
    }
    drop(fan_out);
    let published = match published {
        Err(StoreError::OverCapacity { deliveries, room }) => {
            let refused = ctx.capacity.refused(deliveries, room, limit);
            return Err(ApiError::over_capacity(
                format!(
                    "event {id:?} fans out to {deliveries} deliveries and only {room} fit now \
                     ({}: hookline could not deliver more within its promise); nothing was \
                     stored: publish it again after the Retry-After",
                    refused.why
                ),
                refused.retry_after_s,
            ));
        }
        other => other.inspect_err(|e| ctx.health.failed_commits().record(e))?,
    };
    match published {
        PublishOutcome::Accepted(receipt) => {
            ctx.capacity
                .accepted(receipt.deliveries - receipt.unversioned);
            drop(turn);
            crate::telemetry::event_accepted(
                receipt.deliveries,
                receipt.tenant_id.as_deref(),
                ctx.tenant_labels,
            );
            ctx.wake.notify_one();
            Ok((StatusCode::ACCEPTED, Json(views::receipt(&receipt))))
        }
        PublishOutcome::AlreadyAccepted(receipt) => {
            Ok((StatusCode::OK, Json(views::receipt(&receipt))))
        }
        PublishOutcome::Conflict => Err(ApiError::conflict(format!(
            "event {id:?} was already accepted with a different type, payload or \
             payload_version, or published by another token or for another tenant"
        ))),
    }
}

/// A time an outsider sent as RFC 3339 (UTC), refused naming the field `name`.
pub(super) fn instant(name: &str, text: Option<&str>) -> Result<Option<i64>, ApiError> {
    text.map(|t| {
        hookline_engine::clock::parse_rfc3339(t).ok_or_else(|| {
            ApiError::invalid(format!(
                "{name} must be an RFC 3339 time in UTC, like 2026-12-05T09:00:00Z"
            ))
        })
    })
    .transpose()
}

/// Newest first (by acceptance), each with its delivery counts by state and without its
/// payloads. The type filters compare types exactly as published (case-sensitive).
#[utoipa::path(get, path = "/v1/events", operation_id = "list_events", tag = TAG, params(EventQuery),
    responses((status = 200, description = "A page of events", body = views::Page<views::EventSummary>)))]
pub async fn list(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<EventQuery>, QueryRejection>,
) -> Answer<views::Page<views::EventSummary>> {
    let Query(q) = query?;
    let limit = page_limit(q.limit)?;
    if let Some(t) = &q.event_type {
        validate::searched_type(t)?;
    }
    if let Some(prefix) = &q.type_prefix {
        validate::searched_type(prefix)
            .map_err(|_| ApiError::invalid("type_prefix must be 1 to 256 printable characters"))?;
    }
    let since = instant("since", q.since.as_deref())?;
    let until = instant("until", q.until.as_deref())?;
    let Listing::Of(tenant_id) = tenancy.listing(q.tenant_id)? else {
        return Ok((StatusCode::OK, Json(views::Page::empty())));
    };
    let filter = EventFilter {
        event_type: q.event_type,
        type_prefix: q.type_prefix,
        tenant_id,
        since,
        until,
    };
    let page = ctx.store.list_events(filter, limit, q.cursor).await?;
    Ok((
        StatusCode::OK,
        Json(views::page(&page, views::event_summary)),
    ))
}

/// A publish-scope token sees its own events only.
#[utoipa::path(get, path = "/v1/events/{id}", operation_id = "get_event", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The event and its delivery counts by state", body = views::Event),
        (status = 404, description = "No such event", body = ErrorEnvelope),
    ))]
pub async fn get(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Event> {
    let event = tenancy.shown(ctx.store.get_event(&id).await?, "event", &id)?;
    if let Some(Extension(c)) = caller {
        // A publisher sees its own events only; others' are as good as absent.
        if c.scope == Scope::Publish && event.published_by.as_deref() != Some(c.name.as_str()) {
            return Err(StoreError::NotFound(format!("event {id:?}")).into());
        }
    }
    Ok((StatusCode::OK, Json(views::event(&event))))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn the_document_describes_the_fields_read() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(wire::NewEvent::schema()).unwrap();
        let mut described: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        described.sort_unstable();
        let mut read = FIELDS.to_vec();
        read.sort_unstable();
        assert_eq!(described, read);
    }

    fn parse(body: &str) -> Result<NewEvent, ApiError> {
        new_event(body.as_bytes(), None, 64, 0)
    }

    fn with_key(body: &str, key: &str) -> Result<NewEvent, ApiError> {
        let mut headers = HeaderMap::new();
        headers.insert(IDEMPOTENCY_KEY, key.parse().unwrap());
        new_event(body.as_bytes(), idempotency_key(&headers)?, 64, 0)
    }

    /// The header names the event when the body does not; both must agree; it follows the id's
    /// rules.
    #[test]
    fn idempotency_keys() {
        let body = r#"{"type":"t","payload":1}"#;
        assert_eq!(with_key(body, "order-7:paid").unwrap().id, "order-7:paid");
        let named = r#"{"id":"order-7:paid","type":"t","payload":1}"#;
        assert_eq!(with_key(named, "order-7:paid").unwrap().id, "order-7:paid");
        let differ = with_key(named, "order-8:paid").unwrap_err();
        assert_eq!(differ.status.as_u16(), 422);
        assert!(differ.message.contains("differ"), "{}", differ.message);
        for bad in ["a b", "..", "x".repeat(129).as_str(), ""] {
            let refused = with_key(body, bad).unwrap_err();
            assert_eq!(refused.status.as_u16(), 422, "{bad:?}");
            assert!(
                refused.message.contains("Idempotency-Key"),
                "{}",
                refused.message
            );
        }
        let mut twice = HeaderMap::new();
        twice.append(IDEMPOTENCY_KEY, "a".parse().unwrap());
        twice.append(IDEMPOTENCY_KEY, "a".parse().unwrap());
        assert_eq!(idempotency_key(&twice).unwrap_err().status.as_u16(), 422);
        let mut binary = HeaderMap::new();
        binary.insert(
            IDEMPOTENCY_KEY,
            HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        assert_eq!(idempotency_key(&binary).unwrap_err().status.as_u16(), 422);
    }

    #[test]
    fn bodies() {
        let e = parse(r#"{"id":"e1","type":"t","payload":{"b":1,"a":[true,null]}}"#).unwrap();
        assert_eq!(e.payload, r#"{"a":[true,null],"b":1}"#);
        assert_eq!(e.payload_version, 1);
        assert_eq!(
            parse(r#"{"type":"t","payload":null}"#).unwrap().payload,
            "null"
        );
        assert!(parse(r#"{"type":"t","payload":1}"#)
            .unwrap()
            .id
            .starts_with("evt_"));
        let status = |b: &str| parse(b).unwrap_err().status.as_u16();
        assert_eq!(status("{"), 400);
        assert_eq!(status("[1]"), 422);
        assert_eq!(status(r#"{"payload":1}"#), 422);
        assert_eq!(status(r#"{"type":"t"}"#), 422);
        assert_eq!(status(r#"{"type":5,"payload":1}"#), 422);
        assert_eq!(status(r#"{"type":"t","payload":1,"extra":1}"#), 422);
        assert_eq!(
            status(r#"{"type":"t","payload":1,"payload_version":-1}"#),
            422
        );
        assert_eq!(status(r#"{"id":"a b","type":"t","payload":1}"#), 422);
        assert_eq!(
            status(&format!(r#"{{"type":"t","payload":"{}"}}"#, "x".repeat(63))),
            413
        );
    }

    #[test]
    fn payload_versions() {
        let e = parse(r#"{"type":"t","payloads":{"2":{"b":1},"10":[2],"1":null}}"#).unwrap();
        assert_eq!((e.payload_version, e.payload.as_str()), (10, "[2]"));
        assert_eq!(
            e.earlier_payloads,
            vec![(1, "null".to_owned()), (2, r#"{"b":1}"#.to_owned())]
        );
        assert_eq!(e.versions(), [1, 2, 10]);
        let status = |b: &str| parse(b).unwrap_err().status.as_u16();
        assert_eq!(status(r#"{"type":"t","payloads":{}}"#), 422);
        assert_eq!(status(r#"{"type":"t","payloads":[1]}"#), 422);
        assert_eq!(status(r#"{"type":"t","payloads":{"-1":1}}"#), 422);
        assert_eq!(status(r#"{"type":"t","payloads":{"01":1}}"#), 422);
        assert_eq!(status(r#"{"type":"t","payloads":{"v2":1}}"#), 422);
        assert_eq!(
            status(r#"{"type":"t","payload":1,"payloads":{"1":1}}"#),
            422
        );
        assert_eq!(
            status(r#"{"type":"t","payload_version":2,"payloads":{"1":1}}"#),
            422
        );
        assert_eq!(status(r#"{"type":"t","payload_version":2}"#), 422);
        let many: Vec<String> = (0..=MAX_PAYLOAD_VERSIONS)
            .map(|v| format!(r#""{v}":1"#))
            .collect();
        assert_eq!(
            status(&format!(
                r#"{{"type":"t","payloads":{{{}}}}}"#,
                many.join(",")
            )),
            422
        );
        // The limit is on all versions together.
        let half = "x".repeat(40);
        assert_eq!(
            status(&format!(
                r#"{{"type":"t","payloads":{{"1":"{half}","2":"{half}"}}}}"#
            )),
            413
        );
    }
}
