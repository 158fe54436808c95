//! The receiver library (`hookline-receiver`) end to end against hookline: a subscriber built
//! from it applies each delivery exactly once, counted in its own SQLite database, across a
//! retry after its own failure and after a lost answer, a dead letter replayed after it was
//! already applied, and a `kill -9` of hookline between the receiver's commit and hookline's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hookline_receiver::{Claim, Clock, Delivery, Outcome, Receiver, SqliteStore, Verifier};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::common::*;

/// What the subscriber's handler does with the n-th new delivery of an id it runs for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// Writes its side effect, then fails (a downstream outage): 503, nothing committed.
    FailBeforeCommit,
    /// Commits, and the answer is lost on its way back: hookline sees this status instead.
    CommitButAnswer(u16),
    /// Commits and answers the outcome.
    Commit,
    /// Commits, says so, and never answers (hookline is to be killed meanwhile).
    CommitThenHang,
}

/// The step for a webhook-id's n-th handler run.
type Plan = Arc<dyn Fn(&str, u32) -> Step + Send + Sync>;

#[derive(Clone)]
struct Subscriber {
    receiver: Receiver<SqliteStore>,
    /// Handler runs per webhook-id: duplicates the extractor answered are not among them.
    runs: Arc<Mutex<HashMap<String, u32>>>,
    plan: Plan,
    committed: Arc<Notify>,
}

impl FromRef<Subscriber> for Receiver<SqliteStore> {
    fn from_ref(s: &Subscriber) -> Self {
        s.receiver.clone()
    }
}

async fn hook(State(s): State<Subscriber>, Delivery(d): Delivery<SqliteStore>) -> Response {
    let nth = {
        let mut runs = s.runs.lock().unwrap();
        let n = runs.entry(d.id.clone()).or_default();
        *n += 1;
        *n
    };
    let step = (s.plan)(&d.id, nth);
    d.claim
        .connection()
        .execute(
            "INSERT INTO applied (webhook_id, event_type) VALUES (?1, ?2)",
            (&d.id, &d.event.event_type),
        )
        .unwrap();
    if step == Step::FailBeforeCommit {
        return (StatusCode::SERVICE_UNAVAILABLE, "downstream unavailable").into_response();
    }
    let outcome = match d.claim.commit(Outcome::new(200, "applied").unwrap()).await {
        Ok(outcome) => outcome,
        Err(e) => return e.into_response(),
    };
    match step {
        Step::CommitButAnswer(status) => StatusCode::from_u16(status).unwrap().into_response(),
        Step::CommitThenHang => {
            s.committed.notify_one();
            std::future::pending().await
        }
        Step::Commit | Step::FailBeforeCommit => outcome.into_response(),
    }
}

/// A subscriber's endpoint: bound first (hookline needs its URL to make the subscriber and
/// its secret), then served with that secret.
struct Endpoint {
    listener: tokio::net::TcpListener,
    dir: tempfile::TempDir,
}

impl Endpoint {
    async fn bind() -> Self {
        Endpoint {
            listener: tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/hooks", self.listener.local_addr().unwrap())
    }

    fn serve(self, secret: &str, clock: impl Clock, plan: Plan) -> Served {
        let db = self.dir.path().join("receiver.db");
        let store = SqliteStore::open(&db).unwrap();
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch("CREATE TABLE applied (webhook_id TEXT NOT NULL, event_type TEXT)")
            .unwrap();
        let verifier = Verifier::new([secret]).unwrap().with_clock(clock);
        let subscriber = Subscriber {
            receiver: Receiver::new(verifier, store),
            runs: Arc::default(),
            plan,
            committed: Arc::default(),
        };
        let app = Router::new()
            .route("/hooks", post(hook))
            .with_state(subscriber.clone());
        let listener = self.listener;
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Served {
            subscriber,
            db,
            _dir: self.dir,
        }
    }
}

struct Served {
    subscriber: Subscriber,
    db: PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Side effects in the receiver's own database.
    fn applied(&self, webhook_id: &str) -> u32 {
        count_applied(&self.db, webhook_id)
    }

    fn runs(&self, webhook_id: &str) -> u32 {
        let runs = self.subscriber.runs.lock().unwrap();
        runs.get(webhook_id).copied().unwrap_or(0)
    }
}

fn count_applied(db: &Path, webhook_id: &str) -> u32 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM applied WHERE webhook_id = ?1",
            [webhook_id],
            |row| row.get(0),
        )
        .unwrap()
}

