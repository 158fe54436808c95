//! `/v1/subscribers`: who receives what, and where.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
// The request bodies, beside the store's records of the same names.
use hookline_api as wire;
use hookline_api::{SecretRotation, SubscriberChange, SubscriberQuery};
use hookline_engine::signer::{new_secret, SigningKey};
use hookline_policy::{duration_ms, UnixMs};
use hookline_store::{
    DeliveryFilter, ListOrder, NewEvent, NewSubscriber, SubscriberFilter, SubscriberHeaders,
    SubscriberPatch, SubscriberStatus,
};
use std::collections::HashMap;
use std::time::Duration;

use super::auth::Caller;
use super::deliveries::MAX_GROUPS;
use super::error::{parse_json, parse_optional_json, ErrorEnvelope};
use super::overview::HOUR_MS;
use super::tenancy::{Listing, Tenancy};
use super::views::QueryValues;
use super::{page_limit, validate, views, Answer, ApiContext, ApiError, ApiState};
use crate::config::parse_duration;

const TAG: &str = "subscribers";

pub const MAX_IN_FLIGHT_OVERRIDE: u32 = 1000;

fn max_in_flight(n: Option<u32>) -> Result<Option<u32>, ApiError> {
    match n {
        Some(n) if !(1..=MAX_IN_FLIGHT_OVERRIDE).contains(&n) => Err(ApiError::invalid(format!(
            "max_in_flight must be between 1 and {MAX_IN_FLIGHT_OVERRIDE}"
        ))),
        other => Ok(other),
    }
}

fn rate_limit(r: Option<f64>) -> Result<Option<f64>, ApiError> {
    Ok(
        r.map(|r| hookline_store::check_rate("rate_limit_per_second", r))
            .transpose()?,
    )
}

/// A pin: the highest payload version the subscriber accepts.
fn payload_version(v: Option<i64>) -> Result<Option<i64>, ApiError> {
    match v {
        Some(v) if v < 0 => Err(ApiError::invalid(
            "payload_version must be a non-negative integer (or null for the latest)",
        )),
        other => Ok(other),
    }
}

pub const MAX_EVENT_TYPES: usize = 100;

fn event_types(types: Vec<String>) -> Result<Vec<String>, ApiError> {
    if types.len() > MAX_EVENT_TYPES {
        return Err(ApiError::invalid(format!(
            "event_types may list at most {MAX_EVENT_TYPES} types"
        )));
    }
    for t in &types {
        validate::event_type_pattern(t)?;
    }
    let mut types = types;
    types.sort();
    types.dedup();
    Ok(types)
}

/// `raw`, checked by the guard a subscriber of `tenant` is held to.
async fn url(ctx: &super::ApiContext, tenant: Option<&str>, raw: &str) -> Result<String, ApiError> {
    ctx.guards
        .of(tenant)
        .check_url(raw)
        .await
        .map(|u| u.to_string())
        .map_err(ApiError::from)
}

#[utoipa::path(post, path = "/v1/subscribers", operation_id = "create_subscriber", tag = TAG, request_body(content = wire::NewSubscriber, example = json!({
        "id": "subscriber-731", "url": "https://hooks.acme.example/hookline",
        "event_types": ["shipment.out_for_delivery"], "max_in_flight": 8})),
    responses(
        (status = 201, description = "Created; the one answer that shows its secret", body = views::CreatedSubscriber),
        (status = 409, description = "A subscriber with this id exists", body = ErrorEnvelope),
    ))]
