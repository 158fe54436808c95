//! Answers: what each operation of the API returns, as JSON. The server builds them from its
//! records (crates/hookline/src/api/views.rs); a client reads them. Fields added by a newer
//! server are ignored when read, so an older client keeps working. Times are RFC 3339.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// Delivery counts by state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateCounts {
    pub scheduled: u64,
    pub in_flight: u64,
    pub delivered: u64,
    pub dead: u64,
}

/// A subscriber's circuit breaker, as it stands now.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Breaker {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::breaker_state))]
    pub state: String,
    pub consecutive_failures: u32,
    /// When an open breaker lets a probe through.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub open_until: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Subscriber {
    #[cfg_attr(feature = "openapi", schema(example = "sub_acme"))]
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    /// Its query values (`?api_key=...`, maybe credentials) shown to admin tokens only; other
    /// callers see each as `***`.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "https://hooks.acme.example/hookline")
    )]
    pub url: String,
    /// Empty: every type.
    pub event_types: Vec<String>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::subscriber_status))]
    pub status: String,
    /// Why it is paused or revoked: `paused` (by an operator), `auto_disabled` (every attempt
    /// failed for `[lifecycle] disable_after`), `deleted`, `gone` (its endpoint answered 410),
    /// `tenant_deleted`; `null` while active (or paused or revoked by an older release).
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::status_reason_or_null, required = true))]
    pub status_reason: Option<String>,
    /// When the run of failed attempts since its last success began (404s count, unlike the
    /// breaker's); `null` when its last attempt succeeded or it has had none.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub failing_since: Option<String>,
    /// Failed attempts since its last success.
    pub failed_attempts: u32,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub updated_at: String,
    /// Until then every request is signed with the previous secret too.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub previous_secret_valid_until: Option<String>,
    /// Its own cap on attempts in flight; `null`: the server's.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub max_in_flight: Option<u32>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub rate_limit_per_second: Option<f64>,
    /// A pin: the highest payload version it receives; `null`: the latest.
    #[cfg_attr(feature = "openapi", schema(required = true))]
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// Something a request did that its caller may not have meant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Warning {
    /// `deprecated_event_type`: the catalog marks this type deprecated.
    #[cfg_attr(feature = "openapi", schema(example = "deprecated_event_type"))]
    pub code: String,
    #[cfg_attr(feature = "openapi", schema(example = "shipment.out_for_delivery"))]
    pub event_type: String,
    pub message: String,
}

/// A subscriber's recent outcomes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Activity {
    /// The latest attempt among its 20 newest deliveries; `null`: none of them had one.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_attempt: Option<LastAttempt>,
    /// Its deliveries that died in the last hour and are still dead; `null` when more than
    /// 1,000 groups of dead letters (by reason and subscriber) died in the last hour, and this
    /// one's could not be counted among them.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub dead_letters_last_hour: Option<u64>,
}

/// An attempt, in short: what came back, and from which delivery.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LastAttempt {
    pub delivery_id: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub started_at: String,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::outcome))]
    pub outcome: String,
    /// The HTTP status, when an answer came.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub status: Option<u16>,
}

/// A subscriber just created: the one answer that shows its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedSubscriber {
    #[serde(flatten)]
    pub subscriber: Subscriber,
    #[cfg_attr(
        feature = "openapi",
        schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    )]
    pub secret: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Secret {
    pub secret: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Headers {
    /// Sent with every attempt, values included.
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RotatedSecret {
    pub id: String,
    pub secret: String,
    /// Until then both secrets sign; `null` when the previous one was dropped at once.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub previous_secret_valid_until: Option<String>,
}

/// `payload` and `payload_version` are the latest; an event with several versions also lists
/// them all under `payloads`, as it was published.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: Box<RawValue>,
    pub payload_version: i64,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub accepted_at: String,
    pub deliveries: u64,
    pub counts: StateCounts,
    /// What its deliveries are ordered by, per subscriber; `null`: nothing.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub ordering_key: Option<String>,
    /// The W3C `traceparent` of the span that published it, when tracing was on
    /// (`[telemetry] otlp_endpoint`): its trace id is the trace of the publish and of every
    /// attempt of its deliveries. `null`: published with tracing off.
    #[cfg_attr(
        feature = "openapi",
        schema(
            required = true,
            example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        )
    )]
    pub traceparent: Option<String>,
    /// Every version by number, when there are several.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<BTreeMap<String, Value>>))]
    pub payloads: Option<BTreeMap<String, Box<RawValue>>>,
}