fn attempt_outcomes(d: &Value) -> Vec<String> {
    let history = d["attempt_history"].as_array().unwrap();
    history
        .iter()
        .map(|a| format!("{}{}", a["outcome"].as_str().unwrap(), a["status"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_a_replay_apply_each_delivery_once() {
    let app = TestApp::start("[retry]\nbase_delay = \"2s\"").await;
    let endpoint = Endpoint::bind().await;
    let created = app.subscriber("sub-1", &endpoint.url()).await;
    let clock = app.clock.clone();
    // The first event: a failure of the subscriber's own (rolled back), then a commit whose
    // answer is lost (503), then the retry, a duplicate. The second: applied, but answered
    // 400 (permanent): a dead letter, replayed.
    let plan: Plan = Arc::new(|id, nth| match (id.starts_with("SHP-1:"), nth) {
        (true, 1) => Step::FailBeforeCommit,
        (true, _) => Step::CommitButAnswer(503),
        (false, _) => Step::CommitButAnswer(400),
    });
    let rx = endpoint.serve(
        created["secret"].as_str().unwrap(),
        move || hookline_engine::clock::Clock::now_ms(&clock) / 1000,
        plan,
    );

    app.publish("SHP-1:delivered", "shipment.delivered").await;
    let id = "SHP-1:delivered:sub-1";
    for tries in 1..=2 {
        app.delivery_when(id, "a failed attempt", |d| {
            d["attempts"] == tries && state(d) == "scheduled"
        })
        .await;
        app.advance_to_next_attempt(id).await;
    }
    let d = app
        .delivery_when(id, "delivered", |d| state(d) == "delivered")
        .await;
    assert_eq!(
        attempt_outcomes(&d),
        ["retryable503", "retryable503", "success200"],
        "{d}"
    );
    assert_eq!(
        rx.runs(id),
        2,
        "the third attempt was answered as a duplicate"
    );
    assert_eq!(rx.applied(id), 1, "one side effect");

    // Applied, but hookline saw 400: dead, then replayed.
    app.publish("SHP-2:delivered", "shipment.delivered").await;
    let id = "SHP-2:delivered:sub-1";
    app.delivery_when(id, "dead", |d| state(d) == "dead").await;
    assert_eq!(rx.applied(id), 1);
    let (status, body) = app
        .call(
            "POST",
            "/v1/dead-letters/replay",
            Some(json!({"reason": "permanent_failure", "limit": 10})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let d = app
        .delivery_when(id, "delivered", |d| state(d) == "delivered")
        .await;
    assert_eq!(
        rx.runs(id),
        1,
        "the replay was answered as a duplicate: {d}"
    );
    assert_eq!(rx.applied(id), 1, "one side effect");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_between_the_receiver_s_commit_and_hookline_s_applies_once() {
    let dir = tempfile::tempdir().unwrap();
    // The lease (attempt timeout + 5 s) is what a restarted hookline waits out before it sends
    // the attempt it lost again: seconds of real time, waited for, never asserted on.
    let config = format!(
        "database = \"sqlite://{}\"\nallow_private_destinations = true\n\
         [delivery]\nattempt_timeout = \"3s\"\n[retry]\nbase_delay = \"1s\"\njitter = \"none\"\n",
        dir.path().join("hookline.db").display()
    );
    let mut hookline = Process::spawn(dir.path(), "hookline", &config, "all").await;
    let http = reqwest::Client::new();
    let endpoint = Endpoint::bind().await;
    let created: Value = http
        .post(format!("{}/v1/subscribers", hookline.base))
        .json(&json!({"id": "sub-1", "url": endpoint.url()}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let plan: Plan = Arc::new(|_, nth| match nth {
        1 => Step::CommitThenHang,
        _ => Step::Commit,
    });
    let rx = endpoint.serve(
        created["secret"].as_str().unwrap(),
        hookline_receiver::SystemClock,
        plan,
    );
    let committed = rx.subscriber.committed.notified();
    let published = http
        .post(format!("{}/v1/events", hookline.base))
        .json(&json!({"id": "SHP-3:delivered", "type": "shipment.delivered", "payload": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(published.status(), 202);
    tokio::time::timeout(Duration::from_secs(20), committed)
        .await
        .expect("the receiver to commit the first attempt");
    hookline.kill_9();

    let hookline = Process::spawn(dir.path(), "hookline", &config, "all").await;
    let id = "SHP-3:delivered:sub-1";
    let d = eventually("the lost attempt sent again and delivered", async || {
        let d: Value = http
            .get(format!("{}/v1/deliveries/{id}", hookline.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (state(&d) == "delivered").then_some(d)
    })
    .await;
    assert_eq!(attempt_outcomes(&d)[0], "lostnull", "{d}");
    assert_eq!(
        rx.runs(id),
        1,
        "the resend was answered as a duplicate: {d}"
    );
    assert_eq!(rx.applied(id), 1, "one side effect");
}
