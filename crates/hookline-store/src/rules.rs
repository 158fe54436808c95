//! The rules a store applies, whichever database holds the rows: what a patch or a rotation
//! makes of a subscriber, what a re-publish answers, the bounds of replays and paces, how an
//! attempt's outcome is stored. Backends call these; none restates them.

use hookline_policy::{DeadReason, Evidence, FailingStreak, Outcome, Shown, UnixMs};

use crate::*;

/// The subscriber a patch makes of `current`, and whether it resumes a paused subscriber (whose
/// held deliveries must then be released). Revocation is final and is not a patch.
pub(crate) fn patched(
    current: Subscriber,
    patch: SubscriberPatch,
    now: UnixMs,
) -> Result<(Subscriber, bool)> {
    if current.status == SubscriberStatus::Revoked {
        return Err(StoreError::Conflict(format!(
            "subscriber {:?} is revoked; revocation is final",
            current.id
        )));
    }
    let status = patch.status.unwrap_or(current.status);
    if status == SubscriberStatus::Revoked {
        return Err(StoreError::Invalid(
            "a subscriber is revoked by deleting it, not by a status change".into(),
        ));
    }
    let resumed = current.status == SubscriberStatus::Paused && status == SubscriberStatus::Active;
    // A pause through the API is an operator's, even of a subscriber hookline paused.
    let status_reason = match (status, patch.status) {
        (SubscriberStatus::Active, _) => None,
        (_, Some(SubscriberStatus::Paused)) => Some(StatusReason::Paused),
        _ => current.status_reason,
    };
    // A resumed subscriber's failing streak counts from now: one paused for failing too long
    // would otherwise be paused again at once, before it had a chance to answer. It is still
    // failing (its failures still count) until an attempt succeeds.
    let failing = match current.failing.since {
        Some(_) if resumed => FailingStreak {
            since: Some(now),
            ..current.failing
        },
        _ => current.failing,
    };
    let url = patch.url.unwrap_or(current.url);
    Ok((
        Subscriber {
            origin: Origin::of_url(&url),
            url,
            event_types: patch.event_types.unwrap_or(current.event_types),
            status,
            status_reason,
            failing,
            max_in_flight: patch.max_in_flight.unwrap_or(current.max_in_flight),
            rate_limit_per_second: patch
                .rate_limit_per_second
                .unwrap_or(current.rate_limit_per_second),
            payload_version: patch.payload_version.unwrap_or(current.payload_version),
            headers: patch.headers.unwrap_or(current.headers),
            ..current
        },
        resumed,
    ))
}

/// What a rotation keeps of the current secret: it stays valid until `grace_until`, unless the
/// grace period is already over. Revoked subscribers have nothing to rotate.
pub(crate) fn rotation(
    current: &Subscriber,
    grace_until: UnixMs,
    now: UnixMs,
) -> Result<(Option<String>, Option<UnixMs>)> {
    if current.status == SubscriberStatus::Revoked {
        return Err(StoreError::Conflict(format!(
            "subscriber {:?} is revoked; revocation is final",
            current.id
        )));
    }
    Ok(if grace_until > now {
        (Some(current.secret.clone()), Some(grace_until))
    } else {
        (None, None)
    })
}

/// The answer to storing a policy whose name is taken.
pub(crate) fn policy_exists(name: &str) -> StoreError {
    StoreError::Conflict(format!(
        "policy {name:?} already exists; policies never change: create one under a new name"
    ))
}

/// The counter of deliveries entering the dead-letter queue, by reason and policy.
pub const DEAD_LETTERS_METRIC: &str = "hookline_dead_letters_total";
/// The `policy` of deaths no policy decided (a revocation, a window that ended while the
/// delivery waited, a payload version the subscriber cannot take).
pub const NO_POLICY: &str = "none";

/// Counts deliveries that just died, for `hookline_dead_letters_total{reason,policy}`: the one
/// place every backend reports dead-letter inflow, whichever path killed them.
pub(crate) fn count_dead(reason: DeadReason, policy: Option<&str>, n: u64) {
    if n > 0 {
        let policy = policy.unwrap_or(NO_POLICY).to_owned();
        metrics::counter!(DEAD_LETTERS_METRIC, "reason" => reason.as_str(), "policy" => policy)
            .increment(n);
    }
}

