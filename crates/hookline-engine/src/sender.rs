//! One HTTP attempt: render the body, sign it, POST it, and report what happened in the terms
//! the policy classifies. Redirects are never followed: a 3xx is the subscriber's answer.
//!
//! Attempts go through hyper's client directly rather than reqwest: reqwest parsed every
//! request's URL again twice (its redirect policy's first look, and the response's URL), and its
//! layers above hyper cost a large share of an attempt (`docs/perf-journal.md`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;

use bytes::Bytes;
use hookline_policy::{parse_retry_after, AttemptResult, UnixMs};
use hookline_store::{ClaimedDelivery, EventBody};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::{timeout_at, Instant};
use url::Url;

use crate::clock::rfc3339;
use crate::destination::{Guard, GuardedResolver, Guards, Refused};
use crate::signer::SigningKey;

pub const USER_AGENT_VALUE: &str = concat!("hookline/", env!("CARGO_PKG_VERSION"));

/// What the attempt produced, plus a human-readable error for the history.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub result: AttemptResult,
    pub error: Option<String>,
    /// The wait a 429 or 503 answer asked for in `Retry-After`.
    pub retry_after: Option<Duration>,
    /// The start of the answer's body (at most `KEPT_RESPONSE_BYTES`).
    pub response_body: Option<String>,
}

/// Connections through the guard's resolver, TLS (rustls, the webpki roots) or plain, each
/// given up after the attempt timeout.
type Connector = WithinTimeout<hyper_rustls::HttpsConnector<HttpConnector<GuardedResolver>>>;

/// Bounds a whole connect (lookup, TCP and TLS). The attempt's deadline bounds the connect it
/// waits for, but a connect that lost its race to a pooled connection goes on in the
/// background, and a server that accepts TCP and never finishes TLS would hold it open.
#[derive(Clone)]
struct WithinTimeout<C> {
    connect: C,
    timeout: Duration,
}

/// A connect that did not finish within the attempt timeout.
#[derive(Debug, thiserror::Error)]
#[error("connect did not finish within {}", humantime::format_duration(*.0))]
struct ConnectTimedOut(Duration);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<C> tower_service::Service<Uri> for WithinTimeout<C>
where
    C: tower_service::Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.connect.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.connect.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(ConnectTimedOut(timeout).into()),
            }
        })
    }
}

#[derive(Clone)]
pub struct Sender {
    /// The platform's subscribers' connections.
    client: Client<Connector, Full<Bytes>>,
    /// Tenants' subscribers' connections, through their own guard (the same client when the
    /// guard is the same).
    tenants_client: Client<Connector, Full<Bytes>>,
    /// The whole attempt, connecting and the answer's body included.
    attempt_timeout: Duration,
    /// Destinations are vetted when connecting, not only when a subscriber is created.
    guards: Guards,
    /// Subscriber URLs as parsed: parsing one (IDNA included) on every attempt showed in the
    /// whole process's cost (`docs/perf-journal.md`); a subscriber's URL rarely changes, and a
    /// changed one is another key.
    /// Shared, so that an attempt copies none of it.
    parsed: Arc<std::sync::Mutex<HashMap<String, Arc<Target>>>>,
}

/// A subscriber URL as the guard reads it, and as the request's target.
#[derive(Clone, Debug, PartialEq)]
struct Target {
    url: Url,
    /// Without the credentials, which go in `authorization`.
    uri: Uri,
    /// Basic credentials from a URL's `user:password@`, sent as the HTTP client before did.
    /// New subscribers cannot have them (refused when created); ones stored before that can.
    authorization: Option<HeaderValue>,
}

/// URLs kept parsed at most; the cache starts over when full (a fleet larger than this parses
/// as before, no worse).
const PARSED_URLS: usize = 10_000;

/// How long an idle connection to a subscriber is kept for its next attempt.
const IDLE_CONNECTION: Duration = Duration::from_secs(30);
/// TCP keepalive on each connection (as the HTTP client before had it): a peer that vanished
/// is found out while the connection idles in the pool.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_RETRIES: u32 = 3;

impl Sender {
    pub fn new(attempt_timeout: Duration, guards: Guards) -> Self {
        Self::with_resolvers(attempt_timeout, guards, GuardedResolver::new)
    }

