//! `/v1/policies`: named retry policies. `default` is the config's; the others are stored, and
//! never change once created.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use hookline_engine::policy::{Policy, DEFAULT_POLICY};
use hookline_store::{StoredPolicy, NO_POLICY};

use super::auth::Caller;
use super::error::{parse_json, ErrorEnvelope};
use super::{page_limit, validate, views, Answer, ApiError, ApiState, PageQuery};
use crate::policies::{NewPolicy, PolicyExt};

const TAG: &str = "policies";

/// A policy never changes once created; roll it out with `POST /v1/rollouts`.
#[utoipa::path(post, path = "/v1/policies", operation_id = "create_policy", tag = TAG, request_body(content = NewPolicy, example = json!({
        "name": "retry-520", "classification": {"retryable": [408, 429, 500, 502, 503, 504, 520]},
        "retry": {"max_attempts": 8}})),
    responses(
        (status = 201, description = "Created, every part spelled out", body = views::Policy),
        (status = 409, description = "A policy with this name exists (or the name is `default`)", body = ErrorEnvelope),
    ))]
pub async fn create(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Policy> {
    let definition: NewPolicy = parse_json(&body?)?;
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
    let by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)).to_owned();
    let stored = ctx
        .store
        .create_policy(StoredPolicy {
            name: policy.name.clone(),
            definition: policy.to_json().to_string(),
            created_at: ctx.clock.now_ms(),
            created_by: caller.map(|Extension(c)| c.name),
        })
        .await?;
    tracing::info!(
        action = "create_policy",
        policy = %policy.name,
        by,
        "policy created"
    );
    Ok((
        StatusCode::CREATED,
        Json(views::policy(&policy, Some(&stored))),
    ))
}

/// `default` is the configuration's `[retry]` and `[breaker]` with the standard table.
#[utoipa::path(get, path = "/v1/policies/{name}", operation_id = "get_policy", tag = TAG, params(("name" = String, Path)),
    responses(
        (status = 200, description = "The policy", body = views::Policy),
        (status = 404, description = "No such policy", body = ErrorEnvelope),
    ))]
pub async fn get(State(ctx): ApiState, Path(name): Path<String>) -> Answer<views::Policy> {
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
#[utoipa::path(get, path = "/v1/policies", operation_id = "list_policies", tag = TAG, params(PageQuery),
    responses((status = 200, description = "A page of policies", body = views::Page<views::Policy>)))]
pub async fn list(
    State(ctx): ApiState,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Answer<views::Page<views::Policy>> {
    let Query(q) = query?;
    let page = ctx
        .store
        .list_policies(page_limit(q.limit)?, q.cursor)
        .await?;
    let mut items = Vec::with_capacity(page.items.len());
    for stored in &page.items {
        let policy = ctx.policies.named(&stored.name).await?;
        items.push(views::policy(&policy, Some(stored)));
    }
    Ok((
        StatusCode::OK,
        Json(views::Page {
            items,
            next_cursor: page.next_cursor,
        }),
    ))
}
