//! `/v1/policies`: named retry policies. `default` is the config's; the others are stored, and
//! never change once created.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use hookline_store::{StoredPolicy, NO_POLICY};
use serde_json::Value;

use super::auth::Caller;
use super::error::parse_json;
use super::{validate, views, ApiError, ApiState, PageQuery};
use crate::policies::{Definition, Policy, DEFAULT_POLICY};

type Answer = Result<(StatusCode, Json<Value>), ApiError>;

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
    if definition.name.eq_ignore_ascii_case(NO_POLICY) {
        return Err(ApiError::invalid(format!(
            "name: {NO_POLICY:?} is what metrics call deaths no policy decided; choose another"
        )));
    }
    // What it leaves out is the policy in force for everyone's.
    let in_force = ctx.policies.current();
    let policy = Policy::define(definition, &in_force.default, ctx.attempt_timeout)
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
            Json(views::policy(ctx.policies.configured(), None)),
        ));
    }
    let stored = ctx.store.get_policy(&name).await?;
    let policy = ctx.policies.named(&name).await?;
    Ok((StatusCode::OK, Json(views::policy(&policy, Some(&stored)))))
}

/// The stored policies, oldest first (`default` is at `GET /v1/policies/default`).
pub async fn list(State(ctx): ApiState, query: Result<Query<PageQuery>, QueryRejection>) -> Answer {
    let Query(q) = query?;
    let page = ctx.store.list_policies(q.limit()?, q.cursor).await?;
    let mut items = Vec::with_capacity(page.items.len());
    for stored in &page.items {
        let policy = ctx.policies.named(&stored.name).await?;
        items.push(views::policy(&policy, Some(stored)));
    }
    Ok((
        StatusCode::OK,
        Json(serde_json::json!({"items": items, "next_cursor": page.next_cursor})),
    ))
}
