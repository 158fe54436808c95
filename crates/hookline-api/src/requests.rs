//! Request bodies: what each operation that changes something takes. The server refuses a
//! field it does not know (`deny_unknown_fields`); fields left `None` are not sent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Tells a field set to `null` (clear it) from one left out (keep it): `Some(None)` is sent as
/// `null`, `None` not at all.
pub fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// An event to fan out: one payload, or several versions of it. The server reads this body
/// by hand (to keep payload numbers as written); its tests hold the two to the same fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// The document's description, as it was written before this type moved here.
#[cfg_attr(
    feature = "openapi",
    schema(
        description = "An event to fan out: one payload, or several versions of it. It describes the body\n[`new_event`] reads by hand (a test holds its fields to [`FIELDS`])."
    )
)]
#[serde(deny_unknown_fields)]
pub struct NewEvent {
    /// 1 to 128 characters of `A-Za-z0-9._:-`; when absent, the `Idempotency-Key` header, else
    /// generated (give one of them, so a retry cannot make a second event). The same id again
    /// with the same body answers 200 and the original receipt.
    #[cfg_attr(
        feature = "openapi",
        schema(
            example = "evt_SHP-20418-out-for-delivery",
            pattern = "^(?!\\.\\.?$)[A-Za-z0-9._:-]{1,128}$"
        )
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type")]
    #[cfg_attr(feature = "openapi", schema(example = "shipment.out_for_delivery"))]
    pub event_type: String,
    /// Any JSON value, within `max_payload_bytes`. Give this or `payloads`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Value>, example = json!({"shipment": "SHP-20418", "status": "out_for_delivery"})))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// This payload's version (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_version: Option<i64>,
    /// Up to 16 versions by number: each subscriber gets the highest at or below its pin.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<BTreeMap<String, Value>>))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payloads: Option<Value>,
    /// The tenant whose subscribers it goes to (theirs only); absent: subscribers without a
    /// tenant. A tenant's token publishes for its own tenant (naming another is 403); an
    /// unknown tenant is 422.
    #[cfg_attr(feature = "openapi", schema(example = "merchant-acme"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// 1 to 128 printable characters (a shipment's id, say): each subscriber gets the events
    /// of one key in publish order, the next sent only once the one before it is delivered or
    /// dead. Waiting, a delivery shows `waiting_on: "ordering"`; its window still ends it.
    /// Absent: sent as soon as it can be, beside anything else.
    #[cfg_attr(feature = "openapi", schema(example = "SHP-20418"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewSubscriber {
    /// 1 to 128 characters of `A-Za-z0-9._-`; generated when absent.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "sub_acme", pattern = "^(?!\\.\\.?$)[A-Za-z0-9._-]{1,128}$")
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tenant it belongs to, fixed for good: it receives that tenant's events only. A
    /// tenant's token may leave it out (its own) or name its own; unknown: 422.
    #[cfg_attr(feature = "openapi", schema(example = "merchant-acme"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// http(s), without credentials; private and loopback destinations are refused unless
    /// allowed.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "https://hooks.acme.example/hookline")
    )]
    pub url: String,
    /// Up to 100; empty or absent: every type.
    #[cfg_attr(feature = "openapi", schema(example = json!(["shipment.out_for_delivery"])))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// `whsec_` + base64 of 24 to 64 bytes; generated when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// 1 to 1000: its own cap on attempts in flight.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// 0.001 to 100,000 attempts per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_second: Option<f64>,
    /// A pin: it receives the highest payload version at or below it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_version: Option<i64>,
    /// Up to 20 static headers sent with every attempt (not `webhook-*`, `content-*`, `host`,
    /// `user-agent`, `proxy-*` or hop-by-hop); values printable ASCII, at most 4 KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubscriberChange {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// `paused`: its deliveries wait, spending no attempts, until `active` again or their
    /// window ends.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::settable_status_or_null))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `null` clears it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_in_flight: Option<Option<u32>>,
    /// `null` clears it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub rate_limit_per_second: Option<Option<f64>>,
    /// `null` clears it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub payload_version: Option<Option<i64>>,
    /// Replaces them all; `{}` or `null` removes them.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub headers: Option<Option<BTreeMap<String, String>>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SecretRotation {
    /// How long the previous secret keeps signing, e.g. "24h"; "0s" drops it at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<String>,
    /// The new secret; generated when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    /// As a subscriber id: 1 to 128 characters of `A-Za-z0-9._-`. Never reused, even after a
    /// delete.
    #[cfg_attr(
        feature = "openapi",
        schema(
            example = "merchant-acme",
            pattern = "^(?!\\.\\.?$)[A-Za-z0-9._-]{1,128}$"
        )
    )]
    pub id: String,
    /// For people: 1 to 256 printable characters.
    #[cfg_attr(feature = "openapi", schema(example = "Acme Parcels"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// 1 to 1,000,000 subscribers (not revoked); creating one more is 422 `over_quota`.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscribers: Option<u32>,
    /// 0.001 to 100,000 publishes per second, a second's worth at once; one more is 429
    /// `rate_limited` with `Retry-After`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_events_per_second: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TenantChange {
    /// `null` clears it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<Option<String>>,
    /// `null`: no limit. Lowering it below the subscribers it has revokes none of them.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_subscribers: Option<Option<u32>>,
    /// `null`: no limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_events_per_second: Option<Option<f64>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewPortalSession {
    /// How long its token works, from 1 minute to 24 hours (default 1h).
    #[cfg_attr(feature = "openapi", schema(example = "1h"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// `admin` (the default: the tenant manages its endpoints and replays) or `read`.
    #[cfg_attr(feature = "openapi", schema(example = "admin"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::dead_reason))]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_id: Option<String>,
    /// Only this tenant's dead letters (a tenant's token replays its own whatever this says:
    /// naming another is 403).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// 1 to 1000: it releases exactly the first `limit` dead letters `GET /v1/dead-letters`
    /// lists with the same filter.
    #[cfg_attr(
        feature = "openapi",
        schema(example = 100, minimum = 1, maximum = 1000)
    )]
    pub limit: u32,
    /// 0.001 to 100,000 releases per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_second: Option<f64>,
    /// Answer what a replay would select now, changing nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The `delivery_ids` a dry run answered (1 to `limit` of them): the replay releases
    /// exactly these, or nothing (409) when what the filter selects changed since. Dead
    /// letters that died after the preview sort after them and do not change it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_delivery_ids: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResendRequest {
    /// The subscriber to send to: it gets its tenant's events of the types it takes now.
    pub subscriber_id: String,
    /// Events accepted at or after this (RFC 3339, UTC).
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-12-05T09:00:00Z"))]
    pub since: String,
    /// Events accepted before this (RFC 3339, UTC; default: now), after `since` and at most
    /// 31 days after it.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Only events of these types (at most 100; `shipment.*` and `*` as in a subscription),
    /// among those the subscriber takes; absent or empty: every type it takes.
    #[cfg_attr(feature = "openapi", schema(max_items = 100))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// 1 to 1000 events, oldest first. A selection reads at most 100,000 events of the range
    /// (matching or not) and stops there.
    #[cfg_attr(
        feature = "openapi",
        schema(example = 500, minimum = 1, maximum = 1000)
    )]
    pub limit: u32,
    /// 0.001 to 100,000 deliveries released per second; absent: all at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_second: Option<f64>,
    /// Answer the events a resend would select now, changing nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The `event_ids` a dry run answered (1 to `limit` of them): the resend sends exactly
    /// these, or nothing (409) when what the request selects changed since. Events accepted
    /// after the preview's last sort after it and do not change it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_event_ids: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewRollout {
    /// The candidate: a stored policy.
    pub policy: String,
    /// 0 to 100, at most two decimals, no exponent.
    #[cfg_attr(feature = "openapi", schema(value_type = f64, example = 5, minimum = 0, maximum = 100))]
    pub percent: serde_json::Number,
    /// Up to 1,000 existing subscribers, always in the cohort.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_ids: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort_if: Option<AbortIfRequest>,
}

