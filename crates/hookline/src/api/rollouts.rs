//! `/v1/rollouts`: a candidate policy tried on a cohort of subscribers, compared with the
//! policy in force, then promoted to everyone or aborted.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use hookline_api::{AbortIfRequest, Comparison, EmptyBody, NewRollout, RolloutAbort, RolloutShare};
use hookline_engine::policy::Policy;
use hookline_policy::EVERYONE;
use hookline_store::{AbortIf, Rollout, RolloutChange, RolloutState, StoreError};

use super::auth::Caller;
use super::error::{parse_json, parse_optional_json, ErrorEnvelope};
use super::{page_limit, validate, views, Answer, ApiContext, ApiError, ApiState, PageQuery};
use crate::rollouts::{cohort_view, differences_view, reports};

const TAG: &str = "rollouts";

/// Subscribers a rollout may list by id.
const MAX_LISTED: usize = 1_000;
/// At most this long, an abort's reason.
const MAX_REASON: usize = 500;
/// `abort_if.min_deliveries` at most.
const MAX_MIN_DELIVERIES: u64 = 100_000_000;

/// The store's window sweep and claims apply one window to every delivery: a candidate with
/// another window than the baseline's can only have everyone (and then its window is it).
fn one_window(candidate: &Policy, baseline: &Policy, basis_points: u32) -> Result<(), ApiError> {
    let (theirs, ours) = (
        candidate.retry.delivery_window(),
        baseline.retry.delivery_window(),
    );
    if theirs == ours || basis_points == EVERYONE {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "percent: {:?} has a {} delivery window and the baseline {:?} {}; every delivery's \
         window is enforced alike, so a candidate with another window goes to everyone at \
         once (percent 100), or is defined with delivery_window {:?}",
        candidate.name,
        humantime::format_duration(theirs),
        baseline.name,
        humantime::format_duration(ours),
        humantime::format_duration(ours).to_string(),
    )))
}

/// A percent as hundredths of a percent: 0 to 100, written with at most two decimals (as
/// sent: `12.339999999999999` is not 12.34).
fn basis_points(percent: &serde_json::Number) -> Result<u32, ApiError> {
    let written = percent.to_string();
    let refused = || {
        ApiError::invalid(format!(
            "percent: must be from 0 to 100, written like 5 or 12.5 (at most two decimals, no \
             exponent), not {written}"
        ))
    };
    // Minus zero is zero; any other sign is refused below (a '-' is not a digit).
    let unsigned = match written.strip_prefix('-') {
        Some(rest) if rest.bytes().all(|b| b == b'0' || b == b'.') => rest,
        _ => &written,
    };
    let (whole, decimals) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str, max: usize| s.len() <= max && s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole, 3) || !digits(decimals, 2) {
        return Err(refused());
    }
    let hundredths = whole.parse::<u32>().map_err(|_| refused())? * 100
        + format!("{decimals:0<2}")
            .parse::<u32>()
            .map_err(|_| refused())?;
    if hundredths > EVERYONE {
        return Err(refused());
    }
    Ok(hundredths)
}

fn abort_if(body: AbortIfRequest) -> Result<AbortIf, ApiError> {
    let increase = body.terminal_rate_increase;
    if !(increase > 0.0 && increase <= 1.0) {
        return Err(ApiError::invalid(
            "abort_if.terminal_rate_increase: must be above 0 and at most 1 (a share of ended \
             deliveries, e.g. 0.05)",
        ));
    }
    if !(1..=MAX_MIN_DELIVERIES).contains(&body.min_deliveries) {
        return Err(ApiError::invalid(format!(
            "abort_if.min_deliveries: must be 1 to {MAX_MIN_DELIVERIES}"
        )));
    }
    Ok(AbortIf {
        terminal_rate_increase: increase,
        min_deliveries: body.min_deliveries,
    })
}

/// Listed subscribers must exist: an id that does not is a typo to report, not a cohort
/// member that never sends.
async fn listed(ctx: &ApiContext, ids: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
    let mut ids = ids.unwrap_or_default();
    if ids.len() > MAX_LISTED {
        return Err(ApiError::invalid(format!(
            "subscriber_ids: may list at most {MAX_LISTED} subscribers"
        )));
    }
    ids.sort();
    ids.dedup();
    for id in &ids {
        validate::subscriber_id(id)?;
        match ctx.store.get_subscriber(id).await {
            Ok(_) => {}
            Err(StoreError::NotFound(_)) => {
                return Err(ApiError::invalid(format!(
                    "subscriber_ids: no subscriber {id:?}"
                )))
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(ids)
}

/// A candidate policy for a share of subscribers (admin scope, like every change).
#[utoipa::path(post, path = "/v1/rollouts", operation_id = "start_rollout", tag = TAG, request_body(content = NewRollout, example = json!({
        "policy": "retry-520", "percent": 5,
        "abort_if": {"terminal_rate_increase": 0.05, "min_deliveries": 200}})),
    responses(
        (status = 201, description = "Running", body = views::Rollout),
        (status = 409, description = "Another rollout is running, or the baseline changed meanwhile", body = ErrorEnvelope),
    ))]
