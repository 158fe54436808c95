//! The records the queue keeps. These are plain data: every decision about them is made by
//! `hookline-policy` or the dispatcher, and every backend stores exactly these fields.

use std::collections::BTreeMap;
use std::sync::Arc;

use hookline_policy::{Breaker, DeadReason, FailingStreak, Outcome, UnixMs};
use std::borrow::Cow;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubscriberStatus {
    Active,
    Paused,
    /// Final: kept for the record, never sent to again.
    Revoked,
}

impl SubscriberStatus {
    pub const ALL: [SubscriberStatus; 3] = [
        SubscriberStatus::Active,
        SubscriberStatus::Paused,
        SubscriberStatus::Revoked,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriberStatus::Active => "active",
            SubscriberStatus::Paused => "paused",
            SubscriberStatus::Revoked => "revoked",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "active" => SubscriberStatus::Active,
            "paused" => SubscriberStatus::Paused,
            "revoked" => SubscriberStatus::Revoked,
            _ => return None,
        })
    }
}

/// Why a subscriber is paused or revoked (`None` while active). Kept with the status, so a
/// subscriber paused by hookline itself is told apart from one an operator paused, and a
/// revocation by its endpoint (410) from one by an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusReason {
    /// Paused by an operator (or a tenant) through the API.
    Paused,
    /// Paused by hookline: every attempt failed for `[lifecycle] disable_after`.
    AutoDisabled,
    /// Revoked through the API (`DELETE`).
    Deleted,
    /// Revoked because its endpoint answered 410 Gone.
    Gone,
    /// Revoked with its tenant.
    TenantDeleted,
}

impl StatusReason {
    pub const ALL: [StatusReason; 5] = [
        StatusReason::Paused,
        StatusReason::AutoDisabled,
        StatusReason::Deleted,
        StatusReason::Gone,
        StatusReason::TenantDeleted,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            StatusReason::Paused => "paused",
            StatusReason::AutoDisabled => "auto_disabled",
            StatusReason::Deleted => "deleted",
            StatusReason::Gone => "gone",
            StatusReason::TenantDeleted => "tenant_deleted",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The scheme, host and port of a subscriber URL (a default port left out), as the `url` crate
/// reads it. One gateway is one origin however many paths and subscribers sit behind it, which
/// is what the cap per host counts. Its own type because claims count both per subscriber and
/// per origin, in maps and arguments side by side, and both would otherwise be strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Origin(String);

impl Origin {
    /// The origin of `url`. A URL that does not parse (never stored by the API) is its own
    /// origin.
    pub fn of_url(url: &str) -> Self {
        match url::Url::parse(url) {
            Ok(parsed) => Origin(parsed.origin().ascii_serialization()),
            Err(_) => Origin(url.to_owned()),
        }
    }

    /// A subscriber's origin as stored, or read from its URL when the row has none yet (written
    /// by an older binary since this one started; the next start fills it in).
    pub(crate) fn stored(stored: Option<String>, url: &str) -> Self {
        stored.map_or_else(|| Self::of_url(url), Origin)
    }

    /// [`Origin::stored`] as text borrowed from the row: what a claim reads for every due row,
    /// where an allocation per row cost PostgreSQL's claims measurably.
    pub(crate) fn stored_text<'a>(stored: Option<&'a str>, url: &str) -> Cow<'a, str> {
        stored.map_or_else(|| Cow::Owned(Self::of_url(url).0), Cow::Borrowed)
    }