pub async fn create(
    State(ctx): ApiState,
    tenancy: Tenancy,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::CreatedSubscriber> {
    let body: wire::NewSubscriber = parse_json(&body?)?;
    let tenant_id = tenancy.owner(body.tenant_id)?;
    let now = ctx.clock.now_ms();
    let id = match body.id {
        Some(id) => {
            validate::subscriber_id(&id)?;
            id
        }
        None => validate::generate("sub", now),
    };
    let secret = match body.secret {
        Some(secret) => {
            SigningKey::from_secret(&secret)?;
            secret
        }
        None => new_secret(),
    };
    let new = NewSubscriber {
        url: url(&ctx, tenant_id.as_deref(), &body.url).await?,
        tenant_id,
        event_types: event_types(body.event_types.unwrap_or_default())?,
        max_in_flight: max_in_flight(body.max_in_flight)?,
        rate_limit_per_second: rate_limit(body.rate_limit_per_second)?,
        payload_version: payload_version(body.payload_version)?,
        headers: validate::headers(body.headers.unwrap_or_default())?,
        id,
        secret,
    };
    let created = ctx.store.create_subscriber(new, now).await?;
    let mut answer = views::created_subscriber(&created, now);
    answer.subscriber.warnings =
        views::deprecated_types(ctx.catalog.deprecated_among(&created.event_types));
    Ok((StatusCode::CREATED, Json(answer)))
}

/// Subscriber `id`, if the caller may see it (else the 404 of an id that does not exist). Its
/// tenant never changes, so what a caller may do to it is decided by this read.
pub(super) async fn visible(
    ctx: &ApiContext,
    tenancy: &Tenancy,
    id: &str,
) -> Result<hookline_store::Subscriber, ApiError> {
    tenancy.shown(ctx.store.get_subscriber(id).await?, "subscriber", id)
}

/// Subscriber `id` as [`visible`] reads it, for a change: the operational endpoint is changed
/// at `/v1/operational-endpoint` only, so that it stays what hookline's own events need.
async fn changeable(
    ctx: &ApiContext,
    tenancy: &Tenancy,
    id: &str,
) -> Result<hookline_store::Subscriber, ApiError> {
    if id == crate::operational::ENDPOINT_ID {
        return Err(ApiError::conflict(
            "this is the operational endpoint: change or stop it at /v1/operational-endpoint",
        ));
    }
    visible(ctx, tenancy, id).await
}

/// The longest text a subscriber search takes.
const MAX_SEARCH: usize = 256;

/// Without secrets or header values, oldest first.
#[utoipa::path(get, path = "/v1/subscribers", operation_id = "list_subscribers", tag = TAG, params(SubscriberQuery),
    responses((status = 200, description = "A page of subscribers", body = views::Page<views::Subscriber>)))]
pub async fn list(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    query: Result<Query<SubscriberQuery>, QueryRejection>,
) -> Answer<views::Page<views::Subscriber>> {
    let query_values = QueryValues::for_caller(caller.as_ref().map(|Extension(c)| c));
    let Query(q) = query?;
    let limit = page_limit(q.limit)?;
    let Listing::Of(tenant_id) = tenancy.listing(q.tenant_id)? else {
        return Ok((StatusCode::OK, Json(views::Page::empty())));
    };
    if let Some(text) = &q.contains {
        if text.is_empty() || text.chars().count() > MAX_SEARCH {
            return Err(ApiError::invalid(format!(
                "contains must be 1 to {MAX_SEARCH} characters"
            )));
        }
    }
    let filter = SubscriberFilter {
        tenant_id,
        contains: q.contains,
        search_query_values: query_values == QueryValues::Shown,
    };
    let page = ctx.store.list_subscribers(filter, limit, q.cursor).await?;
    let now = ctx.clock.now_ms();
    let dead = dead_letters_last_hour(&ctx, now, tenancy.tenant()).await?;
    let mut answer = views::page(&page, |s| views::subscriber(s, now, query_values));
    for s in &mut answer.items {
        s.activity = Some(activity(&ctx, &s.id, &dead).await?);
    }
    Ok((StatusCode::OK, Json(answer)))
}

/// How many of a subscriber's newest deliveries are read for its latest attempt: enough to see
/// past the newest few waiting behind a breaker or a cap, and bounded per subscriber.
const RECENT_DELIVERIES: u32 = 20;

/// Dead letters that died in the last hour, per subscriber, from the dead-letter groups (one
/// read for a whole page); `None` when there were more groups than are read, so a subscriber
/// missing from them is not known to have none.
async fn dead_letters_last_hour(
    ctx: &ApiContext,
    now: UnixMs,
    tenant_id: Option<&str>,
) -> Result<Option<HashMap<String, u64>>, ApiError> {
    let since = now.saturating_sub(HOUR_MS);
    let groups = ctx
        .store
        .dead_letter_groups(since, tenant_id.map(str::to_owned), MAX_GROUPS + 1)
        .await?;
    let mut by_subscriber = HashMap::new();
    for g in &groups {
        *by_subscriber.entry(g.subscriber_id.clone()).or_default() += g.count;
    }
    Ok((groups.len() <= MAX_GROUPS as usize).then_some(by_subscriber))
}

/// What subscriber `id` has done lately: the latest attempt among its newest deliveries, and
/// its dead letters of the last hour (from `dead_letters_last_hour`).
async fn activity(
    ctx: &ApiContext,
    id: &str,
    dead: &Option<HashMap<String, u64>>,
) -> Result<views::Activity, ApiError> {
    let filter = DeliveryFilter {
        subscriber_id: Some(id.to_owned()),
        order: ListOrder::NewestFirst,
        ..Default::default()
    };
    let recent = ctx
        .store
        .list_deliveries(filter, RECENT_DELIVERIES, None)
        .await?;
    let last_attempt = recent
        .items
        .iter()
        .flat_map(|d| d.attempt_history.iter().map(move |a| (d, a)))
        .max_by_key(|(_, a)| a.started_at)
        .map(|(d, a)| views::last_attempt(&d.id, a));
    // The groups hold every subscriber with a dead letter in the hour: absent is none.
    let dead_letters_last_hour = dead
        .as_ref()
        .map(|counts| counts.get(id).copied().unwrap_or(0));
    Ok(views::Activity {
        last_attempt,
        dead_letters_last_hour,
    })
}

