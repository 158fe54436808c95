//! The example receivers in other languages (`examples/receivers/`: Python with the PyPI
//! `standardwebhooks` package and SQLite, Node with its own crypto and a JSON-lines file),
//! each run as its own process against a live hookline: an event retried (its first attempt
//! lost before the receiver saw it) and an event duplicated (applied, the answer lost on its
//! way back, so hookline sends it again) each change the receiver's store once, and a forged
//! signature is refused with 401. A missing runtime skips, saying so in one line
//! (`HOOKLINE_TEST_TOOLS_REQUIRED=1`, as in CI, makes it a failure).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Router;

use crate::common::*;

/// Each delivery's path through the proxy in front of the receiver: a first attempt of
/// `RETRIED` never reaches it; a first attempt of `DUPLICATED` does, and hookline is told 503.
const RETRIED: &str = "EVT-retried";
const DUPLICATED: &str = "EVT-duplicated";

/// What the proxy saw of one webhook-id: requests from hookline, and the receiver's answers to
/// those it forwarded.
#[derive(Clone, Debug, Default, PartialEq)]
struct Seen {
    requests: u32,
    answers: Vec<u16>,
}

/// Stands between hookline and the receiver, losing what the test wants lost.
#[derive(Clone)]
struct Proxy {
    target: Arc<Mutex<String>>,
    http: reqwest::Client,
    seen: Arc<Mutex<HashMap<String, Seen>>>,
}

async fn forward(State(p): State<Proxy>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let id = headers["webhook-id"].to_str().unwrap().to_owned();
    let nth = {
        let mut seen = p.seen.lock().unwrap();
        let entry = seen.entry(id.clone()).or_default();
        entry.requests += 1;
        entry.requests
    };
    if nth == 1 && id.starts_with(RETRIED) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let target = p.target.lock().unwrap().clone();
    let mut request = p.http.post(target).body(body);
    for (name, value) in &headers {
        if name.as_str().starts_with("webhook-") || name == "content-type" {
            request = request.header(name, value);
        }
    }
    let status = request.send().await.unwrap().status().as_u16();
    p.seen
        .lock()
        .unwrap()
        .get_mut(&id)
        .unwrap()
        .answers
        .push(status);
    if nth == 1 && id.starts_with(DUPLICATED) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    StatusCode::from_u16(status).unwrap()
}