    /// The origin whose text [`Origin::stored_text`] read.
    pub(crate) fn from_text(text: Cow<'_, str>) -> Self {
        Origin(text.into_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// So that maps keyed by origin can be looked up with a borrowed row's text.
impl std::borrow::Borrow<str> for Origin {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subscriber {
    pub id: String,
    /// The tenant it belongs to, fixed at creation: it gets that tenant's events only (`None`:
    /// events published without a tenant).
    pub tenant_id: Option<String>,
    pub url: String,
    /// Where `url` points: attempts in flight to one origin, across every subscriber pointing
    /// there, are held to `max_in_flight_per_host`.
    pub origin: Origin,
    /// Empty means every event type.
    pub event_types: Vec<String>,
    pub secret: String,
    /// The secret a rotation replaced, still signed with until `previous_secret_until`.
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<UnixMs>,
    pub status: SubscriberStatus,
    /// Why it is paused or revoked; `None` while active (and for a row paused or revoked by an
    /// older release).
    pub status_reason: Option<StatusReason>,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
    /// Its circuit breaker, kept with it so every process sees the same state.
    pub breaker: Breaker,
    /// Its failed attempts since its last success, kept beside the breaker.
    pub failing: FailingStreak,
    /// Overrides `delivery.max_in_flight_per_subscriber` for this subscriber.
    pub max_in_flight: Option<u32>,
    /// Attempts to it never exceed this rate.
    pub rate_limit_per_second: Option<f64>,
    /// When the rate limiter next admits an attempt (kept in the store so every process
    /// shares one limiter).
    pub rate_next_at: Option<UnixMs>,
    /// The highest payload version it accepts; `None` takes the latest.
    pub payload_version: Option<i64>,
    /// Sent with every attempt (static credentials the destination needs).
    pub headers: SubscriberHeaders,
}

/// Headers a subscriber's destination needs with every request, such as static credentials.
/// Kept like a secret: their values never appear in `Debug` output, so never in logs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SubscriberHeaders(pub BTreeMap<String, String>);

impl std::fmt::Debug for SubscriberHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl SubscriberHeaders {
    /// The stored form: a JSON object, or nothing when there are none.
    pub(crate) fn encode(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| serde_json::to_string(&self.0).expect("strings serialize"))
    }

    pub(crate) fn decode(stored: Option<&str>) -> Option<Self> {
        match stored {
            None => Some(Self::default()),
            Some(text) => serde_json::from_str(text).ok().map(Self),
        }
    }
}

impl Subscriber {
    /// Where and how its deliveries are sent at `now`.
    pub fn destination(&self, now: UnixMs) -> Destination {
        Destination {
            subscriber_id: self.id.clone(),
            tenant_id: self.tenant_id.clone(),
            url: self.url.clone(),
            origin: self.origin.clone(),
            secrets: self.signing_secrets(now),
            headers: self.headers.clone(),
        }
    }

    /// The secrets to sign with at `now`: the current one, and during a rotation's grace
    /// period the previous one too.
    pub fn signing_secrets(&self, now: UnixMs) -> Vec<String> {
        let mut secrets = vec![self.secret.clone()];
        if let (Some(previous), Some(until)) = (&self.previous_secret, self.previous_secret_until) {
            if now < until {
                secrets.push(previous.clone());
            }
        }
        secrets
    }
}

#[derive(Debug, Clone)]
pub struct NewSubscriber {
    pub id: String,
    /// Must name a tenant that exists; its `max_subscribers` is enforced.
    pub tenant_id: Option<String>,
    pub url: String,
    pub event_types: Vec<String>,
    pub secret: String,
    pub max_in_flight: Option<u32>,
    pub rate_limit_per_second: Option<f64>,
    pub payload_version: Option<i64>,
    pub headers: SubscriberHeaders,
}

/// A named retry policy as stored. The store keeps its definition (the JSON the API accepted)
/// without reading it: what a policy means is decided above the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPolicy {
    pub name: String,
    pub definition: String,
    pub created_at: UnixMs,
    /// The API token that created it, when tokens are configured.
    pub created_by: Option<String>,
}

/// A type of event in the catalog, the platform's (shared by every tenant). Its name is never
/// reused nor renamed; each payload version may have a JSON Schema its payloads are checked
/// against before they are stored. The store keeps each schema as the JSON text the API
/// accepted, without reading it: what a schema means is decided above the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventType {
    pub name: String,
    pub description: Option<String>,
    /// Each payload version's JSON Schema (JSON text), by version.
    pub schemas: BTreeMap<i64, String>,
    /// Still published, but subscribers are told to move off it.
    pub deprecated: bool,
    /// How many times it was written: 1 when created, one more with every change.
    pub revision: i64,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
    /// The API token that registered it, when tokens are configured.
    pub created_by: Option<String>,
}

#[derive(Debug, Clone)]
pub struct NewEventType {
    pub name: String,
    pub description: Option<String>,
    pub schemas: BTreeMap<i64, String>,
    pub deprecated: bool,
    pub created_by: Option<String>,
}

/// A change to an event type: what it leaves out is kept. A schema version is added or
/// replaced, never removed.
#[derive(Debug, Clone, Default)]
pub struct EventTypePatch {
    /// `Some(None)` clears it.
    pub description: Option<Option<String>>,
    /// Versions added or replaced; the others keep their schema.
    pub schemas: BTreeMap<i64, String>,
    pub deprecated: Option<bool>,
}

/// A customer of the platform: its subscribers get only its events, and its quotas bound what
/// it may create and publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    pub id: String,
    pub name: Option<String>,
    /// Subscribers not revoked it may have; creating one more is `OverQuota`.
    pub max_subscribers: Option<u32>,
    /// Publishes it may make per second (a second's worth may come at once); one more is
    /// `RateLimited`.
    pub max_events_per_second: Option<f64>,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
}

#[derive(Debug, Clone)]
pub struct NewTenant {
    pub id: String,
    pub name: Option<String>,
    pub max_subscribers: Option<u32>,
    pub max_events_per_second: Option<f64>,
}

/// A short-lived token for a tenant's portal, as stored: its token only as a hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalSession {
    pub id: String,
    pub tenant_id: String,
    /// What its token may do, in the API's words (the store does not read it).
    pub scope: String,
    pub created_at: UnixMs,
    /// Refused from then on.
    pub expires_at: UnixMs,
    pub revoked_at: Option<UnixMs>,
    /// Who made it (an API token's name).
    pub created_by: Option<String>,
}

#[derive(Debug, Clone)]
pub struct NewPortalSession {
    pub id: String,
    pub tenant_id: String,
    /// The SHA-256 of its token, in lower-case hex: the token itself is never stored.
    pub token_sha256: String,
    pub scope: String,
    pub expires_at: UnixMs,
    pub created_by: Option<String>,
}

/// A partial update; `Some(None)` clears a field.
#[derive(Debug, Clone, Default)]
pub struct TenantPatch {
    pub name: Option<Option<String>>,
    pub max_subscribers: Option<Option<u32>>,
    pub max_events_per_second: Option<Option<f64>>,
}

