//! The subscriber simulator behind `hookline sink`, for drills, demos and tests. Behaviour is
//! chosen by path, can be flipped at run time, and everything received is counted: deduplicated
//! by webhook-id (as a well-behaved subscriber would), signatures checked when it knows the
//! secret, signing again as the [`Sign`] it is given does: in tests the reference Standard
//! Webhooks implementation (`reference_signature`, feature `standardwebhooks`), not hookline's
//! own signer; in `hookline sink`, hookline's signer, which the tests hold to the reference.
//!
//! Paths: `/ok/...` 200; `/status/{code}/...` that status; `/flaky/{n}/...` 503 for the first n
//! attempts of each webhook-id, then 200; `/slow/{ms}/...` after ms, what the rest of the path
//! asks for (`/slow/40/status/503/...`), or 200; `/hang/...` never
//! answers; `/gone/...` 410. `POST /control {"prefix", "fail": 503 | "hang" | null}` makes every
//! path under a prefix fail (or recover); `GET /stats` reports.
//!
//! One sink may listen on several loopback ports, each a separate origin (scheme, host, port)
//! to the hookline delivering to it, so that it can stand for many hosts: hookline caps the
//! attempts in flight per origin (`delivery.max_in_flight_per_host`). Behaviour, control and
//! counts are shared by every port; the requests being answered are also counted per origin,
//! with the most seen at once, which is what a host at its cap would see.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::{get, post};
use axum::Extension;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::now_ms;

/// Whether the sink checks signatures, and with what.
#[derive(Clone, Default)]
pub enum Signatures {
    #[default]
    Unchecked,
    /// Each webhook signed again as `sign` does, with its secret from `secrets`, must match one
    /// of the signatures it carries.
    Checked { secrets: Secrets, sign: Sign },
}

/// The `webhook-signature` entry (`v1,` and the signature) a webhook signed with `secret`
/// carries; `None` for a secret that cannot sign.
pub type Sign = fn(secret: &str, webhook_id: &str, timestamp: i64, body: &[u8]) -> Option<String>;

/// The reference Standard Webhooks implementation's signature (the `standardwebhooks` crate),
/// for tests that hold hookline's signer to it.
#[cfg(feature = "standardwebhooks")]
pub fn reference_signature(
    secret: &str,
    webhook_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Option<String> {
    standardwebhooks::Webhook::new(secret)
        .and_then(|hook| hook.sign(webhook_id, timestamp, body))
        .ok()
}

/// Where the sink learns subscriber secrets, to check signatures.
#[derive(Clone)]
pub enum Secrets {
    /// One secret for every webhook.
    One(String),
    /// Each subscriber's secret, fetched once from a hookline API (`GET
    /// /v1/subscribers/{id}/secret`), the subscriber being the part of the webhook-id after its
    /// last ':'.
    FromApi { api: String, token: Option<String> },
}

/// How a failing prefix fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Status(u16),
    Hang,
}

#[derive(Default)]
struct Tally {
    received: u64,
    per_id: HashMap<String, u32>,
    bad_signatures: u64,
    per_path: HashMap<String, u64>,
    /// (webhook-id, unix ms) of every receipt, in arrival order.
    receipts: Vec<(String, i64)>,
    /// By origin (`http://127.0.0.1:port`): requests being answered there now, and the most
    /// at once since the sink started.
    per_origin: HashMap<Arc<str>, Concurrency>,
}

#[derive(Default, Clone, Copy)]
struct Concurrency {
    now: u64,
    max: u64,
}

/// The origin a listener serves, given to each of its requests.
#[derive(Clone)]
struct Origin(Arc<str>);

/// One request being answered at an origin, from its arrival until its answer is sent or the
/// client gives up on it (the handler is dropped then: a hanging answer too).
struct InFlight {
    sink: Arc<Sink>,
    origin: Arc<str>,
}