    /// A sender whose connections find their addresses through the resolvers `resolver` makes
    /// of each guard.
    pub fn with_resolvers(
        attempt_timeout: Duration,
        guards: Guards,
        resolver: impl Fn(Arc<Guard>) -> GuardedResolver,
    ) -> Self {
        let client = client(resolver(guards.platform.clone()), attempt_timeout);
        let tenants_client = if Arc::ptr_eq(&guards.platform, &guards.tenants) {
            client.clone()
        } else {
            self::client(resolver(guards.tenants.clone()), attempt_timeout)
        };
        Self {
            client,
            tenants_client,
            attempt_timeout,
            guards,
            parsed: Default::default(),
        }
    }

    /// Sends attempt `delivery.attempt` of `delivery`, whose rendered body is `body`, at `now`,
    /// with the attempt span's `traceparent` when tracing is on (`traces.rs`).
    pub async fn send(
        &self,
        delivery: &ClaimedDelivery,
        body: Bytes,
        now: UnixMs,
        traceparent: Option<&str>,
    ) -> AttemptReport {
        let timestamp = now.div_euclid(1000);
        let target = match self.target(&delivery.destination.url) {
            Ok(target) => target,
            Err(e) => return refused(format!("subscriber URL is unusable: {e}")),
        };
        let tenant = delivery.destination.tenant_id.as_deref();
        if let Err(e) = self.guards.of(tenant).check_before_send(&target.url) {
            return refused(e);
        }
        // During a secret rotation's grace period both signatures go out, space-separated, as
        // Standard Webhooks specifies; verifiers accept any one that matches.
        let mut signatures = Vec::with_capacity(delivery.destination.secrets.len());
        for secret in &delivery.destination.secrets {
            match SigningKey::from_secret(secret) {
                Ok(key) => signatures.push(key.sign(&delivery.id, timestamp, &body)),
                Err(e) => return refused(format!("subscriber secret is unusable: {e}")),
            }
        }
        let signature = signatures.join(" ");
        let own = &delivery.destination.headers.0;
        let credentials = Credentials::new(
            own.values()
                .map(String::as_str)
                .chain(target.authorization.iter().filter_map(|v| v.to_str().ok()))
                .chain([signature.as_str()]),
        );
        let mut request = Request::post(target.uri.clone());
        for (name, value) in own {
            request = request.header(name, value);
        }
        // Stored names are lower case. The subscriber's own header wins over these.
        if !own.contains_key("accept") {
            request = request.header(ACCEPT, HeaderValue::from_static("*/*"));
        }
        if let (Some(basic), false) = (&target.authorization, own.contains_key("authorization")) {
            request = request.header(AUTHORIZATION, basic.clone());
        }
        // A subscriber's own headers cannot name it (`api/validate.rs`).
        if let Some(traceparent) = traceparent {
            request = request.header(crate::traces::TRACEPARENT, traceparent);
        }
        let request = request
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE))
            .header("webhook-id", &delivery.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header("webhook-attempt", delivery.attempt.to_string())
            .body(Full::new(body));
        let request = match request {
            Ok(request) => request,
            Err(e) => return refused(format!("cannot build the request: {e}")),
        };
        // One deadline for the whole attempt. An answer whose body is still arriving at the
        // deadline is the answer it is: its status stands, with the part of the body read.
        let deadline = Instant::now() + self.attempt_timeout;
        let client = match tenant {
            Some(_) => &self.tenants_client,
            None => &self.client,
        };
        match timeout_at(deadline, client.request(request)).await {
            Ok(Ok(response)) => answered(response, now, deadline, &credentials).await,
            Ok(Err(e)) => transport_failure(&e, self.attempt_timeout),
            Err(_) => timed_out(self.attempt_timeout, None),
        }
    }
}

