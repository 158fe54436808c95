//! One HTTP attempt: render the body, sign it, POST it, and report what happened in the terms
//! the policy classifies. Redirects are never followed: a 3xx is the subscriber's answer.

use std::error::Error as _;
use std::time::Duration;

use axum::body::Bytes;
use hookline_policy::AttemptResult;
use hookline_store::{ClaimedDelivery, EventBody};
use reqwest::header::{HeaderValue, CONTENT_TYPE, USER_AGENT};

use crate::clock::rfc3339;
use crate::signer::SigningKey;

pub const USER_AGENT_VALUE: &str = concat!("hookline/", env!("CARGO_PKG_VERSION"));

/// What the attempt produced, plus a human-readable error for the history.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub result: AttemptResult,
    pub error: Option<String>,
}

#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
}

impl Sender {
    pub fn new(attempt_timeout: Duration) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(attempt_timeout)
            .connect_timeout(attempt_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .expect("the HTTP client configuration is static");
        Self { client }
    }

    /// Sends attempt `delivery.attempt` of `delivery`, whose rendered body is `body`, with the
    /// given unix-seconds timestamp.
    pub async fn send(
        &self,
        delivery: &ClaimedDelivery,
        body: Bytes,
        timestamp: i64,
    ) -> AttemptReport {
        let key = match SigningKey::from_secret(&delivery.destination.secret) {
            Ok(key) => key,
            Err(e) => return refused(format!("subscriber secret is unusable: {e}")),
        };
        let signature = key.sign(&delivery.id, timestamp, &body);
        let request = self
            .client
            .post(&delivery.destination.url)
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
                // Drain (a bounded amount of) the body so the connection can be reused.
                let _ = drain(response).await;
                AttemptReport {
                    result: AttemptResult::Status(status),
                    error: None,
                }
            }
            // Never echo the URL into the history: it may carry credentials.
            Err(e) => transport_failure(&e.without_url()),
        }
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

const MAX_DRAIN_BYTES: usize = 64 * 1024;

async fn drain(mut response: reqwest::Response) -> reqwest::Result<()> {
    let mut seen = 0;
    while let Some(chunk) = response.chunk().await? {
        seen += chunk.len();
        if seen > MAX_DRAIN_BYTES {
            break;
        }
    }
    Ok(())
}

fn refused(error: String) -> AttemptReport {
    AttemptReport {
        result: AttemptResult::Refused,
        error: Some(error),
    }
}

fn transport_failure(e: &reqwest::Error) -> AttemptReport {
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
    }
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
