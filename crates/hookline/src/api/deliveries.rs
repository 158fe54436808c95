//! `/v1/deliveries`, `/v1/dead-letters` and `/v1/replays`: what happened to each delivery, and
//! the bounded, audited way back out of the dead-letter queue.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
// The request bodies, beside the store's records of the same names.
use hookline_api as wire;
use hookline_api::{DeadLetterGroups, DeadLetterQuery, DeliveryQuery, GroupQuery, ReplayQuery};
use hookline_policy::DeadReason;
use hookline_store::{
    DeadLetterFilter, DeliveryFilter, DeliveryState, ListOrder, ReplayRequest, SubscriberStatus,
};

use super::auth::Caller;
use super::error::{parse_json, ErrorEnvelope};
use super::tenancy::{Listing, Tenancy};
use super::{page_limit, views, Answer, ApiError, ApiState};

const DELIVERIES: &str = "deliveries";
const DEAD_LETTERS: &str = "dead letters";

/// Dead-letter groups answered at most: enough to see where the queue is, bounded like a
/// page.
pub(super) const MAX_GROUPS: u32 = 1000;

pub(super) fn list_order(text: Option<&str>) -> Result<ListOrder, ApiError> {
    let Some(text) = text else {
        return Ok(ListOrder::default());
    };
    ListOrder::parse(text).ok_or_else(|| {
        let names: Vec<&str> = ListOrder::ALL.iter().map(|o| o.as_str()).collect();
        ApiError::invalid(format!("order {text:?} is not one of {}", names.join(", ")))
    })
}

fn reason(text: &str) -> Result<DeadReason, ApiError> {
    DeadReason::parse(text).ok_or_else(|| {
        let names: Vec<&str> = DeadReason::ALL.iter().map(|r| r.as_str()).collect();
        ApiError::invalid(format!(
            "reason {text:?} is not one of {}",
            names.join(", ")
        ))
    })
}

#[utoipa::path(get, path = "/v1/deliveries/{id}", operation_id = "get_delivery", tag = DELIVERIES, params(("id" = String, Path, description = "`{event_id}:{subscriber_id}` (a resend's: `{event_id}:{subscriber_id}:resend-{n}`), the `webhook-id` it is sent with")),
    responses(
        (status = 200, description = "The delivery and its attempts", body = views::Delivery),
        (status = 404, description = "No such delivery", body = ErrorEnvelope),
    ))]
pub async fn get(
    State(ctx): ApiState,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Delivery> {
    let d = tenancy.shown(ctx.store.get_delivery(&id).await?, "delivery", &id)?;
    Ok((StatusCode::OK, Json(views::delivery(&d))))
}

#[utoipa::path(get, path = "/v1/deliveries", operation_id = "list_deliveries", tag = DELIVERIES, params(DeliveryQuery),
    responses((status = 200, description = "A page of deliveries", body = views::Page<views::Delivery>)))]
pub async fn list(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<DeliveryQuery>, QueryRejection>,
) -> Answer<views::Page<views::Delivery>> {
    let Query(q) = query?;
    let limit = page_limit(q.limit)?;
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
    let order = list_order(q.order.as_deref())?;
    let Listing::Of(tenant_id) = tenancy.listing(q.tenant_id)? else {
        return Ok((StatusCode::OK, Json(views::Page::empty())));
    };
    let filter = DeliveryFilter {
        tenant_id,
        event_id: q.event_id,
        subscriber_id: q.subscriber_id,
        state,
        order,
    };
    let page = ctx.store.list_deliveries(filter, limit, q.cursor).await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::delivery))))
}

/// Oldest dead first (then by id): the order a replay selects in.
#[utoipa::path(get, path = "/v1/dead-letters", operation_id = "list_dead_letters", tag = DEAD_LETTERS, params(DeadLetterQuery),
    responses((status = 200, description = "A page of dead letters", body = views::Page<views::DeadLetter>)))]
pub async fn list_dead_letters(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<DeadLetterQuery>, QueryRejection>,
) -> Answer<views::Page<views::DeadLetter>> {
    let Query(q) = query?;
    let (limit, reason) = (
        page_limit(q.limit)?,
        q.reason.as_deref().map(reason).transpose()?,
    );
    let Listing::Of(tenant_id) = tenancy.listing(q.tenant_id)? else {
        return Ok((StatusCode::OK, Json(views::Page::empty())));
    };
    let filter = DeadLetterFilter {
        tenant_id,
        reason,
        subscriber_id: q.subscriber_id,
    };
    let page = ctx.store.list_dead_letters(filter, limit, q.cursor).await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::dead_letter))))
}

