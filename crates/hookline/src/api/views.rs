//! How records look in JSON: each store record as the answer type of `hookline-api` that shows
//! it. The types are the API's wire types, serialized as they are and described by the same
//! types in the OpenAPI document (and read by the client), so a field cannot be sent without
//! being described. Times are RFC 3339; secrets appear only where a view asks for them.

use std::collections::BTreeMap;

use hookline_engine::clock::rfc3339;
use hookline_store as store;
use serde_json::value::RawValue;

pub use hookline_api::{
    AbortIf, Activity, Attempt, Breaker, CreatedPortalSession, CreatedSubscriber, DeadLetter,
    DeadLetterGroup, Delivery, Event, EventSummary, EventType, Headers, LastAttempt, Page, Policy,
    PortalSession, Receipt, Replay, ReplayFilter, ReplayPreview, ReplayStarted, Resend,
    ResendPreview, Rollout, RotatedSecret, Secret, StateCounts, Subscriber, Tenant, Warning,
};

use crate::policies::PolicyExt;

/// A warning for each of `types`, deprecated in the event type catalog.
pub fn deprecated_types(types: Vec<String>) -> Vec<Warning> {
    types
        .into_iter()
        .map(|t| Warning {
            code: "deprecated_event_type".to_owned(),
            message: format!(
                "event type {t:?} is deprecated in the event type catalog \
                 (GET /v1/event-types/{{name}} says what replaces it)"
            ),
            event_type: t,
        })
        .collect()
}

/// Delivery counts as the API shows them.
pub fn state_counts(c: &store::StateCounts) -> StateCounts {
    StateCounts {
        scheduled: c.scheduled,
        in_flight: c.in_flight,
        delivered: c.delivered,
        dead: c.dead,
    }
}

pub fn last_attempt(delivery_id: &str, a: &store::AttemptRecord) -> LastAttempt {
    LastAttempt {
        delivery_id: delivery_id.to_owned(),
        started_at: rfc3339(a.started_at),
        outcome: a.outcome.as_str().to_owned(),
        status: a.status,
    }
}

/// Whether a caller is shown the values of a subscriber URL's query string. They may be
/// credentials (`?api_key=...`): admin tokens (and open mode, where there are no tokens) see
/// them; read tokens, and the console with one, see each value as `***` and cannot search them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryValues {
    Shown,
    Masked,
}

impl QueryValues {
    pub fn for_caller(caller: Option<&super::auth::Caller>) -> Self {
        match caller {
            Some(c) if c.scope != super::auth::Scope::Admin => QueryValues::Masked,
            _ => QueryValues::Shown,
        }
    }

    /// `url` as this caller sees it: with `Masked`, every value of its query string (and a
    /// part without a name) replaced by `***`, names and everything else as stored.
    pub fn url(self, url: &str) -> String {
        let Some((before, rest)) = url.split_once('?').filter(|_| self == QueryValues::Masked)
        else {
            return url.to_owned();
        };
        let (query, fragment) = match rest.split_once('#') {
            Some((query, fragment)) => (query, Some(fragment)),
            None => (rest, None),
        };
        let masked: Vec<String> = query
            .split('&')
            .map(|part| match part.split_once('=') {
                Some((name, "")) => format!("{name}="),
                Some((name, _)) => format!("{name}=***"),
                None if part.is_empty() => String::new(),
                None => "***".to_owned(),
            })
            .collect();
        let mut shown = format!("{before}?{}", masked.join("&"));
        if let Some(fragment) = fragment {
            shown.push('#');
            shown.push_str(fragment);
        }
        shown
    }
}

pub fn subscriber(
    s: &store::Subscriber,
    now: hookline_policy::UnixMs,
    query_values: QueryValues,
) -> Subscriber {
    Subscriber {
        id: s.id.clone(),
        tenant_id: s.tenant_id.clone(),
        url: query_values.url(&s.url),
        event_types: s.event_types.clone(),
        status: s.status.as_str().to_owned(),
        status_reason: s.status_reason.map(|r| r.as_str().to_owned()),
        failing_since: s.failing.since.map(rfc3339),
        failed_attempts: s.failing.attempts,
        created_at: rfc3339(s.created_at),
        updated_at: rfc3339(s.updated_at),
        previous_secret_valid_until: s.previous_secret_until.map(rfc3339),
        max_in_flight: s.max_in_flight,
        rate_limit_per_second: s.rate_limit_per_second,
        payload_version: s.payload_version,
        header_names: s.headers.0.keys().cloned().collect(),
        breaker: Breaker {
            state: s.breaker.state(now).as_str().to_owned(),
            consecutive_failures: s.breaker.consecutive_failures,
            open_until: s.breaker.open_until.map(rfc3339),
        },
        activity: None,
        warnings: Vec::new(),
    }
}