impl Sender {
    fn target(&self, raw: &str) -> Result<Arc<Target>, String> {
        if let Some(target) = self.parsed.lock().unwrap().get(raw) {
            return Ok(target.clone());
        }
        let url = Url::parse(raw).map_err(|e| e.to_string())?;
        let authorization = basic_credentials(&url);
        let mut bare = url.clone();
        // Only a URL with a host can hold credentials, and every URL sent to has one.
        let _ = bare.set_username("");
        let _ = bare.set_password(None);
        let uri = bare.as_str().parse::<Uri>().map_err(|e| e.to_string())?;
        let target = Arc::new(Target {
            url,
            uri,
            authorization,
        });
        let mut parsed = self.parsed.lock().unwrap();
        if parsed.len() >= PARSED_URLS {
            parsed.clear();
        }
        parsed.insert(raw.to_owned(), target.clone());
        Ok(target)
    }
}

/// The HTTP client, whose connects each end within `connect_timeout`.
fn client(resolver: GuardedResolver, connect_timeout: Duration) -> Client<Connector, Full<Bytes>> {
    let mut http = HttpConnector::new_with_resolver(resolver);
    // The TLS layer above it takes https URLs too.
    http.enforce_http(false);
    // A request goes out in one write; waiting to coalesce it only adds latency.
    http.set_nodelay(true);
    // Split across a name's addresses, so that one that does not answer leaves time for the
    // next.
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(KEEPALIVE));
    http.set_keepalive_interval(Some(KEEPALIVE));
    http.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let connector = WithinTimeout {
        connect: tls,
        timeout: connect_timeout,
    };
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE_CONNECTION)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// `Basic` credentials from a URL's `user:password@`, percent-decoded.
fn basic_credentials(url: &Url) -> Option<HeaderValue> {
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    // The bytes as they were written, UTF-8 or not.
    let mut pair: Vec<u8> = percent_encoding::percent_decode_str(url.username()).collect();
    pair.push(b':');
    pair.extend(percent_encoding::percent_decode_str(
        url.password().unwrap_or(""),
    ));
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// What an answer says: its status, the wait it asks for, the start of its body (what arrives
/// of it before `deadline`, `credentials` redacted).
async fn answered(
    response: Response<Incoming>,
    now: UnixMs,
    deadline: Instant,
    credentials: &Credentials,
) -> AttemptReport {
    let status = response.status().as_u16();
    let retry_after = match status {
        429 | 503 => response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, now)),
        _ => None,
    };
    AttemptReport {
        result: AttemptResult::Status(status),
        error: None,
        retry_after,
        response_body: read_start(response.into_body(), deadline, credentials).await,
    }
}

/// What replaces a credential in a stored answer.
pub const REDACTED: &str = "[redacted]";

/// A part of a credential at least this long is redacted on its own too: a bearer token
/// without its scheme, one signature of several without its `v1,`. Shorter parts (`Bearer`,
/// `v1`) are common words.
const MIN_REDACTED_PART: usize = 16;

/// What a request carried that is a credential: the subscriber's header values (admin-only,
/// like its secret), the `Basic` credentials of an older subscriber's URL, and the signatures.
/// A subscriber that answers by echoing the request would otherwise have them stored in the
/// attempt history, which read tokens and the console see.
struct Credentials(Vec<Vec<u8>>);

impl Credentials {
    fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut redacted: Vec<Vec<u8>> = Vec::new();
        for value in values.into_iter().filter(|v| !v.is_empty()) {
            redacted.push(value.as_bytes().to_vec());
            redacted.extend(
                value
                    .split([' ', ','])
                    .filter(|part| part.len() >= MIN_REDACTED_PART && *part != value)
                    .map(|part| part.as_bytes().to_vec()),
            );
        }
        // Longest first: a whole value goes before a part of it could split it.
        redacted.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        redacted.dedup();
        Credentials(redacted)
    }

    /// How many bytes past the kept start a credential that begins inside it can reach.
    fn reach(&self) -> usize {
        self.0
            .first()
            .map_or(0, |longest| longest.len().saturating_sub(1))
    }

    /// `text` with every occurrence of a credential replaced by [`REDACTED`].
    fn redact(&self, mut text: Vec<u8>) -> Vec<u8> {
        for secret in &self.0 {
            let mut out = Vec::with_capacity(text.len());
            let mut rest = text.as_slice();
            while let Some(at) = rest
                .windows(secret.len())
                .position(|w| w == secret.as_slice())
            {
                out.extend_from_slice(&rest[..at]);
                out.extend_from_slice(REDACTED.as_bytes());
                rest = &rest[at + secret.len()..];
            }
            out.extend_from_slice(rest);
            text = out;
        }
        text
    }
}