impl InFlight {
    fn start(sink: &Arc<Sink>, origin: Arc<str>) -> Self {
        let mut t = sink.tally.lock().unwrap();
        let c = t.per_origin.entry(origin.clone()).or_default();
        c.now += 1;
        c.max = c.max.max(c.now);
        drop(t);
        InFlight {
            sink: sink.clone(),
            origin,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut t = self.sink.tally.lock().unwrap();
        if let Some(c) = t.per_origin.get_mut(&self.origin) {
            c.now -= 1;
        }
    }
}

struct Sink {
    signatures: Signatures,
    known_secrets: Mutex<HashMap<String, String>>,
    failing: Mutex<Vec<(String, Failure)>>,
    tally: Mutex<Tally>,
    http: reqwest::Client,
}

/// The subscriber a `webhook-id` names, as docs/API.md writes it: `<event id>:<subscriber id>`,
/// or a resend's `<event id>:<subscriber id>:resend-<n>` (no subscriber id may be `resend-<n>`).
fn subscriber_of(webhook_id: &str) -> Option<&str> {
    let mut parts = webhook_id.rsplit(':');
    let last = parts.next()?;
    let resend = last
        .strip_prefix("resend-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if resend {
        parts.next()
    } else {
        Some(last)
    }
}

impl Sink {
    async fn secret_for(&self, secrets: &Secrets, webhook_id: &str) -> Option<String> {
        match secrets {
            Secrets::One(secret) => Some(secret.clone()),
            Secrets::FromApi { api, token } => {
                let subscriber = subscriber_of(webhook_id)?.to_owned();
                if let Some(s) = self.known_secrets.lock().unwrap().get(&subscriber) {
                    return Some(s.clone());
                }
                let mut request = self.http.get(format!(
                    "{}/v1/subscribers/{subscriber}/secret",
                    api.trim_end_matches('/')
                ));
                if let Some(t) = token {
                    request = request.bearer_auth(t);
                }
                let body: Value = request.send().await.ok()?.json().await.ok()?;
                let secret = body["secret"].as_str()?.to_owned();
                self.known_secrets
                    .lock()
                    .unwrap()
                    .insert(subscriber, secret.clone());
                Some(secret)
            }
        }
    }

    /// Whether one of the signatures matches (any secret the sink knows for it). A mismatch
    /// with a secret fetched earlier fetches it again, once: the subscriber's secret may have
    /// been rotated since.
    async fn signature_ok(&self, headers: &HeaderMap, body: &[u8]) -> Option<bool> {
        let Signatures::Checked { secrets, sign } = &self.signatures else {
            return None;
        };
        let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
        let (id, ts, sigs) = (
            h("webhook-id")?,
            h("webhook-timestamp")?,
            h("webhook-signature")?,
        );
        let ts: i64 = ts.parse().ok()?;
        // Signed again with the secret and compared, rather than the reference's `verify`: a
        // drill's or a test's timestamps may lie outside its five-minute tolerance.
        let matches = |secret: &str| {
            sign(secret, id, ts, body)
                .is_some_and(|expected| sigs.split(' ').any(|s| s == expected))
        };
        if matches(&self.secret_for(secrets, id).await?) {
            return Some(true);
        }
        if !matches!(secrets, Secrets::FromApi { .. }) {
            return Some(false);
        }
        let subscriber = subscriber_of(id)?;
        self.known_secrets.lock().unwrap().remove(subscriber);
        Some(matches(&self.secret_for(secrets, id).await?))
    }

    fn failure_for(&self, path: &str) -> Option<Failure> {
        self.failing
            .lock()
            .unwrap()
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, f)| *f)
    }
}

/// The behaviour a path asks for, for the `nth` attempt of a webhook-id.
fn behaviour(path: &str, nth: u32) -> Option<Failure> {
    let mut parts = path.trim_start_matches('/').split('/');
    let number = |p: Option<&str>| p.and_then(|v| v.parse::<u64>().ok());
    match parts.next() {
        Some("ok") => Some(Failure::Status(200)),
        Some("gone") => Some(Failure::Status(410)),
        Some("hang") => Some(Failure::Hang),
        Some("status") => number(parts.next())
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| (100..600).contains(c))
            .map(Failure::Status),
        Some("flaky") => number(parts.next())
            .map(|n| Failure::Status(if u64::from(nth) <= n { 503 } else { 200 })),
        // After the delay, what the rest of the path asks for (one level: a delay after a
        // delay is not a behaviour); 200 when it asks for nothing.
        Some("slow") => {
            number(parts.next())?;
            let rest = parts.collect::<Vec<_>>().join("/");
            match rest.split('/').next() {
                Some("slow") => Some(Failure::Status(200)),
                _ => behaviour(&format!("/{rest}"), nth).or(Some(Failure::Status(200))),
            }
        }
        _ => None,
    }
}

async fn receive(
    State(sink): State<Arc<Sink>>,
    origin: Option<Extension<Origin>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let _in_flight = origin.map(|Extension(Origin(o))| InFlight::start(&sink, o));
    let path = uri.path().to_owned();
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let signature = sink.signature_ok(&headers, &body).await;
    let nth = {
        let mut t = sink.tally.lock().unwrap();
        t.received += 1;
        *t.per_path.entry(path.clone()).or_default() += 1;
        t.receipts.push((id.clone(), now_ms()));
        if signature == Some(false) {
            t.bad_signatures += 1;
        }
        let n = t.per_id.entry(id).or_default();
        *n += 1;
        *n
    };
    if signature == Some(false) {
        return StatusCode::UNAUTHORIZED;
    }
    let answer = sink.failure_for(&path).or_else(|| behaviour(&path, nth));
    if path.starts_with("/slow/") {
        let ms = path
            .split('/')
            .nth(2)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    match answer {
        Some(Failure::Status(code)) => StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        Some(Failure::Hang) => std::future::pending().await,
        None => StatusCode::NOT_FOUND,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Control {
    prefix: String,
    /// A status code to answer, "hang", or null to recover.
    fail: Value,
}

async fn control(
    State(sink): State<Arc<Sink>>,
    Json(c): Json<Control>,
) -> (StatusCode, Json<Value>) {
    let failure = match &c.fail {
        Value::Null => None,
        Value::String(s) if s == "hang" => Some(Failure::Hang),
        Value::Number(n) => match n.as_u64().and_then(|c| u16::try_from(c).ok()) {
            Some(code) if (100..600).contains(&code) => Some(Failure::Status(code)),
            _ => {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({"error": "fail must be a status code, \"hang\" or null"})),
                )
            }
        },
        _ => {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"error": "fail must be a status code, \"hang\" or null"})),
            )
        }
    };
    let mut failing = sink.failing.lock().unwrap();
    failing.retain(|(p, _)| p != &c.prefix);
    if let Some(f) = failure {
        failing.push((c.prefix.clone(), f));
    }
    (
        StatusCode::OK,
        Json(json!({"prefix": c.prefix, "failing": failure.is_some()})),
    )
}

