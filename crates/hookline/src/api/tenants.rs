//! `/v1/tenants`: the platform's customers. The platform's admin tokens create, change and
//! delete them; a tenant's own token reads itself and nothing else here.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use hookline_store::{NewTenant, TenantPatch};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::error::{parse_json, ErrorEnvelope};
use super::subscribers::present;
use super::tenancy::{Listing, Tenancy};
use super::{page_limit, validate, views, Answer, ApiError, ApiState};

const TAG: &str = "tenants";

/// The longest name a tenant takes.
const MAX_NAME: usize = 256;
/// The most subscribers a quota may allow.
pub const MAX_SUBSCRIBERS_QUOTA: u32 = 1_000_000;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewTenant)]
pub(super) struct CreateBody {
    /// As a subscriber id: 1 to 128 characters of `A-Za-z0-9._-`. Never reused, even after a
    /// delete.
    #[schema(
        example = "merchant-acme",
        pattern = "^(?!\\.\\.?$)[A-Za-z0-9._-]{1,128}$"
    )]
    id: String,
    /// For people: 1 to 256 printable characters.
    #[schema(example = "Acme Parcels")]
    name: Option<String>,
    /// 1 to 1,000,000 subscribers (not revoked); creating one more is 422 `over_quota`.
    #[schema(minimum = 1, maximum = 1000000)]
    max_subscribers: Option<u32>,
    /// 0.001 to 100,000 publishes per second, a second's worth at once; one more is 429
    /// `rate_limited` with `Retry-After`.
    max_events_per_second: Option<f64>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TenantChange)]
pub(super) struct PatchBody {
    /// `null` clears it.
    #[serde(default, deserialize_with = "present")]
    name: Option<Option<String>>,
    /// `null`: no limit. Lowering it below the subscribers it has revokes none of them.
    #[serde(default, deserialize_with = "present")]
    max_subscribers: Option<Option<u32>>,
    /// `null`: no limit.
    #[serde(default, deserialize_with = "present")]
    max_events_per_second: Option<Option<f64>>,
}

fn name(name: Option<String>) -> Result<Option<String>, ApiError> {
    match name {
        Some(n)
            if n.is_empty() || n.chars().count() > MAX_NAME || n.chars().any(char::is_control) =>
        {
            Err(ApiError::invalid(format!(
                "name must be 1 to {MAX_NAME} printable characters"
            )))
        }
        other => Ok(other),
    }
}

fn max_subscribers(n: Option<u32>) -> Result<Option<u32>, ApiError> {
    match n {
        Some(n) if !(1..=MAX_SUBSCRIBERS_QUOTA).contains(&n) => Err(ApiError::invalid(format!(
            "max_subscribers must be from 1 to {MAX_SUBSCRIBERS_QUOTA}"
        ))),
        other => Ok(other),
    }
}

fn max_events_per_second(r: Option<f64>) -> Result<Option<f64>, ApiError> {
    Ok(
        r.map(|r| hookline_store::check_rate("max_events_per_second", r))
            .transpose()?,
    )
}

#[utoipa::path(post, path = "/v1/tenants", operation_id = "create_tenant", tag = TAG,
    request_body(content = CreateBody, example = json!({
        "id": "merchant-acme", "name": "Acme Parcels", "max_subscribers": 50,
        "max_events_per_second": 100})),
    responses(
        (status = 201, description = "Created", body = views::Tenant),
        (status = 409, description = "A tenant with this id exists or existed", body = ErrorEnvelope),
    ))]
pub async fn create(
    State(ctx): ApiState,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Tenant> {
    let body: CreateBody = parse_json(&body?)?;
    validate::tenant_id(&body.id)?;
    let new = NewTenant {
        id: body.id,
        name: name(body.name)?,
        max_subscribers: max_subscribers(body.max_subscribers)?,
        max_events_per_second: max_events_per_second(body.max_events_per_second)?,
    };
    let created = ctx.store.create_tenant(new, ctx.clock.now_ms()).await?;
    Ok((StatusCode::CREATED, Json(views::tenant(&created))))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TenantQuery {
    /// 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[param(min_length = 1)]
    cursor: Option<String>,
}

/// Oldest first. A tenant's token sees itself only.
#[utoipa::path(get, path = "/v1/tenants", operation_id = "list_tenants", tag = TAG, params(TenantQuery),
    responses((status = 200, description = "A page of tenants", body = views::Page<views::Tenant>)))]
pub async fn list(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<TenantQuery>, QueryRejection>,
) -> Answer<views::Page<views::Tenant>> {
    let Query(q) = query?;
    let limit = page_limit(q.limit)?;
    let page = match tenancy.listing(None) {
        Listing::Of(Some(mine)) => views::Page {
            // Its own, once: a tenant that does not exist yet is an empty page.
            items: match (q.cursor, ctx.store.get_tenant(&mine).await) {
                (None, Ok(t)) => vec![views::tenant(&t)],
                _ => Vec::new(),
            },
            next_cursor: None,
        },
        _ => views::page(
            &ctx.store.list_tenants(limit, q.cursor).await?,
            views::tenant,
        ),
    };
    Ok((StatusCode::OK, Json(page)))
}

#[utoipa::path(get, path = "/v1/tenants/{id}", operation_id = "get_tenant", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The tenant", body = views::Tenant),
        (status = 404, description = "No such tenant (or deleted)", body = ErrorEnvelope),
    ))]
pub async fn get(
    State(ctx): ApiState,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Tenant> {
    let t = tenancy.shown(ctx.store.get_tenant(&id).await?, "tenant", &id)?;
    Ok((StatusCode::OK, Json(views::tenant(&t))))
}

/// Fields left out keep their value.
#[utoipa::path(patch, path = "/v1/tenants/{id}", operation_id = "update_tenant", tag = TAG, params(("id" = String, Path)),
    request_body(content = PatchBody, example = json!({"max_events_per_second": 20})),
    responses(
        (status = 200, description = "Changed", body = views::Tenant),
        (status = 404, description = "No such tenant (or deleted)", body = ErrorEnvelope),
    ))]
pub async fn update(
    State(ctx): ApiState,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Tenant> {
    let body: PatchBody = parse_json(&body?)?;
    let patch = TenantPatch {
        name: body.name.map(name).transpose()?,
        max_subscribers: body.max_subscribers.map(max_subscribers).transpose()?,
        max_events_per_second: body
            .max_events_per_second
            .map(max_events_per_second)
            .transpose()?,
    };
    let t = ctx
        .store
        .update_tenant(&id, patch, ctx.clock.now_ms())
        .await?;
    Ok((StatusCode::OK, Json(views::tenant(&t))))
}

/// Final: its subscribers are revoked (their pending deliveries die `subscription_revoked`)
/// and the tenant is gone; its id is never used again. Answers the tenant as it was.
#[utoipa::path(delete, path = "/v1/tenants/{id}", operation_id = "delete_tenant", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "Deleted", body = views::Tenant),
        (status = 404, description = "No such tenant (or deleted)", body = ErrorEnvelope),
    ))]
pub async fn delete(State(ctx): ApiState, Path(id): Path<String>) -> Answer<views::Tenant> {
    let t = ctx.store.delete_tenant(&id, ctx.clock.now_ms()).await?;
    Ok((StatusCode::OK, Json(views::tenant(&t))))
}