/// The JSON a subscriber receives. The payload is stored as canonical JSON text and spliced in
/// verbatim, never re-parsed. Rendered once per event per claim batch: every delivery of a
/// fan-out shares the same bytes.
pub fn render_body(e: &EventBody) -> Bytes {
    let quote = |s: &str| serde_json::to_string(s).expect("strings serialize");
    Bytes::from(format!(
        r#"{{"id":{},"type":{},"timestamp":{},"payload_version":{},"data":{}}}"#,
        quote(&e.id),
        quote(&e.event_type),
        quote(&rfc3339(e.accepted_at)),
        e.payload_version,
        e.payload
    ))
}

/// How much of each answer is kept with its attempt.
pub const KEPT_RESPONSE_BYTES: usize = 4 * 1024;
/// How much is read (and dropped) beyond that so the connection can be reused; a larger body
/// closes the connection instead.
const MAX_DRAIN_BYTES: usize = 64 * 1024;

/// Keeps the first `KEPT_RESPONSE_BYTES` of the body, `credentials` redacted, and drains a
/// bounded amount of the rest, until `deadline`. A credential that starts inside the kept part
/// is redacted whole: enough past it is read to see its end. Kept as text that every store can
/// hold: invalid UTF-8 and NUL bytes are replaced (PostgreSQL refuses NUL in text, and one
/// subscriber's binary answer would fail the whole batch of completions it was committed with).
async fn read_start(
    mut body: Incoming,
    deadline: Instant,
    credentials: &Credentials,
) -> Option<String> {
    let read = KEPT_RESPONSE_BYTES + credentials.reach();
    let mut kept = Vec::new();
    let mut seen = 0;
    while let Ok(Some(Ok(frame))) = timeout_at(deadline, body.frame()).await {
        // Trailers carry nothing kept.
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        let room = read.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        seen += chunk.len();
        if seen > MAX_DRAIN_BYTES {
            break;
        }
    }
    let mut kept = credentials.redact(kept);
    kept.truncate(KEPT_RESPONSE_BYTES);
    (!kept.is_empty()).then(|| String::from_utf8_lossy(&kept).replace('\0', "\u{FFFD}"))
}

fn refused(error: String) -> AttemptReport {
    AttemptReport {
        result: AttemptResult::Refused,
        error: Some(error),
        retry_after: None,
        response_body: None,
    }
}

/// No answer: refused by the guard, a connect given up for time, a name that does not resolve,
/// or a connection that failed (refused, reset, closed early, TLS). hyper's errors carry no
/// URL, which may hold credentials and is never echoed into the history.
fn transport_failure(
    e: &hyper_util::client::legacy::Error,
    attempt_timeout: Duration,
) -> AttemptReport {
    if let Some(guard) = find_source::<Refused>(e) {
        return refused(guard.to_string());
    }
    let detail = error_chain(e);
    // A connect's own timeout ends at the attempt's deadline too, and may fire first.
    if gave_up_for_time(e) {
        return timed_out(attempt_timeout, Some(detail));
    }
    let result = if detail.contains("dns error") || detail.contains("failed to lookup address") {
        AttemptResult::DnsFailed
    } else {
        AttemptResult::ConnectionFailed
    };
    AttemptReport {
        result,
        error: Some(detail),
        retry_after: None,
        response_body: None,
    }
}

/// No answer within the attempt timeout; `detail`, what the connect said when it gave up.
fn timed_out(attempt_timeout: Duration, detail: Option<String>) -> AttemptReport {
    let mut error = format!(
        "no answer within the attempt timeout ({})",
        humantime::format_duration(attempt_timeout)
    );
    if let Some(detail) = detail {
        error = format!("{error}: {detail}");
    }
    AttemptReport {
        result: AttemptResult::Timeout,
        error: Some(error),
        retry_after: None,
        response_body: None,
    }
}

