//! `/v1/tenants`: the platform's customers. The platform's admin tokens create, change and
//! delete them; a tenant's own token reads itself and nothing else here.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
// The request bodies, beside the store's records of the same names.
use hookline_api as wire;
use hookline_api::TenantChange;
use hookline_policy::duration_ms;
use hookline_store::{NewPortalSession, NewTenant, StoreError, TenantPatch};

use super::auth::Caller;
use super::error::{parse_json, parse_optional_json, ErrorEnvelope};
use super::tenancy::{Listing, Tenancy};
use super::{page_limit, validate, views, Answer, ApiError, ApiState, PageQuery};
use crate::config::parse_duration;

const TAG: &str = "tenants";

/// The longest name a tenant takes.
const MAX_NAME: usize = 256;
/// The most subscribers a quota may allow.
pub const MAX_SUBSCRIBERS_QUOTA: u32 = 1_000_000;

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
    request_body(content = wire::NewTenant, example = json!({
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
    let body: wire::NewTenant = parse_json(&body?)?;
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

/// Oldest first. A tenant's token sees itself only.
#[utoipa::path(get, path = "/v1/tenants", operation_id = "list_tenants", tag = TAG, params(PageQuery),
    responses((status = 200, description = "A page of tenants", body = views::Page<views::Tenant>)))]
pub async fn list(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Answer<views::Page<views::Tenant>> {
    let Query(q) = query?;
    let limit = page_limit(q.limit)?;
    let page = match tenancy.listing(None)? {
        Listing::Of(Some(mine)) => views::Page {
            // Its own, once: a tenant that does not exist yet is an empty page.
            items: match (q.cursor, ctx.store.get_tenant(&mine).await) {
                (None, Ok(t)) => vec![views::tenant(&t)],
                (_, Err(e)) if !matches!(e, StoreError::NotFound(_)) => return Err(e.into()),
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
    request_body(content = TenantChange, example = json!({"max_events_per_second": 20})),
    responses(
        (status = 200, description = "Changed", body = views::Tenant),
        (status = 404, description = "No such tenant (or deleted)", body = ErrorEnvelope),
    ))]
pub async fn update(
    State(ctx): ApiState,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Tenant> {
    let body: TenantChange = parse_json(&body?)?;
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
pub async fn delete(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
) -> Answer<views::Tenant> {
    let t = ctx.store.delete_tenant(&id, ctx.clock.now_ms()).await?;
    tracing::info!(
        action = "delete_tenant",
        tenant = %t.id,
        by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)),
        "tenant deleted"
    );
    Ok((StatusCode::OK, Json(views::tenant(&t))))
}

/// How long a portal session lasts when the request does not say.
pub const DEFAULT_PORTAL_TTL: &str = "1h";
/// A portal session lasts at most this long: it is for one sitting, not a standing credential.
pub const MAX_PORTAL_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Made for the platform's customer: a short-lived token of the tenant (shown once; only its
/// hash is kept) and the portal's address with it, to open or embed.
#[utoipa::path(post, path = "/v1/tenants/{id}/portal-sessions", operation_id = "create_portal_session", tag = TAG,
    params(("id" = String, Path)),
    request_body(content = Option<wire::NewPortalSession>, example = json!({"ttl": "1h", "scope": "admin"})),
    responses(
        (status = 201, description = "Made; the one answer that shows its token", body = views::CreatedPortalSession),
        (status = 404, description = "No such tenant (or deleted)", body = ErrorEnvelope),
    ))]
pub async fn create_portal_session(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::CreatedPortalSession> {
    let body = parse_optional_json(&body?)?.unwrap_or(wire::NewPortalSession {
        ttl: None,
        scope: None,
    });
    let ttl = parse_duration(body.ttl.as_deref().unwrap_or(DEFAULT_PORTAL_TTL))
        .map_err(|m| ApiError::invalid(format!("ttl: {m}")))?;
    if ttl < std::time::Duration::from_secs(60) || ttl > MAX_PORTAL_TTL {
        return Err(ApiError::invalid("ttl must be from 1m to 24h"));
    }
    let scope = match body.scope.as_deref() {
        None | Some("admin") => "admin",
        Some("read") => "read",
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "scope must be \"admin\" or \"read\", not {other:?}"
            )))
        }
    };
    let now = ctx.clock.now_ms();
    let token = crate::tokens::new_portal_token();
    let new = NewPortalSession {
        id: validate::generate("ps", now),
        tenant_id: id,
        token_sha256: crate::tokens::sha256_hex(&token),
        scope: scope.to_owned(),
        expires_at: now.saturating_add(duration_ms(ttl)),
        created_by: caller.as_ref().map(|Extension(c)| c.name.clone()),
    };
    let session = ctx.store.create_portal_session(new, now).await?;
    tracing::info!(
        action = "create_portal_session",
        tenant = %session.tenant_id,
        session = %session.id,
        scope,
        by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)),
        "portal session made"
    );
    Ok((
        StatusCode::CREATED,
        Json(views::CreatedPortalSession {
            url: format!("/portal#token={token}"),
            token,
            session: views::portal_session(&session),
        }),
    ))
}

/// Ends it at once: its token is refused from the next request on.
#[utoipa::path(delete, path = "/v1/tenants/{id}/portal-sessions/{session_id}", operation_id = "revoke_portal_session", tag = TAG,
    params(("id" = String, Path), ("session_id" = String, Path)),
    responses(
        (status = 200, description = "Revoked", body = views::PortalSession),
        (status = 404, description = "No such session of this tenant", body = ErrorEnvelope),
    ))]
pub async fn revoke_portal_session(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    Path((id, session_id)): Path<(String, String)>,
) -> Answer<views::PortalSession> {
    let session = ctx
        .store
        .revoke_portal_session(&id, &session_id, ctx.clock.now_ms())
        .await?;
    tracing::info!(
        action = "revoke_portal_session",
        tenant = %id,
        session = %session_id,
        by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)),
        "portal session revoked"
    );
    Ok((StatusCode::OK, Json(views::portal_session(&session))))
}