/// A partial update. Revocation is not a patch: it has consequences (pending deliveries die),
/// so it goes through [`crate::Store::revoke_subscriber`].
#[derive(Debug, Clone, Default)]
pub struct SubscriberPatch {
    pub url: Option<String>,
    pub event_types: Option<Vec<String>>,
    /// Only `Active` or `Paused`.
    pub status: Option<SubscriberStatus>,
    /// `Some(None)` clears the override.
    pub max_in_flight: Option<Option<u32>>,
    /// `Some(None)` removes the limit.
    pub rate_limit_per_second: Option<Option<f64>>,
    /// `Some(None)` unpins: the latest version again.
    pub payload_version: Option<Option<i64>>,
    /// Replaces every header; an empty set removes them all.
    pub headers: Option<SubscriberHeaders>,
}

#[derive(Debug, Clone)]
pub struct NewEvent {
    pub id: String,
    /// Fans out to this tenant's subscribers only; `None` to subscribers without a tenant.
    /// Publishing for a tenant that does not exist is `Invalid`.
    pub tenant_id: Option<String>,
    pub event_type: String,
    /// Canonical JSON text of the latest payload version: stored once, sent verbatim as `data`.
    pub payload: String,
    pub payload_version: i64,
    /// Versions below `payload_version` (ascending, canonical JSON), for subscribers pinned
    /// below the latest. Empty for a single-version event.
    pub earlier_payloads: Vec<(i64, String)>,
    /// The API token that published it, when tokens are configured.
    pub published_by: Option<String>,
    /// Admission: at most this many deliveries may be created, else nothing is stored
    /// (`StoreError::OverCapacity`). A re-publish of an accepted event is answered regardless.
    pub admit_at_most: Option<u64>,
    /// Fans out to this subscriber only, whatever its event types (a test event): it must be
    /// of the event's tenant and not revoked, else nothing is stored (`Conflict`).
    pub only_subscriber: Option<String>,
    /// Its deliveries to each subscriber wait for that subscriber's earlier deliveries of the
    /// same key to end (delivered or dead): attempted in publish order.
    pub ordering_key: Option<String>,
    /// The W3C `traceparent` of the publish's span, when tracing is on: each attempt's span
    /// is its child, in the publish's trace (`hookline_engine::traces`). Not compared on a
    /// re-publish.
    pub traceparent: Option<String>,
}

impl NewEvent {
    /// An event with one payload version.
    pub fn single(id: &str, event_type: &str, payload: &str, payload_version: i64) -> Self {
        NewEvent {
            id: id.to_owned(),
            tenant_id: None,
            event_type: event_type.to_owned(),
            payload: payload.to_owned(),
            payload_version,
            earlier_payloads: Vec::new(),
            published_by: None,
            admit_at_most: None,
            only_subscriber: None,
            ordering_key: None,
            traceparent: None,
        }
    }

    /// Every version it carries, ascending.
    pub fn versions(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self.earlier_payloads.iter().map(|(v, _)| *v).collect();
        v.push(self.payload_version);
        v
    }
}

/// The answer to a publish, kept so a repeated publish can be answered identically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventReceipt {
    pub id: String,
    pub tenant_id: Option<String>,
    pub event_type: String,
    pub ordering_key: Option<String>,
    pub deliveries: u64,
    /// Deliveries to subscribers pinned below every version the event carries: dead at once.
    pub unversioned: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The event and all its deliveries are committed.
    Accepted(EventReceipt),
    /// The same id with the same type, payload and version was accepted before; nothing new.
    AlreadyAccepted(EventReceipt),
    /// The id exists with a different body.
    Conflict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Scheduled,
    InFlight,
    Delivered,
    Dead,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 4] = [
        DeliveryState::Scheduled,
        DeliveryState::InFlight,
        DeliveryState::Delivered,
        DeliveryState::Dead,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Scheduled => "scheduled",
            DeliveryState::InFlight => "in_flight",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
    /// Delivered or dead: not attempted again (but by a replay).
    pub fn ended(self) -> bool {
        matches!(self, DeliveryState::Delivered | DeliveryState::Dead)
    }
}

/// Delivery counts by state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    pub scheduled: u64,
    pub in_flight: u64,
    pub delivered: u64,
    pub dead: u64,
}