#[utoipa::path(get, path = "/v1/subscribers/{id}", operation_id = "get_subscriber", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The subscriber, with its breaker", body = views::Subscriber),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
    ))]
pub async fn get(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Subscriber> {
    let query_values = QueryValues::for_caller(caller.as_ref().map(|Extension(c)| c));
    let s = visible(&ctx, &tenancy, &id).await?;
    let now = ctx.clock.now_ms();
    let mut answer = views::subscriber(&s, now, query_values);
    let dead = dead_letters_last_hour(&ctx, now, tenancy.tenant()).await?;
    answer.activity = Some(activity(&ctx, &s.id, &dead).await?);
    Ok((StatusCode::OK, Json(answer)))
}

/// Admin scope: it is a credential.
#[utoipa::path(get, path = "/v1/subscribers/{id}/secret", operation_id = "get_subscriber_secret", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "Its signing secret", body = views::Secret),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
    ))]
pub async fn secret(
    State(ctx): ApiState,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Secret> {
    let s = visible(&ctx, &tenancy, &id).await?;
    Ok((StatusCode::OK, Json(views::Secret { secret: s.secret })))
}

/// The headers sent with its every attempt, values included: admin only, like the secret.
#[utoipa::path(get, path = "/v1/subscribers/{id}/headers", operation_id = "get_subscriber_headers", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "Its static headers, values included", body = views::Headers),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
    ))]
pub async fn headers(
    State(ctx): ApiState,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Headers> {
    let s = visible(&ctx, &tenancy, &id).await?;
    let SubscriberHeaders(headers) = s.headers;
    Ok((StatusCode::OK, Json(views::Headers { headers })))
}

pub const DEFAULT_ROTATION_GRACE: &str = "24h";
/// A previous secret signs for at most this long after a rotation.
pub const MAX_ROTATION_GRACE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Until `previous_secret_valid_until` every request carries both signatures; the answer holds
/// the new secret, once. The body may be empty.
#[utoipa::path(post, path = "/v1/subscribers/{id}/secret/rotate", operation_id = "rotate_subscriber_secret", tag = TAG, params(("id" = String, Path)),
    request_body(content = Option<SecretRotation>, example = json!({"grace_period": "24h"})),
    responses(
        (status = 200, description = "Rotated", body = views::RotatedSecret),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
        (status = 409, description = "The subscriber is revoked", body = ErrorEnvelope),
    ))]
pub async fn rotate_secret(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::RotatedSecret> {
    changeable(&ctx, &tenancy, &id).await?;
    let body = parse_optional_json(&body?)?.unwrap_or(SecretRotation {
        grace_period: None,
        secret: None,
    });
    let grace = body
        .grace_period
        .as_deref()
        .unwrap_or(DEFAULT_ROTATION_GRACE);
    let grace =
        parse_duration(grace).map_err(|m| ApiError::invalid(format!("grace_period: {m}")))?;
    if grace > MAX_ROTATION_GRACE {
        return Err(ApiError::invalid("grace_period may be at most 30 days"));
    }
    let secret = match body.secret {
        Some(secret) => {
            SigningKey::from_secret(&secret)?;
            secret
        }
        None => new_secret(),
    };
    let now = ctx.clock.now_ms();
    let s = ctx
        .store
        .rotate_secret(&id, secret, now.saturating_add(duration_ms(grace)), now)
        .await?;
    tracing::info!(
        action = "rotate_secret",
        subscriber = %s.id,
        grace_period = %humantime::format_duration(grace),
        by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)),
        "subscriber secret rotated"
    );
    Ok((
        StatusCode::OK,
        Json(views::RotatedSecret {
            id: s.id,
            secret: s.secret,
            previous_secret_valid_until: s
                .previous_secret_until
                .map(hookline_engine::clock::rfc3339),
        }),
    ))
}

/// A test event's type: none of a publisher's, so a receiver can tell it from real traffic.
pub const TEST_EVENT_TYPE: &str = "hookline.test";

/// A test event's payload: always this, naming the subscriber it was sent to.
fn test_payload(subscriber_id: &str) -> String {
    serde_json::json!({"test": true, "subscriber_id": subscriber_id}).to_string()
}

