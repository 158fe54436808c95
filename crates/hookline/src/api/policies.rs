//! `/v1/policies`: named retry policies. `default` is the config's; the others are stored, and
//! never change once created.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use hookline_store::{StoreError, StoredPolicy};
use serde_json::Value;

use super::auth::Caller;
use super::error::parse_json;
use super::{validate, views, ApiContext, ApiError, ApiState, PageQuery};
use crate::policies::{Definition, Policy, DEFAULT_POLICY};

type Answer = Result<(StatusCode, Json<Value>), ApiError>;

/// A stored policy as the policy it defines.
fn read(ctx: &ApiContext, stored: &StoredPolicy) -> Result<Policy, ApiError> {
    let corrupt = |e: String| {
        ApiError::from(StoreError::Backend(format!(
            "policy {:?} is stored unreadably: {e}",
            stored.name
        )))
    };
    let definition: Definition =
        serde_json::from_str(&stored.definition).map_err(|e| corrupt(e.to_string()))?;
    Policy::read(definition, &ctx.default_policy).map_err(|e| corrupt(e.to_string()))
}

pub async fn create(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let definition: Definition = parse_json(&body?)?;
    validate::policy_name(&definition.name)?;
    if definition.name.eq_ignore_ascii_case(DEFAULT_POLICY) {
        return Err(ApiError::conflict(
            "policy \"default\" is the configuration's [retry] and [breaker] with the standard \
             classification; create one under another name",
        ));
    }
    let policy = Policy::define(definition, &ctx.default_policy, ctx.attempt_timeout)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let stored = ctx
        .store
        .create_policy(StoredPolicy {
            name: policy.name.clone(),
            definition: policy.to_json().to_string(),
            created_at: ctx.clock.now_ms(),
            created_by: caller.map(|Extension(c)| c.name),
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(views::policy(&policy, Some(&stored))),
    ))
}

pub async fn get(State(ctx): ApiState, Path(name): Path<String>) -> Answer {
    if name == DEFAULT_POLICY {
        return Ok((
            StatusCode::OK,
            Json(views::policy(&ctx.default_policy, None)),
        ));
    }
    let stored = ctx.store.get_policy(&name).await?;
    let policy = read(&ctx, &stored)?;
    Ok((StatusCode::OK, Json(views::policy(&policy, Some(&stored)))))
}

/// The stored policies, oldest first (`default` is at `GET /v1/policies/default`).
pub async fn list(State(ctx): ApiState, query: Result<Query<PageQuery>, QueryRejection>) -> Answer {
    let Query(q) = query?;
    let page = ctx.store.list_policies(q.limit()?, q.cursor).await?;
    let mut items = Vec::with_capacity(page.items.len());
    for stored in &page.items {
        items.push(views::policy(&read(&ctx, stored)?, Some(stored)));
    }
    Ok((
        StatusCode::OK,
        Json(serde_json::json!({"items": items, "next_cursor": page.next_cursor})),
    ))
}