impl StateCounts {
    pub fn add(&mut self, state: DeliveryState, n: u64) {
        match state {
            DeliveryState::Scheduled => self.scheduled += n,
            DeliveryState::InFlight => self.in_flight += n,
            DeliveryState::Delivered => self.delivered += n,
            DeliveryState::Dead => self.dead += n,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: String,
    pub tenant_id: Option<String>,
    pub event_type: String,
    pub payload: String,
    pub payload_version: i64,
    /// Versions below the latest, ascending.
    pub earlier_payloads: Vec<(i64, String)>,
    pub accepted_at: UnixMs,
    pub deliveries: u64,
    pub counts: StateCounts,
    pub published_by: Option<String>,
    pub ordering_key: Option<String>,
    /// The publish span's W3C `traceparent` ([`NewEvent::traceparent`]).
    pub traceparent: Option<String>,
}

/// What the queue looks like now, for the gauges operators watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub counts: StateCounts,
    /// The earliest `run_at` among first attempts a claim could take now (their subscriber is
    /// not at its cap, rate-limited, behind its breaker or paused): first attempts waiting
    /// for the dispatcher.
    pub oldest_ready_since: Option<UnixMs>,
    /// The earliest `run_at` among due deliveries no claim can take now, by what they wait on.
    pub oldest_waiting_since: Vec<(WaitingOn, UnixMs)>,
    /// The earliest `first_seen` among deliveries waiting for (or due for) a retry.
    pub oldest_retrying_first_seen: Option<UnixMs>,
    /// Subscribers whose breaker is open or half-open.
    pub open_breakers: Vec<String>,
    /// Deliveries not ended of the subscribers in `open_breakers`: a claim defers them to the
    /// half-open time, so they are not due and `oldest_waiting_since` never counts them.
    pub behind_open_breakers: u64,
    /// The earliest `first_seen` among `behind_open_breakers`.
    pub behind_open_breakers_first_seen: Option<UnixMs>,
}

/// One attempt, as the append-only history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The attempt's number within its budget (a replay starts a new budget at 1).
    pub ordinal: u32,
    pub started_at: UnixMs,
    pub duration_ms: u64,
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub error: Option<String>,
    /// The start of what the subscriber answered (at most 4 KiB), for the operator reading why.
    pub response_body: Option<String>,
    /// The policy that classified it and decided what followed (`None` in history written
    /// before policies had names).
    pub policy: Option<String>,
}

/// What a delivery was waiting on when its delivery window ended without an attempt (and,
/// for [`WaitingOn::Ordering`], what a scheduled one waits on now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitingOn {
    /// An earlier delivery of its ordering key to the same subscriber, still on its way.
    Ordering,
    /// Its subscriber's circuit breaker was open or half-open.
    Breaker,
    /// Its subscriber was paused.
    Paused,
    /// Its subscriber's rate limit.
    RateLimit,
    /// A free slot: its subscriber had as many deliveries in flight as it may.
    Cap,
    /// A free place at its host: its origin had `max_in_flight_per_host` deliveries in flight
    /// across its subscribers. Told apart from `Cap` because the remedy differs: that host is
    /// slow for everyone pointing there, and the cap keeps it to its own share.
    HostCap,
    /// Its subscriber's attempt far slower than usual: the dispatcher gives the subscriber no
    /// new slot until that attempt ends (a process's own view: only the queue gauges of a
    /// process with a dispatcher show it).
    Slow,
}

impl WaitingOn {
    pub const ALL: [WaitingOn; 7] = [
        WaitingOn::Ordering,
        WaitingOn::Breaker,
        WaitingOn::Paused,
        WaitingOn::RateLimit,
        WaitingOn::Cap,
        WaitingOn::HostCap,
        WaitingOn::Slow,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            WaitingOn::Ordering => "ordering",
            WaitingOn::Breaker => "breaker",
            WaitingOn::Paused => "paused",
            WaitingOn::RateLimit => "rate_limit",
            WaitingOn::Cap => "cap",
            WaitingOn::HostCap => "host_cap",
            WaitingOn::Slow => "slow",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == s)
    }
}

/// What a delivery shows of its stored `waiting_on` (`Err`: a value no release writes). A
/// delivery that died of its window shows what it was waiting on then; a delivery not ended
/// shows `ordering` while it waits behind an earlier one of its key. Otherwise the column is
/// left behind (by an older release's replay, or a later death) and shows nothing.
pub fn shown_waiting_on(
    stored: Option<&str>,
    reason: Option<DeadReason>,
) -> std::result::Result<Option<WaitingOn>, &str> {
    match stored {
        Some(v) if reason == Some(DeadReason::WindowExpired) => {
            WaitingOn::parse(v).map(Some).ok_or(v)
        }
        Some(v) if reason.is_none() && v == WaitingOn::Ordering.as_str() => {
            Ok(Some(WaitingOn::Ordering))
        }
        _ => Ok(None),
    }
}

/// What a scheduled delivery's subscriber looks like to the window sweep, to tell what the
/// delivery was waiting on.
#[derive(Debug, Clone, Copy)]
pub struct WaitState {
    /// Behind an earlier delivery of its ordering key (held until that one ends).
    pub ordered: bool,
    pub held: bool,
    pub run_at: Option<UnixMs>,
    pub breaker_open_until: Option<UnixMs>,
    pub rate_next_at: Option<UnixMs>,
    pub in_flight: u32,
    pub cap: u32,
    /// What its subscriber's origin has in flight, across the subscribers pointing there.
    pub host_in_flight: u32,
    /// The cap per host in force (`None`: off).
    pub host_cap: Option<u32>,
    /// Its subscriber has a rate limit and another of its due deliveries is ahead of it: it
    /// waits for its turn at that rate.
    pub queued_at_rate: bool,
    /// The dispatcher holds its subscriber back ([`WaitingOn::Slow`]).
    pub held_back: bool,
}

