//! `/v1/subscribers`: who receives what, and where.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use hookline_store::{NewSubscriber, SubscriberHeaders, SubscriberPatch, SubscriberStatus};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

use super::error::parse_json;
use super::{validate, views, ApiError, ApiState, PageQuery};
use crate::config::parse_duration;
use crate::signer::{new_secret, SigningKey};

type Answer = Result<(StatusCode, Json<Value>), ApiError>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateBody {
    id: Option<String>,
    url: String,
    event_types: Option<Vec<String>>,
    secret: Option<String>,
    max_in_flight: Option<u32>,
    rate_limit_per_second: Option<f64>,
    payload_version: Option<i64>,
    headers: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PatchBody {
    url: Option<String>,
    event_types: Option<Vec<String>>,
    status: Option<String>,
    #[serde(default, deserialize_with = "present")]
    max_in_flight: Option<Option<u32>>,
    #[serde(default, deserialize_with = "present")]
    rate_limit_per_second: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    payload_version: Option<Option<i64>>,
    /// Replaces them all; `{}` or `null` removes them.
    #[serde(default, deserialize_with = "present")]
    headers: Option<Option<BTreeMap<String, String>>>,
}

/// Tells a field set to `null` (clear it) from one left out (keep it).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

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
        validate::event_type(t)?;
    }
    let mut types = types;
    types.sort();
    types.dedup();
    Ok(types)
}

async fn url(ctx: &super::ApiContext, raw: &str) -> Result<String, ApiError> {
    ctx.guard
        .check_url(raw)
        .await
        .map(|u| u.to_string())
        .map_err(ApiError::from)
}

pub async fn create(State(ctx): ApiState, body: Result<Bytes, BytesRejection>) -> Answer {
    let body: CreateBody = parse_json(&body?)?;
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
        url: url(&ctx, &body.url).await?,
        event_types: event_types(body.event_types.unwrap_or_default())?,
        max_in_flight: max_in_flight(body.max_in_flight)?,
        rate_limit_per_second: rate_limit(body.rate_limit_per_second)?,
        payload_version: payload_version(body.payload_version)?,
        headers: validate::headers(body.headers.unwrap_or_default())?,
        id,
        secret,
    };
    let created = ctx.store.create_subscriber(new, now).await?;
    Ok((
        StatusCode::CREATED,
        Json(views::created_subscriber(&created, now)),
    ))
}

pub async fn list(State(ctx): ApiState, query: Result<Query<PageQuery>, QueryRejection>) -> Answer {
    let Query(q) = query?;
    let page = ctx.store.list_subscribers(q.limit()?, q.cursor).await?;
    Ok((
        StatusCode::OK,
        Json(views::page(&page, |s| {
            views::subscriber(s, ctx.clock.now_ms())
        })),
    ))
}

pub async fn get(State(ctx): ApiState, Path(id): Path<String>) -> Answer {
    let s = ctx.store.get_subscriber(&id).await?;
    Ok((
        StatusCode::OK,
        Json(views::subscriber(&s, ctx.clock.now_ms())),
    ))
}

pub async fn secret(State(ctx): ApiState, Path(id): Path<String>) -> Answer {
    let s = ctx.store.get_subscriber(&id).await?;
    Ok((StatusCode::OK, Json(json!({"secret": s.secret}))))
}

/// The headers sent with its every attempt, values included: admin only, like the secret.
pub async fn headers(State(ctx): ApiState, Path(id): Path<String>) -> Answer {
    let s = ctx.store.get_subscriber(&id).await?;
    let SubscriberHeaders(headers) = s.headers;
    Ok((StatusCode::OK, Json(json!({"headers": headers}))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RotateBody {
    /// How long the previous secret keeps signing, e.g. "24h"; "0s" drops it at once.
    grace_period: Option<String>,
    /// The new secret; generated when absent.
    secret: Option<String>,
}

pub const DEFAULT_ROTATION_GRACE: &str = "24h";
/// A previous secret signs for at most this long after a rotation.
pub const MAX_ROTATION_GRACE: Duration = Duration::from_secs(30 * 24 * 3600);

/// `POST /v1/subscribers/{id}/secret/rotate`: the answer holds the new secret, once.
pub async fn rotate_secret(
    State(ctx): ApiState,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let body = body?;
    let body: RotateBody = if body.is_empty() {
        RotateBody {
            grace_period: None,
            secret: None,
        }
    } else {
        parse_json(&body)?
    };
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
        .rotate_secret(&id, secret, now + grace.as_millis() as i64, now)
        .await?;
    Ok((
        StatusCode::OK,
        Json(json!({
            "id": s.id,
            "secret": s.secret,
            "previous_secret_valid_until": s.previous_secret_until.map(crate::clock::rfc3339),
        })),
    ))
}

pub async fn update(
    State(ctx): ApiState,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let body: PatchBody = parse_json(&body?)?;
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
            Some(raw) => Some(url(&ctx, &raw).await?),
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
    Ok((
        StatusCode::OK,
        Json(views::subscriber(&s, ctx.clock.now_ms())),
    ))
}

pub async fn revoke(State(ctx): ApiState, Path(id): Path<String>) -> Answer {
    let s = ctx.store.revoke_subscriber(&id, ctx.clock.now_ms()).await?;
    Ok((
        StatusCode::OK,
        Json(views::subscriber(&s, ctx.clock.now_ms())),
    ))
}
