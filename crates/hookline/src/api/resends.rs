//! `/v1/resends`: new deliveries of events already published, to one subscriber that lost what
//! it was sent (it answered 2xx and dropped it), each under a fresh `webhook-id`; previewed,
//! confirmed, paced and audited as replays of dead letters are.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
// The request bodies, beside the store's records of the same names.
use hookline_api as wire;
use hookline_api::ResendQuery;
use hookline_store::{ListOrder, ResendFilter, ResendRequest, SubscriberStatus};

use super::auth::Caller;
use super::error::{parse_json, ErrorEnvelope};
use super::events::instant;
use super::tenancy::{Listing, Tenancy};
use super::{page_limit, validate, views, Answer, ApiError, ApiState};

const TAG: &str = "resends";

/// New deliveries of published events to one subscriber, each with a fresh delivery id
/// (`<event id>:<subscriber id>:resend-<n>`, its `webhook-id`), a fresh attempt budget and
/// window; held while the subscriber is paused. Bounded, paced and audited;
/// `"dry_run": true` answers what it would send, changing nothing.
#[utoipa::path(post, path = "/v1/resends", operation_id = "resend", tag = TAG, request_body(content = wire::ResendRequest, example = json!({
        "subscriber_id": "subscriber-731", "since": "2026-12-04T09:00:00Z",
        "until": "2026-12-05T09:00:00Z", "event_types": ["shipment.out_for_delivery"],
        "limit": 500, "per_second": 20, "dry_run": true})),
    responses(
        (status = 202, description = "Made (released at its pace); the audit record", body = views::Resend),
        (status = 200, description = "A dry run: what it would send now", body = views::ResendPreview),
        (status = 404, description = "No such subscriber", body = ErrorEnvelope),
        (status = 409, description = "`subscriber_revoked`: the subscriber is revoked; `conflict`: `expected_event_ids` are no longer what the request selects. Nothing was made", body = ErrorEnvelope),
    ))]
pub async fn create(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    tenancy: Tenancy,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: wire::ResendRequest = parse_json(&body?)?;
    validate::subscriber_id(&body.subscriber_id)?;
    let now = ctx.clock.now_ms();
    let since = instant("since", Some(&body.since))?.unwrap_or(now);
    let until = instant("until", body.until.as_deref())?.unwrap_or(now);
    hookline_store::check_resend(body.limit, body.per_second, since, until)?;
    let event_types = body.event_types.unwrap_or_default();
    if event_types.len() > hookline_store::MAX_RESEND_TYPES {
        return Err(ApiError::invalid(format!(
            "event_types may list at most {} types",
            hookline_store::MAX_RESEND_TYPES
        )));
    }
    for t in &event_types {
        validate::event_type_pattern(t)?;
    }
    if let Some(ids) = &body.expected_event_ids {
        if body.dry_run {
            return Err(ApiError::invalid(
                "expected_event_ids holds a resend to a dry run's answer; a dry run takes none",
            ));
        }
        if ids.is_empty() || ids.len() > body.limit as usize {
            return Err(ApiError::invalid(format!(
                "expected_event_ids must list 1 to limit ({}) events, as a dry run answered",
                body.limit
            )));
        }
        for id in ids {
            validate::event_id(id)?;
        }
    }
    // Another tenant's subscriber is the 404 of one that does not exist.
    let subscriber = super::subscribers::visible(&ctx, &tenancy, &body.subscriber_id).await?;
    if subscriber.status == SubscriberStatus::Revoked {
        return Err(ApiError::subscriber_revoked(format!(
            "subscriber {:?} is revoked (revocation is final): nothing can be resent to it",
            subscriber.id
        )));
    }
    let by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)).to_owned();
    let request = ResendRequest {
        subscriber_id: body.subscriber_id,
        since,
        until,
        event_types,
        limit: body.limit,
        per_second: body.per_second,
        requested_by: caller.map(|Extension(c)| c.name),
        expected: body.expected_event_ids,
    };
    if body.dry_run {
        let ids = ctx.store.preview_resend(request).await?;
        let preview = views::ResendPreview {
            selected: ids.len() as u64,
            event_ids: ids,
        };
        return Ok((StatusCode::OK, Json(preview)).into_response());
    }
    let resend = ctx.store.resend(request, now).await?;
    if resend.selected > 0 {
        ctx.wake.notify_one();
    }
    tracing::info!(
        action = "resend",
        resend = %resend.id,
        subscriber = %resend.subscriber_id,
        selected = resend.selected,
        by,
        "resend created"
    );
    Ok((StatusCode::ACCEPTED, Json(views::resend(&resend))).into_response())
}

/// The audit, newest first.
#[utoipa::path(get, path = "/v1/resends", operation_id = "list_resends", tag = TAG, params(ResendQuery),
    responses((status = 200, description = "A page of resends", body = views::Page<views::Resend>)))]
pub async fn list(
    State(ctx): ApiState,
    tenancy: Tenancy,
    query: Result<Query<ResendQuery>, QueryRejection>,
) -> Answer<views::Page<views::Resend>> {
    let Query(q) = query?;
    let order = match q.order.as_deref() {
        None => ListOrder::NewestFirst,
        given => super::deliveries::list_order(given)?,
    };
    let limit = page_limit(q.limit)?;
    if let Some(id) = &q.subscriber_id {
        validate::subscriber_id(id)?;
    }
    let Listing::Of(tenant_id) = tenancy.listing(q.tenant_id)? else {
        return Ok((StatusCode::OK, Json(views::Page::empty())));
    };
    let filter = ResendFilter {
        tenant_id,
        subscriber_id: q.subscriber_id,
    };
    let page = ctx
        .store
        .list_resends(filter, order, limit, q.cursor)
        .await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::resend))))
}

#[utoipa::path(get, path = "/v1/resends/{id}", operation_id = "get_resend", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The resend: its request, pace, the deliveries it made and what became of them", body = views::Resend),
        (status = 404, description = "No such resend", body = ErrorEnvelope),
    ))]
pub async fn get(
    State(ctx): ApiState,
    tenancy: Tenancy,
    Path(id): Path<String>,
) -> Answer<views::Resend> {
    let r = tenancy.shown(ctx.store.get_resend(&id).await?, "resend", &id)?;
    Ok((StatusCode::OK, Json(views::resend(&r))))
}