impl WaitState {
    /// Behind an earlier delivery of its key first (it is held for that, paused or not), then
    /// paused (nothing else matters while it is), then the breaker, then, for a delivery
    /// already due, the dispatcher holding its subscriber back, the rate limit, the
    /// subscriber's in-flight cap and its host's (the subscriber's own first: a claim checks it
    /// first, and room at the host would not help). A delivery whose next attempt was still
    /// ahead was waiting on nothing but its own retry time. A due delivery of a subscriber with
    /// a rate limit, behind another of its due deliveries, that waits on nothing else waits for
    /// its turn at that rate: the limiter's next turn may be now, but the delivery ahead takes
    /// it (a window that ends there ends on the rate limit).
    pub fn waiting_on(&self, now: UnixMs) -> Option<WaitingOn> {
        if self.ordered {
            Some(WaitingOn::Ordering)
        } else if self.held {
            Some(WaitingOn::Paused)
        } else if self.breaker_open_until.is_some() {
            Some(WaitingOn::Breaker)
        } else if self.run_at.is_some_and(|t| t > now) {
            None
        } else if self.held_back {
            Some(WaitingOn::Slow)
        } else if self.rate_next_at.is_some_and(|t| t > now) {
            Some(WaitingOn::RateLimit)
        } else if self.in_flight >= self.cap {
            Some(WaitingOn::Cap)
        } else if self.host_cap.is_some_and(|cap| self.host_in_flight >= cap) {
            Some(WaitingOn::HostCap)
        } else if self.queued_at_rate {
            Some(WaitingOn::RateLimit)
        } else {
            None
        }
    }
}

/// The dispatcher's caps on deliveries in flight, as its claims apply them: what the queue
/// gauges and the window sweep need to tell a delivery waiting on a cap from a ready one.
/// Named fields, since two counts side by side in an argument list swap unnoticed.
#[derive(Debug, Clone, Copy)]
pub struct InFlightCaps {
    /// The cap of subscribers without their own.
    pub max_in_flight_per_subscriber: u32,
    /// The cap per origin across its subscribers; 0: off.
    pub max_in_flight_per_host: u32,
}

/// A pass that ends the delivery window of deliveries not in flight.
#[derive(Debug, Clone, Copy)]
pub struct WindowSweep {
    pub now: UnixMs,
    /// Every delivery's window: it ends at `window_start + window_ms`.
    pub window_ms: i64,
    /// The caps a claim holds deliveries to, to tell `WaitingOn::Cap` and `HostCap`.
    pub caps: InFlightCaps,
    /// At most this many per pass.
    pub limit: usize,
}

impl WindowSweep {
    /// Deliveries whose window started at or before this have ended it.
    pub fn started_before(&self) -> UnixMs {
        self.now.saturating_sub(self.window_ms)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `<event id>:<subscriber id>` (a resend's: `...:resend-<n>`): the `webhook-id` of every
    /// attempt, forever.
    pub id: String,
    /// Its subscriber's (and so its event's) tenant.
    pub tenant_id: Option<String>,
    pub event_id: String,
    pub subscriber_id: String,
    pub state: DeliveryState,
    /// Attempts spent in the current budget.
    pub attempts: u32,
    pub first_seen: UnixMs,
    /// When the current delivery window opened: `first_seen`, or the release time of a replay.
    pub window_start: UnixMs,
    /// When the next attempt is due (scheduled deliveries only).
    pub next_attempt_at: Option<UnixMs>,
    pub dead_reason: Option<DeadReason>,
    pub dead_at: Option<UnixMs>,
    /// Why it died when no attempt says so (no payload version for its subscriber's pin).
    pub dead_error: Option<String>,
    /// The payload version it sends (or sent); `None` when none fits its subscriber's pin.
    pub payload_version: Option<i64>,
    /// For a delivery whose window ended while it waited: what it was waiting on.
    pub waiting_on: Option<WaitingOn>,
    pub attempt_history: Vec<AttemptRecord>,
}

/// A dead letter: everything needed to decide whether to replay it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub delivery_id: String,
    pub tenant_id: Option<String>,
    pub event_id: String,
    pub event_type: String,
    pub subscriber_id: String,
    /// The version it was sent with; `None` when the event had none for the subscriber's pin.
    pub payload_version: Option<i64>,
    pub reason: DeadReason,
    pub dead_at: UnixMs,
    pub dead_error: Option<String>,
    pub waiting_on: Option<WaitingOn>,
    pub attempt_history: Vec<AttemptRecord>,
}

/// A page of a list; `next_cursor` is opaque to callers.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// Which subscribers a list shows.
#[derive(Debug, Clone, Default)]
pub struct SubscriberFilter {
    /// Only this tenant's (`None`: every subscriber).
    pub tenant_id: Option<String>,
    /// Those whose id or URL contains this, in any case (`None`: every subscriber).
    pub contains: Option<String>,
    /// Whether `contains` may match inside a URL's query string, whose values may be
    /// credentials (`?api_key=...`): only for callers who are shown them. Otherwise the URL is
    /// searched up to its `?`.
    pub search_query_values: bool,
}

impl SubscriberFilter {
    /// The `LIKE` pattern both backends match the lower-cased id and URL against: `%`, `_`
    /// and `\` in the text match themselves. A NUL is refused: no id or URL holds one, and the
    /// backends would disagree on it (SQLite ends the pattern there and matches everyone).
    pub(crate) fn like_pattern(&self) -> Result<Option<String>, crate::StoreError> {
        if self
            .contains
            .as_deref()
            .is_some_and(|text| text.contains('\0'))
        {
            return Err(crate::StoreError::Invalid(
                "contains may not hold a NUL character (%00): no subscriber id or URL has one"
                    .into(),
            ));
        }
        Ok(self.contains.as_ref().map(|text| {
            let mut pattern = String::with_capacity(text.len() + 2);
            pattern.push('%');
            for c in text.to_lowercase().chars() {
                if matches!(c, '%' | '_' | '\\') {
                    pattern.push('\\');
                }
                pattern.push(c);
            }
            pattern.push('%');
            pattern
        }))
    }
}

/// An event as a search lists it: without its payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSummary {
    pub id: String,
    pub tenant_id: Option<String>,
    pub event_type: String,
    /// Its latest payload version.
    pub payload_version: i64,
    pub accepted_at: UnixMs,
    pub deliveries: u64,
    pub counts: StateCounts,
}

