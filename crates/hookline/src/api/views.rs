//! How records look in JSON. Each answer is a type here, serialized as it is and described by
//! the same type in the OpenAPI document, so a field cannot be sent without being described.
//! Times are RFC 3339; secrets appear only where a view asks for them.

use std::collections::BTreeMap;

use hookline_engine::clock::rfc3339;
use hookline_store as store;
use hookline_store::StateCounts;
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::policies::PolicyExt;
use crate::schema;

/// A subscriber's circuit breaker, as it stands now.
#[derive(Serialize, ToSchema)]
pub struct Breaker {
    #[schema(schema_with = schema::breaker_state)]
    pub state: &'static str,
    pub consecutive_failures: u32,
    /// When an open breaker lets a probe through.
    #[schema(format = DateTime, required = true)]
    pub open_until: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Subscriber {
    #[schema(example = "sub_acme")]
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    /// Its query values (`?api_key=...`, maybe credentials) shown to admin tokens only; other
    /// callers see each as `***`.
    #[schema(example = "https://hooks.acme.example/hookline")]
    pub url: String,
    /// Empty: every type.
    pub event_types: Vec<String>,
    #[schema(schema_with = schema::subscriber_status)]
    pub status: &'static str,
    /// Why it is paused or revoked: `paused` (by an operator), `auto_disabled` (every attempt
    /// failed for `[lifecycle] disable_after`), `deleted`, `gone` (its endpoint answered 410),
    /// `tenant_deleted`; `null` while active (or paused or revoked by an older release).
    #[schema(schema_with = schema::status_reason_or_null, required = true)]
    pub status_reason: Option<&'static str>,
    /// When the run of failed attempts since its last success began (404s count, unlike the
    /// breaker's); `null` when its last attempt succeeded or it has had none.
    #[schema(format = DateTime, required = true)]
    pub failing_since: Option<String>,
    /// Failed attempts since its last success.
    pub failed_attempts: u32,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// Until then every request is signed with the previous secret too.
    #[schema(format = DateTime, required = true)]
    pub previous_secret_valid_until: Option<String>,
    /// Its own cap on attempts in flight; `null`: the server's.
    #[schema(required = true)]
    pub max_in_flight: Option<u32>,
    #[schema(required = true)]
    pub rate_limit_per_second: Option<f64>,
    /// A pin: the highest payload version it receives; `null`: the latest.
    #[schema(required = true)]
    pub payload_version: Option<i64>,
    /// Names only: values may be credentials (admin reads them at `.../headers`).
    pub header_names: Vec<String>,
    pub breaker: Breaker,
    /// What it has done lately (in `GET` answers): a breaker counts retryable failures only,
    /// so a subscriber whose every delivery dies 404 keeps it closed; this says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activity: Option<Activity>,
    /// In the answers to a create or a change, when there is something to heed (absent
    /// otherwise): each deprecated event type among `event_types`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// Something a request did that its caller may not have meant.
#[derive(Serialize, ToSchema)]
pub struct Warning {
    /// `deprecated_event_type`: the catalog marks this type deprecated.
    #[schema(example = "deprecated_event_type")]
    pub code: &'static str,
    #[schema(example = "shipment.out_for_delivery")]
    pub event_type: String,
    pub message: String,
}

/// A warning for each of `types`, deprecated in the event type catalog.
pub fn deprecated_types(types: Vec<String>) -> Vec<Warning> {
    types
        .into_iter()
        .map(|t| Warning {
            code: "deprecated_event_type",
            message: format!(
                "event type {t:?} is deprecated in the event type catalog \
                 (GET /v1/event-types/{{name}} says what replaces it)"
            ),
            event_type: t,
        })
        .collect()
}

/// A subscriber's recent outcomes.
#[derive(Serialize, ToSchema)]
pub struct Activity {
    /// The latest attempt among its 20 newest deliveries; `null`: none of them had one.
    #[schema(required = true)]
    pub last_attempt: Option<LastAttempt>,
    /// Its deliveries that died in the last hour and are still dead; `null` when more than
    /// 1,000 groups of dead letters (by reason and subscriber) died in the last hour, and this
    /// one's could not be counted among them.
    #[schema(required = true)]
    pub dead_letters_last_hour: Option<u64>,
}

/// An attempt, in short: what came back, and from which delivery.
#[derive(Serialize, ToSchema)]
pub struct LastAttempt {
    pub delivery_id: String,
    #[schema(format = DateTime)]
    pub started_at: String,
    #[schema(schema_with = schema::outcome)]
    pub outcome: &'static str,
    /// The HTTP status, when an answer came.
    #[schema(required = true)]
    pub status: Option<u16>,
}

pub fn last_attempt(delivery_id: &str, a: &store::AttemptRecord) -> LastAttempt {
    LastAttempt {
        delivery_id: delivery_id.to_owned(),
        started_at: rfc3339(a.started_at),
        outcome: a.outcome.as_str(),
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
        status: s.status.as_str(),
        status_reason: s.status_reason.map(store::StatusReason::as_str),
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
            state: s.breaker.state(now).as_str(),
            consecutive_failures: s.breaker.consecutive_failures,
            open_until: s.breaker.open_until.map(rfc3339),
        },
        activity: None,
        warnings: Vec::new(),
    }
}

/// A subscriber just created: the one answer that shows its secret.
#[derive(Serialize, ToSchema)]
pub struct CreatedSubscriber {
    #[serde(flatten)]
    pub subscriber: Subscriber,
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    pub secret: String,
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

#[derive(Serialize, ToSchema)]
pub struct Secret {
    pub secret: String,
}

#[derive(Serialize, ToSchema)]
pub struct Headers {
    /// Sent with every attempt, values included.
    pub headers: BTreeMap<String, String>,
}

#[derive(Serialize, ToSchema)]
pub struct RotatedSecret {
    pub id: String,
    pub secret: String,
    /// Until then both secrets sign; `null` when the previous one was dropped at once.
    #[schema(format = DateTime, required = true)]
    pub previous_secret_valid_until: Option<String>,
}

/// Embeds stored canonical JSON without re-parsing it into a tree.
pub fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).expect("stored payloads are valid JSON")
}