/// The answer to publishing an id that exists: the original answer when the type and every
/// payload version are the same, a conflict when anything differs. A token that did not publish
/// the event (`published_by`, the token's name) gets a conflict whatever the body, so that a
/// re-publish tells it neither that the id exists with its body nor what that body is; without
/// tokens (open mode: no publisher named) the body alone decides.
pub(crate) fn republished(
    event: NewEvent,
    existing: EventReceipt,
    published_by: Option<&str>,
    payload: &str,
    payload_version: i64,
    earlier_payloads: &[(i64, String)],
) -> PublishOutcome {
    let another_publisher = event
        .published_by
        .as_deref()
        .is_some_and(|name| published_by != Some(name));
    let same = !another_publisher
        && existing.tenant_id == event.tenant_id
        && existing.event_type == event.event_type
        && existing.ordering_key == event.ordering_key
        && payload == event.payload
        && payload_version == event.payload_version
        && earlier_payloads == event.earlier_payloads.as_slice();
    if same {
        PublishOutcome::AlreadyAccepted(existing)
    } else {
        PublishOutcome::Conflict
    }
}

/// How an outcome is stored: a lost attempt as `retryable` with the `lost` flag, so releases
/// that predate `lost` still read the history (they see a retryable failure).
pub(crate) fn stored_outcome(outcome: Outcome) -> (&'static str, Option<bool>) {
    match outcome {
        Outcome::Lost => (Outcome::Retryable.as_str(), Some(true)),
        other => (other.as_str(), None),
    }
}

/// The outcome a history row records, from its `outcome` and `lost` columns.
pub(crate) fn read_outcome(outcome: &str, lost: Option<bool>) -> Option<Outcome> {
    match lost {
        Some(true) => Some(Outcome::Lost),
        _ => Outcome::parse(outcome),
    }
}

/// The most dead letters one replay may select.
pub const MAX_REPLAY: u32 = 1000;

/// The paces an outsider may ask for, per second: a replay's `per_second` and a subscriber's
/// `rate_limit_per_second`. The floor keeps every time computed from them (a replay's release
/// times, the limiter's next admission) within days, never past what RFC 3339 can render.
pub const MIN_RATE_PER_SECOND: f64 = 0.001;
pub const MAX_RATE_PER_SECOND: f64 = 100_000.0;

/// Refuses a pace outside [`MIN_RATE_PER_SECOND`, `MAX_RATE_PER_SECOND`], naming the field.
pub fn check_rate(field: &str, rate: f64) -> Result<f64> {
    if rate.is_finite() && (MIN_RATE_PER_SECOND..=MAX_RATE_PER_SECOND).contains(&rate) {
        Ok(rate)
    } else {
        Err(StoreError::Invalid(format!(
            "{field} must be a number from {MIN_RATE_PER_SECOND} to {MAX_RATE_PER_SECOND}"
        )))
    }
}

pub(crate) fn validate_replay(req: &ReplayRequest) -> Result<()> {
    check_replay(req.limit, req.per_second)?;
    match &req.expected {
        Some(ids) if ids.is_empty() => Err(StoreError::Invalid(
            "expected_delivery_ids: lists no delivery; a replay held to a preview releases \
             what the preview showed"
                .into(),
        )),
        Some(ids) if ids.len() > req.limit as usize => Err(StoreError::Invalid(format!(
            "expected_delivery_ids: lists {} deliveries, more than limit ({})",
            ids.len(),
            req.limit
        ))),
        _ => Ok(()),
    }
}

/// How many dead letters a replay selects: `limit`, or as many as its preview showed (dead
/// letters that died since sort after them, so they do not change the selection).
pub(crate) fn selection_limit(req: &ReplayRequest) -> u32 {
    req.expected.as_ref().map_or(req.limit, |ids| {
        u32::try_from(ids.len()).unwrap_or(u32::MAX).min(req.limit)
    })
}

/// Refuses a replay whose selection is not the one its preview showed (`expected`), before
/// anything is released.
pub(crate) fn selection_as_previewed<'a>(
    req: &ReplayRequest,
    selected: impl Iterator<Item = &'a str>,
) -> Result<()> {
    let Some(expected) = &req.expected else {
        return Ok(());
    };
    if !selected.eq(expected.iter().map(String::as_str)) {
        return Err(StoreError::Conflict(
            "the dead letters this replay selects are no longer the ones previewed (another \
             replay or a new death changed them): preview again"
                .into(),
        ));
    }
    Ok(())
}

/// Refuses a replay's `limit` outside 1..=[`MAX_REPLAY`] or a pace outside the bounds, naming
/// the field: the API asks before it calls the store, and the store asks again.
pub fn check_replay(limit: u32, per_second: Option<f64>) -> Result<()> {
    if limit == 0 || limit > MAX_REPLAY {
        return Err(StoreError::Invalid(format!(
            "limit must be between 1 and {MAX_REPLAY}, not {limit}"
        )));
    }
    if let Some(rate) = per_second {
        check_rate("per_second", rate)?;
    }
    Ok(())
}