/// What an event search keeps; each filter `None` keeps everything.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub event_type: Option<String>,
    /// Types starting with this (case-sensitive, as types are compared).
    pub type_prefix: Option<String>,
    pub tenant_id: Option<String>,
    /// Accepted at or after.
    pub since: Option<UnixMs>,
    /// Accepted before.
    pub until: Option<UnixMs>,
}

#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    /// Only this tenant's.
    pub tenant_id: Option<String>,
    pub event_id: Option<String>,
    pub subscriber_id: Option<String>,
    pub state: Option<DeliveryState>,
    pub order: ListOrder,
}

/// Which end of a list comes first (by when its rows were created).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ListOrder {
    #[default]
    OldestFirst,
    NewestFirst,
}

impl ListOrder {
    pub const ALL: [ListOrder; 2] = [ListOrder::OldestFirst, ListOrder::NewestFirst];

    pub fn as_str(self) -> &'static str {
        match self {
            ListOrder::OldestFirst => "oldest",
            ListOrder::NewestFirst => "newest",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

#[derive(Debug, Clone, Default)]
pub struct DeadLetterFilter {
    /// Only this tenant's.
    pub tenant_id: Option<String>,
    pub reason: Option<DeadReason>,
    pub subscriber_id: Option<String>,
}

/// What a claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub now: UnixMs,
    /// At most this many deliveries: the caller's free in-flight slots.
    pub limit: usize,
    /// The caller's delivery slots, free or not: what the fair share divides among the tenants
    /// with deliveries due (`fair_share.rs`).
    pub slots: usize,
    /// How many more than `limit` the claim may take for tenants under their share, while
    /// others hold more than theirs: the caller starts them without a slot (in its slow lane)
    /// rather than make them wait for another tenant's attempts to end. 0: none.
    pub lend: usize,
    /// How long the claim is valid; past it, the delivery is presumed lost and is rescued.
    pub lease_ms: i64,
    /// No subscriber ever has more than this many deliveries in flight (unless it overrides it).
    pub max_in_flight_per_subscriber: u32,
    /// No origin (scheme, host and port of a subscriber URL) ever has more than this many
    /// deliveries in flight, across every subscriber pointing there and every process: many
    /// subscribers behind one gateway must not add up to a flood. 0: no such cap.
    pub max_in_flight_per_host: u32,
    /// At most this many of the claimed may be retries (attempt 2 or later): the rest of the
    /// caller's slots are kept for first attempts.
    pub max_retries: usize,
    /// Subscribers that get no new delivery in this claim (the caller saw them answer far
    /// slower than usual).
    pub exclude_subscribers: Vec<String>,
    /// Deliveries whose window started at or before this have ended it: they are never
    /// claimed (the window sweep ends them), so none is attempted after its window.
    pub window_ended_for_start: UnixMs,
}

/// Where and how to send: shared by every delivery of a claim batch to the same subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub subscriber_id: String,
    /// Its subscriber's tenant, for the metrics labelled by tenant.
    pub tenant_id: Option<String>,
    pub url: String,
    /// The origin of `url`, which the cap per host counts by.
    pub origin: Origin,
    /// Sign with each: the current secret first, then one in its rotation grace period.
    pub secrets: Vec<String>,
    pub headers: SubscriberHeaders,
}

/// The event as a subscriber sees it, in one payload version: shared by every delivery of a
/// claim batch for that event and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventBody {
    pub id: String,
    pub event_type: String,
    pub payload: String,
    pub payload_version: i64,
    pub accepted_at: UnixMs,
    /// The publish span's W3C `traceparent` ([`NewEvent::traceparent`]).
    pub traceparent: Option<String>,
}

/// Opaque store key of a delivery row; cheaper to fence on than the text id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeliveryKey(pub i64);

/// A delivery leased to the caller, with everything needed to attempt it.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    pub key: DeliveryKey,
    pub id: String,
    /// Fences the completion: only the holder of the current lease can complete the delivery.
    pub lease: i64,
    /// The number of the attempt this claim is for, already counted against the budget.
    pub attempt: u32,
    pub first_seen: UnixMs,
    pub window_start: UnixMs,
    /// When it became due: the start of its wait in the ready queue.
    pub due_at: UnixMs,
    /// Set when this claim rescued a delivery whose previous lease ran out: when that lost
    /// attempt started. Its outcome is unknown and must be recorded before anything else.
    pub lost_attempt_started_at: Option<UnixMs>,
    pub destination: Arc<Destination>,
    pub event: Arc<EventBody>,
}

