//! One HTTP attempt: render the body, sign it, POST it, and report what happened in the terms
//! the policy classifies. Redirects are never followed: a 3xx is the subscriber's answer.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use hookline_policy::{parse_retry_after, AttemptResult, UnixMs};
use hookline_store::{ClaimedDelivery, EventBody};
use reqwest::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};

use crate::clock::rfc3339;
use crate::destination::{Guard, GuardedResolver, Refused};
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

#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    /// Destinations are vetted when connecting, not only when a subscriber is created.
    guard: Arc<Guard>,
    /// Subscriber URLs as parsed: parsing one (IDNA included) cost about 5% of the process's
    /// instructions per attempt (callgrind, `throughput`); a subscriber's URL rarely changes,
    /// and a changed one is another key.
    parsed: Arc<std::sync::Mutex<HashMap<String, reqwest::Url>>>,
}

/// URLs kept parsed at most; the cache starts over when full (a fleet larger than this parses
/// as before, no worse).
const PARSED_URLS: usize = 10_000;

impl Sender {
    pub fn new(attempt_timeout: Duration, guard: Arc<Guard>) -> Self {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(attempt_timeout)
            .connect_timeout(attempt_timeout)
            .pool_idle_timeout(Duration::from_secs(30));
        if guard.enabled {
            builder = builder.dns_resolver(Arc::new(GuardedResolver::new(guard.clone())));
        }
        let client = builder
            .build()
            .expect("the HTTP client configuration is static");
        Self {
            client,
            guard,
            parsed: Default::default(),
        }
    }

    /// Sends attempt `delivery.attempt` of `delivery`, whose rendered body is `body`, at `now`.
    pub async fn send(
        &self,
        delivery: &ClaimedDelivery,
        body: Bytes,
        now: UnixMs,
    ) -> AttemptReport {
        let timestamp = now.div_euclid(1000);
        let url = match self.url(&delivery.destination.url) {
            Ok(url) => url,
            Err(e) => return refused(format!("subscriber URL is unusable: {e}")),
        };
        if let Err(e) = self.guard.check_before_send(&url) {
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
        let mut request = self.client.post(url);
        for (name, value) in &delivery.destination.headers.0 {
            request = request.header(name, value);
        }
        let request = request
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE))
            .header("webhook-id", &delivery.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header("webhook-attempt", delivery.attempt.to_string())
            .body(body);
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let retry_after = match status {
                    429 | 503 => response
                        .headers()
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| parse_retry_after(v, now)),
                    _ => None,
                };
                let response_body = read_start(response).await;
                AttemptReport {
                    result: AttemptResult::Status(status),
                    error: None,
                    retry_after,
                    response_body,
                }
            }
            // Never echo the URL into the history: it may carry credentials.
            Err(e) => transport_failure(&e.without_url()),
        }
    }
}

impl Sender {
    fn url(&self, raw: &str) -> Result<reqwest::Url, url::ParseError> {
        if let Some(url) = self.parsed.lock().unwrap().get(raw) {
            return Ok(url.clone());
        }
        let url = reqwest::Url::parse(raw)?;
        let mut parsed = self.parsed.lock().unwrap();
        if parsed.len() >= PARSED_URLS {
            parsed.clear();
        }
        parsed.insert(raw.to_owned(), url.clone());
        Ok(url)
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

/// Keeps the first `KEPT_RESPONSE_BYTES` of the body (as text; invalid UTF-8 is replaced) and
/// drains a bounded amount of the rest.
async fn read_start(mut response: reqwest::Response) -> Option<String> {
    let mut kept = Vec::new();
    let mut seen = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = KEPT_RESPONSE_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        seen += chunk.len();
        if seen > MAX_DRAIN_BYTES {
            break;
        }
    }
    (!kept.is_empty()).then(|| String::from_utf8_lossy(&kept).into_owned())
}

fn refused(error: String) -> AttemptReport {
    AttemptReport {
        result: AttemptResult::Refused,
        error: Some(error),
        retry_after: None,
        response_body: None,
    }
}

fn transport_failure(e: &reqwest::Error) -> AttemptReport {
    if let Some(guard) = find_source::<Refused>(e) {
        return refused(guard.to_string());
    }
    let detail = error_chain(e);
    let result = if e.is_timeout() {
        AttemptResult::Timeout
    } else if e.is_builder() {
        return refused(format!("cannot build the request: {detail}"));
    } else if detail.contains("dns error") || detail.contains("failed to lookup address") {
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

fn find_source<T: std::error::Error + 'static>(e: &reqwest::Error) -> Option<&T> {
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(found) = s.downcast_ref::<T>() {
            return Some(found);
        }
        source = s.source();
    }
    None
}

/// reqwest's top-level message is generic ("error sending request"); the cause is below it.
fn error_chain(e: &reqwest::Error) -> String {
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
    use hookline_store::{DeliveryKey, Destination};

    #[test]
    fn urls_are_parsed_once_and_the_cache_stays_bounded() {
        let sender = Sender::new(Duration::from_secs(1), Arc::new(Guard::default()));
        let first = sender.url("http://Example.COM:80/hook").unwrap();
        assert_eq!(first.as_str(), "http://example.com/hook");
        assert_eq!(sender.url("http://Example.COM:80/hook").unwrap(), first);
        assert!(sender.url("http://exa mple.com/").is_err());
        assert_eq!(
            sender.parsed.lock().unwrap().len(),
            1,
            "failures are not kept"
        );
        for i in 0..PARSED_URLS + 5 {
            sender.url(&format!("http://127.0.0.1:9/{i}")).unwrap();
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
        let guarded = Sender::new(Duration::from_secs(2), on);
        for url in [
            format!("http://127.0.0.1:{}/hook", addr.port()),
            format!("http://localhost:{}/hook", addr.port()),
        ] {
            let d = delivery(url.clone());
            let report = guarded.send(&d, render_body(&d.event), 0).await;
            assert_eq!(report.result, AttemptResult::Refused, "{url}: {report:?}");
            assert!(report.error.unwrap().contains("internal address"));
        }
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "nothing reached it"
        );

        let open = Sender::new(Duration::from_secs(2), Arc::new(Guard::default()));
        let d = delivery(format!("http://localhost:{}/hook", addr.port()));
        let report = open.send(&d, render_body(&d.event), 0).await;
        assert_eq!(report.result, AttemptResult::Status(200));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