pub async fn start(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Rollout> {
    let body: NewRollout = parse_json(&body?)?;
    validate::policy_name(&body.policy)?;
    let basis_points = basis_points(&body.percent)?;
    let abort_if = body.abort_if.map(abort_if).transpose()?;
    let subscriber_ids = listed(&ctx, body.subscriber_ids).await?;
    // A promotion made by another process counts: the baseline is what is in force now.
    let in_force = ctx.policies.refresh().await?;
    let candidate = match ctx.policies.named(&body.policy).await {
        Ok(p) => p,
        Err(StoreError::NotFound(_)) => {
            return Err(ApiError::invalid(format!(
                "policy: no policy {:?}; create it first (POST /v1/policies)",
                body.policy
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let baseline = &in_force.default;
    if candidate.name == baseline.name {
        return Err(ApiError::invalid(format!(
            "policy: {:?} is already in force for everyone",
            candidate.name
        )));
    }
    one_window(&candidate, baseline, basis_points)?;
    let now = ctx.clock.now_ms();
    let by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)).to_owned();
    let rollout = ctx
        .store
        .start_rollout(Rollout {
            id: validate::generate("ro", now),
            policy: candidate.name.clone(),
            baseline: baseline.name.clone(),
            basis_points,
            subscriber_ids,
            abort_if,
            state: RolloutState::Running,
            reason: None,
            started_at: now,
            ended_at: None,
            created_by: caller.map(|Extension(c)| c.name),
        })
        .await?;
    made_current(&ctx).await;
    tracing::info!(
        action = "start_rollout",
        rollout = %rollout.id,
        policy = %rollout.policy,
        basis_points = rollout.basis_points,
        by,
        "rollout started"
    );
    Ok((StatusCode::CREATED, Json(views::rollout(&rollout))))
}

#[utoipa::path(get, path = "/v1/rollouts/{id}", operation_id = "get_rollout", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The rollout", body = views::Rollout),
        (status = 404, description = "No such rollout", body = ErrorEnvelope),
    ))]
pub async fn get(State(ctx): ApiState, Path(id): Path<String>) -> Answer<views::Rollout> {
    let rollout = ctx.store.get_rollout(&id).await?;
    Ok((StatusCode::OK, Json(views::rollout(&rollout))))
}

/// Oldest first.
#[utoipa::path(get, path = "/v1/rollouts", operation_id = "list_rollouts", tag = TAG, params(PageQuery),
    responses((status = 200, description = "A page of rollouts", body = views::Page<views::Rollout>)))]
pub async fn list(
    State(ctx): ApiState,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Answer<views::Page<views::Rollout>> {
    let Query(q) = query?;
    let page = ctx
        .store
        .list_rollouts(page_limit(q.limit)?, q.cursor)
        .await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::rollout))))
}

/// Makes a committed start or change this process's at once. It is committed whatever
/// happens here: a failed read leaves it to the next refresh (within a second), not to a 500
/// that would make the client try again.
async fn made_current(ctx: &ApiContext) {
    if let Err(e) = ctx.policies.refresh().await {
        hookline_engine::telemetry::store_error("policies_in_force");
        tracing::warn!(error = %e, "a rollout changed but the policies in force were not re-read; the next refresh will");
    }
}

/// Applies a change and makes it this process's at once.
async fn change(ctx: &ApiContext, id: &str, change: RolloutChange) -> Answer<views::Rollout> {
    let rollout = ctx
        .store
        .change_rollout(id, change, ctx.clock.now_ms())
        .await?;
    made_current(ctx).await;
    Ok((StatusCode::OK, Json(views::rollout(&rollout))))
}

/// `PATCH {"percent"}`: a new share (raising it only adds subscribers).
#[utoipa::path(patch, path = "/v1/rollouts/{id}", operation_id = "change_rollout_share", tag = TAG, params(("id" = String, Path)), request_body(content = RolloutShare, example = json!({"percent": 25})),
    responses(
        (status = 200, description = "The new share is in force", body = views::Rollout),
        (status = 404, description = "No such rollout", body = ErrorEnvelope),
        (status = 409, description = "The rollout ended", body = ErrorEnvelope),
    ))]
