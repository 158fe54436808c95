#![doc = include_str!("../README.md")]

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::stream::{self, Stream, TryStreamExt};
use reqwest::{Method, RequestBuilder, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The wire types: every request body, query and answer of the API.
pub use hookline_api as api;
use hookline_api::{
    CapacityView, Comparison, CreatedPortalSession, CreatedSubscriber, DeadLetter,
    DeadLetterGroups, DeadLetterQuery, Delivery, DeliveryQuery, Endpoint, ErrorBody, ErrorEnvelope,
    Event, EventQuery, EventSummary, EventType, EventTypeChange, GroupQuery, Headers, LatestDrill,
    NewEvent, NewEventType, NewPolicy, NewPortalSession, NewRollout, NewSubscriber, NewTenant,
    OperationalEndpointRequest, Overview, Page, PageQuery, Policy, PortalSession, Receipt, Replay,
    ReplayPreview, ReplayQuery, ReplayRequest, ReplayStarted, Resend, ResendPreview, ResendQuery,
    ResendRequest, Rollout, RolloutAbort, RolloutShare, RotatedSecret, Secret, SecretRotation,
    Subscriber, SubscriberChange, SubscriberQuery, Tenant, TenantChange,
};

/// What went wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API answered an error: its status, and its envelope's `code` and `message`.
    #[error("{status}: {}", .error.message)]
    Api {
        status: StatusCode,
        error: ErrorBody,
        /// `Retry-After`, when the answer had one (503 `over_capacity`, 429 `rate_limited`).
        retry_after: Option<Duration>,
    },
    /// No answer: the connection could not be made, or was lost before the answer came.
    #[error("cannot reach the hookline API at {base}")]
    Unreachable {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    /// An answer this client cannot read as the type it expects.
    #[error("the API at {base} answered {status} without the JSON expected")]
    Unreadable {
        base: String,
        status: StatusCode,
        #[source]
        source: serde_json::Error,
    },
    /// The base URL given to [`Client::new`] is not an http(s) URL.
    #[error("{0:?} is not an http(s) URL for the hookline API")]
    BaseUrl(String),
}

impl Error {
    /// The API's error `code` (`not_found`, `invalid_request`, `conflict`, ...), when the API
    /// answered one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { error, .. } => Some(&error.code),
            _ => None,
        }
    }

    /// The HTTP status of the answer, when one came.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api { status, .. } | Error::Unreadable { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the same publish may succeed if sent again: no answer, a 5xx or a 429.
    fn retryable(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Api { status, .. } => {
                status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
            }
            _ => false,
        }
    }
}

/// How a publish is retried: at most `max_attempts` sends (the first included) within
/// `max_elapsed`, waiting `base_delay` doubled after each failure up to `max_delay`, or what
/// `Retry-After` says when the answer has one (a wait past `max_elapsed` ends the retries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub max_attempts: u32,
    pub max_elapsed: Duration,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 5,
            max_elapsed: Duration::from_secs(30),
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl Retry {
    /// Send once, never again.
    pub fn never() -> Self {
        Retry {
            max_attempts: 1,
            ..Retry::default()
        }
    }

    /// The wait before send number `attempt + 1`, after `attempt` failed ones.
    fn backoff(&self, attempt: u32) -> Duration {
        let doubled = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.base_delay.saturating_mul(doubled).min(self.max_delay)
    }
}

/// What a replay request answered: a preview (`dry_run`) or a replay started.
#[derive(Debug, Clone)]
pub enum Replayed {
    Previewed(ReplayPreview),
    Started(ReplayStarted),
}

/// What a resend request answered: a preview (`dry_run`) or the resend's audit record.
#[derive(Debug, Clone)]
pub enum Resent {
    Previewed(ResendPreview),
    Started(Box<Resend>),
}

/// A query that pages on with a cursor.
trait Cursor: Serialize + Clone {
    fn set_cursor(&mut self, cursor: String);
}

macro_rules! cursor {
    ($($query:ty),*) => {$(
        impl Cursor for $query {
            fn set_cursor(&mut self, cursor: String) {
                self.cursor = Some(cursor);
            }
        }
    )*};
}
cursor!(
    PageQuery,
    SubscriberQuery,
    DeliveryQuery,
    DeadLetterQuery,
    ReplayQuery,
    ResendQuery,
    EventQuery
);

/// A client of one hookline API. Cheap to clone: clones share their connections.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    /// The base URL as given, for messages.
    shown: String,
    token: Option<String>,
    retry: Retry,
}