/// Where an attempt leaves its delivery, as the policy decided.
pub use hookline_policy::{BacklogWaits, DeferCause, Deferred, Transition};

#[derive(Debug, Clone)]
pub struct Completion {
    pub key: DeliveryKey,
    pub lease: i64,
    /// What the attempt did, for its history.
    pub record: AttemptRecord,
    pub transition: Transition,
    /// The subscriber answered 410 Gone: revoke it along with this completion.
    pub revoke_subscriber: bool,
    /// How the deciding policy's circuit breaker counts this outcome.
    pub breaker: hookline_policy::BreakerConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionResult {
    Applied,
    /// The lease was lost (rescued by another claim): nothing changed.
    LeaseLost,
}

#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// Selects only this tenant's dead letters, and the audit belongs to it.
    pub tenant_id: Option<String>,
    pub reason: DeadReason,
    pub subscriber_id: Option<String>,
    pub limit: u32,
    /// Release at most this many per second; `None` releases all at once.
    pub per_second: Option<f64>,
    /// Who asked (an API token name), for the audit.
    pub requested_by: Option<String>,
    /// The ids a preview showed (`preview_replay`): the replay releases exactly these, or
    /// nothing (`Conflict`) when what the filter selects changed since.
    pub expected: Option<Vec<String>>,
}

/// The audit record of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub id: String,
    pub tenant_id: Option<String>,
    pub created_at: UnixMs,
    pub reason: DeadReason,
    pub subscriber_id: Option<String>,
    pub limit: u32,
    pub per_second: Option<f64>,
    pub requested_by: Option<String>,
    pub selected: u64,
    pub delivery_ids: Vec<String>,
    /// How many of the selected have been delivered since.
    pub delivered: u64,
    /// How many of the selected have died again since.
    pub dead: u64,
}

/// New deliveries of events already published, to one subscriber (`Resends::resend`): for a
/// subscriber that lost what it was sent (it answered 2xx and dropped it), each with a fresh
/// delivery id, and so a fresh `webhook-id` its deduplication does not drop.
#[derive(Debug, Clone)]
pub struct ResendRequest {
    pub subscriber_id: String,
    /// Events accepted at or after this...
    pub since: UnixMs,
    /// ...and before this.
    pub until: UnixMs,
    /// Only events of these types or patterns, besides the subscriber's own types (empty: every
    /// type it takes). Matched as the subscriber's are ([`crate::type_patterns::selects`]).
    pub event_types: Vec<String>,
    /// At most this many events, oldest first (1 to [`crate::MAX_REPLAY`]).
    pub limit: u32,
    /// Release at most this many per second; `None` releases all at once.
    pub per_second: Option<f64>,
    /// Who asked (an API token name), for the audit.
    pub requested_by: Option<String>,
    /// The event ids a preview showed (`preview_resend`): the resend makes deliveries of
    /// exactly these, or nothing (`Conflict`) when what the request selects changed since.
    pub expected: Option<Vec<String>>,
}

/// The audit record of one resend.
#[derive(Debug, Clone, PartialEq)]
pub struct Resend {
    pub id: String,
    /// Its subscriber's tenant.
    pub tenant_id: Option<String>,
    pub created_at: UnixMs,
    pub subscriber_id: String,
    pub since: UnixMs,
    pub until: UnixMs,
    pub event_types: Vec<String>,
    pub limit: u32,
    pub per_second: Option<f64>,
    pub requested_by: Option<String>,
    pub selected: u64,
    /// The deliveries it made (`<event id>:<subscriber id>:resend-<n>`), oldest event first.
    pub delivery_ids: Vec<String>,
    /// How many of them have been delivered since.
    pub delivered: u64,
    /// How many of them have died since.
    pub dead: u64,
}

/// Which resends a list shows; each filter `None` keeps everything.
#[derive(Debug, Clone, Default)]
pub struct ResendFilter {
    /// Only this tenant's (its subscribers').
    pub tenant_id: Option<String>,
    pub subscriber_id: Option<String>,
}

/// Dead letters of one reason and subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterGroup {
    pub reason: DeadReason,
    pub subscriber_id: String,
    /// The subscriber's status now: a revoked subscriber's dead letters cannot be replayed.
    pub subscriber_status: SubscriberStatus,
    pub count: u64,
    pub oldest_dead_at: UnixMs,
    pub newest_dead_at: UnixMs,
}

/// What a backup or a restore copied, for the operator to check against what they expect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSummary {
    pub bytes: u64,
    /// The schema version of the copy.
    pub schema_version: u32,
    pub events: u64,
    /// Deliveries by state in the copy: those scheduled or in flight are still to be sent.
    pub counts: StateCounts,
}

/// Where a rollout is: it runs until an operator (or its own `abort_if`) ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutState {
    Running,
    /// Its candidate became the policy in force for everyone.
    Promoted,
    /// Its cohort went back to the baseline.
    Aborted,
}

