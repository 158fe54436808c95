//! Test fixtures: a real HTTP receiver on a 127.0.0.1 port, and a hookline running in-process
//! on a temporary SQLite file with a manual clock.

#![allow(dead_code)] // each test binary uses its own part of these fixtures

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::Router;
use hookline::app::{self, RunningApp};
use hookline::config::Config;
use hookline_engine::clock::ManualClock;
use serde_json::{json, Value};

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub webhook_id: String,
    pub attempt: String,
    pub timestamp: String,
    pub signature: String,
    pub user_agent: String,
    pub content_type: String,
    pub body: Vec<u8>,
    /// Every header, for the ones the fields above do not name.
    pub all_headers: HeaderMap,
}

impl Received {
    pub fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("webhook-id", self.webhook_id.parse().unwrap());
        h.insert("webhook-timestamp", self.timestamp.parse().unwrap());
        h.insert("webhook-signature", self.signature.parse().unwrap());
        h
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Decides the answer to the n-th request (1-based) for a webhook-id on a path.
pub type Behaviour = Arc<dyn Fn(&str, u32) -> u16 + Send + Sync>;

#[derive(Default)]
struct Record {
    received: Vec<Received>,
    /// Requests being answered right now, per webhook-id.
    in_progress: HashMap<String, u32>,
    /// Times a request arrived while another with the same webhook-id was still being answered.
    overlaps: u32,
    per_id: HashMap<String, u32>,
    /// Successful receipts per webhook-id. A deduplicating subscriber changes its visible state
    /// on the first and recognises the rest as duplicates.
    applied: HashMap<String, u32>,
    /// The subscriber's visible state: one change per webhook-id it had not seen before, the
    /// body (the event it announces) recorded with it.
    state: Vec<(String, Vec<u8>)>,
}

#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    record: Arc<Mutex<Record>>,
    behaviour: Arc<Mutex<Behaviour>>,
    /// While held, first requests for a webhook-id wait here before answering.
    gate: Arc<tokio::sync::RwLock<()>>,
    /// How long each answer takes: widens the window in which overlaps would be seen.
    answer_delay: Duration,
}

/// Marks a request finished even when the sender hangs up mid-answer (the handler is dropped).
struct InProgress {
    record: Arc<Mutex<Record>>,
    webhook_id: String,
}

impl Drop for InProgress {
    fn drop(&mut self) {
        let mut rec = self.record.lock().unwrap();
        if let Some(n) = rec.in_progress.get_mut(&self.webhook_id) {
            *n -= 1;
        }
    }
}