/// `payload` and `payload_version` are the latest; an event with several versions also lists
/// them all under `payloads`, as it was published.
#[derive(Serialize, ToSchema)]
pub struct Event {
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    #[schema(value_type = Value)]
    pub payload: Box<RawValue>,
    pub payload_version: i64,
    #[schema(format = DateTime)]
    pub accepted_at: String,
    pub deliveries: u64,
    pub counts: StateCounts,
    /// What its deliveries are ordered by, per subscriber; `null`: nothing.
    #[schema(required = true)]
    pub ordering_key: Option<String>,
    /// The W3C `traceparent` of the span that published it, when tracing was on
    /// (`[telemetry] otlp_endpoint`): its trace id is the trace of the publish and of every
    /// attempt of its deliveries. `null`: published with tracing off.
    #[schema(
        required = true,
        example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    )]
    pub traceparent: Option<String>,
    /// Every version by number, when there are several.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, Value>>)]
    pub payloads: Option<BTreeMap<String, Box<RawValue>>>,
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
        counts: e.counts.clone(),
        ordering_key: e.ordering_key.clone(),
        traceparent: e.traceparent.clone(),
        payloads,
    }
}

/// An event as a search lists it: without its payloads (`GET /v1/events/{id}` has them).
#[derive(Serialize, ToSchema)]
pub struct EventSummary {
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    /// Its latest payload version.
    pub payload_version: i64,
    #[schema(format = DateTime)]
    pub accepted_at: String,
    pub deliveries: u64,
    pub counts: StateCounts,
}

pub fn event_summary(e: &store::EventSummary) -> EventSummary {
    EventSummary {
        id: e.id.clone(),
        tenant_id: e.tenant_id.clone(),
        event_type: e.event_type.clone(),
        payload_version: e.payload_version,
        accepted_at: rfc3339(e.accepted_at),
        deliveries: e.deliveries,
        counts: e.counts.clone(),
    }
}