/// When the `i`-th delivery of a replay is released: all at once, or paced `per_second`.
pub(crate) fn release_at(now: UnixMs, i: usize, per_second: Option<f64>) -> UnixMs {
    match per_second {
        Some(rate) => now.saturating_add(paced(i as f64 * 1000.0 / rate)),
        None => now,
    }
}

/// A span worked out from a rate (`check_rate` bounds every one stored), in the unit it was
/// worked out in (milliseconds of [`UnixMs`], a limiter's microseconds), rounded toward zero:
/// `as` saturates, so not even an unbounded rate could wrap it.
#[allow(clippy::cast_possible_truncation)]
pub(crate) fn paced(span: f64) -> i64 {
    span as i64
}

/// A count, a length or a duration of the model as the 64-bit integer that stores or bounds
/// it, saturating: one beyond is stored as the most the column holds, never as a negative.
pub(crate) fn to_bigint(v: impl TryInto<i64>) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

/// A number the database worked out that means nothing below 0 (a count; a wait, which is 0
/// once due): a negative one counts as 0.
pub(crate) fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// How a completion leaves a delivery, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ending {
    pub state: DeliveryState,
    pub run_at: Option<UnixMs>,
    pub dead_reason: Option<DeadReason>,
}

impl Ending {
    /// Where `transition` leaves a delivery of a subscriber in `status`: a reschedule for a
    /// subscriber revoked meanwhile is a dead letter instead (`subscription_revoked`).
    pub fn of(transition: Transition, status: SubscriberStatus) -> Self {
        let dead = |reason| Ending {
            state: DeliveryState::Dead,
            run_at: None,
            dead_reason: Some(reason),
        };
        match transition {
            Transition::Reschedule { .. } if status == SubscriberStatus::Revoked => {
                dead(DeadReason::SubscriptionRevoked)
            }
            Transition::Reschedule { run_at } => Ending {
                state: DeliveryState::Scheduled,
                run_at: Some(run_at),
                dead_reason: None,
            },
            Transition::Delivered => Ending {
                state: DeliveryState::Delivered,
                run_at: None,
                dead_reason: None,
            },
            Transition::Dead(reason) => dead(reason),
        }
    }

    pub fn dead_reason_str(&self) -> Option<&'static str> {
        self.dead_reason.map(DeadReason::as_str)
    }
}

/// The backlog from its four counts: scheduled, in flight, scheduled and not held, due.
pub(crate) fn backlog_of(scheduled: i64, in_flight: i64, unheld: i64, due: i64) -> Backlog {
    let scheduled = non_negative(scheduled);
    Backlog {
        not_ended: scheduled + non_negative(in_flight),
        held: scheduled.saturating_sub(non_negative(unheld)),
        due: non_negative(due),
    }
}

/// The rows of `ATTEMPT_HISTORY` (`sql/<backend>/capacity.sql`), summed: each row is (duration in ms, outcome, answered).
pub(crate) fn attempt_history_of(
    rows: impl IntoIterator<Item = (i64, String, bool)>,
) -> Result<AttemptHistory> {
    let mut h = AttemptHistory::default();
    for (duration_ms, outcome, answered) in rows {
        let outcome = Outcome::parse(&outcome).ok_or_else(|| {
            StoreError::backend(format!("unexpected outcome {outcome:?} in the database"))
        })?;
        h.attempts += 1;
        if matches!(outcome, Outcome::Retryable | Outcome::Lost) {
            h.failed += 1;
        }
        if answered {
            h.answered_ms.push(non_negative(duration_ms));
        } else {
            h.unanswered += 1;
        }
    }
    h.answered_ms.sort_unstable();
    Ok(h)
}

/// One group of the answer of `BACKLOG_DEFERRED` (`sql/<backend>/capacity.sql`).
pub(crate) fn deferred_of(cause: i64, after_ms: i64, deliveries: i64) -> Deferred {
    Deferred {
        cause: if cause == 1 {
            DeferCause::OpenBreaker
        } else {
            DeferCause::Retry
        },
        after_ms: non_negative(after_ms),
        deliveries: non_negative(deliveries),
    }
}

/// The recorded estimate from its row. Evidence this binary does not know (a later one wrote
/// it) reads as a lower bound: the floor still applies under it.
pub(crate) fn shown_of(per_s: f64, evidence: &str) -> Shown {
    Shown {
        per_s: if per_s.is_finite() {
            per_s.max(0.0)
        } else {
            0.0
        },
        evidence: Evidence::parse(evidence).unwrap_or(Evidence::AtLeast),
    }
}