impl Proxy {
    async fn start() -> (Self, String) {
        let proxy = Proxy {
            target: Arc::default(),
            http: reqwest::Client::new(),
            seen: Arc::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let app = Router::new().fallback(forward).with_state(proxy.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (proxy, url)
    }

    fn seen(&self, id: &str) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_default()
    }
}

/// A runtime the example needs: the first of `names` in `HOOKLINE_TEST_TOOLS` or on `PATH`
/// for which `probe` succeeds. None skips the test, saying why (a failure under
/// `HOOKLINE_TEST_TOOLS_REQUIRED=1`).
fn runtime(names: &[&str], probe: &[&str], what: &str) -> Option<PathBuf> {
    let found = tool_dirs()
        .iter()
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .filter(|path| path.is_file())
        .find(|path| {
            std::process::Command::new(path)
                .args(probe)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    found_or_skipped(what, found)
}

fn example(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/receivers")
        .join(path)
}

/// Runs `program script` with the subscriber's secret and a free port (and `env`), waits until
/// it listens, and returns it (killed when dropped) with its URL.
async fn start_receiver(
    program: &Path,
    script: &Path,
    secret: &str,
    env: (&str, &Path),
) -> (tokio::process::Child, String) {
    let port = hookline_testkit::free_port().unwrap();
    let child = tokio::process::Command::new(program)
        .arg(script)
        .env("WEBHOOK_SECRET", secret)
        .env("PORT", port.to_string())
        .env(env.0, env.1)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually("the example receiver to listen", async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(drop)
    })
    .await;
    (child, format!("http://127.0.0.1:{port}/hooks"))
}

/// Delivers a retried and a duplicated event through the proxy to the receiver at whatever
/// URL `start` gives (with the subscriber's secret); once both are delivered, returns the
/// receiver and its URL.
async fn deliver_retried_and_duplicated<R>(
    app: &TestApp,
    start: impl AsyncFnOnce(&str) -> (R, String),
) -> (R, String) {
    let (proxy, url) = Proxy::start().await;
    let created = app.subscriber("sub-1", &url).await;
    let (receiver, target) = start(created["secret"].as_str().unwrap()).await;
    *proxy.target.lock().unwrap() = target.clone();
    for event in [RETRIED, DUPLICATED] {
        app.publish(event, "shipment.delivered").await;
        let id = format!("{event}:sub-1");
        app.delivery_when(&id, "a failed first attempt", |d| {
            d["attempts"] == 1 && state(d) == "scheduled"
        })
        .await;
        app.advance_to_next_attempt(&id).await;
        app.delivery_when(&id, "delivered", |d| state(d) == "delivered")
            .await;
    }
    let retried = proxy.seen(&format!("{RETRIED}:sub-1"));
    let expected = |requests, answers| Seen { requests, answers };
    assert_eq!(
        retried,
        expected(2, vec![200]),
        "the receiver saw the retry only"
    );
    let duplicated = proxy.seen(&format!("{DUPLICATED}:sub-1"));
    assert_eq!(
        duplicated,
        expected(2, vec![200, 200]),
        "the duplicate answered as the first"
    );
    (receiver, target)
}

/// A forged delivery (signed with another secret) is refused with 401.
async fn forged_is_refused(target: &str) {
    let other: hookline_receiver::Secret = "whsec_dGhlIG90aGVyIHNlY3JldCBvZiB0aGUgcm90YXRpb24="
        .parse()
        .unwrap();
    let now = unix_ms_now() / 1000;
    let body = r#"{"type":"shipment.delivered","timestamp":"2026-01-01T00:00:00Z","data":{}}"#;
    let response = reqwest::Client::new()
        .post(target)
        .header("webhook-id", "forged:sub-1")
        .header("webhook-timestamp", now.to_string())
        .header(
            "webhook-signature",
            other.sign("forged:sub-1", now, body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_applies_a_retried_and_a_duplicated_event_once() {
    let probe = ["-c", "import standardwebhooks"];
    let Some(python) = runtime(
        &["python", "python3"],
        &probe,
        "python with standardwebhooks",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("receiver.db");
    let app = TestApp::start("[retry]\nbase_delay = \"2s\"").await;
    let script = example("python/receiver.py");
    let (_receiver, target) = deliver_retried_and_duplicated(&app, async |secret: &str| {
        start_receiver(&python, &script, secret, ("RECEIVER_DB", &db)).await
    })
    .await;
    forged_is_refused(&target).await;
    let conn = rusqlite::Connection::open(&db).unwrap();
    for event in [RETRIED, DUPLICATED] {
        let applied: u32 = conn
            .query_row(
                "SELECT count(*) FROM events_applied WHERE webhook_id = ?1",
                [format!("{event}:sub-1")],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(applied, 1, "{event}: one side effect");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_applies_a_retried_and_a_duplicated_event_once() {
    let Some(node) = runtime(&["node"], &["--version"], "node") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("receiver.jsonl");
    let app = TestApp::start("[retry]\nbase_delay = \"2s\"").await;
    let script = example("node/receiver.js");
    let (_receiver, target) = deliver_retried_and_duplicated(&app, async |secret: &str| {
        start_receiver(&node, &script, secret, ("RECEIVER_LOG", &log)).await
    })
    .await;
    forged_is_refused(&target).await;
    let lines = std::fs::read_to_string(&log).unwrap();
    for event in [RETRIED, DUPLICATED] {
        let id = format!("{event}:sub-1");
        let applied = lines
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .filter(|record| record["webhook_id"] == id.as_str())
            .count();
        assert_eq!(applied, 1, "{event}: one side effect");
    }
    app.stop().await;
}
