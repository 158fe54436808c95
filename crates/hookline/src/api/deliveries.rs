//! `/v1/deliveries`, `/v1/dead-letters` and `/v1/replays`: what happened to each delivery, and
//! the bounded, audited way back out of the dead-letter queue.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use hookline_policy::DeadReason;
use hookline_store::{DeadLetterFilter, DeliveryFilter, DeliveryState, ListOrder, ReplayRequest};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::error::{parse_json, ErrorEnvelope};
use super::{page_limit, views, ApiError, ApiState, PageQuery};

type Answer<T> = Result<(StatusCode, Json<T>), ApiError>;

const DELIVERIES: &str = "deliveries";
const DEAD_LETTERS: &str = "dead letters";

/// Dead-letter groups answered at most.
const MAX_GROUPS: u32 = 1000;

fn reason(text: &str) -> Result<DeadReason, ApiError> {
    DeadReason::parse(text).ok_or_else(|| {
        let names: Vec<&str> = DeadReason::ALL.iter().map(|r| r.as_str()).collect();
        ApiError::invalid(format!(
            "reason {text:?} is not one of {}",
            names.join(", ")
        ))
    })
}

#[utoipa::path(get, path = "/v1/deliveries/{id}", operation_id = "get_delivery", tag = DELIVERIES, params(("id" = String, Path, description = "`{event_id}:{subscriber_id}`, the `webhook-id` it is sent with")),
    responses(
        (status = 200, description = "The delivery and its attempts", body = views::Delivery),
        (status = 404, description = "No such delivery", body = ErrorEnvelope),
    ))]
pub async fn get(State(ctx): ApiState, Path(id): Path<String>) -> Answer<views::Delivery> {
    let d = ctx.store.get_delivery(&id).await?;
    Ok((StatusCode::OK, Json(views::delivery(&d))))
}

/// Unknown query parameters are refused, naming them (`?stat=dead` is a typo, not a filter).
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    event_id: Option<String>,
    subscriber_id: Option<String>,
    #[param(schema_with = super::schema::delivery_state_or_null)]
    state: Option<String>,
    /// `oldest` first (the default) or `newest` first; a cursor pages on in the same order.
    #[param(schema_with = super::schema::list_order_or_null)]
    order: Option<String>,
    /// 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `next_cursor` of the page before.
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/v1/deliveries", operation_id = "list_deliveries", tag = DELIVERIES, params(DeliveryQuery),
    responses((status = 200, description = "A page of deliveries", body = views::Page<views::Delivery>)))]
pub async fn list(
    State(ctx): ApiState,
    query: Result<Query<DeliveryQuery>, QueryRejection>,
) -> Answer<views::Page<views::Delivery>> {
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
    let order = match q.order.as_deref() {
        None => ListOrder::default(),
        Some(o) => ListOrder::parse(o).ok_or_else(|| {
            ApiError::invalid(format!("order {o:?} is not one of oldest, newest"))
        })?,
    };
    let filter = DeliveryFilter {
        event_id: q.event_id,
        subscriber_id: q.subscriber_id,
        state,
        order,
    };
    let page = ctx
        .store
        .list_deliveries(filter, page_limit(q.limit)?, q.cursor)
        .await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::delivery))))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadLetterQuery {
    #[param(schema_with = super::schema::dead_reason_or_null)]
    reason: Option<String>,
    subscriber_id: Option<String>,
    /// 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `next_cursor` of the page before.
    cursor: Option<String>,
}

/// Oldest dead first (then by id): the order a replay selects in.
#[utoipa::path(get, path = "/v1/dead-letters", operation_id = "list_dead_letters", tag = DEAD_LETTERS, params(DeadLetterQuery),
    responses((status = 200, description = "A page of dead letters", body = views::Page<views::DeadLetter>)))]
pub async fn list_dead_letters(
    State(ctx): ApiState,
    query: Result<Query<DeadLetterQuery>, QueryRejection>,
) -> Answer<views::Page<views::DeadLetter>> {
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

/// Dead letters by reason and subscriber.
#[derive(Serialize, ToSchema)]
pub struct DeadLetterGroups {
    pub items: Vec<views::DeadLetterGroup>,
}

/// What is in the dead-letter queue, by reason and subscriber, largest groups first (at most
/// 1,000 groups): where to look first, and what a replay by reason and subscriber would take.
#[utoipa::path(get, path = "/v1/dead-letters/groups", operation_id = "list_dead_letter_groups", tag = DEAD_LETTERS,
    responses((status = 200, description = "The groups", body = DeadLetterGroups)))]
