//! `/v1/operational-endpoint`: where hookline sends its own signed webhooks about subscribers,
//! dead letters and replays (`crate::operational`). Platform only; set here, or in the file
//! (`[operational] url`), which then wins and these changes are refused.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hookline_api::{Endpoint, OperationalEndpointRequest};
use hookline_engine::signer::{new_secret, SigningKey};
use hookline_store::StoreError;

use super::error::{parse_json, ErrorEnvelope};
use super::{views, Answer, ApiContext, ApiError, ApiState};
use crate::operational::{self, ENDPOINT_ID};

const TAG: &str = "operational";

fn set_by(ctx: &ApiContext) -> &'static str {
    if ctx.operational_from_file {
        "file"
    } else {
        "api"
    }
}

fn refuse_if_from_file(ctx: &ApiContext) -> Result<(), ApiError> {
    if ctx.operational_from_file {
        return Err(ApiError::conflict(
            "the operational endpoint is set by [operational] url in the configuration file; \
             change it there",
        ));
    }
    Ok(())
}

async fn shown(ctx: &ApiContext, secret: Option<String>) -> Result<Endpoint, ApiError> {
    let s =
        ctx.store.get_subscriber(ENDPOINT_ID).await.map_err(|e| {
            match e {
        StoreError::NotFound(_) => ApiError::not_found(
            "no operational endpoint is set (POST /v1/operational-endpoint, or [operational] url)",
        ),
        e => e.into(),
    }
        })?;
    let now = ctx.clock.now_ms();
    Ok(Endpoint {
        set_by: set_by(ctx).to_owned(),
        subscriber: views::subscriber(&s, now, views::QueryValues::Shown),
        secret,
    })
}

/// Sets where hookline's operational events go (`subscriber.failing`, `.recovered`,
/// `.disabled`, `.revoked`, `dead_letters.spike`, `replay.finished`), signed as any delivery
/// and retried by the default policy; resumes it if it was stopped.
#[utoipa::path(post, path = "/v1/operational-endpoint", operation_id = "set_operational_endpoint", tag = TAG,
    request_body(content = OperationalEndpointRequest, example = json!({"url": "https://ops.platform.example/hookline"})),
    responses(
        (status = 201, description = "Set for the first time; the answer shows its secret", body = Endpoint),
        (status = 200, description = "Changed (its secret shown when one was given)", body = Endpoint),
        (status = 409, description = "Set by the configuration file", body = ErrorEnvelope),
        (status = 422, description = "A URL the guard refuses, or a malformed secret", body = ErrorEnvelope),
    ))]
pub async fn set(State(ctx): ApiState, body: Result<Bytes, BytesRejection>) -> Answer<Endpoint> {
    let body: OperationalEndpointRequest = parse_json(&body?)?;
    refuse_if_from_file(&ctx)?;
    if let Some(secret) = &body.secret {
        SigningKey::from_secret(secret)?;
    }
    let url = ctx
        .guards
        .of(None)
        .check_url(&body.url)
        .await
        .map_err(ApiError::from)?;
    let exists = match ctx.store.get_subscriber(ENDPOINT_ID).await {
        Ok(_) => true,
        Err(StoreError::NotFound(_)) => false,
        Err(e) => return Err(e.into()),
    };
    let secret = match (&body.secret, exists) {
        (None, false) => Some(new_secret()),
        (given, _) => given.clone(),
    };
    let now = ctx.clock.now_ms();
    let made =
        operational::set_endpoint(ctx.store.as_ref(), url.to_string(), secret.clone(), now).await?;
    tracing::info!(action = "set_operational_endpoint", url = %url, "operational endpoint set");
    let status = if made {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(shown(&ctx, secret).await?)))
}

#[utoipa::path(get, path = "/v1/operational-endpoint", operation_id = "get_operational_endpoint", tag = TAG,
    responses(
        (status = 200, description = "The endpoint, with its breaker and status", body = Endpoint),
        (status = 404, description = "None is set", body = ErrorEnvelope),
    ))]
pub async fn get(State(ctx): ApiState) -> Answer<Endpoint> {
    Ok((StatusCode::OK, Json(shown(&ctx, None).await?)))
}

/// Stops operational events: the endpoint is paused (what happens meanwhile is not told
/// later; its waiting deliveries are held, and end with their windows). `POST` resumes it.
#[utoipa::path(delete, path = "/v1/operational-endpoint", operation_id = "stop_operational_endpoint", tag = TAG,
    responses(
        (status = 200, description = "Stopped", body = Endpoint),
        (status = 404, description = "None is set", body = ErrorEnvelope),
        (status = 409, description = "Set by the configuration file", body = ErrorEnvelope),
    ))]
pub async fn stop(State(ctx): ApiState) -> Answer<Endpoint> {
    refuse_if_from_file(&ctx)?;
    shown(&ctx, None).await?;
    operational::stop_endpoint(ctx.store.as_ref(), ctx.clock.now_ms()).await?;
    tracing::info!(
        action = "stop_operational_endpoint",
        "operational endpoint stopped"
    );
    Ok((StatusCode::OK, Json(shown(&ctx, None).await?)))
}