impl Client {
    /// A client of the API at `base_url` (e.g. `http://127.0.0.1:8080`, or with a path prefix
    /// behind a proxy), without a token, retrying publishes as [`Retry::default`] says.
    pub fn new(base_url: &str) -> Result<Self, Error> {
        let base = Url::parse(base_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .ok_or_else(|| Error::BaseUrl(base_url.to_owned()))?;
        Ok(Client {
            http: reqwest::Client::new(),
            base,
            shown: base_url.to_owned(),
            token: None,
            retry: Retry::default(),
        })
    }

    /// Sends `token` as a bearer token with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Retries publishes as `retry` says.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Sends through `http` (its timeouts, proxy, TLS roots) instead of a default one.
    pub fn with_http_client(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// The base URL, as given.
    pub fn base_url(&self) -> &str {
        &self.shown
    }

    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in Client::new: a base URL")
            .pop_if_empty()
            .extend(segments);
        let request = self.http.request(method, url);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request` once; its answer's status and body, or the API's error.
    async fn send<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
    ) -> Result<(StatusCode, T), Error> {
        let unreachable = |source| Error::Unreachable {
            base: self.shown.clone(),
            source,
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.bytes().await.map_err(unreachable)?;
        let unreadable = |source| Error::Unreadable {
            base: self.shown.clone(),
            status,
            source,
        };
        if status.is_success() {
            let answer = serde_json::from_slice(&body).map_err(unreadable)?;
            return Ok((status, answer));
        }
        let envelope: ErrorEnvelope = serde_json::from_slice(&body).map_err(unreadable)?;
        Err(Error::Api {
            status,
            error: envelope.error,
            retry_after,
        })
    }

    async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, Error> {
        Ok(self.send(request).await?.1)
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, Error> {
        self.call(self.request(Method::GET, segments)).await
    }

    async fn list<Q: Serialize, T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &Q,
    ) -> Result<T, Error> {
        self.call(self.request(Method::GET, segments).query(query))
            .await
    }

    /// Every item of a list, fetching each page when the one before it is used up.
    fn all<Q: Cursor + 'static, T: DeserializeOwned + 'static>(
        &self,
        segments: &'static [&'static str],
        query: Q,
    ) -> impl Stream<Item = Result<T, Error>> + '_ {
        stream::try_unfold(Some(query), move |query| async move {
            let Some(mut query) = query else {
                return Ok(None);
            };
            let page: Page<T> = self.list(segments, &query).await?;
            let next = page.next_cursor.map(|cursor| {
                query.set_cursor(cursor);
                query
            });
            Ok(Some((stream::iter(page.items.into_iter().map(Ok)), next)))
        })
        .try_flatten()
    }

    // Events.

    /// Publishes `event`, retried as [`Retry`] says on a lost connection, a 5xx or a 429. An
    /// event without an id is given one here (`evt_` and 128 random bits), so every send of it
    /// is the same event: the server answers a repeat with the original receipt.
    pub async fn publish(&self, event: &NewEvent) -> Result<Receipt, Error> {
        let mut event = event.clone();
        event.id.get_or_insert_with(generated_id);
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let sent = self.call(self.request(Method::POST, &["v1", "events"]).json(&event));
            let error = match sent.await {
                Ok(receipt) => return Ok(receipt),
                Err(e) if e.retryable() && attempt < self.retry.max_attempts => e,
                Err(e) => return Err(e),
            };
            let wait = match &error {
                Error::Api {
                    retry_after: Some(after),
                    ..
                } => *after,
                _ => self.retry.backoff(attempt),
            };
            if started.elapsed() + wait > self.retry.max_elapsed {
                return Err(error);
            }
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    pub async fn get_event(&self, id: &str) -> Result<Event, Error> {
        self.get(&["v1", "events", id]).await
    }

    /// One page of the events `query` selects (newest first).
    pub async fn list_events(&self, query: &EventQuery) -> Result<Page<EventSummary>, Error> {
        self.list(&["v1", "events"], query).await
    }

    /// Every event `query` selects, from its cursor on.
    pub fn events_all(
        &self,
        query: EventQuery,
    ) -> impl Stream<Item = Result<EventSummary, Error>> + '_ {
        self.all(&["v1", "events"], query)
    }

    // Event types.

    pub async fn create_event_type(&self, new: &NewEventType) -> Result<EventType, Error> {
        self.call(self.request(Method::POST, &["v1", "event-types"]).json(new))
            .await
    }

    pub async fn get_event_type(&self, name: &str) -> Result<EventType, Error> {
        self.get(&["v1", "event-types", name]).await
    }

    pub async fn update_event_type(
        &self,
        name: &str,
        change: &EventTypeChange,
    ) -> Result<EventType, Error> {
        let request = self.request(Method::PATCH, &["v1", "event-types", name]);
        self.call(request.json(change)).await
    }

    pub async fn list_event_types(&self, query: &PageQuery) -> Result<Page<EventType>, Error> {
        self.list(&["v1", "event-types"], query).await
    }

    pub fn event_types_all(
        &self,
        query: PageQuery,
    ) -> impl Stream<Item = Result<EventType, Error>> + '_ {
        self.all(&["v1", "event-types"], query)
    }

    // Subscribers.

    /// Creates a subscriber: the one answer that shows its secret.
    pub async fn create_subscriber(&self, new: &NewSubscriber) -> Result<CreatedSubscriber, Error> {
        self.call(self.request(Method::POST, &["v1", "subscribers"]).json(new))
            .await
    }

    pub async fn get_subscriber(&self, id: &str) -> Result<Subscriber, Error> {
        self.get(&["v1", "subscribers", id]).await
    }

    pub async fn update_subscriber(
        &self,
        id: &str,
        change: &SubscriberChange,
    ) -> Result<Subscriber, Error> {
        let request = self.request(Method::PATCH, &["v1", "subscribers", id]);
        self.call(request.json(change)).await
    }

    /// Revokes a subscriber (`DELETE`): it receives nothing more, for good.
    pub async fn revoke_subscriber(&self, id: &str) -> Result<Subscriber, Error> {
        self.call(self.request(Method::DELETE, &["v1", "subscribers", id]))
            .await
    }

    pub async fn list_subscribers(
        &self,
        query: &SubscriberQuery,
    ) -> Result<Page<Subscriber>, Error> {
        self.list(&["v1", "subscribers"], query).await
    }

    pub fn subscribers_all(
        &self,
        query: SubscriberQuery,
    ) -> impl Stream<Item = Result<Subscriber, Error>> + '_ {
        self.all(&["v1", "subscribers"], query)
    }

    pub async fn get_subscriber_secret(&self, id: &str) -> Result<Secret, Error> {
        self.get(&["v1", "subscribers", id, "secret"]).await
    }

    pub async fn get_subscriber_headers(&self, id: &str) -> Result<Headers, Error> {
        self.get(&["v1", "subscribers", id, "headers"]).await
    }

    pub async fn rotate_subscriber_secret(
        &self,
        id: &str,
        rotation: &SecretRotation,
    ) -> Result<RotatedSecret, Error> {
        let request = self.request(Method::POST, &["v1", "subscribers", id, "secret", "rotate"]);
        self.call(request.json(rotation)).await
    }

    /// Sends the subscriber a `hookline.test` event, delivered like any other.
    pub async fn send_test_event(&self, id: &str) -> Result<Receipt, Error> {
        let request = self.request(Method::POST, &["v1", "subscribers", id, "test-event"]);
        self.call(request).await
    }

    // Tenants.

    pub async fn create_tenant(&self, new: &NewTenant) -> Result<Tenant, Error> {
        self.call(self.request(Method::POST, &["v1", "tenants"]).json(new))
            .await
    }

    pub async fn get_tenant(&self, id: &str) -> Result<Tenant, Error> {
        self.get(&["v1", "tenants", id]).await
    }

    pub async fn update_tenant(&self, id: &str, change: &TenantChange) -> Result<Tenant, Error> {
        let request = self.request(Method::PATCH, &["v1", "tenants", id]);
        self.call(request.json(change)).await
    }

    pub async fn delete_tenant(&self, id: &str) -> Result<Tenant, Error> {
        self.call(self.request(Method::DELETE, &["v1", "tenants", id]))
            .await
    }

    pub async fn list_tenants(&self, query: &PageQuery) -> Result<Page<Tenant>, Error> {
        self.list(&["v1", "tenants"], query).await
    }

    pub fn tenants_all(&self, query: PageQuery) -> impl Stream<Item = Result<Tenant, Error>> + '_ {
        self.all(&["v1", "tenants"], query)
    }

    /// A portal session for a tenant: the one answer that shows its token.
    pub async fn create_portal_session(
        &self,
        tenant_id: &str,
        new: &NewPortalSession,
    ) -> Result<CreatedPortalSession, Error> {
        let request = self.request(
            Method::POST,
            &["v1", "tenants", tenant_id, "portal-sessions"],
        );
        self.call(request.json(new)).await
    }

    pub async fn revoke_portal_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<PortalSession, Error> {
        let segments = ["v1", "tenants", tenant_id, "portal-sessions", session_id];
        self.call(self.request(Method::DELETE, &segments)).await
    }

    // Deliveries and dead letters.

    pub async fn get_delivery(&self, id: &str) -> Result<Delivery, Error> {
        self.get(&["v1", "deliveries", id]).await
    }

    pub async fn list_deliveries(&self, query: &DeliveryQuery) -> Result<Page<Delivery>, Error> {
        self.list(&["v1", "deliveries"], query).await
    }

    pub fn deliveries_all(
        &self,
        query: DeliveryQuery,
    ) -> impl Stream<Item = Result<Delivery, Error>> + '_ {
        self.all(&["v1", "deliveries"], query)
    }

    pub async fn list_dead_letters(
        &self,
        query: &DeadLetterQuery,
    ) -> Result<Page<DeadLetter>, Error> {
        self.list(&["v1", "dead-letters"], query).await
    }

    pub fn dead_letters_all(
        &self,
        query: DeadLetterQuery,
    ) -> impl Stream<Item = Result<DeadLetter, Error>> + '_ {
        self.all(&["v1", "dead-letters"], query)
    }

    /// Dead letters by reason and subscriber, largest groups first.
    pub async fn dead_letter_groups(&self, query: &GroupQuery) -> Result<DeadLetterGroups, Error> {
        self.list(&["v1", "dead-letters", "groups"], query).await
    }

    /// Replays dead letters, or (`dry_run`) previews what a replay would release.
    pub async fn replay_dead_letters(&self, request: &ReplayRequest) -> Result<Replayed, Error> {
        let sent = self.request(Method::POST, &["v1", "dead-letters", "replay"]);
        let (status, answer) = self.send::<serde_json::Value>(sent.json(request)).await?;
        self.answer_of(status, answer, Replayed::Started, Replayed::Previewed)
    }

    /// The typed answer of an operation that answers 202 when it started something and 200
    /// for a preview.
    fn answer_of<S: DeserializeOwned, P: DeserializeOwned, A>(
        &self,
        status: StatusCode,
        answer: serde_json::Value,
        started: impl FnOnce(S) -> A,
        previewed: impl FnOnce(P) -> A,
    ) -> Result<A, Error> {
        let unreadable = |source| Error::Unreadable {
            base: self.shown.clone(),
            status,
            source,
        };
        if status == StatusCode::ACCEPTED {
            Ok(started(serde_json::from_value(answer).map_err(unreadable)?))
        } else {
            Ok(previewed(
                serde_json::from_value(answer).map_err(unreadable)?,
            ))
        }
    }

    pub async fn get_replay(&self, id: &str) -> Result<Replay, Error> {
        self.get(&["v1", "replays", id]).await
    }

    pub async fn list_replays(&self, query: &ReplayQuery) -> Result<Page<Replay>, Error> {
        self.list(&["v1", "replays"], query).await
    }

    pub fn replays_all(
        &self,
        query: ReplayQuery,
    ) -> impl Stream<Item = Result<Replay, Error>> + '_ {
        self.all(&["v1", "replays"], query)
    }

    // Resends.

    /// Resends published events to one subscriber, or (`dry_run`) previews what it would send.
    pub async fn resend(&self, request: &ResendRequest) -> Result<Resent, Error> {
        let sent = self.request(Method::POST, &["v1", "resends"]);
        let (status, answer) = self.send::<serde_json::Value>(sent.json(request)).await?;
        self.answer_of(
            status,
            answer,
            |r| Resent::Started(Box::new(r)),
            Resent::Previewed,
        )
    }

    pub async fn get_resend(&self, id: &str) -> Result<Resend, Error> {
        self.get(&["v1", "resends", id]).await
    }

    pub async fn list_resends(&self, query: &ResendQuery) -> Result<Page<Resend>, Error> {
        self.list(&["v1", "resends"], query).await
    }

    pub fn resends_all(
        &self,
        query: ResendQuery,
    ) -> impl Stream<Item = Result<Resend, Error>> + '_ {
        self.all(&["v1", "resends"], query)
    }

    // Policies and rollouts.

    pub async fn create_policy(&self, new: &NewPolicy) -> Result<Policy, Error> {
        self.call(self.request(Method::POST, &["v1", "policies"]).json(new))
            .await
    }

    pub async fn get_policy(&self, name: &str) -> Result<Policy, Error> {
        self.get(&["v1", "policies", name]).await
    }

    pub async fn list_policies(&self, query: &PageQuery) -> Result<Page<Policy>, Error> {
        self.list(&["v1", "policies"], query).await
    }

    pub fn policies_all(&self, query: PageQuery) -> impl Stream<Item = Result<Policy, Error>> + '_ {
        self.all(&["v1", "policies"], query)
    }

    pub async fn start_rollout(&self, new: &NewRollout) -> Result<Rollout, Error> {
        self.call(self.request(Method::POST, &["v1", "rollouts"]).json(new))
            .await
    }

    pub async fn get_rollout(&self, id: &str) -> Result<Rollout, Error> {
        self.get(&["v1", "rollouts", id]).await
    }

    pub async fn list_rollouts(&self, query: &PageQuery) -> Result<Page<Rollout>, Error> {
        self.list(&["v1", "rollouts"], query).await
    }

    pub fn rollouts_all(
        &self,
        query: PageQuery,
    ) -> impl Stream<Item = Result<Rollout, Error>> + '_ {
        self.all(&["v1", "rollouts"], query)
    }

    /// Changes the share of subscribers a running rollout's candidate applies to.
    pub async fn change_rollout_share(
        &self,
        id: &str,
        share: &RolloutShare,
    ) -> Result<Rollout, Error> {
        let request = self.request(Method::PATCH, &["v1", "rollouts", id]);
        self.call(request.json(share)).await
    }

    /// Makes the candidate the policy in force for everyone.
    pub async fn promote_rollout(&self, id: &str) -> Result<Rollout, Error> {
        let request = self.request(Method::POST, &["v1", "rollouts", id, "promote"]);
        self.call(request.json(&hookline_api::EmptyBody {})).await
    }

    pub async fn abort_rollout(&self, id: &str, abort: &RolloutAbort) -> Result<Rollout, Error> {
        let request = self.request(Method::POST, &["v1", "rollouts", id, "abort"]);
        self.call(request.json(abort)).await
    }

    /// Each cohort's deliveries since the rollout started, side by side.
    pub async fn compare_rollout(&self, id: &str) -> Result<Comparison, Error> {
        self.get(&["v1", "rollouts", id, "comparison"]).await
    }

    // Operations.

    /// The state of the queue at a glance: counts, ages, open breakers, recent dead letters.
    pub async fn overview(&self) -> Result<Overview, Error> {
        self.get(&["v1", "overview"]).await
    }

    /// The newest drill report in the drill directory.
    pub async fn latest_drill(&self) -> Result<LatestDrill, Error> {
        self.get(&["v1", "drill", "latest"]).await
    }

    /// The live capacity model, and whether publishes are admitted.
    pub async fn capacity(&self) -> Result<CapacityView, Error> {
        self.get(&["v1", "capacity"]).await
    }

    pub async fn get_operational_endpoint(&self) -> Result<Endpoint, Error> {
        self.get(&["v1", "operational-endpoint"]).await
    }

    /// Where hookline's own events go.
    pub async fn set_operational_endpoint(
        &self,
        request: &OperationalEndpointRequest,
    ) -> Result<Endpoint, Error> {
        let sent = self.request(Method::POST, &["v1", "operational-endpoint"]);
        self.call(sent.json(request)).await
    }

    pub async fn stop_operational_endpoint(&self) -> Result<Endpoint, Error> {
        self.call(self.request(Method::DELETE, &["v1", "operational-endpoint"]))
            .await
    }
}

/// An event id no other publish has: `evt_` and 128 bits from the standard library's
/// per-process random hash keys (no random number crate), mixed with the time and a count.
fn generated_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let half = || RandomState::new().hash_one((nanos, n, std::process::id()));
    format!("evt_{:016x}{:016x}", half(), half())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_bound() {
        let retry = Retry {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
            ..Retry::default()
        };
        let waits: Vec<u128> = (1..=4).map(|a| retry.backoff(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 350, 350]);
    }

    #[test]
    fn generated_ids_differ_and_are_valid_event_ids() {
        let (a, b) = (generated_id(), generated_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }

    #[test]
    fn a_base_url_must_be_http() {
        for bad in ["", "hookline:8080", "ftp://a.example", "mailto:a@b.example"] {
            assert!(matches!(Client::new(bad), Err(Error::BaseUrl(_))), "{bad}");
        }
        let client = Client::new("http://127.0.0.1:1/prefix/").unwrap();
        let url = client
            .request(Method::GET, &["v1", "event-types", "a b/c"])
            .build()
            .unwrap()
            .url()
            .to_string();
        assert_eq!(url, "http://127.0.0.1:1/prefix/v1/event-types/a%20b%2Fc");
    }
}