/// What a publish answers once the event and its deliveries are committed.
#[derive(Serialize, ToSchema)]
pub struct Receipt {
    #[schema(example = "evt_SHP-20418-out-for-delivery")]
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    #[serde(rename = "type")]
    #[schema(example = "shipment.out_for_delivery")]
    pub event_type: String,
    /// What its deliveries are ordered by, per subscriber; `null`: nothing.
    #[schema(required = true)]
    pub ordering_key: Option<String>,
    pub deliveries: u64,
    /// Deliveries to subscribers pinned below every version the event carries: dead at once.
    pub unversioned: u64,
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

/// One attempt: what was sent when, and what came back.
#[derive(Serialize, ToSchema)]
pub struct Attempt {
    /// Its number within its budget (a replay starts a new budget at 1).
    pub ordinal: u32,
    #[schema(format = DateTime)]
    pub started_at: String,
    pub duration_ms: u64,
    #[schema(schema_with = schema::outcome)]
    pub outcome: &'static str,
    /// The HTTP status, when an answer came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The transport error, when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The first 4 KiB of the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
    /// The policy that classified it and decided what followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

pub fn attempt(a: &store::AttemptRecord) -> Attempt {
    Attempt {
        ordinal: a.ordinal,
        started_at: rfc3339(a.started_at),
        duration_ms: a.duration_ms,
        outcome: a.outcome.as_str(),
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

#[derive(Serialize, ToSchema)]
pub struct Delivery {
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    pub event_id: String,
    pub subscriber_id: String,
    #[schema(schema_with = schema::delivery_state)]
    pub state: &'static str,
    pub attempts: u32,
    #[schema(format = DateTime)]
    pub first_seen: String,
    /// Where its delivery window starts (a replay starts a new one).
    #[schema(format = DateTime)]
    pub window_start: String,
    #[schema(format = DateTime, required = true)]
    pub next_attempt_at: Option<String>,
    #[schema(schema_with = schema::dead_reason_or_null, required = true)]
    pub dead_reason: Option<&'static str>,
    #[schema(format = DateTime, required = true)]
    pub dead_at: Option<String>,
    /// Why it died when no attempt says.
    #[schema(required = true)]
    pub error: Option<String>,
    /// For one whose window ended while it waited: what it waited on (`null`: its own retry).
    /// For one still scheduled behind an earlier delivery of its ordering key: `ordering`.
    #[schema(schema_with = schema::waiting_on_or_null, required = true)]
    pub waiting_on: Option<&'static str>,
    /// The payload version it sends; `null` when none fits its subscriber's pin.
    #[schema(required = true)]
    pub payload_version: Option<i64>,
    /// The policy of its latest decision.
    #[schema(required = true)]
    pub policy: Option<String>,
    pub attempt_history: Vec<Attempt>,
}

pub fn delivery(d: &store::Delivery) -> Delivery {
    Delivery {
        id: d.id.clone(),
        tenant_id: d.tenant_id.clone(),
        event_id: d.event_id.clone(),
        subscriber_id: d.subscriber_id.clone(),
        state: d.state.as_str(),
        attempts: d.attempts,
        first_seen: rfc3339(d.first_seen),
        window_start: rfc3339(d.window_start),
        next_attempt_at: d.next_attempt_at.map(rfc3339),
        dead_reason: d.dead_reason.map(|r| r.as_str()),
        dead_at: d.dead_at.map(rfc3339),
        error: d.dead_error.clone(),
        waiting_on: d.waiting_on.map(store::WaitingOn::as_str),
        payload_version: d.payload_version,
        policy: latest_policy(&d.attempt_history),
        attempt_history: history(&d.attempt_history),
    }
}

#[derive(Serialize, ToSchema)]
pub struct DeadLetter {
    pub delivery_id: String,
    /// The tenant it belongs to; `null`: none.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    pub event_id: String,
    pub event_type: String,
    pub subscriber_id: String,
    /// The payload version sent; `null` when none fitted the pin.
    #[schema(required = true)]
    pub payload_version: Option<i64>,
    #[schema(schema_with = schema::dead_reason)]
    pub reason: &'static str,
    #[schema(format = DateTime)]
    pub dead_at: String,
    #[schema(required = true)]
    pub error: Option<String>,
    #[schema(schema_with = schema::waiting_on_or_null, required = true)]
    pub waiting_on: Option<&'static str>,
    #[schema(required = true)]
    pub policy: Option<String>,
    pub attempt_history: Vec<Attempt>,
}

pub fn dead_letter(d: &store::DeadLetter) -> DeadLetter {
    DeadLetter {
        delivery_id: d.delivery_id.clone(),
        tenant_id: d.tenant_id.clone(),
        event_id: d.event_id.clone(),
        event_type: d.event_type.clone(),
        subscriber_id: d.subscriber_id.clone(),
        payload_version: d.payload_version,
        reason: d.reason.as_str(),
        dead_at: rfc3339(d.dead_at),
        error: d.dead_error.clone(),
        waiting_on: d.waiting_on.map(store::WaitingOn::as_str),
        policy: latest_policy(&d.attempt_history),
        attempt_history: history(&d.attempt_history),
    }
}

/// Dead letters of one reason and subscriber.
#[derive(Serialize, ToSchema)]
pub struct DeadLetterGroup {
    #[schema(schema_with = schema::dead_reason)]
    pub reason: &'static str,
    pub subscriber_id: String,
    /// The subscriber's status now: a revoked subscriber's dead letters cannot be replayed.
    #[schema(schema_with = schema::subscriber_status)]
    pub subscriber_status: &'static str,
    pub count: u64,
    #[schema(format = DateTime)]
    pub oldest_dead_at: String,
    #[schema(format = DateTime)]
    pub newest_dead_at: String,
}

pub fn dead_letter_group(g: &store::DeadLetterGroup) -> DeadLetterGroup {
    DeadLetterGroup {
        reason: g.reason.as_str(),
        subscriber_id: g.subscriber_id.clone(),
        subscriber_status: g.subscriber_status.as_str(),
        count: g.count,
        oldest_dead_at: rfc3339(g.oldest_dead_at),
        newest_dead_at: rfc3339(g.newest_dead_at),
    }
}

#[derive(Serialize, ToSchema)]
pub struct ReplayFilter {
    #[schema(schema_with = schema::dead_reason)]
    pub reason: &'static str,
    #[schema(required = true)]
    pub subscriber_id: Option<String>,
}

/// A replay's audit record.
#[derive(Serialize, ToSchema)]
pub struct Replay {
    pub id: String,
    /// The tenant whose dead letters it replayed; `null`: every tenant's (the platform's).
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub filter: ReplayFilter,
    pub limit: u32,
    #[schema(required = true)]
    pub per_second: Option<f64>,
    /// The token's name; `null` in open mode.
    #[schema(required = true)]
    pub requested_by: Option<String>,
    pub selected: u64,
    pub delivery_ids: Vec<String>,
    /// How many of the selected were delivered since.
    pub delivered: u64,
    /// How many of the selected died again since.
    pub dead: u64,
}

pub fn replay(r: &store::Replay) -> Replay {
    Replay {
        id: r.id.clone(),
        tenant_id: r.tenant_id.clone(),
        created_at: rfc3339(r.created_at),
        filter: ReplayFilter {
            reason: r.reason.as_str(),
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

/// A resend's audit record.
#[derive(Serialize, ToSchema)]
pub struct Resend {
    pub id: String,
    /// Its subscriber's tenant.
    #[schema(required = true)]
    pub tenant_id: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub subscriber_id: String,
    /// Events accepted at or after this...
    #[schema(format = DateTime)]
    pub since: String,
    /// ...and before this.
    #[schema(format = DateTime)]
    pub until: String,
    /// The types it was limited to, besides the subscriber's own; empty: none.
    pub event_types: Vec<String>,
    pub limit: u32,
    #[schema(required = true)]
    pub per_second: Option<f64>,
    /// The token's name; `null` in open mode.
    #[schema(required = true)]
    pub requested_by: Option<String>,
    pub selected: u64,
    /// The deliveries it made, `<event id>:<subscriber id>:resend-<n>`, oldest event first.
    pub delivery_ids: Vec<String>,
    /// How many of them were delivered since.
    pub delivered: u64,
    /// How many of them died since.
    pub dead: u64,
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

#[derive(Serialize, ToSchema)]
pub struct Tenant {
    #[schema(example = "merchant-acme")]
    pub id: String,
    #[schema(required = true, example = "Acme Parcels")]
    pub name: Option<String>,
    /// Subscribers (not revoked) it may have; `null`: no limit.
    #[schema(required = true)]
    pub max_subscribers: Option<u32>,
    /// Publishes per second (a second's worth may come at once); `null`: no limit.
    #[schema(required = true)]
    pub max_events_per_second: Option<f64>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
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

/// A portal session: never its token, but after its creation.
#[derive(Serialize, ToSchema)]
pub struct PortalSession {
    #[schema(example = "ps_18c2f0a1b2c3")]
    pub id: String,
    pub tenant_id: String,
    /// `admin` or `read`.
    pub scope: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// Its token is refused from then on.
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime, required = true)]
    pub revoked_at: Option<String>,
    /// The token that made it.
    #[schema(required = true)]
    pub created_by: Option<String>,
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

/// A portal session just made: the one answer that shows its token.
#[derive(Serialize, ToSchema)]
pub struct CreatedPortalSession {
    #[serde(flatten)]
    pub session: PortalSession,
    /// A tenant's bearer token (`hlp_...`), valid until `expires_at`.
    pub token: String,
    /// The portal with the token in its fragment (never sent to a server): open it, or embed
    /// it from an origin in `[portal] frame_ancestors`.
    #[schema(example = "/portal#token=hlp_...")]
    pub url: String,
}

/// `"dry_run": true`: what a replay would release now.
#[derive(Serialize, ToSchema)]
pub struct ReplayPreview {
    pub selected: u64,
    pub delivery_ids: Vec<String>,
}

/// `"dry_run": true`: what a resend would send now, oldest first.
#[derive(Serialize, ToSchema)]
pub struct ResendPreview {
    pub selected: u64,
    pub event_ids: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ReplayStarted {
    pub replay_id: String,
    pub selected: u64,
}

/// One page of a list; `next_cursor` fetches the next (`null`: this is the last).
#[derive(Serialize, ToSchema)]
pub struct Page<T: ToSchema> {
    pub items: Vec<T>,
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

impl<T: ToSchema> Page<T> {
    /// What a list answers a tenant that asked for another tenant's: nothing, as if that
    /// tenant had none.
    pub fn empty() -> Self {
        Page {
            items: Vec::new(),
            next_cursor: None,
        }
    }
}

pub fn page<T, V: ToSchema>(p: &store::Page<T>, view: impl Fn(&T) -> V) -> Page<V> {
    Page {
        items: p.items.iter().map(view).collect(),
        next_cursor: p.next_cursor.clone(),
    }
}

/// A policy: every part spelled out, and for a stored one when and by whom it was created
/// (`null` for `default`, which the configuration defines).
#[derive(Serialize, ToSchema)]
pub struct Policy {
    #[serde(flatten)]
    pub policy: crate::policies::SpelledPolicy,
    #[schema(format = DateTime, required = true)]
    pub created_at: Option<String>,
    #[schema(required = true)]
    pub created_by: Option<String>,
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

#[derive(Serialize, ToSchema)]
pub struct AbortIf {
    pub terminal_rate_increase: f64,
    pub min_deliveries: u64,
}

#[derive(Serialize, ToSchema)]
pub struct Rollout {
    pub id: String,
    /// The candidate.
    pub policy: String,
    /// The policy in force for everyone when it started.
    pub baseline: String,
    #[schema(value_type = f64, example = 5)]
    pub percent: serde_json::Number,
    /// Always in the cohort.
    pub subscriber_ids: Vec<String>,
    #[schema(required = true)]
    pub abort_if: Option<AbortIf>,
    #[schema(schema_with = schema::rollout_state)]
    pub state: &'static str,
    /// Why it was aborted.
    #[schema(required = true)]
    pub reason: Option<String>,
    #[schema(format = DateTime)]
    pub started_at: String,
    #[schema(format = DateTime, required = true)]
    pub ended_at: Option<String>,
    #[schema(required = true)]
    pub created_by: Option<String>,
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
        state: r.state.as_str(),
        reason: r.reason.clone(),
        started_at: rfc3339(r.started_at),
        ended_at: r.ended_at.map(rfc3339),
        created_by: r.created_by.clone(),
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

/// A type of the event type catalog, with its schemas.
#[derive(Serialize, ToSchema)]
pub struct EventType {
    #[schema(example = "shipment.out_for_delivery")]
    pub name: String,
    #[schema(required = true)]
    pub description: Option<String>,
    /// Each payload version's JSON Schema (draft 2020-12), by version, as registered; a version
    /// without one is not checked.
    #[schema(value_type = BTreeMap<String, Value>, example = json!({"1": {"type": "object", "required": ["shipment"]}}))]
    pub schemas: BTreeMap<i64, Box<RawValue>>,
    /// Still published; subscribers listing it are warned.
    pub deprecated: bool,
    /// 1 when registered, one more with every change.
    pub revision: i64,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// The token that registered it; `null` without tokens.
    #[schema(required = true)]
    pub created_by: Option<String>,
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