async fn stats(State(sink): State<Arc<Sink>>) -> Json<Value> {
    let t = sink.tally.lock().unwrap();
    let unique = t.per_id.len() as u64;
    Json(json!({
        "received": t.received,
        "unique": unique,
        "duplicates": t.received - unique,
        "bad_signatures": t.bad_signatures,
        "per_path": t.per_path,
        "receipts": t.receipts.iter().map(|(id, at)| json!([id, at])).collect::<Vec<_>>(),
        "origins": t.per_origin.iter().map(|(origin, c)| {
            (origin.to_string(), json!({"in_flight": c.now, "max_in_flight": c.max}))
        }).collect::<serde_json::Map<_, _>>(),
    }))
}

/// The sink's routes, for one listener (requests are not counted per origin).
pub fn router(signatures: Signatures) -> Router {
    routes(Arc::new(Sink {
        signatures,
        known_secrets: Mutex::default(),
        failing: Mutex::default(),
        tally: Mutex::default(),
        http: reqwest::Client::new(),
    }))
}

fn routes(sink: Arc<Sink>) -> Router {
    Router::new()
        .route("/stats", get(stats))
        .route("/control", post(control))
        .fallback(receive)
        .with_state(sink)
}

/// `routes` for a listener serving `origin`: its requests are counted as that origin's.
fn serving(routes: Router, origin: &str) -> Router {
    routes.layer(Extension(Origin(origin.into())))
}

/// A sink without signature checks on a free loopback port, served for as long as the runtime
/// runs; answers its base URL. For tools that deliver to themselves (`hookline capacity
/// --measure`).
pub async fn spawn_on_loopback() -> anyhow::Result<String> {
    let mut origins = spawn_on_loopback_ports(1).await?;
    Ok(origins.remove(0))
}

/// One sink without signature checks on `ports` free loopback ports (at least one), served for
/// as long as the runtime runs; answers their base URLs, each an origin of its own, all sharing
/// behaviour, control and counts. For the drill, whose subscribers stand for many hosts.
pub async fn spawn_on_loopback_ports(ports: usize) -> anyhow::Result<Vec<String>> {
    let shared = router(Signatures::Unchecked);
    let mut origins = Vec::with_capacity(ports);
    for _ in 0..ports.max(1) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen on a loopback port")?;
        let origin = format!("http://{}", listener.local_addr()?);
        let routes = serving(shared.clone(), &origin);
        tokio::spawn(async move { axum::serve(listener, routes).await });
        origins.push(origin);
    }
    Ok(origins)
}

/// Serves the sink until the process is stopped.
pub async fn serve(listen: SocketAddr, signatures: Signatures) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(listen = %listen, "hookline sink serving");
    let routes = serving(router(signatures), &format!("http://{listen}"));
    Ok(axum::serve(listener, routes).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_choose_behaviour() {
        assert_eq!(behaviour("/ok/s1", 1), Some(Failure::Status(200)));
        assert_eq!(behaviour("/status/429/s1", 1), Some(Failure::Status(429)));
        assert_eq!(behaviour("/status/999/s1", 1), None);
        assert_eq!(behaviour("/flaky/2/s1", 2), Some(Failure::Status(503)));
        assert_eq!(behaviour("/flaky/2/s1", 3), Some(Failure::Status(200)));
        assert_eq!(behaviour("/gone/s1", 1), Some(Failure::Status(410)));
        assert_eq!(behaviour("/hang/s1", 1), Some(Failure::Hang));
        assert_eq!(behaviour("/slow/5/s1", 1), Some(Failure::Status(200)));
        assert_eq!(
            behaviour("/slow/5/status/503/s1", 1),
            Some(Failure::Status(503))
        );
        assert_eq!(behaviour("/slow/x/s1", 1), None);
        assert_eq!(behaviour("/nothing", 1), None);
    }
}