/// A fan-out of `deliveries` (not counting those dead at once: they join no backlog) under
/// admission: refused (and the transaction rolled back by the caller's error) when it is more
/// than the event may create.
pub(crate) fn admitted(event: &NewEvent, deliveries: u64) -> Result<()> {
    match event.admit_at_most {
        Some(room) if deliveries > room => Err(StoreError::OverCapacity { deliveries, room }),
        _ => Ok(()),
    }
}

/// A fan-out to one subscriber (`NewEvent::only_subscriber`) that reached nobody: refused (and
/// the transaction rolled back by the caller's error), as a test event that goes nowhere would
/// be a receipt of nothing. Reached by a revocation that won the race with the caller's read.
pub(crate) fn reached_its_subscriber(event: &NewEvent, deliveries: u64) -> Result<()> {
    match &event.only_subscriber {
        Some(id) if deliveries == 0 => Err(StoreError::Conflict(format!(
            "subscriber {id:?} is revoked, or not of the event's tenant: the event would reach \
             nobody, so nothing was stored"
        ))),
        _ => Ok(()),
    }
}

/// The answer to starting a rollout while `running` runs.
pub(crate) fn rollout_running(running: &str) -> StoreError {
    StoreError::Conflict(format!(
        "rollout {running} is running; promote or abort it before starting another"
    ))
}

/// A rollout starts from the policy in force: when one was promoted, its `baseline` must be
/// that one (a promotion between the caller's look and the start would leave it comparing
/// against a policy nobody follows).
pub(crate) fn check_baseline(rollout: &Rollout, promoted: Option<&str>) -> Result<()> {
    match promoted {
        Some(p) if p != rollout.baseline => Err(StoreError::Conflict(format!(
            "the policy in force changed to {p:?} meanwhile; start the rollout again"
        ))),
        _ => Ok(()),
    }
}

/// A running rollout after `change` at `now`. One that ended changes no more.
pub(crate) fn rollout_changed(
    mut rollout: Rollout,
    change: RolloutChange,
    now: UnixMs,
) -> Result<Rollout> {
    if rollout.state != RolloutState::Running {
        return Err(StoreError::Conflict(format!(
            "rollout {} is {}: it changes no more; start a new one",
            rollout.id,
            rollout.state.as_str()
        )));
    }
    match change {
        RolloutChange::Share(basis_points) => rollout.basis_points = basis_points,
        RolloutChange::Promote => {
            rollout.state = RolloutState::Promoted;
            rollout.ended_at = Some(now);
        }
        RolloutChange::Abort { reason } => {
            rollout.state = RolloutState::Aborted;
            rollout.reason = Some(reason);
            rollout.ended_at = Some(now);
        }
    }
    Ok(rollout)
}

/// How a rollout's listed subscribers are stored: a JSON array.
pub(crate) fn subscriber_ids_text(ids: &[String]) -> String {
    serde_json::to_string(ids).expect("strings serialize")
}

pub(crate) fn subscriber_ids_read(text: &str) -> Result<Vec<String>> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::caused_by("a rollout's subscriber_ids are unreadable", e))
}

pub(crate) fn rollout_state_read(text: &str) -> Result<RolloutState> {
    RolloutState::parse(text)
        .ok_or_else(|| StoreError::backend(format!("unexpected rollout state {text:?}")))
}

/// The 0-based rank of quantile `q` among `n` sorted values (nearest rank).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // The clamp holds it to 1..=n.
pub(crate) fn nearest_rank(n: u64, q: f64) -> u64 {
    ((q * n as f64).ceil() as u64).clamp(1, n.max(1)) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reschedule_for_a_revoked_subscriber_is_a_dead_letter() {
        use SubscriberStatus::*;
        let later = Transition::Reschedule { run_at: 42 };
        assert_eq!(
            Ending::of(later, Active),
            Ending {
                state: DeliveryState::Scheduled,
                run_at: Some(42),
                dead_reason: None
            }
        );
        assert_eq!(Ending::of(later, Paused), Ending::of(later, Active));
        let revoked = Ending::of(later, Revoked);
        assert_eq!(
            (revoked.state, revoked.run_at, revoked.dead_reason_str()),
            (DeliveryState::Dead, None, Some("subscription_revoked"))
        );
        // What ends anyway ends the same way.
        for status in [Active, Paused, Revoked] {
            assert_eq!(
                Ending::of(Transition::Delivered, status).state,
                DeliveryState::Delivered
            );
            let dead = Ending::of(Transition::Dead(DeadReason::PermanentFailure), status);
            assert_eq!(dead.dead_reason, Some(DeadReason::PermanentFailure));
        }
    }
}