pub async fn dead_letter_groups(State(ctx): ApiState) -> Answer<DeadLetterGroups> {
    let groups = ctx.store.dead_letter_groups(i64::MIN, MAX_GROUPS).await?;
    Ok((
        StatusCode::OK,
        Json(DeadLetterGroups {
            items: groups.iter().map(views::dead_letter_group).collect(),
        }),
    ))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ReplayRequest)]
pub(super) struct ReplayBody {
    #[schema(schema_with = super::schema::dead_reason)]
    reason: String,
    subscriber_id: Option<String>,
    /// 1 to 1000: it releases exactly the first `limit` dead letters `GET /v1/dead-letters`
    /// lists with the same filter.
    #[schema(example = 100, minimum = 1, maximum = 1000)]
    limit: u32,
    /// 0.001 to 100,000 releases per second.
    per_second: Option<f64>,
    /// Answer what a replay would select now, changing nothing.
    #[serde(default)]
    dry_run: bool,
    /// The `delivery_ids` a dry run answered: the replay releases exactly these, or nothing
    /// (409) when what the filter selects changed since.
    expected_delivery_ids: Option<Vec<String>>,
}

/// Bounded, paced and audited; `"dry_run": true` answers what it would release, changing
/// nothing.
#[utoipa::path(post, path = "/v1/dead-letters/replay", operation_id = "replay_dead_letters", tag = DEAD_LETTERS, request_body(content = ReplayBody, example = json!({
        "reason": "attempts_exhausted", "subscriber_id": "subscriber-731", "limit": 100,
        "per_second": 10, "dry_run": true})),
    responses(
        (status = 202, description = "Released (at its pace); audited under `replay_id`", body = views::ReplayStarted),
        (status = 200, description = "A dry run: what it would release now", body = views::ReplayPreview),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
        (status = 409, description = "`expected_delivery_ids` are no longer what the filter selects: nothing was released", body = ErrorEnvelope),
    ))]
pub async fn replay(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: ReplayBody = parse_json(&body?)?;
    let reason = reason(&body.reason)?;
    hookline_store::check_replay(body.limit, body.per_second)?;
    if body
        .expected_delivery_ids
        .as_ref()
        .is_some_and(|ids| ids.len() > body.limit as usize)
    {
        return Err(ApiError::invalid(
            "expected_delivery_ids: lists more deliveries than limit lets a replay release",
        ));
    }
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
        expected: body.expected_delivery_ids,
    };
    if body.dry_run {
        let ids = ctx.store.preview_replay(request).await?;
        let preview = views::ReplayPreview {
            selected: ids.len() as u64,
            delivery_ids: ids,
        };
        return Ok((StatusCode::OK, Json(preview)).into_response());
    }
    let replay = ctx.store.replay(request, ctx.clock.now_ms()).await?;
    if replay.selected > 0 {
        crate::telemetry::replayed(replay.selected);
        ctx.wake.notify_one();
    }
    tracing::info!(replay = %replay.id, reason = %replay.reason, selected = replay.selected, "replay");
    let started = views::ReplayStarted {
        replay_id: replay.id,
        selected: replay.selected,
    };
    Ok((StatusCode::ACCEPTED, Json(started)).into_response())
}

/// The audit, oldest first.
#[utoipa::path(get, path = "/v1/replays", operation_id = "list_replays", tag = DEAD_LETTERS, params(PageQuery),
    responses((status = 200, description = "A page of replays", body = views::Page<views::Replay>)))]
pub async fn list_replays(
    State(ctx): ApiState,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Answer<views::Page<views::Replay>> {
    let Query(q) = query?;
    let page = ctx.store.list_replays(q.limit()?, q.cursor).await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::replay))))
}

#[utoipa::path(get, path = "/v1/replays/{id}", operation_id = "get_replay", tag = DEAD_LETTERS, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The replay: its filter, pace, selected ids and what became of them", body = views::Replay),
        (status = 404, description = "No such replay", body = ErrorEnvelope),
    ))]
pub async fn get_replay(State(ctx): ApiState, Path(id): Path<String>) -> Answer<views::Replay> {
    let r = ctx.store.get_replay(&id).await?;
    Ok((StatusCode::OK, Json(views::replay(&r))))
}