/// An event as a search lists it: without its payloads (`GET /v1/events/{id}` has them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventSummary {
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    /// Its latest payload version.
    pub payload_version: i64,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub accepted_at: String,
    pub deliveries: u64,
    pub counts: StateCounts,
}

/// What a publish answers once the event and its deliveries are committed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Receipt {
    #[cfg_attr(
        feature = "openapi",
        schema(example = "evt_SHP-20418-out-for-delivery")
    )]
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    #[serde(rename = "type")]
    #[cfg_attr(feature = "openapi", schema(example = "shipment.out_for_delivery"))]
    pub event_type: String,
    /// What its deliveries are ordered by, per subscriber; `null`: nothing.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub ordering_key: Option<String>,
    pub deliveries: u64,
    /// Deliveries to subscribers pinned below every version the event carries: dead at once.
    pub unversioned: u64,
}

/// One attempt: what was sent when, and what came back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    /// Its number within its budget (a replay starts a new budget at 1).
    pub ordinal: u32,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub started_at: String,
    pub duration_ms: u64,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::outcome))]
    pub outcome: String,
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delivery {
    pub id: String,
    /// The tenant it belongs to; `null`: none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    pub event_id: String,
    pub subscriber_id: String,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::delivery_state))]
    pub state: String,
    pub attempts: u32,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub first_seen: String,
    /// Where its delivery window starts (a replay starts a new one).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub window_start: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub next_attempt_at: Option<String>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::dead_reason_or_null, required = true))]
    pub dead_reason: Option<String>,
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub dead_at: Option<String>,
    /// Why it died when no attempt says.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub error: Option<String>,
    /// For one whose window ended while it waited: what it waited on (`null`: its own retry).
    /// For one still scheduled behind an earlier delivery of its ordering key: `ordering`.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::waiting_on_or_null, required = true))]
    pub waiting_on: Option<String>,
    /// The payload version it sends; `null` when none fits its subscriber's pin.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub payload_version: Option<i64>,
    /// The policy of its latest decision.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub policy: Option<String>,
    pub attempt_history: Vec<Attempt>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetter {
    pub delivery_id: String,
    /// The tenant it belongs to; `null`: none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    pub event_id: String,
    pub event_type: String,
    pub subscriber_id: String,
    /// The payload version sent; `null` when none fitted the pin.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub payload_version: Option<i64>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::dead_reason))]
    pub reason: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub dead_at: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub error: Option<String>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::waiting_on_or_null, required = true))]
    pub waiting_on: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub policy: Option<String>,
    pub attempt_history: Vec<Attempt>,
}

/// Dead letters of one reason and subscriber.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetterGroup {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::dead_reason))]
    pub reason: String,
    pub subscriber_id: String,
    /// The subscriber's status now: a revoked subscriber's dead letters cannot be replayed.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::subscriber_status))]
    pub subscriber_status: String,
    pub count: u64,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub oldest_dead_at: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub newest_dead_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplayFilter {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::dead_reason))]
    pub reason: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub subscriber_id: Option<String>,
}

/// A replay's audit record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Replay {
    pub id: String,
    /// The tenant whose dead letters it replayed; `null`: every tenant's (the platform's).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    pub filter: ReplayFilter,
    pub limit: u32,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub per_second: Option<f64>,
    /// The token's name; `null` in open mode.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub requested_by: Option<String>,
    pub selected: u64,
    pub delivery_ids: Vec<String>,
    /// How many of the selected were delivered since.
    pub delivered: u64,
    /// How many of the selected died again since.
    pub dead: u64,
}