pub fn created_subscriber(
    s: &store::Subscriber,
    now: hookline_policy::UnixMs,
) -> CreatedSubscriber {
    CreatedSubscriber {
        // Only admin creates subscribers.
        subscriber: subscriber(s, now, QueryValues::Shown),
        secret: s.secret.clone(),
    }
}

/// Embeds stored canonical JSON without re-parsing it into a tree.
pub fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).expect("stored payloads are valid JSON")
}

pub fn event(e: &store::Event) -> Event {
    let payloads = (!e.earlier_payloads.is_empty()).then(|| {
        let mut all: BTreeMap<String, Box<RawValue>> = e
            .earlier_payloads
            .iter()
            .map(|(version, payload)| (version.to_string(), raw_json(payload)))
            .collect();
        all.insert(e.payload_version.to_string(), raw_json(&e.payload));
        all
    });
    Event {
        id: e.id.clone(),
        tenant_id: e.tenant_id.clone(),
        event_type: e.event_type.clone(),
        payload: raw_json(&e.payload),
        payload_version: e.payload_version,
        accepted_at: rfc3339(e.accepted_at),
        deliveries: e.deliveries,
        counts: state_counts(&e.counts),
        ordering_key: e.ordering_key.clone(),
        traceparent: e.traceparent.clone(),
        payloads,
    }
}

pub fn event_summary(e: &store::EventSummary) -> EventSummary {
    EventSummary {
        id: e.id.clone(),
        tenant_id: e.tenant_id.clone(),
        event_type: e.event_type.clone(),
        payload_version: e.payload_version,
        accepted_at: rfc3339(e.accepted_at),
        deliveries: e.deliveries,
        counts: state_counts(&e.counts),
    }
}

pub fn receipt(r: &store::EventReceipt) -> Receipt {
    Receipt {
        id: r.id.clone(),
        tenant_id: r.tenant_id.clone(),
        event_type: r.event_type.clone(),
        ordering_key: r.ordering_key.clone(),
        deliveries: r.deliveries,
        unversioned: r.unversioned,
    }
}

pub fn attempt(a: &store::AttemptRecord) -> Attempt {
    Attempt {
        ordinal: a.ordinal,
        started_at: rfc3339(a.started_at),
        duration_ms: a.duration_ms,
        outcome: a.outcome.as_str().to_owned(),
        status: a.status,
        error: a.error.clone(),
        response_body: a.response_body.clone(),
        policy: a.policy.clone(),
    }
}

/// The policy of the latest decision: its last attempt's.
fn latest_policy(h: &[store::AttemptRecord]) -> Option<String> {
    h.last().and_then(|a| a.policy.clone())
}

fn history(h: &[store::AttemptRecord]) -> Vec<Attempt> {
    h.iter().map(attempt).collect()
}

pub fn delivery(d: &store::Delivery) -> Delivery {
    Delivery {
        id: d.id.clone(),
        tenant_id: d.tenant_id.clone(),
        event_id: d.event_id.clone(),
        subscriber_id: d.subscriber_id.clone(),
        state: d.state.as_str().to_owned(),
        attempts: d.attempts,
        first_seen: rfc3339(d.first_seen),
        window_start: rfc3339(d.window_start),
        next_attempt_at: d.next_attempt_at.map(rfc3339),
        dead_reason: d.dead_reason.map(|r| r.as_str().to_owned()),
        dead_at: d.dead_at.map(rfc3339),
        error: d.dead_error.clone(),
        waiting_on: d.waiting_on.map(|w| w.as_str().to_owned()),
        payload_version: d.payload_version,
        policy: latest_policy(&d.attempt_history),
        attempt_history: history(&d.attempt_history),
    }
}

pub fn dead_letter(d: &store::DeadLetter) -> DeadLetter {
    DeadLetter {
        delivery_id: d.delivery_id.clone(),
        tenant_id: d.tenant_id.clone(),
        event_id: d.event_id.clone(),
        event_type: d.event_type.clone(),
        subscriber_id: d.subscriber_id.clone(),
        payload_version: d.payload_version,
        reason: d.reason.as_str().to_owned(),
        dead_at: rfc3339(d.dead_at),
        error: d.dead_error.clone(),
        waiting_on: d.waiting_on.map(|w| w.as_str().to_owned()),
        policy: latest_policy(&d.attempt_history),
        attempt_history: history(&d.attempt_history),
    }
}

pub fn dead_letter_group(g: &store::DeadLetterGroup) -> DeadLetterGroup {
    DeadLetterGroup {
        reason: g.reason.as_str().to_owned(),
        subscriber_id: g.subscriber_id.clone(),
        subscriber_status: g.subscriber_status.as_str().to_owned(),
        count: g.count,
        oldest_dead_at: rfc3339(g.oldest_dead_at),
        newest_dead_at: rfc3339(g.newest_dead_at),
    }
}