/// Abort by itself when the candidate's terminal rate passes the baseline's by more than
/// `terminal_rate_increase`, once each cohort has `min_deliveries` ended deliveries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AbortIfRequest {
    /// Above 0, at most 1.
    pub terminal_rate_increase: f64,
    /// 1 to 100,000,000.
    pub min_deliveries: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RolloutShare {
    /// 0 to 100, at most two decimals, no exponent.
    #[cfg_attr(feature = "openapi", schema(value_type = f64, example = 25, minimum = 0, maximum = 100))]
    pub percent: serde_json::Number,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RolloutAbort {
    /// 1 to 500 characters; default: who aborted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `{}`: promote takes no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EmptyBody {}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewEventType {
    /// The event type, exactly as events name it: 1 to 256 printable characters, without `*`
    /// (a subscription's wildcard), not `.` or `..`, not `hookline.test`. Never reused.
    #[cfg_attr(feature = "openapi", schema(example = "shipment.out_for_delivery"))]
    pub name: String,
    /// Up to 1024 characters.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "The parcel left the depot with a driver")
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Up to 16 JSON Schemas (draft 2020-12), by payload version (`"1"`, `"2"`, ...), each
    /// at most 64 KiB as compact JSON, referring to nothing outside itself. A publish's payload
    /// of a version with a schema must match it (else 422 `schema_violation`); a version
    /// without one is not checked.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<BTreeMap<String, Value>>, example = json!({"1": {"type": "object", "required": ["shipment"]}})))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schemas: Option<BTreeMap<String, Value>>,
    /// Subscribers that list a deprecated type are warned (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EventTypeChange {
    /// `null` clears it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub description: Option<Option<String>>,
    /// Versions added or replaced, as at creation; the versions it leaves out keep their
    /// schema. A version's schema is never removed (`null` is refused): replace it with `{}`
    /// to accept any payload.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<BTreeMap<String, Value>>, example = json!({"2": {"type": "object"}})))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schemas: Option<BTreeMap<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OperationalEndpointRequest {
    /// Where hookline's own events go (checked by the SSRF guard like a subscriber's URL).
    #[cfg_attr(
        feature = "openapi",
        schema(example = "https://ops.platform.example/hookline")
    )]
    pub url: String,
    /// A Standard Webhooks secret (`whsec_` and base64 of 24 to 64 bytes); absent: a new
    /// endpoint gets a generated one (answered once), a set one keeps its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A new policy: every part or field left out is the policy in force's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewPolicy {
    /// 1 to 128 characters of `A-Za-z0-9._-`; never changes once stored.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "retry-520", pattern = "^(?!\\.\\.?$)[A-Za-z0-9._-]{1,128}$")
    )]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<ClassificationPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerPart>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClassificationPart {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retryable: Option<Vec<u16>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoke: Option<Vec<u16>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryPart {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_delay: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BreakerPart {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cool_down: Option<String>,
}

impl From<crate::SpelledPolicy> for NewPolicy {
    /// A policy as the API shows it, as the definition that makes it: every part given.
    fn from(p: crate::SpelledPolicy) -> Self {
        NewPolicy {
            name: p.name,
            classification: Some(ClassificationPart {
                retryable: Some(p.classification.retryable),
                revoke: Some(p.classification.revoke),
            }),
            retry: Some(RetryPart {
                base_delay: Some(p.retry.base_delay),
                max_delay: Some(p.retry.max_delay),
                max_attempts: Some(p.retry.max_attempts),
                delivery_window: Some(p.retry.delivery_window),
                jitter: Some(p.retry.jitter),
            }),
            breaker: Some(BreakerPart {
                failures: Some(p.breaker.failures),
                cool_down: Some(p.breaker.cool_down),
            }),
        }
    }
}