/// A resend's audit record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resend {
    pub id: String,
    /// Its subscriber's tenant.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tenant_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    pub subscriber_id: String,
    /// Events accepted at or after this...
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub since: String,
    /// ...and before this.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub until: String,
    /// The types it was limited to, besides the subscriber's own; empty: none.
    pub event_types: Vec<String>,
    pub limit: u32,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub per_second: Option<f64>,
    /// The token's name; `null` in open mode.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub requested_by: Option<String>,
    pub selected: u64,
    /// The deliveries it made, `<event id>:<subscriber id>:resend-<n>`, oldest event first.
    pub delivery_ids: Vec<String>,
    /// How many of them were delivered since.
    pub delivered: u64,
    /// How many of them died since.
    pub dead: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tenant {
    #[cfg_attr(feature = "openapi", schema(example = "merchant-acme"))]
    pub id: String,
    #[cfg_attr(feature = "openapi", schema(required = true, example = "Acme Parcels"))]
    pub name: Option<String>,
    /// Subscribers (not revoked) it may have; `null`: no limit.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub max_subscribers: Option<u32>,
    /// Publishes per second (a second's worth may come at once); `null`: no limit.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub max_events_per_second: Option<f64>,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub updated_at: String,
}

/// A portal session: never its token, but after its creation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PortalSession {
    #[cfg_attr(feature = "openapi", schema(example = "ps_18c2f0a1b2c3"))]
    pub id: String,
    pub tenant_id: String,
    /// `admin` or `read`.
    pub scope: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    /// Its token is refused from then on.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub revoked_at: Option<String>,
    /// The token that made it.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub created_by: Option<String>,
}

/// A portal session just made: the one answer that shows its token.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedPortalSession {
    #[serde(flatten)]
    pub session: PortalSession,
    /// A tenant's bearer token (`hlp_...`), valid until `expires_at`.
    pub token: String,
    /// The portal with the token in its fragment (never sent to a server): open it, or embed
    /// it from an origin in `[portal] frame_ancestors`.
    #[cfg_attr(feature = "openapi", schema(example = "/portal#token=hlp_..."))]
    pub url: String,
}

/// `"dry_run": true`: what a replay would release now.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplayPreview {
    pub selected: u64,
    pub delivery_ids: Vec<String>,
}

/// `"dry_run": true`: what a resend would send now, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResendPreview {
    pub selected: u64,
    pub event_ids: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplayStarted {
    pub replay_id: String,
    pub selected: u64,
}

/// One page of a list; `next_cursor` fetches the next (`null`: this is the last).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page<T> {
    pub items: Vec<T>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next_cursor: Option<String>,
}

/// A policy: every part spelled out, and for a stored one when and by whom it was created
/// (`null` for `default`, which the configuration defines).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Policy {
    #[serde(flatten)]
    pub policy: SpelledPolicy,
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub created_at: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub created_by: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AbortIf {
    pub terminal_rate_increase: f64,
    pub min_deliveries: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rollout {
    pub id: String,
    /// The candidate.
    pub policy: String,
    /// The policy in force for everyone when it started.
    pub baseline: String,
    #[cfg_attr(feature = "openapi", schema(value_type = f64, example = 5))]
    pub percent: serde_json::Number,
    /// Always in the cohort.
    pub subscriber_ids: Vec<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub abort_if: Option<AbortIf>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::rollout_state))]
    pub state: String,
    /// Why it was aborted.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reason: Option<String>,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub started_at: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime, required = true))]
    pub ended_at: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub created_by: Option<String>,
}

/// A type of the event type catalog, with its schemas.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventType {
    #[cfg_attr(feature = "openapi", schema(example = "shipment.out_for_delivery"))]
    pub name: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub description: Option<String>,
    /// Each payload version's JSON Schema (draft 2020-12), by version, as registered; a version
    /// without one is not checked.
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, Value>, example = json!({"1": {"type": "object", "required": ["shipment"]}})))]
    pub schemas: BTreeMap<i64, Box<RawValue>>,
    /// Still published; subscribers listing it are warned.
    pub deprecated: bool,
    /// 1 when registered, one more with every change.
    pub revision: i64,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub updated_at: String,
    /// The token that registered it; `null` without tokens.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub created_by: Option<String>,
}

/// Dead letters by reason and subscriber.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetterGroups {
    pub items: Vec<DeadLetterGroup>,
    /// More groups exist than the 1,000 largest answered.
    pub truncated: bool,
}