/// A test event of type `hookline.test` to this subscriber only, whatever its event types:
/// `{"test": true, "subscriber_id": id}`, in the payload version it is pinned to (1 when
/// unpinned), of its tenant, under admission and its tenant's publish rate like any event. A
/// paused subscriber's waits until it is resumed. The receipt's delivery is
/// `<receipt id>:<subscriber id>`.
#[utoipa::path(post, path = "/v1/subscribers/{id}/test-event", operation_id = "send_test_event", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 202, description = "Accepted: the event and its one delivery are committed", body = views::Receipt),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
        (status = 409, description = "The subscriber is revoked", body = ErrorEnvelope),
        (status = 429, description = "`rate_limited`: the tenant's `max_events_per_second` refuses it now; nothing was stored",
            body = ErrorEnvelope, headers(("retry-after" = u64, description = "Seconds to wait"))),
        (status = 503, description = "`over_capacity` or `storage_full`: nothing was stored",
            body = ErrorEnvelope, headers(("retry-after" = u64, description = "Seconds to wait"))),
    ))]
pub async fn send_test_event(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Answer<views::Receipt> {
    let s = visible(&ctx, &tenancy, &id).await?;
    if s.status == SubscriberStatus::Revoked {
        return Err(ApiError::conflict(format!(
            "subscriber {id:?} is revoked: it receives nothing, test events included"
        )));
    }
    let now = ctx.clock.now_ms();
    let mut event = NewEvent::single(
        &validate::generate("test", now),
        TEST_EVENT_TYPE,
        &test_payload(&s.id),
        s.payload_version.unwrap_or(1),
    );
    event.tenant_id = s.tenant_id;
    event.only_subscriber = Some(s.id);
    event.published_by = caller.map(|Extension(c)| c.name);
    let span = super::events::publish_span(&ctx, &headers, "/v1/subscribers/{id}/test-event");
    let published = super::events::publish_admitted(&ctx, event, now, &span).await;
    super::events::traced(&span, published)
}

/// Fields left out keep their value.
#[utoipa::path(patch, path = "/v1/subscribers/{id}", operation_id = "update_subscriber", tag = TAG, params(("id" = String, Path)),
    request_body(content = SubscriberChange, example = json!({"status": "paused"})),
    responses(
        (status = 200, description = "Changed", body = views::Subscriber),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
        (status = 409, description = "The subscriber is revoked", body = ErrorEnvelope),
    ))]
pub async fn update(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Subscriber> {
    let current = changeable(&ctx, &tenancy, &id).await?;
    let body: SubscriberChange = parse_json(&body?)?;
    let status = match body.status.as_deref() {
        None => None,
        Some("active") => Some(SubscriberStatus::Active),
        Some("paused") => Some(SubscriberStatus::Paused),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "status must be \"active\" or \"paused\", not {other:?} (DELETE revokes)"
            )))
        }
    };
    let patch = SubscriberPatch {
        url: match body.url {
            Some(raw) => Some(url(&ctx, current.tenant_id.as_deref(), &raw).await?),
            None => None,
        },
        event_types: body.event_types.map(event_types).transpose()?,
        status,
        max_in_flight: body.max_in_flight.map(max_in_flight).transpose()?,
        rate_limit_per_second: body.rate_limit_per_second.map(rate_limit).transpose()?,
        payload_version: body.payload_version.map(payload_version).transpose()?,
        headers: body
            .headers
            .map(|h| validate::headers(h.unwrap_or_default()))
            .transpose()?,
    };
    let resumed = status == Some(SubscriberStatus::Active);
    let s = ctx
        .store
        .update_subscriber(&id, patch, ctx.clock.now_ms())
        .await?;
    if resumed {
        ctx.wake.notify_one();
    }
    let by = crate::logs::by(caller.as_ref().map(|Extension(c)| c));
    match status {
        Some(SubscriberStatus::Paused) => {
            tracing::info!(action = "pause", subscriber = %s.id, by, "subscriber paused")
        }
        Some(SubscriberStatus::Active) => {
            tracing::info!(action = "resume", subscriber = %s.id, by, "subscriber resumed")
        }
        _ => {}
    }
    // Admin scope only.
    let mut answer = views::subscriber(&s, ctx.clock.now_ms(), QueryValues::Shown);
    answer.warnings = views::deprecated_types(ctx.catalog.deprecated_among(&s.event_types));
    Ok((StatusCode::OK, Json(answer)))
}

/// Final (kept for the record): its pending deliveries die `subscription_revoked`.
#[utoipa::path(delete, path = "/v1/subscribers/{id}", operation_id = "revoke_subscriber", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "Revoked", body = views::Subscriber),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
    ))]
pub async fn revoke(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Subscriber> {
    changeable(&ctx, &tenancy, &id).await?;
    let s = ctx.store.revoke_subscriber(&id, ctx.clock.now_ms()).await?;
    tracing::info!(
        action = "revoke",
        subscriber = %s.id,
        by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)),
        "subscriber revoked"
    );
    Ok((
        StatusCode::OK,
        // Admin scope only.
        Json(views::subscriber(
            &s,
            ctx.clock.now_ms(),
            QueryValues::Shown,
        )),
    ))
}