async fn receive(
    State(r): State<Receiver>,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let h = |name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let got = Received {
        path: uri.path().to_owned(),
        webhook_id: h("webhook-id"),
        attempt: h("webhook-attempt"),
        timestamp: h("webhook-timestamp"),
        signature: h("webhook-signature"),
        user_agent: h("user-agent"),
        content_type: h("content-type"),
        body: body.to_vec(),
        all_headers: headers.clone(),
    };
    let nth = {
        let mut rec = r.record.lock().unwrap();
        let n = rec.per_id.entry(got.webhook_id.clone()).or_default();
        *n += 1;
        let n = *n;
        rec.received.push(got.clone());
        let concurrent = rec.in_progress.entry(got.webhook_id.clone()).or_default();
        *concurrent += 1;
        if *concurrent > 1 {
            rec.overlaps += 1;
        }
        n
    };
    let _in_progress = InProgress {
        record: r.record.clone(),
        webhook_id: got.webhook_id.clone(),
    };
    if !r.answer_delay.is_zero() {
        tokio::time::sleep(r.answer_delay).await;
    }
    let _held = if nth == 1 {
        Some(r.gate.read().await)
    } else {
        None
    };
    let behaviour = r.behaviour.lock().unwrap().clone();
    let status = behaviour(&got.path, nth);
    if (200..300).contains(&status) {
        // Idempotent processing: the state change happens once per webhook-id.
        let mut rec = r.record.lock().unwrap();
        let seen = rec.applied.entry(got.webhook_id.clone()).or_default();
        *seen += 1;
        if *seen == 1 {
            rec.state.push((got.webhook_id, got.body));
        }
    }
    StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    pub async fn start(behaviour: impl Fn(&str, u32) -> u16 + Send + Sync + 'static) -> Self {
        Self::start_slow(Duration::ZERO, behaviour).await
    }

    /// A receiver that takes `answer_delay` to answer each request.
    pub async fn start_slow(
        answer_delay: Duration,
        behaviour: impl Fn(&str, u32) -> u16 + Send + Sync + 'static,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Receiver {
            addr: listener.local_addr().unwrap(),
            record: Default::default(),
            behaviour: Arc::new(Mutex::new(Arc::new(behaviour))),
            gate: Default::default(),
            answer_delay,
        };
        let app = Router::new().fallback(receive).with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        r
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn set_behaviour(&self, behaviour: impl Fn(&str, u32) -> u16 + Send + Sync + 'static) {
        *self.behaviour.lock().unwrap() = Arc::new(behaviour);
    }

    pub fn received(&self) -> Vec<Received> {
        self.record.lock().unwrap().received.clone()
    }

    pub fn received_for(&self, webhook_id: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.webhook_id == webhook_id)
            .collect()
    }

    /// The visible state changes a deduplicating subscriber made (webhook-id and body), in
    /// order: one per webhook-id it had not seen.
    pub fn state_changes(&self) -> Vec<(String, Vec<u8>)> {
        self.record.lock().unwrap().state.clone()
    }

    /// Requests that arrived while another with the same webhook-id was being answered.
    pub fn overlaps(&self) -> u32 {
        self.record.lock().unwrap().overlaps
    }

    /// Webhook-ids answered 2xx more than once.
    pub fn duplicated_ids(&self) -> Vec<String> {
        let rec = self.record.lock().unwrap();
        rec.applied
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Successful receipts that a deduplicating subscriber recognised as repeats.
    pub fn duplicates(&self) -> u32 {
        let rec = self.record.lock().unwrap();
        rec.applied.values().map(|n| n - 1).sum()
    }

    /// Holds the first request of every webhook-id until the guard is dropped; repeats pass.
    pub async fn hold(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.gate.write().await
    }
}

pub use hookline_testkit::now_ms as unix_ms_now;

/// Held by a test that measures latency against a baseline in the same run, so that no other
/// such test shares the machine's two cores with it.
pub static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Polls `check` until it returns `Some`, for at most 20 s of real time. This waits for the
/// system to make progress (a request to cross a socket), never for a retry delay: retry delays
/// pass only when a test advances the manual clock.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub struct TestApp {
    pub app: Option<RunningApp>,
    pub clock: ManualClock,
    pub config: Config,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
    /// The PostgreSQL schema it runs on, dropped at `stop`.
    schema: Option<hookline_store::testing::PgSchema>,
}

impl TestApp {
    /// Starts hookline with the given extra TOML (on top of a test base config).
    pub async fn start(extra: &str) -> Self {
        Self::start_in(extra, true).await
    }

    /// Like `start`, with the SSRF guard on, as in production.
    pub async fn start_guarded(extra: &str) -> Self {
        Self::start_in(extra, false).await
    }

    pub fn db_path(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("hookline.db")
    }

    /// Like `start`, on a PostgreSQL schema of its own (dropped at `stop`); `None` where no
    /// PostgreSQL can be had (the reason is printed once).
    pub async fn start_on_postgres(extra: &str) -> Option<Self> {
        let schema = hookline_store::testing::PgSchema::create().await?;
        let dir = tempfile::tempdir().unwrap();
        let mut app = Self::start_at(dir, &schema.url(), extra, true).await;
        app.schema = Some(schema);
        Some(app)
    }

    async fn start_in(extra: &str, allow_private: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", Self::db_path(&dir).display());
        Self::start_at(dir, &url, extra, allow_private).await
    }