/// The operational endpoint, as its subscriber record shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Endpoint {
    /// `file` when `[operational] url` sets it (changes here are refused), else `api`.
    #[cfg_attr(feature = "openapi", schema(example = "api"))]
    pub set_by: String,
    /// Its deliveries are those of this subscriber (`GET /v1/deliveries?subscriber_id=...`).
    #[serde(flatten)]
    pub subscriber: Subscriber,
    /// In the answer that set it, when it made or took a secret: the one place it shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A policy as the API shows it: every part and field spelled out.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpelledPolicy {
    pub name: String,
    pub classification: SpelledClassification,
    pub retry: SpelledRetry,
    pub breaker: SpelledBreaker,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpelledClassification {
    /// HTTP statuses retried (any other non-2xx status is a permanent failure).
    pub retryable: Vec<u16>,
    /// Statuses that revoke the subscriber.
    pub revoke: Vec<u16>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpelledRetry {
    #[cfg_attr(feature = "openapi", schema(example = "2s"))]
    pub base_delay: String,
    pub max_delay: String,
    pub max_attempts: u32,
    pub delivery_window: String,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::jitter))]
    pub jitter: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpelledBreaker {
    pub failures: u32,
    pub cool_down: String,
}

/// Each cohort's deliveries since the rollout started (until it ended), side by side.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Comparison {
    pub rollout: String,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::rollout_state))]
    pub state: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub since: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub until: String,
    pub baseline: CohortView,
    pub candidate: CohortView,
    /// Candidate minus baseline.
    pub difference: DifferencesView,
}

/// Percentiles of the time from a delivery's creation to the end of its first attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LatencyMs {
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub p50: Option<i64>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub p99: Option<i64>,
}

/// One side of a comparison, as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CohortView {
    pub policy: String,
    pub subscribers: u64,
    pub deliveries: u64,
    pub first_attempt_latency_ms: LatencyMs,
    /// Attempts after the first, per delivery.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub retry_rate: Option<f64>,
    /// Deliveries attempted more than once.
    pub retried: u64,
    /// The share of ended deliveries that died.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub terminal_rate: Option<f64>,
    pub ended: u64,
    pub pending: u64,
    pub delivered: u64,
    pub dead: u64,
    pub dead_by_reason: BTreeMap<String, u64>,
}

/// Candidate minus baseline, with a pooled two-proportion z-test at 95%.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DifferenceView {
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub difference: Option<f64>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub z: Option<f64>,
    pub significant: bool,
    /// Which proportion the test compared.
    pub tested: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DifferencesView {
    pub retry_rate: DifferenceView,
    pub terminal_rate: DifferenceView,
}

/// The live capacity model across every process, and whether publishes are admitted.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapacityView {
    /// Attempts completed per second (the last minute, every process).
    pub service_rate_per_s: f64,
    pub new_attempts_per_s: f64,
    pub retry_attempts_per_s: f64,
    /// The share of attempts that failed retryably.
    pub failure_rate: f64,
    /// The attempts per second admission projects with: what the process has shown it can do,
    /// or `min_service_rate` before it has shown more. Never `null` since 0.2 (kept nullable
    /// for clients of the older model).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub sustainable_rate_per_s: Option<f64>,
    /// Where `sustainable_rate_per_s` comes from: `saturated` (measured with the slots full of
    /// attempts that answered), `at_least` (the most completed while the slots had room), or
    /// `min_service_rate` (the floor, not yet exceeded).
    pub sustainable_from: String,
    /// What the process has shown it can do, kept in the store across restarts; `null` on a
    /// fresh install. Attempts that hang or wait in the slow lane never lower it.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub shown_rate_per_s: Option<f64>,
    /// `[admission] min_service_rate`: the floor before the process has shown more.
    pub min_service_rate_per_s: f64,
    /// Deliveries not ended (scheduled or in flight).
    pub backlog: u64,
    /// Of them, held for paused subscribers.
    pub held_backlog: u64,
    /// Of them, due now and waiting only for capacity.
    pub due_backlog: u64,
    /// How long the backlog (held deliveries left out) takes to end if destinations answer
    /// from their next attempt on: the longest of the terms in `drain_terms`. `null` when it
    /// cannot be computed (no rate to drain at).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub projected_drain_s: Option<f64>,
    /// The term `projected_drain_s` comes from: `throughput`, `retries`, `breaker_deferred` or
    /// `rate_limited`.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::drain_term))]
    pub projected_drain_by: String,
    pub drain_terms: DrainTermsView,
    /// Of the backlog, deliveries waiting for a scheduled retry.
    pub retry_backlog: u64,
    /// Of the backlog, deliveries waiting for an open breaker's cool-down.
    pub breaker_deferred_backlog: u64,
    /// Of the backlog, deliveries of subscribers with a rate limit.
    pub rate_limited_backlog: u64,
    /// The policy in force's delivery window.
    pub delivery_window_s: f64,
    /// The policy in force's attempt budget.
    pub max_attempts: u32,
    /// The share of delivery slots busy.
    pub utilization: f64,
    pub admitting: bool,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::refusal_or_null, required = true))]
    pub refusing_reason: Option<String>,
    /// Deliveries a publish may fan out to now.
    pub room: u64,
    pub max_backlog: u64,
    pub max_projected_drain_s: f64,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub measured_at: String,
}