impl RolloutState {
    pub const ALL: [RolloutState; 3] = [
        RolloutState::Running,
        RolloutState::Promoted,
        RolloutState::Aborted,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Running => "running",
            RolloutState::Promoted => "promoted",
            RolloutState::Aborted => "aborted",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// When a rollout aborts itself: the candidate's terminal rate passes the baseline's by more
/// than `terminal_rate_increase`, with at least `min_deliveries` ended in each cohort.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AbortIf {
    pub terminal_rate_increase: f64,
    pub min_deliveries: u64,
}

/// A cohort of subscribers moved from the policy in force when it started (`baseline`) to a
/// candidate `policy`. Who is in the cohort is decided above the store, from `basis_points`
/// and `subscriber_ids`; the store keeps the record and guarantees one runs at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    pub id: String,
    pub policy: String,
    pub baseline: String,
    /// The share of subscribers in the cohort, in hundredths of a percent (0 to 10,000).
    pub basis_points: u32,
    /// Subscribers in the cohort whatever the share.
    pub subscriber_ids: Vec<String>,
    pub abort_if: Option<AbortIf>,
    pub state: RolloutState,
    /// Why it ended, when it did not end by an operator's promote.
    pub reason: Option<String>,
    pub started_at: UnixMs,
    pub ended_at: Option<UnixMs>,
    /// The API token that started it, when tokens are configured.
    pub created_by: Option<String>,
}

/// What an operator (or `abort_if`) does to a running rollout.
#[derive(Debug, Clone, PartialEq)]
pub enum RolloutChange {
    /// A new share, in hundredths of a percent.
    Share(u32),
    Promote,
    Abort {
        reason: String,
    },
}

/// The policies deliveries are decided by: the one in force for everyone (`None`: the
/// configuration's `default`) and the rollout running, if any.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoliciesInForce {
    pub default: Option<String>,
    pub rollout: Option<Rollout>,
}

/// The deliveries whose first attempt a policy decided, started in `[since, until)`, and what
/// became of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CohortReport {
    /// Subscribers with such deliveries.
    pub subscribers: u64,
    pub deliveries: u64,
    pub delivered: u64,
    pub dead: u64,
    pub dead_by_reason: BTreeMap<String, u64>,
    /// Attempts after the first, over all of them.
    pub retry_attempts: u64,
    /// Deliveries attempted more than once.
    pub retried: u64,
    /// From a delivery's creation to the end of its first attempt, nearest rank; `None`
    /// without deliveries.
    pub first_attempt_latency_p50_ms: Option<i64>,
    pub first_attempt_latency_p99_ms: Option<i64>,
}

impl CohortReport {
    /// Deliveries that reached an end (delivered or dead).
    pub fn ended(&self) -> u64 {
        self.delivered + self.dead
    }
}

/// Which deliveries a [`CohortReport`] covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CohortQuery {
    pub policy: String,
    pub since: UnixMs,
    pub until: UnixMs,
}

/// Deliveries not ended yet, across every process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Scheduled (due, waiting for a retry, held, deferred) or in flight.
    pub not_ended: u64,
    /// Of them, held for paused subscribers: they wait rather than drain.
    pub held: u64,
    /// Of them, due now and claimable but for capacity (not held for a paused subscriber).
    pub due: u64,
}

/// The recent attempts, as `hookline capacity --from-history` models a load on them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttemptHistory {
    /// Attempts read (the most recent first, up to the limit asked).
    pub attempts: u64,
    /// How long each answered attempt took to answer, in ms, ascending.
    pub answered_ms: Vec<u64>,
    /// Of the attempts, those that failed retryably (the unanswered included).
    pub failed: u64,
    /// Of the attempts, those that got no answer: a timeout, a refused connection, a lost
    /// attempt. Each held its place for up to the attempt timeout.
    pub unanswered: u64,
}

/// What one process measured over the last minute, kept in the store so that every process
/// reads the sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MeterReading {
    /// First attempts completed.
    pub new_attempts: u64,
    /// Later attempts completed.
    pub retry_attempts: u64,
    /// Attempts that failed retryably.
    pub failed_attempts: u64,
    /// Delivery slots found busy (the slow lane counted in), and slots looked at, sampled
    /// once a second.
    pub busy_slot_samples: u64,
    pub slot_samples: u64,
    /// Attempts that got an answer: what shows what the process can do (an attempt without
    /// one, a timeout above all, shows its destination's time).
    pub answered_attempts: u64,
    /// Slots held by an attempt (the slow lane left out), sampled with `slot_samples`.
    pub held_slot_samples: u64,
}

impl std::ops::Add for MeterReading {
    type Output = MeterReading;
    fn add(self, o: MeterReading) -> MeterReading {
        MeterReading {
            new_attempts: self.new_attempts.saturating_add(o.new_attempts),
            retry_attempts: self.retry_attempts.saturating_add(o.retry_attempts),
            failed_attempts: self.failed_attempts.saturating_add(o.failed_attempts),
            busy_slot_samples: self.busy_slot_samples.saturating_add(o.busy_slot_samples),
            slot_samples: self.slot_samples.saturating_add(o.slot_samples),
            answered_attempts: self.answered_attempts.saturating_add(o.answered_attempts),
            held_slot_samples: self.held_slot_samples.saturating_add(o.held_slot_samples),
        }
    }
}
