//! How records look in JSON. Times are RFC 3339; secrets appear only where a view asks for them.

use hookline_store::*;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::clock::rfc3339;

pub fn subscriber(s: &Subscriber, now: hookline_policy::UnixMs) -> Value {
    json!({
        "id": s.id,
        "url": s.url,
        "event_types": s.event_types,
        "status": s.status.as_str(),
        "created_at": rfc3339(s.created_at),
        "updated_at": rfc3339(s.updated_at),
        "previous_secret_valid_until": s.previous_secret_until.map(rfc3339),
        "max_in_flight": s.max_in_flight,
        "rate_limit_per_second": s.rate_limit_per_second,
        "payload_version": s.payload_version,
        // Names only: values may be credentials (admin reads them at .../headers).
        "header_names": s.headers.0.keys().collect::<Vec<_>>(),
        "breaker": {
            "state": s.breaker.state(now).as_str(),
            "consecutive_failures": s.breaker.consecutive_failures,
            "open_until": s.breaker.open_until.map(rfc3339),
        },
    })
}

/// A subscriber just created: the one answer that shows its secret.
pub fn created_subscriber(s: &Subscriber, now: hookline_policy::UnixMs) -> Value {
    let mut v = subscriber(s, now);
    v["secret"] = json!(s.secret);
    v
}

/// Embeds stored canonical JSON without re-parsing it into a tree.
pub fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).expect("stored payloads are valid JSON")
}

/// `payload` and `payload_version` are the latest; an event with several versions also lists
/// them all under `payloads`, as it was published.
pub fn event(e: &Event) -> Value {
    let mut v = json!({
        "id": e.id,
        "type": e.event_type,
        "payload": raw_json(&e.payload),
        "payload_version": e.payload_version,
        "accepted_at": rfc3339(e.accepted_at),
        "deliveries": e.deliveries,
        "counts": e.counts,
    });
    if !e.earlier_payloads.is_empty() {
        let mut all: Map<String, Value> = e
            .earlier_payloads
            .iter()
            .map(|(version, payload)| (version.to_string(), json!(raw_json(payload))))
            .collect();
        all.insert(e.payload_version.to_string(), json!(raw_json(&e.payload)));
        v["payloads"] = Value::Object(all);
    }
    v
}

pub fn receipt(r: &EventReceipt) -> Value {
    json!({
        "id": r.id,
        "type": r.event_type,
        "deliveries": r.deliveries,
        "unversioned": r.unversioned,
    })
}

pub fn attempt(a: &AttemptRecord) -> Value {
    let mut v = Map::new();
    v.insert("ordinal".into(), json!(a.ordinal));
    v.insert("started_at".into(), json!(rfc3339(a.started_at)));
    v.insert("duration_ms".into(), json!(a.duration_ms));
    v.insert("outcome".into(), json!(a.outcome.as_str()));
    if let Some(status) = a.status {
        v.insert("status".into(), json!(status));
    }
    if let Some(error) = &a.error {
        v.insert("error".into(), json!(error));
    }
    if let Some(body) = &a.response_body {
        v.insert("response_body".into(), json!(body));
    }
    if let Some(policy) = &a.policy {
        v.insert("policy".into(), json!(policy));
    }
    Value::Object(v)
}

/// The policy of the latest decision: its last attempt's.
fn latest_policy(h: &[AttemptRecord]) -> Option<&str> {
    h.last().and_then(|a| a.policy.as_deref())
}

fn history(h: &[AttemptRecord]) -> Value {
    Value::Array(h.iter().map(attempt).collect())
}

pub fn delivery(d: &Delivery) -> Value {
    json!({
        "id": d.id,
        "event_id": d.event_id,
        "subscriber_id": d.subscriber_id,
        "state": d.state.as_str(),
        "attempts": d.attempts,
        "first_seen": rfc3339(d.first_seen),
        "window_start": rfc3339(d.window_start),
        "next_attempt_at": d.next_attempt_at.map(rfc3339),
        "dead_reason": d.dead_reason.map(|r| r.as_str()),
        "dead_at": d.dead_at.map(rfc3339),
        "error": d.dead_error,
        "waiting_on": d.waiting_on.map(WaitingOn::as_str),
        "payload_version": d.payload_version,
        "policy": latest_policy(&d.attempt_history),
        "attempt_history": history(&d.attempt_history),
    })
}

pub fn dead_letter(d: &DeadLetter) -> Value {
    json!({
        "delivery_id": d.delivery_id,
        "event_id": d.event_id,
        "event_type": d.event_type,
        "subscriber_id": d.subscriber_id,
        "payload_version": d.payload_version,
        "reason": d.reason.as_str(),
        "dead_at": rfc3339(d.dead_at),
        "error": d.dead_error,
        "waiting_on": d.waiting_on.map(WaitingOn::as_str),
        "policy": latest_policy(&d.attempt_history),
        "attempt_history": history(&d.attempt_history),
    })
}

pub fn replay(r: &Replay) -> Value {
    json!({
        "id": r.id,
        "created_at": rfc3339(r.created_at),
        "filter": {"reason": r.reason.as_str(), "subscriber_id": r.subscriber_id},
        "limit": r.limit,
        "per_second": r.per_second,
        "requested_by": r.requested_by,
        "selected": r.selected,
        "delivery_ids": r.delivery_ids,
        "delivered": r.delivered,
        "dead": r.dead,
    })
}

pub fn page<T>(p: &Page<T>, view: impl Fn(&T) -> Value) -> Value {
    json!({
        "items": p.items.iter().map(view).collect::<Vec<_>>(),
        "next_cursor": p.next_cursor,
    })
}

/// A policy: every part spelled out, and for a stored one when and by whom it was created
/// (`null` for `default`, which the configuration defines).
pub fn policy(p: &crate::policies::Policy, stored: Option<&hookline_store::StoredPolicy>) -> Value {
    let mut v = p.to_json();
    v["created_at"] = json!(stored.map(|s| rfc3339(s.created_at)));
    v["created_by"] = json!(stored.and_then(|s| s.created_by.clone()));
    v
}

/// A share in hundredths of a percent, as the percent it is (whole when it is).
fn percent(basis_points: u32) -> Value {
    let whole = basis_points / 100;
    if whole * 100 == basis_points {
        json!(whole)
    } else {
        json!(f64::from(basis_points) / 100.0)
    }
}

pub fn rollout(r: &hookline_store::Rollout) -> Value {
    json!({
        "id": r.id,
        "policy": r.policy,
        "baseline": r.baseline,
        "percent": percent(r.basis_points),
        "subscriber_ids": r.subscriber_ids,
        "abort_if": r.abort_if.map(|a| json!({
            "terminal_rate_increase": a.terminal_rate_increase,
            "min_deliveries": a.min_deliveries,
        })),
        "state": r.state,
        "reason": r.reason,
        "started_at": rfc3339(r.started_at),
        "ended_at": r.ended_at.map(rfc3339),
        "created_by": r.created_by,
    })
}