    async fn start_at(dir: tempfile::TempDir, url: &str, extra: &str, allow_private: bool) -> Self {
        let clock = ManualClock::new(unix_ms_now());
        // Tenants' subscribers are local receivers too, wherever the platform's may be.
        let tenants = if allow_private {
            "as_platform"
        } else {
            "public"
        };
        let toml = format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{url}\"\nallow_private_destinations = {allow_private}\n\
             {extra}\n[tenants]\ndestinations = \"{tenants}\"\n"
        );
        Self::launch(dir, clock, Config::from_toml(&toml).unwrap()).await
    }

    async fn launch(dir: tempfile::TempDir, clock: ManualClock, config: Config) -> Self {
        let app = app::start(&config, Arc::new(clock.clone()), app::Role::All)
            .await
            .unwrap();
        TestApp {
            app: Some(app),
            clock,
            config,
            dir,
            http: reqwest::Client::new(),
            schema: None,
        }
    }

    /// A clean stop and a fresh start on the same database and clock: a restart.
    pub async fn restart(self) -> Self {
        self.stopped_while(async || ()).await.0
    }

    /// A clean stop, `f` (another process on the database, say), and a fresh start on the same
    /// database and clock.
    pub async fn stopped_while<T>(mut self, f: impl AsyncFnOnce() -> T) -> (Self, T) {
        self.app.take().unwrap().shutdown().await;
        let out = f().await;
        let TestApp {
            dir,
            clock,
            config,
            schema,
            ..
        } = self;
        let mut app = Self::launch(dir, clock, config).await;
        app.schema = schema;
        (app, out)
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.app.as_ref().unwrap().addr)
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(None, method, path, body).await
    }

    /// `call` with a bearer token.
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base());
        let req = match method {
            "GET" => self.http.get(url),
            "POST" => self.http.post(url),
            "PATCH" => self.http.patch(url),
            "DELETE" => self.http.delete(url),
            _ => unreachable!(),
        };
        let req = match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// The body of `GET path` as text, exactly as sent.
    pub async fn text(&self, path: &str) -> String {
        let url = format!("{}{path}", self.base());
        let response = self.http.get(url).send().await.unwrap();
        response.text().await.unwrap()
    }

    pub async fn subscriber(&self, id: &str, url: &str) -> Value {
        let (status, body) = self
            .call(
                "POST",
                "/v1/subscribers",
                Some(json!({"id": id, "url": url})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body
    }

    pub async fn publish(&self, id: &str, event_type: &str) -> Value {
        let (status, body) = self
            .call(
                "POST",
                "/v1/events",
                Some(json!({"id": id, "type": event_type, "payload": {"shipment": id, "status": "out_for_delivery"}})),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        body
    }

    pub async fn delivery(&self, id: &str) -> Value {
        let (status, body) = self
            .call("GET", &format!("/v1/deliveries/{id}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until the delivery satisfies `pred`, and returns it.
    pub async fn delivery_when(
        &self,
        id: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        eventually(what, async || {
            let d = self.delivery(id).await;
            pred(&d).then_some(d)
        })
        .await
    }

    /// Waits until `subscriber`'s breaker is open and none of its attempts is in flight: its
    /// deliveries wait behind the breaker, and only the clock moves them.
    pub async fn until_breaker_open_and_idle(&self, subscriber: &str) {
        eventually("the breaker to open", async || {
            let (_, s) = self
                .call("GET", &format!("/v1/subscribers/{subscriber}"), None)
                .await;
            (s["breaker"]["state"] == "open").then_some(())
        })
        .await;
        eventually("no attempt in flight", async || {
            let path = format!("/v1/deliveries?subscriber_id={subscriber}&state=in_flight");
            let (_, page) = self.call("GET", &path, None).await;
            page["items"].as_array().unwrap().is_empty().then_some(())
        })
        .await;
    }

    /// Moves the manual clock to the delivery's next attempt.
    pub async fn advance_to_next_attempt(&self, id: &str) {
        let d = self.delivery(id).await;
        let at =
            hookline_testkit::rfc3339_ms(&d["next_attempt_at"]).expect("delivery is scheduled");
        self.clock.set(at);
    }

    pub async fn stop(mut self) {
        self.app.take().unwrap().shutdown().await;
        if let Some(schema) = self.schema.take() {
            schema.drop_schema().await;
        }
    }
}

/// One scenario (`async fn(&TestApp)`) as two tests: on SQLite, and on a PostgreSQL schema
/// of its own (skipped, saying why, where no PostgreSQL can be had).
#[macro_export]
macro_rules! on_both_backends {
    ($sqlite:ident, $postgres:ident, $config:expr, $scenario:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            let app = TestApp::start($config).await;
            $scenario(&app).await;
            app.stop().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let Some(app) = TestApp::start_on_postgres($config).await else {
                return;
            };
            $scenario(&app).await;
            app.stop().await;
        }
    };
}

/// The config lines of an API token (`tenant`: a tenant's token).
pub fn api_token(name: &str, token: &str, scope: &str, tenant: Option<&str>) -> String {
    let hex = hookline::tokens::sha256_hex(token);
    let tenant = tenant.map_or(String::new(), |t| format!("tenant = \"{t}\"\n"));
    format!("[[api_tokens]]\nname = \"{name}\"\nsha256 = \"{hex}\"\nscope = \"{scope}\"\n{tenant}")
}

pub fn state(d: &Value) -> &str {
    d["state"].as_str().unwrap()
}

pub use hookline_testkit::process::Process;

/// `hookline serve` processes for tests: this build's binary, or another.
pub trait Spawn: Sized {
    /// `hookline serve --config <config> --role <role>` of this build on a free port, once it
    /// answers `/healthz`. `config` must not set `listen`.
    async fn spawn(dir: &std::path::Path, name: &str, config: &str, role: &str) -> Self;
    /// Like `spawn`, running the hookline binary at `binary` (another release, for instance).
    async fn spawn_binary(
        binary: &std::path::Path,
        dir: &std::path::Path,
        name: &str,
        config: &str,
        role: &str,
    ) -> Self;
}

impl Spawn for Process {
    async fn spawn(dir: &std::path::Path, name: &str, config: &str, role: &str) -> Self {
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_hookline"));
        Self::spawn_binary(binary, dir, name, config, role).await
    }

    async fn spawn_binary(
        binary: &std::path::Path,
        dir: &std::path::Path,
        name: &str,
        config: &str,
        role: &str,
    ) -> Self {
        Process::start(binary, dir, name, config, role)
            .await
            .unwrap()
    }
}

/// An independent tool a test runs (a validator, a browser driver): found in the directories
/// `HOOKLINE_TEST_TOOLS` lists (`.ci/run` points it at the virtual environment it installs
/// them into) or on `PATH`. Without it the test skips, saying so in one line that a plain
/// `cargo test` shows (`say_skipped`);
/// `HOOKLINE_TEST_TOOLS_REQUIRED=1` (as in CI) turns the skip into a failure.
pub fn external_tool(name: &str) -> Option<PathBuf> {
    let found = tool_dirs()
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file());
    found_or_skipped(name, found)
}

/// Where tests look for the tools and runtimes they run: `HOOKLINE_TEST_TOOLS`, then `PATH`.
pub fn tool_dirs() -> Vec<PathBuf> {
    std::env::var_os("HOOKLINE_TEST_TOOLS")
        .into_iter()
        .chain(std::env::var_os("PATH"))
        .flat_map(|list| std::env::split_paths(&list).collect::<Vec<_>>())
        .collect()
}

/// `found`; when it is `None`, the test skips saying so in one line (`say_skipped`), or fails
/// under `HOOKLINE_TEST_TOOLS_REQUIRED=1`.
pub fn found_or_skipped(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_none() {
        let required = std::env::var("HOOKLINE_TEST_TOOLS_REQUIRED").as_deref() == Ok("1");
        assert!(
            !required,
            "{what} is required (HOOKLINE_TEST_TOOLS_REQUIRED=1) but is neither in \
             HOOKLINE_TEST_TOOLS nor on PATH"
        );
        hookline_store::testing::say_skipped(&format!(
            "{what} is not installed (.ci/run installs it; HOOKLINE_TEST_TOOLS_REQUIRED=1 \
             makes this a failure)"
        ));
    }
    found
}
