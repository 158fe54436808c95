//! Schemas the derive cannot see: strings drawn from a fixed list. Each is built from the list
//! the code itself answers with (`ALL` and `as_str`), so the document can neither name a value
//! the code never sends nor miss one it does.

use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};

use hookline_policy::{BreakerState, DeadReason, Jitter, Outcome, Refusal};
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

pub fn delivery_state_or_null() -> Object {
    one_of_or_null(DeliveryState::ALL.map(DeliveryState::as_str))
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

pub fn list_order_or_null() -> Object {
    one_of_or_null(ListOrder::ALL.map(ListOrder::as_str))
}