/// A projected drain term by term, in seconds from now.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DrainTermsView {
    /// Every delivery not held, each costing the attempts the failure rate implies, at the
    /// sustainable rate: the term a fan-out lengthens, and the one admission refuses on.
    pub throughput_s: f64,
    /// Until the latest scheduled retries, then the work due from then on.
    pub retries_s: f64,
    /// Until the latest open breaker's cool-down ends, then the work due from then on.
    pub breaker_deferred_s: f64,
    /// The longest any rate-limited subscriber needs for its own deliveries at its rate.
    pub rate_limited_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReasonCount {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::dead_reason))]
    pub reason: String,
    pub count: u64,
}

/// The queue, the dead-letter inflow, breakers, admission and the rollout, at a glance. A
/// tenant's token sees its own: its deliveries by state (counted now), its subscribers' open
/// breakers and its dead-letter inflow; the ages, what open breakers hold, capacity and the
/// rollout are the platform's, `null` for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Overview {
    /// When the queue figures were read (they are refreshed every `metrics.refresh_interval`).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub measured_at: String,
    pub deliveries: StateCounts,
    /// Seconds the oldest first attempt a worker could take now has been due.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub oldest_ready_age_s: Option<f64>,
    /// Seconds the oldest due delivery no claim can take has waited, by what it waits on
    /// (`cap`, `host_cap`, `rate_limit`, `breaker`, `paused`); `null`: none waits on it.
    pub oldest_waiting_age_s: BTreeMap<String, Option<f64>>,
    /// Seconds since the oldest delivery waiting for a retry was first seen.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub oldest_retrying_age_s: Option<f64>,
    /// Subscribers whose breaker is open or half-open.
    pub open_breakers: Vec<String>,
    /// What waits behind those breakers (`null` for a tenant).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub held_by_open_breakers: Option<HeldByOpenBreakers>,
    /// Dead letters that died in the last hour (and were not replayed since), by reason.
    pub dead_letters_last_hour: Vec<ReasonCount>,
    /// `null` for a tenant.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub capacity: Option<CapacityView>,
    /// The running rollout, if one is.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub rollout: Option<Rollout>,
}

/// Deliveries waiting for subscribers whose breaker is open or half-open. A claim defers them
/// to the half-open time, so they are not due and `oldest_waiting_age_s.breaker` (due
/// deliveries only) rarely sees them: this is how much an open breaker holds back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeldByOpenBreakers {
    pub deliveries: u64,
    /// Seconds since the oldest of them was first seen; `null`: none waits.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub oldest_first_seen_age_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DrillCheck {
    pub check: String,
    pub passed: bool,
}

/// What `hookline drill --json` writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DrillReport {
    pub passed: bool,
    pub checks: Vec<DrillCheck>,
    /// By phase (`baseline`, `failure`, `restore`, ...): what the drill measured in it, as it
    /// wrote it (latency summaries with `n`, `p50_ms`, `p95_ms`, `p99_ms`, and plain figures
    /// such as `drain_ms`).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub phases: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LatestDrill {
    /// The report's file name in the drill directory.
    pub file: String,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub modified_at: String,
    /// Whether its chart (`--svg`: the same name ending in `.svg`) is beside it and can be
    /// served.
    pub chart: bool,
    pub report: DrillReport,
}

impl<T> Page<T> {
    /// A page with nothing on it, and nothing after it (what a list answers a tenant that
    /// asked for another tenant's: as if that tenant had none).
    pub fn empty() -> Self {
        Page {
            items: Vec::new(),
            next_cursor: None,
        }
    }
}