pub async fn patch(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Rollout> {
    let body: RolloutShare = parse_json(&body?)?;
    let basis_points = basis_points(&body.percent)?;
    let rollout = ctx.store.get_rollout(&id).await?;
    if rollout.state != RolloutState::Running {
        return Err(ApiError::conflict(format!(
            "rollout {id} is {}: it changes no more; start a new one",
            rollout.state.as_str()
        )));
    }
    let candidate = ctx.policies.named(&rollout.policy).await?;
    let baseline = ctx.policies.named(&rollout.baseline).await?;
    one_window(&candidate, &baseline, basis_points)?;
    let answer = change(&ctx, &id, RolloutChange::Share(basis_points)).await?;
    tracing::info!(
        action = "change_rollout_share",
        rollout = %id,
        basis_points,
        by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)),
        "rollout share changed"
    );
    Ok(answer)
}

/// The candidate becomes the policy in force for everyone. The body, if any, is `{}`.
#[utoipa::path(post, path = "/v1/rollouts/{id}/promote", operation_id = "promote_rollout", tag = TAG, params(("id" = String, Path)),
    request_body(content = Option<EmptyBody>),
    responses(
        (status = 200, description = "Promoted", body = views::Rollout),
        (status = 404, description = "No such rollout", body = ErrorEnvelope),
        (status = 409, description = "The rollout ended", body = ErrorEnvelope),
    ))]
pub async fn promote(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Rollout> {
    let _: Option<EmptyBody> = parse_optional_json(&body?)?;
    let answer = change(&ctx, &id, RolloutChange::Promote).await?;
    tracing::info!(
        action = "promote_rollout",
        rollout = %id,
        by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)),
        "rollout promoted"
    );
    Ok(answer)
}

/// The cohort returns to the baseline. The body, if any, is `{"reason"}`.
#[utoipa::path(post, path = "/v1/rollouts/{id}/abort", operation_id = "abort_rollout", tag = TAG, params(("id" = String, Path)),
    request_body(content = Option<RolloutAbort>, example = json!({"reason": "dead letters climbing"})),
    responses(
        (status = 200, description = "Aborted", body = views::Rollout),
        (status = 404, description = "No such rollout", body = ErrorEnvelope),
        (status = 409, description = "The rollout ended", body = ErrorEnvelope),
    ))]
pub async fn abort(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::Rollout> {
    let body = body?;
    let by = crate::logs::by(caller.as_ref().map(|Extension(c)| c)).to_owned();
    let given = parse_optional_json::<RolloutAbort>(&body)?.and_then(|b| b.reason);
    let reason = match given {
        Some(r) if r.chars().count() > MAX_REASON || r.trim().is_empty() => {
            return Err(ApiError::invalid(format!(
                "reason: must be 1 to {MAX_REASON} characters"
            )))
        }
        Some(r) => r,
        None => match caller {
            Some(Extension(c)) => format!("aborted by {}", c.name),
            None => "aborted by an operator".to_owned(),
        },
    };
    let answer = change(&ctx, &id, RolloutChange::Abort { reason }).await?;
    tracing::info!(
        action = "abort_rollout",
        rollout = %id,
        by,
        "rollout aborted"
    );
    Ok(answer)
}

/// What each cohort's deliveries did since the rollout started, side by side.
#[utoipa::path(get, path = "/v1/rollouts/{id}/comparison", operation_id = "compare_rollout", tag = TAG, params(("id" = String, Path)),
    responses(
        (status = 200, description = "The comparison", body = Comparison),
        (status = 404, description = "No such rollout", body = ErrorEnvelope),
    ))]
pub async fn comparison(State(ctx): ApiState, Path(id): Path<String>) -> Answer<Comparison> {
    let rollout = ctx.store.get_rollout(&id).await?;
    let now = ctx.clock.now_ms();
    let (baseline, candidate) = reports(&ctx.store, &rollout, now).await?;
    Ok((
        StatusCode::OK,
        Json(Comparison {
            rollout: rollout.id.clone(),
            state: rollout.state.as_str().to_owned(),
            since: hookline_engine::clock::rfc3339(rollout.started_at),
            until: hookline_engine::clock::rfc3339(rollout.ended_at.unwrap_or(now)),
            baseline: cohort_view(&rollout.baseline, &baseline),
            candidate: cohort_view(&rollout.policy, &candidate),
            difference: differences_view(&baseline, &candidate),
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<u32, ApiError> {
        basis_points(&serde_json::from_str(text).unwrap())
    }

    #[test]
    fn a_percent_is_read_as_written() {
        for (text, bp) in [
            ("0", 0),
            ("5", 500),
            ("12.5", 1250),
            ("12.34", 1234),
            ("100", 10_000),
            ("100.00", 10_000),
            ("-0", 0),
            ("-0.00", 0),
            ("0.01", 1),
        ] {
            assert_eq!(parse(text).unwrap(), bp, "{text}");
        }
        for text in [
            "12.339999999999999",
            "1e2",
            "1e-400",
            "12.345",
            "100.01",
            "-1",
            "101",
            "1000",
            "5.000000000000000001",
            "-0.5",
            "-0.01",
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }
}
