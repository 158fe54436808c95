//! OpenAPI schemas the derive cannot see: strings drawn from a fixed list. Each is built from the list
//! the code itself answers with (`ALL` and `as_str`), so the document can neither name a value
//! the code never sends nor miss one it does.

use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};

use hookline_policy::{BreakerState, DeadReason, DrainTerm, Jitter, Outcome, Refusal};
use hookline_store::{DeliveryState, ListOrder, RolloutState, SubscriberStatus, WaitingOn};

fn one_of(names: impl IntoIterator<Item = &'static str>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names))
}

/// The same, or `null`.
fn one_of_or_null(names: impl IntoIterator<Item = &'static str>) -> Object {
    let mut values: Vec<serde_json::Value> = names.into_iter().map(Into::into).collect();
    values.push(serde_json::Value::Null);
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(values))
        .build()
}

pub fn subscriber_status() -> Object {
    one_of(SubscriberStatus::ALL.map(SubscriberStatus::as_str)).build()
}

pub fn status_reason_or_null() -> Object {
    one_of_or_null(hookline_store::StatusReason::ALL.map(hookline_store::StatusReason::as_str))
}

/// What `PATCH /v1/subscribers/{id}` may set (`DELETE` revokes).
pub fn settable_status_or_null() -> Object {
    one_of_or_null(
        [SubscriberStatus::Active, SubscriberStatus::Paused].map(SubscriberStatus::as_str),
    )
}

pub fn breaker_state() -> Object {
    one_of(BreakerState::NAMES).build()
}

pub fn delivery_state() -> Object {
    one_of(DeliveryState::ALL.map(DeliveryState::as_str)).build()
}

pub fn dead_reason() -> Object {
    one_of(DeadReason::ALL.map(DeadReason::as_str)).build()
}

pub fn dead_reason_or_null() -> Object {
    one_of_or_null(DeadReason::ALL.map(DeadReason::as_str))
}

pub fn waiting_on_or_null() -> Object {
    one_of_or_null(WaitingOn::ALL.map(WaitingOn::as_str))
}

pub fn outcome() -> Object {
    one_of(Outcome::ALL.map(Outcome::as_str)).build()
}

pub fn jitter() -> Object {
    one_of(Jitter::ALL.map(Jitter::as_str)).build()
}

pub fn rollout_state() -> Object {
    one_of(RolloutState::ALL.map(RolloutState::as_str)).build()
}

pub fn refusal_or_null() -> Object {
    one_of_or_null(Refusal::ALL.map(Refusal::as_str))
}

pub fn drain_term() -> Object {
    one_of(DrainTerm::ALL.map(DrainTerm::as_str)).build()
}

pub fn list_order() -> Object {
    one_of(ListOrder::ALL.map(ListOrder::as_str)).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each list the document is built from holds every variant: an exhaustive match per enum,
    /// so a new variant does not compile here until it is looked at, and then must be listed.
    #[test]
    fn every_variant_is_in_its_list() {
        let listed = |names: &[&str], name: &str| assert!(names.contains(&name), "{name}");
        let states = DeliveryState::ALL.map(DeliveryState::as_str);
        for v in [
            DeliveryState::Scheduled,
            DeliveryState::InFlight,
            DeliveryState::Delivered,
            DeliveryState::Dead,
        ] {
            match v {
                DeliveryState::Scheduled
                | DeliveryState::InFlight
                | DeliveryState::Delivered
                | DeliveryState::Dead => listed(&states, v.as_str()),
            }
        }
        let statuses = SubscriberStatus::ALL.map(SubscriberStatus::as_str);
        for v in [
            SubscriberStatus::Active,
            SubscriberStatus::Paused,
            SubscriberStatus::Revoked,
        ] {
            match v {
                SubscriberStatus::Active | SubscriberStatus::Paused | SubscriberStatus::Revoked => {
                    listed(&statuses, v.as_str())
                }
            }
        }
        let outcomes = Outcome::ALL.map(Outcome::as_str);
        for v in [
            Outcome::Success,
            Outcome::Retryable,
            Outcome::Permanent,
            Outcome::Lost,
        ] {
            match v {
                Outcome::Success | Outcome::Retryable | Outcome::Permanent | Outcome::Lost => {
                    listed(&outcomes, v.as_str())
                }
            }
        }
        let jitters = Jitter::ALL.map(Jitter::as_str);
        for v in [Jitter::Equal, Jitter::Full, Jitter::None] {
            match v {
                Jitter::Equal | Jitter::Full | Jitter::None => listed(&jitters, v.as_str()),
            }
        }
        let refusals = Refusal::ALL.map(Refusal::as_str);
        for v in [Refusal::Backlog, Refusal::ProjectedDrain] {
            match v {
                Refusal::Backlog | Refusal::ProjectedDrain => listed(&refusals, v.as_str()),
            }
        }
        let terms = DrainTerm::ALL.map(DrainTerm::as_str);
        for v in [
            DrainTerm::Throughput,
            DrainTerm::Retries,
            DrainTerm::BreakerDeferred,
            DrainTerm::RateLimited,
        ] {
            match v {
                DrainTerm::Throughput
                | DrainTerm::Retries
                | DrainTerm::BreakerDeferred
                | DrainTerm::RateLimited => listed(&terms, v.as_str()),
            }
        }
        let waits = WaitingOn::ALL.map(WaitingOn::as_str);
        for v in [
            WaitingOn::Ordering,
            WaitingOn::Breaker,
            WaitingOn::Paused,
            WaitingOn::RateLimit,
            WaitingOn::Cap,
            WaitingOn::HostCap,
            WaitingOn::Slow,
        ] {
            match v {
                WaitingOn::Ordering
                | WaitingOn::Breaker
                | WaitingOn::Paused
                | WaitingOn::RateLimit
                | WaitingOn::Cap
                | WaitingOn::HostCap
                | WaitingOn::Slow => listed(&waits, v.as_str()),
            }
        }
        let reasons = DeadReason::ALL.map(DeadReason::as_str);
        for v in [
            DeadReason::PermanentFailure,
            DeadReason::AttemptsExhausted,
            DeadReason::WindowExpired,
            DeadReason::NextDelayExceedsWindow,
            DeadReason::SubscriptionRevoked,
        ] {
            match v {
                DeadReason::PermanentFailure
                | DeadReason::AttemptsExhausted
                | DeadReason::WindowExpired
                | DeadReason::NextDelayExceedsWindow
                | DeadReason::SubscriptionRevoked => listed(&reasons, v.as_str()),
            }
        }
        for v in [
            BreakerState::Closed,
            BreakerState::Open { until: 0 },
            BreakerState::HalfOpen,
        ] {
            match v {
                BreakerState::Closed | BreakerState::Open { .. } | BreakerState::HalfOpen => {
                    listed(&BreakerState::NAMES, v.as_str())
                }
            }
        }
    }
}