/// Whether the connect gave up for time: the whole connect's bound, or the TCP connect's
/// (an `io::Error` of kind `TimedOut`).
fn gave_up_for_time(e: &hyper_util::client::legacy::Error) -> bool {
    find_source::<ConnectTimedOut>(e).is_some()
        || find_source::<std::io::Error>(e)
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

fn find_source<'e, T: std::error::Error + 'static>(
    e: &'e (dyn std::error::Error + 'static),
) -> Option<&'e T> {
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(found) = s.downcast_ref::<T>() {
            return Some(found);
        }
        source = s.source();
    }
    None
}

/// The client's top-level message is generic ("client error (Connect)"); the cause is below it.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::destination::TenantDestinations;
    use hookline_store::{DeliveryKey, Destination};

    /// Guards that let every destination through (tests send to loopback).
    fn open_guards() -> Guards {
        Guards::new(Guard::default(), TenantDestinations::AsPlatform)
    }

    #[test]
    fn urls_are_parsed_once_and_the_cache_stays_bounded() {
        let sender = Sender::new(Duration::from_secs(1), open_guards());
        let first = sender.target("http://Example.COM:80/hook").unwrap();
        assert_eq!(first.url.as_str(), "http://example.com/hook");
        assert_eq!(first.uri, "http://example.com/hook");
        assert_eq!(sender.target("http://Example.COM:80/hook").unwrap(), first);
        assert_eq!(first.authorization, None);
        assert!(sender.target("http://exa mple.com/").is_err());
        assert_eq!(
            sender.parsed.lock().unwrap().len(),
            1,
            "failures are not kept"
        );
        let with_credentials = sender.target("http://u:p@example.com/x").unwrap();
        assert_eq!(
            with_credentials.uri, "http://example.com/x",
            "no userinfo in the target"
        );
        assert!(with_credentials.authorization.is_some());
        for i in 0..PARSED_URLS + 5 {
            sender.target(&format!("http://127.0.0.1:9/{i}")).unwrap();
        }
        assert!(sender.parsed.lock().unwrap().len() <= PARSED_URLS);
    }

    fn delivery(url: String) -> ClaimedDelivery {
        ClaimedDelivery {
            key: DeliveryKey(1),
            id: "e:s".into(),
            lease: 1,
            attempt: 1,
            first_seen: 0,
            window_start: 0,
            due_at: 0,
            lost_attempt_started_at: None,
            destination: Arc::new(Destination {
                subscriber_id: "s".into(),
                tenant_id: None,
                origin: hookline_store::Origin::of_url(&url),
                url,
                secrets: vec![crate::signer::new_secret()],
                headers: Default::default(),
            }),
            event: Arc::new(EventBody {
                id: "e".into(),
                event_type: "t".into(),
                payload: "{}".into(),
                payload_version: 1,
                accepted_at: 0,
                traceparent: None,
            }),
        }
    }

    /// A receiver on loopback: reachable only while the guard is off.
    async fn receiver() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counted = hits.clone();
        let app = axum::Router::new().fallback(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { "ok" }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, hits)
    }

    #[tokio::test]
    async fn the_guard_refuses_internal_destinations_when_connecting() {
        let (addr, hits) = receiver().await;
        let on = Arc::new(Guard {
            enabled: true,
            ..Guard::default()
        });
        let guarded = Sender::new(
            Duration::from_secs(2),
            Guards::new((*on).clone(), TenantDestinations::AsPlatform),
        );
        for url in [
            format!("http://127.0.0.1:{}/hook", addr.port()),
            format!("http://localhost:{}/hook", addr.port()),
        ] {
            let d = delivery(url.clone());
            let report = guarded.send(&d, render_body(&d.event), 0, None).await;
            assert_eq!(report.result, AttemptResult::Refused, "{url}: {report:?}");
            assert!(report.error.unwrap().contains("internal address"));
        }
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "nothing reached it"
        );

        let open = Sender::new(Duration::from_secs(2), open_guards());
        let d = delivery(format!("http://localhost:{}/hook", addr.port()));
        let report = open.send(&d, render_body(&d.event), 0, None).await;
        assert_eq!(report.result, AttemptResult::Status(200));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// What the platform opens for its own subscribers (`allowed_networks`) is not opened for
    /// tenants' (`[tenants] destinations = "public"`): checked again when connecting.
    #[tokio::test]
    async fn a_tenant_s_subscriber_is_held_to_public_addresses() {
        let (addr, hits) = receiver().await;
        let platform = Guard {
            enabled: true,
            allowed_networks: vec!["127.0.0.0/8".parse().unwrap()],
            https_only: false,
        };
        let sender = Sender::new(
            Duration::from_secs(2),
            Guards::new(platform, TenantDestinations::Public),
        );
        let url = format!("http://127.0.0.1:{}/hook", addr.port());
        let platform_s = delivery(url.clone());
        let report = sender
            .send(&platform_s, render_body(&platform_s.event), 0, None)
            .await;
        assert_eq!(report.result, AttemptResult::Status(200), "{report:?}");
        let mut tenant_s = delivery(url);
        Arc::make_mut(&mut tenant_s.destination).tenant_id = Some("acme".into());
        let report = sender
            .send(&tenant_s, render_body(&tenant_s.event), 0, None)
            .await;
        assert_eq!(report.result, AttemptResult::Refused, "{report:?}");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_answer_is_read_with_its_wait_and_the_start_of_its_body() {
        let (addr, seen) = recording_server((
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "7")],
            "busy",
        ))
        .await;
        let sender = Sender::new(Duration::from_secs(5), open_guards());
        let d = delivery(format!("http://{addr}/hook"));
        let report = sender
            .send(&d, render_body(&d.event), 1_000_000, None)
            .await;
        assert_eq!(report.result, AttemptResult::Status(503), "{report:?}");
        assert_eq!(report.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(report.response_body.as_deref(), Some("busy"));
        let headers = seen.lock().unwrap().take().expect("the request arrived");
        let header = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_owned();
        assert_eq!(header("host"), addr.to_string());
        assert_eq!(header("accept"), "*/*");
        assert_eq!(
            header("content-length"),
            render_body(&d.event).len().to_string()
        );
        assert_eq!(header("webhook-id"), "e:s");
        assert_eq!(header("webhook-timestamp"), "1000");
        assert_eq!(header("webhook-attempt"), "1");
        assert_eq!(header("content-type"), "application/json");
        assert_eq!(header("user-agent"), USER_AGENT_VALUE);
        assert!(header("webhook-signature").starts_with("v1,"));
    }

    /// A server on loopback that reads a request's head and answers it with `answer`, then
    /// holds the connection open.
    async fn raw_server(
        answer: &'static [u8],
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let (mut connection, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && connection.read(&mut byte).await.unwrap() == 1 {
                head.push(byte[0]);
            }
            connection.write_all(answer).await.unwrap();
            std::future::pending::<()>().await
        });
        (addr, held)
    }

    /// A server on loopback answering every request with `answer`; keeps the last request's
    /// headers.
    async fn recording_server<A>(
        answer: A,
    ) -> (
        std::net::SocketAddr,
        Arc<std::sync::Mutex<Option<axum::http::HeaderMap>>>,
    )
    where
        A: axum::response::IntoResponse + Clone + Send + Sync + 'static,
    {
        let seen = Arc::new(std::sync::Mutex::new(None));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let headers = seen.clone();
        let app = axum::Router::new().fallback(move |h: axum::http::HeaderMap| {
            *headers.lock().unwrap() = Some(h);
            let answer = answer.clone();
            async move { answer }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, seen)
    }

    /// Bounds a send that should end by itself well before this.
    async fn bounded(sender: &Sender, d: &ClaimedDelivery) -> AttemptReport {
        tokio::time::timeout(
            Duration::from_secs(30),
            sender.send(d, render_body(&d.event), 0, None),
        )
        .await
        .expect("the attempt ended")
    }

    #[tokio::test]
    async fn no_answer_within_the_attempt_timeout_is_a_timeout() {
        // Takes the request and never answers.
        let (addr, silent) = raw_server(b"").await;
        let sender = Sender::new(Duration::from_millis(200), open_guards());
        let report = bounded(&sender, &delivery(format!("http://{addr}/hook"))).await;
        assert_eq!(report.result, AttemptResult::Timeout, "{report:?}");
        assert!(report.error.unwrap().contains("200ms"));
        silent.abort();
    }

    /// The answer is the answer: a body still arriving at the attempt's deadline keeps its
    /// status (a delivered webhook is not sent again for a slow body), with what arrived of it.
    #[tokio::test]
    async fn a_body_still_arriving_at_the_deadline_keeps_its_status() {
        let (addr, held) =
            raw_server(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789").await;
        let sender = Sender::new(Duration::from_millis(300), open_guards());
        let report = bounded(&sender, &delivery(format!("http://{addr}/hook"))).await;
        assert_eq!(report.result, AttemptResult::Status(200), "{report:?}");
        assert_eq!(report.response_body.as_deref(), Some("0123456789"));
        held.abort();
    }

    /// A binary answer is kept as text any store takes: no NUL, no invalid UTF-8.
    #[tokio::test]
    async fn a_binary_answer_is_kept_as_text_without_nul() {
        let (addr, held) =
            raw_server(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nok\0\xff\0!").await;
        let sender = Sender::new(Duration::from_secs(5), open_guards());
        let report = bounded(&sender, &delivery(format!("http://{addr}/hook"))).await;
        assert_eq!(report.result, AttemptResult::Status(200), "{report:?}");
        assert_eq!(
            report.response_body.as_deref(),
            Some("ok\u{FFFD}\u{FFFD}\u{FFFD}!")
        );
        held.abort();
    }

    #[tokio::test]
    async fn the_start_of_a_long_answer_is_kept() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(|| async { "x".repeat(10 * 1024) });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let sender = Sender::new(Duration::from_secs(5), open_guards());
        let report = bounded(&sender, &delivery(format!("http://{addr}/hook"))).await;
        assert_eq!(report.result, AttemptResult::Status(200));
        assert_eq!(report.response_body.unwrap().len(), KEPT_RESPONSE_BYTES);
    }

    #[test]
    fn credentials_are_redacted_whole_and_by_their_long_parts() {
        let credentials = Credentials::new([
            "Bearer sk_live_0123456789abcdef",
            "t-7",
            "v1,c2lnbmF0dXJlLW9uZS12YWx1ZQ== v1,b3RoZXItc2lnbmF0dXJlLXZhbHVl",
        ]);
        let echoed = b"auth: Bearer sk_live_0123456789abcdef; key sk_live_0123456789abcdef; \
            tenant t-7; sig v1,b3RoZXItc2lnbmF0dXJlLXZhbHVl; Bearer stays";
        assert_eq!(
            String::from_utf8(credentials.redact(echoed.to_vec())).unwrap(),
            "auth: [redacted]; key [redacted]; tenant [redacted]; sig v1,[redacted]; Bearer stays"
        );
    }

    /// A credential that begins inside the kept start of an answer and ends past it is
    /// redacted all the same: none of it is kept.
    #[tokio::test]
    async fn a_credential_across_the_end_of_the_kept_answer_is_redacted() {
        const KEY: &str = "key-0123456789abcdefghij";
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = format!("{}{KEY} and more", "x".repeat(KEPT_RESPONSE_BYTES - 8));
        let app = axum::Router::new().fallback(move || std::future::ready(answer.clone()));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let sender = Sender::new(Duration::from_secs(5), open_guards());
        let mut d = delivery(format!("http://{addr}/hook"));
        let mut destination = (*d.destination).clone();
        destination.headers.0.insert("x-api-key".into(), KEY.into());
        d.destination = Arc::new(destination);
        let kept = bounded(&sender, &d).await.response_body.unwrap();
        assert_eq!(kept.len(), KEPT_RESPONSE_BYTES);
        // 8 bytes of room: the start of the marker, none of the key.
        assert!(
            kept.ends_with("xxxx[redacte"),
            "{}",
            &kept[kept.len() - 40..]
        );
    }

    /// A subscriber's own `accept` replaces hookline's; credentials stored in an older
    /// subscriber's URL go as Basic auth, not in the request's target.
    #[tokio::test]
    async fn a_subscribers_own_headers_and_stored_credentials_are_sent() {
        let (addr, seen) = recording_server("ok").await;
        let sender = Sender::new(Duration::from_secs(5), open_guards());
        let url = format!("http://user:p%40ss@{addr}/hook");
        let sent = |own: &[(&str, &str)]| {
            let mut d = delivery(url.clone());
            let mut destination = (*d.destination).clone();
            for (name, value) in own {
                destination
                    .headers
                    .0
                    .insert((*name).into(), (*value).into());
            }
            d.destination = Arc::new(destination);
            let (sender, seen) = (&sender, &seen);
            async move {
                let report = bounded(sender, &d).await;
                assert_eq!(report.result, AttemptResult::Status(200), "{report:?}");
                let headers = seen.lock().unwrap().take().expect("the request arrived");
                move |name: &str| -> Vec<String> {
                    headers
                        .get_all(name)
                        .iter()
                        .map(|v| v.to_str().unwrap().to_owned())
                        .collect()
                }
            }
        };
        let all = sent(&[("accept", "application/json")]).await;
        assert_eq!(all("accept"), ["application/json"]);
        // base64("user:p@ss")
        assert_eq!(all("authorization"), ["Basic dXNlcjpwQHNz"]);
        assert_eq!(all("host"), [addr.to_string()]);
        // The subscriber's own credentials are the ones sent.
        let all = sent(&[("authorization", "Bearer own")]).await;
        assert_eq!(all("authorization"), ["Bearer own"]);
        assert_eq!(all("accept"), ["*/*"]);
    }

    /// A connect that does not finish in time (here a server that takes the connection and
    /// never answers TLS) is given up by the connector itself, not only by the attempt's
    /// deadline, and counts as a timeout.
    #[tokio::test]
    async fn a_connect_that_does_not_finish_in_time_is_a_timeout() {
        let (addr, silent) = raw_server(b"").await;
        let guards = open_guards();
        let client = client(
            GuardedResolver::new(guards.platform.clone()),
            Duration::from_millis(200),
        );
        let sender = Sender {
            tenants_client: client.clone(),
            client,
            attempt_timeout: Duration::from_secs(20),
            guards,
            parsed: Default::default(),
        };
        let report = bounded(&sender, &delivery(format!("https://{addr}/hook"))).await;
        assert_eq!(report.result, AttemptResult::Timeout, "{report:?}");
        let error = report.error.unwrap();
        assert!(
            error.contains("connect did not finish within 200ms"),
            "{error}"
        );
        silent.abort();
    }

    #[tokio::test]
    async fn a_closed_port_is_a_failed_connection() {
        // Bound and never listening: the port stays this test's, and connecting is refused.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        let sender = Sender::new(Duration::from_secs(5), open_guards());
        let report = bounded(&sender, &delivery(format!("http://{addr}/hook"))).await;
        assert_eq!(report.result, AttemptResult::ConnectionFailed, "{report:?}");
        drop(socket);
        let error = report.error.unwrap();
        assert!(error.contains("tcp connect error"), "{error}");
        assert!(
            !error.contains(&addr.port().to_string()),
            "no URL in the history: {error}"
        );
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_a_dns_failure() {
        let lookup: crate::destination::Lookup = Arc::new(|host| {
            Box::pin(async move {
                Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("failed to lookup address information: {host} is unknown"),
                ))
            })
        });
        let sender = Sender::with_resolvers(Duration::from_secs(5), open_guards(), |guard| {
            GuardedResolver::with_lookup(guard, lookup.clone())
        });
        let d = delivery("http://nowhere.example/hook".into());
        let report = sender.send(&d, render_body(&d.event), 0, None).await;
        assert_eq!(report.result, AttemptResult::DnsFailed, "{report:?}");
    }

    /// The TLS layer is in the path: an https destination whose server does not speak TLS
    /// fails its handshake (a failed connection), and no plain-text request is sent to it.
    #[tokio::test]
    async fn an_https_destination_that_does_not_speak_tls_is_a_failed_connection() {
        let (addr, hits) = receiver().await;
        let sender = Sender::new(Duration::from_secs(5), open_guards());
        let d = delivery(format!("https://{addr}/hook"));
        let report = sender.send(&d, render_body(&d.event), 0, None).await;
        assert_eq!(report.result, AttemptResult::ConnectionFailed, "{report:?}");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
