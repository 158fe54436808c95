//! `/v1/deliveries`, `/v1/dead-letters` and `/v1/replays`: what happened to each delivery, and
//! the bounded, audited way back out of the dead-letter queue.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Extension;
use axum::Json;
use hookline_policy::DeadReason;
use hookline_store::{DeadLetterFilter, DeliveryFilter, DeliveryState, ReplayRequest};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::parse_json;
use super::{page_limit, views, ApiError, ApiState, PageQuery};

type Answer = Result<(StatusCode, Json<Value>), ApiError>;

fn reason(text: &str) -> Result<DeadReason, ApiError> {
    DeadReason::parse(text).ok_or_else(|| {
        let names: Vec<&str> = DeadReason::ALL.iter().map(|r| r.as_str()).collect();
        ApiError::invalid(format!(
            "reason {text:?} is not one of {}",
            names.join(", ")
        ))
    })
}

pub async fn get(State(ctx): ApiState, Path(id): Path<String>) -> Answer {
    let d = ctx.store.get_delivery(&id).await?;
    Ok((StatusCode::OK, Json(views::delivery(&d))))
}

/// Unknown query parameters are refused, naming them (`?stat=dead` is a typo, not a filter).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    event_id: Option<String>,
    subscriber_id: Option<String>,
    state: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

pub async fn list(
    State(ctx): ApiState,
    query: Result<Query<DeliveryQuery>, QueryRejection>,
) -> Answer {
    let Query(q) = query?;
    let state = q
        .state
        .as_deref()
        .map(|s| {
            DeliveryState::parse(s).ok_or_else(|| {
                ApiError::invalid(format!(
                    "state {s:?} is not one of scheduled, in_flight, delivered, dead"
                ))
            })
        })
        .transpose()?;
    let filter = DeliveryFilter {
        event_id: q.event_id,
        subscriber_id: q.subscriber_id,
        state,
    };
    let page = ctx
        .store
        .list_deliveries(filter, page_limit(q.limit)?, q.cursor)
        .await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::delivery))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterQuery {
    reason: Option<String>,
    subscriber_id: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

pub async fn list_dead_letters(
    State(ctx): ApiState,
    query: Result<Query<DeadLetterQuery>, QueryRejection>,
) -> Answer {
    let Query(q) = query?;
    let filter = DeadLetterFilter {
        reason: q.reason.as_deref().map(reason).transpose()?,
        subscriber_id: q.subscriber_id,
    };
    let page = ctx
        .store
        .list_dead_letters(filter, page_limit(q.limit)?, q.cursor)
        .await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::dead_letter))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplayBody {
    reason: String,
    subscriber_id: Option<String>,
    limit: u32,
    per_second: Option<f64>,
    /// Answer what a replay would select now, changing nothing.
    #[serde(default)]
    dry_run: bool,
}

pub async fn replay(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let body: ReplayBody = parse_json(&body?)?;
    let reason = reason(&body.reason)?;
    hookline_store::check_replay(body.limit, body.per_second)?;
    if let Some(id) = &body.subscriber_id {
        // An unknown subscriber is a typo to report, not an empty replay to audit.
        ctx.store.get_subscriber(id).await?;
    }
    let request = ReplayRequest {
        reason,
        subscriber_id: body.subscriber_id,
        limit: body.limit,
        per_second: body.per_second,
        requested_by: caller.map(|Extension(c)| c.name),
    };
    if body.dry_run {
        let ids = ctx.store.preview_replay(request).await?;
        return Ok((
            StatusCode::OK,
            Json(json!({"selected": ids.len(), "delivery_ids": ids})),
        ));
    }
    let replay = ctx.store.replay(request, ctx.clock.now_ms()).await?;
    if replay.selected > 0 {
        crate::telemetry::replayed(replay.selected);
        ctx.wake.notify_one();
    }
    tracing::info!(replay = %replay.id, reason = %replay.reason, selected = replay.selected, "replay");
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"replay_id": replay.id, "selected": replay.selected})),
    ))
}

pub async fn list_replays(
    State(ctx): ApiState,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Answer {
    let Query(q) = query?;
    let page = ctx.store.list_replays(q.limit()?, q.cursor).await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::replay))))
}

pub async fn get_replay(State(ctx): ApiState, Path(id): Path<String>) -> Answer {
    let r = ctx.store.get_replay(&id).await?;
    Ok((StatusCode::OK, Json(views::replay(&r))))
}
