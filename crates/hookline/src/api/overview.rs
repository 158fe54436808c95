//! `/v1/overview` and `/v1/whoami`: what the console's first page and its controls need, in
//! one read each.

use hookline_api::{HeldByOpenBreakers, Overview, ReasonCount};

use axum::extract::State;
use axum::{Extension, Json};
use hookline_engine::clock::rfc3339;
use hookline_policy::UnixMs;
use hookline_store::WaitingOn;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::{Caller, Scope};
use super::tenancy::Tenancy;
use super::{views, ApiContext, ApiError, ApiState};

const TAG: &str = "operations";

/// How far back `dead_letters_last_hour` looks.
pub(super) const HOUR_MS: i64 = 3_600_000;

fn age_s(now: UnixMs, since: Option<UnixMs>) -> Option<f64> {
    since.map(|t| now.saturating_sub(t).max(0) as f64 / 1000.0)
}

#[utoipa::path(get, path = "/v1/overview", operation_id = "get_overview", tag = TAG,
    responses((status = 200, description = "The overview", body = Overview)))]
pub async fn overview(State(ctx): ApiState, tenancy: Tenancy) -> Result<Json<Overview>, ApiError> {
    if let Tenancy::Tenant(tenant) = &tenancy {
        return tenant_overview(&ctx, tenant).await.map(Json);
    }
    let (measured_at, stats) = match ctx.queue.latest() {
        Some(latest) => latest,
        // Before the gauges' first refresh.
        None => {
            let now = ctx.clock.now_ms();
            let stats = ctx.store.queue_stats(now, ctx.caps, &[]).await?;
            (now, stats)
        }
    };
    let now = ctx.clock.now_ms();
    let inflow = ctx
        .store
        .dead_letters_by_reason(now.saturating_sub(HOUR_MS), None)
        .await?;
    let waiting = WaitingOn::ALL
        .iter()
        .map(|cause| {
            let since = stats
                .oldest_waiting_since
                .iter()
                .find(|(c, _)| c == cause)
                .map(|(_, t)| *t);
            (cause.as_str().to_owned(), age_s(measured_at, since))
        })
        .collect();
    Ok(Json(Overview {
        measured_at: rfc3339(measured_at),
        deliveries: views::state_counts(&stats.counts),
        oldest_ready_age_s: age_s(measured_at, stats.oldest_ready_since),
        oldest_waiting_age_s: waiting,
        oldest_retrying_age_s: age_s(measured_at, stats.oldest_retrying_first_seen),
        open_breakers: stats.open_breakers,
        held_by_open_breakers: Some(HeldByOpenBreakers {
            deliveries: stats.behind_open_breakers,
            oldest_first_seen_age_s: age_s(measured_at, stats.behind_open_breakers_first_seen),
        }),
        dead_letters_last_hour: reason_counts(inflow),
        capacity: Some(ctx.capacity.view()),
        rollout: ctx
            .policies
            .current()
            .rollout
            .as_ref()
            .map(|c| views::rollout(&c.rollout)),
    }))
}

fn reason_counts(inflow: Vec<(hookline_policy::DeadReason, u64)>) -> Vec<ReasonCount> {
    inflow
        .into_iter()
        .map(|(reason, count)| ReasonCount {
            reason: reason.as_str().to_owned(),
            count,
        })
        .collect()
}

/// What a tenant's token sees of the overview (see [`Overview`]).
async fn tenant_overview(ctx: &ApiContext, tenant: &str) -> Result<Overview, ApiError> {
    let now = ctx.clock.now_ms();
    let deliveries = ctx.store.tenant_counts(tenant).await?;
    let inflow = ctx
        .store
        .dead_letters_by_reason(now.saturating_sub(HOUR_MS), Some(tenant.to_owned()))
        .await?;
    // The platform's list (refreshed with the gauges), kept to this tenant's subscribers.
    let open = ctx
        .queue
        .latest()
        .map(|(_, stats)| stats.open_breakers)
        .unwrap_or_default();
    let mut open_breakers = Vec::new();
    for id in open {
        let mine = match ctx.store.get_subscriber(&id).await {
            Ok(s) => s.tenant_id.as_deref() == Some(tenant),
            Err(hookline_store::StoreError::NotFound(_)) => false,
            Err(e) => return Err(e.into()),
        };
        if mine {
            open_breakers.push(id);
        }
    }
    Ok(Overview {
        measured_at: rfc3339(now),
        deliveries: views::state_counts(&deliveries),
        oldest_ready_age_s: None,
        oldest_waiting_age_s: WaitingOn::ALL
            .iter()
            .map(|cause| (cause.as_str().to_owned(), None))
            .collect(),
        oldest_retrying_age_s: None,
        open_breakers,
        held_by_open_breakers: None,
        dead_letters_last_hour: reason_counts(inflow),
        capacity: None,
        rollout: None,
    })
}

/// Who the API takes the caller for.
#[derive(Serialize, ToSchema)]
pub struct WhoAmI {
    /// No tokens are configured: every route is open, to loopback callers only.
    pub open: bool,
    /// The token's name.
    #[schema(required = true)]
    pub name: Option<String>,
    #[schema(required = true)]
    pub scope: Option<Scope>,
    /// The tenant it acts for; `null`: the platform's.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
}

/// What a token may do, so a client (the console) shows only the controls that will work.
#[utoipa::path(get, path = "/v1/whoami", operation_id = "whoami", tag = TAG,
    responses((status = 200, description = "The caller", body = WhoAmI)))]
pub async fn whoami(caller: Option<Extension<Caller>>) -> Json<WhoAmI> {
    Json(match caller {
        Some(Extension(c)) => WhoAmI {
            open: false,
            name: Some(c.name),
            scope: Some(c.scope),
            tenant_id: c.tenant,
        },
        None => WhoAmI {
            open: true,
            name: None,
            scope: None,
            tenant_id: None,
        },
    })
}