/// What is in the dead-letter queue, by reason and subscriber, largest groups first (at most
/// 1,000 groups): where to look first, and what a replay by reason and subscriber would take.
#[utoipa::path(get, path = "/v1/dead-letters/groups", operation_id = "list_dead_letter_groups", tag = DEAD_LETTERS, params(GroupQuery),
    responses((status = 200, description = "The groups", body = DeadLetterGroups)))]
pub async fn dead_letter_groups(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<GroupQuery>, QueryRejection>,
) -> Answer<DeadLetterGroups> {
    let Query(q) = query?;
    let Listing::Of(tenant_id) = tenancy.listing(q.tenant_id)? else {
        let none = DeadLetterGroups {
            items: Vec::new(),
            truncated: false,
        };
        return Ok((StatusCode::OK, Json(none)));
    };
    // One more than answered tells whether there are more.
    let mut groups = ctx
        .store
        .dead_letter_groups(i64::MIN, tenant_id, MAX_GROUPS + 1)
        .await?;
    let truncated = groups.len() > MAX_GROUPS as usize;
    groups.truncate(MAX_GROUPS as usize);
    Ok((
        StatusCode::OK,
        Json(DeadLetterGroups {
            items: groups.iter().map(views::dead_letter_group).collect(),
            truncated,
        }),
    ))
}

/// Bounded, paced and audited; `"dry_run": true` answers what it would release, changing
/// nothing.
#[utoipa::path(post, path = "/v1/dead-letters/replay", operation_id = "replay_dead_letters", tag = DEAD_LETTERS, request_body(content = wire::ReplayRequest, example = json!({
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
    tenancy: Tenancy,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: wire::ReplayRequest = parse_json(&body?)?;
    let mut tenant_id = tenancy.owner(body.tenant_id)?;
    let reason = reason(&body.reason)?;
    hookline_store::check_replay(body.limit, body.per_second)?;
    if body.dry_run && body.expected_delivery_ids.is_some() {
        return Err(ApiError::invalid(
            "expected_delivery_ids holds a replay to a dry run's answer; a dry run takes none",
        ));
    }
    if let Some(id) = &body.subscriber_id {
        // An unknown subscriber is a typo to report, not an empty replay to audit; a revoked
        // one can receive nothing, so its dead letters are no replay's either.
        let subscriber = super::subscribers::visible(&ctx, &tenancy, id).await?;
        if subscriber.status == SubscriberStatus::Revoked {
            return Err(ApiError::invalid(format!(
                "subscriber {id:?} is revoked (revocation is final): its dead letters cannot \
                 be replayed"
            )));
        }
        // A replay of one subscriber's dead letters is its tenant's too: the tenant sees it
        // in its audit, whoever asked.
        tenant_id = tenant_id.or(subscriber.tenant_id);
    }
    let by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)).to_owned();
    let request = ReplayRequest {
        tenant_id,
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
    tracing::info!(
        action = "replay",
        replay = %replay.id,
        reason = %replay.reason,
        selected = replay.selected,
        by,
        "replay created"
    );
    let started = views::ReplayStarted {
        replay_id: replay.id,
        selected: replay.selected,
    };
    Ok((StatusCode::ACCEPTED, Json(started)).into_response())
}

/// The audit.
#[utoipa::path(get, path = "/v1/replays", operation_id = "list_replays", tag = DEAD_LETTERS, params(ReplayQuery),
    responses((status = 200, description = "A page of replays", body = views::Page<views::Replay>)))]
pub async fn list_replays(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<ReplayQuery>, QueryRejection>,
) -> Answer<views::Page<views::Replay>> {
    let Query(q) = query?;
    let (order, limit) = (list_order(q.order.as_deref())?, page_limit(q.limit)?);
    let Listing::Of(tenant_id) = tenancy.listing(q.tenant_id)? else {
        return Ok((StatusCode::OK, Json(views::Page::empty())));
    };
    let page = ctx
        .store
        .list_replays(tenant_id, order, limit, q.cursor)
        .await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::replay))))
}

#[utoipa::path(get, path = "/v1/replays/{id}", operation_id = "get_replay", tag = DEAD_LETTERS, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The replay: its filter, pace, selected ids and what became of them", body = views::Replay),
        (status = 404, description = "No such replay", body = ErrorEnvelope),
    ))]
pub async fn get_replay(
    State(ctx): ApiState,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Replay> {
    let r = tenancy.shown(ctx.store.get_replay(&id).await?, "replay", &id)?;
    Ok((StatusCode::OK, Json(views::replay(&r))))
}