pub fn replay(r: &store::Replay) -> Replay {
    Replay {
        id: r.id.clone(),
        tenant_id: r.tenant_id.clone(),
        created_at: rfc3339(r.created_at),
        filter: ReplayFilter {
            reason: r.reason.as_str().to_owned(),
            subscriber_id: r.subscriber_id.clone(),
        },
        limit: r.limit,
        per_second: r.per_second,
        requested_by: r.requested_by.clone(),
        selected: r.selected,
        delivery_ids: r.delivery_ids.clone(),
        delivered: r.delivered,
        dead: r.dead,
    }
}

pub fn resend(r: &store::Resend) -> Resend {
    Resend {
        id: r.id.clone(),
        tenant_id: r.tenant_id.clone(),
        created_at: rfc3339(r.created_at),
        subscriber_id: r.subscriber_id.clone(),
        since: rfc3339(r.since),
        until: rfc3339(r.until),
        event_types: r.event_types.clone(),
        limit: r.limit,
        per_second: r.per_second,
        requested_by: r.requested_by.clone(),
        selected: r.selected,
        delivery_ids: r.delivery_ids.clone(),
        delivered: r.delivered,
        dead: r.dead,
    }
}

pub fn tenant(t: &store::Tenant) -> Tenant {
    Tenant {
        id: t.id.clone(),
        name: t.name.clone(),
        max_subscribers: t.max_subscribers,
        max_events_per_second: t.max_events_per_second,
        created_at: rfc3339(t.created_at),
        updated_at: rfc3339(t.updated_at),
    }
}

pub fn portal_session(s: &store::PortalSession) -> PortalSession {
    PortalSession {
        id: s.id.clone(),
        tenant_id: s.tenant_id.clone(),
        scope: s.scope.clone(),
        created_at: rfc3339(s.created_at),
        expires_at: rfc3339(s.expires_at),
        revoked_at: s.revoked_at.map(rfc3339),
        created_by: s.created_by.clone(),
    }
}

pub fn page<T, V>(p: &store::Page<T>, view: impl Fn(&T) -> V) -> Page<V> {
    Page {
        items: p.items.iter().map(view).collect(),
        next_cursor: p.next_cursor.clone(),
    }
}

pub fn policy(p: &hookline_engine::policy::Policy, stored: Option<&store::StoredPolicy>) -> Policy {
    Policy {
        policy: p.spelled(),
        created_at: stored.map(|s| rfc3339(s.created_at)),
        created_by: stored.and_then(|s| s.created_by.clone()),
    }
}

/// A share in hundredths of a percent, as the percent it is (whole when it is).
fn percent(basis_points: u32) -> serde_json::Number {
    let whole = basis_points / 100;
    if whole * 100 == basis_points {
        whole.into()
    } else {
        serde_json::Number::from_f64(f64::from(basis_points) / 100.0).expect("a share is finite")
    }
}

pub fn rollout(r: &store::Rollout) -> Rollout {
    Rollout {
        id: r.id.clone(),
        policy: r.policy.clone(),
        baseline: r.baseline.clone(),
        percent: percent(r.basis_points),
        subscriber_ids: r.subscriber_ids.clone(),
        abort_if: r.abort_if.map(|a| AbortIf {
            terminal_rate_increase: a.terminal_rate_increase,
            min_deliveries: a.min_deliveries,
        }),
        state: r.state.as_str().to_owned(),
        reason: r.reason.clone(),
        started_at: rfc3339(r.started_at),
        ended_at: r.ended_at.map(rfc3339),
        created_by: r.created_by.clone(),
    }
}

pub fn event_type(t: &store::EventType) -> EventType {
    EventType {
        name: t.name.clone(),
        description: t.description.clone(),
        schemas: t
            .schemas
            .iter()
            .map(|(version, schema)| (*version, raw_json(schema)))
            .collect(),
        deprecated: t.deprecated,
        revision: t.revision,
        created_at: rfc3339(t.created_at),
        updated_at: rfc3339(t.updated_at),
        created_by: t.created_by.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::QueryValues;

    #[test]
    fn masked_query_values_keep_their_names_and_nothing_else() {
        for (stored, masked) in [
            ("https://a.example/h", "https://a.example/h"),
            ("https://a.example/h?", "https://a.example/h?"),
            (
                "https://a.example/h?api_key=sk_live_1&v=2",
                "https://a.example/h?api_key=***&v=***",
            ),
            ("https://a.example/h?sk_live_1", "https://a.example/h?***"),
            (
                "https://a.example/h?a=&b=x=y",
                "https://a.example/h?a=&b=***",
            ),
            (
                "https://a.example/h?a=1#top",
                "https://a.example/h?a=***#top",
            ),
        ] {
            assert_eq!(QueryValues::Masked.url(stored), masked);
            assert_eq!(QueryValues::Shown.url(stored), stored);
        }
    }
}
