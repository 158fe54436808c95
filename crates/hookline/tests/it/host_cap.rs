//! 200 subscribers behind one host (a customer's gateway): it answers 503 until enough attempts
//! have failed for retries and breakers to pile up, then recovers. However the backlog and the
//! breakers line up, the host never has more attempts in flight than
//! `delivery.max_in_flight_per_host`, and every delivery ends (delivered, or dead with a
//! reason). On SQLite one `hookline serve`; on PostgreSQL an api process and two workers,
//! whose claims share the cap.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Router;
use hookline_store::testing::PgSchema;
use serde_json::{json, Value};

const SUBSCRIBERS: usize = 200;
const EVENTS: usize = 2;
const HOST_CAP: usize = 8;

/// Each subscriber's own cap and the slots are far above the host's: only the cap per host can
/// hold it to 8. Breakers open after two failures and cool down in a few hundred milliseconds,
/// so they open, half-open and close many times while the host fails and recovers.
fn config(database: &str) -> String {
    format!(
        "database = \"{database}\"\nallow_private_destinations = true\n\
         [delivery]\nconcurrency = 64\nmax_in_flight_per_subscriber = 16\n\
         max_in_flight_per_host = {HOST_CAP}\nattempt_timeout = \"2s\"\n\
         [retry]\nbase_delay = \"100ms\"\nmax_delay = \"400ms\"\nmax_attempts = 30\n\
         delivery_window = \"60s\"\n\
         [breaker]\nfailures = 2\ncool_down = \"200ms\"\n"
    )
}

/// The shared host: counts the requests it is answering at once and the most it ever was.
#[derive(Clone, Default)]
struct Host {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    received: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
}

/// One request in progress, counted down when the answer is done or the sender hangs up.
struct Answering(Arc<AtomicUsize>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(State(host): State<Host>) -> StatusCode {
    let now = host.now.fetch_add(1, Ordering::SeqCst) + 1;
    let _answering = Answering(host.now.clone());
    host.most.fetch_max(now, Ordering::SeqCst);
    host.received.fetch_add(1, Ordering::SeqCst);
    // Long enough for attempts to overlap, so a flood would show.
    tokio::time::sleep(Duration::from_millis(20)).await;
    if host.failing.load(Ordering::SeqCst) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

impl Host {
    async fn start() -> (Self, String) {
        let host = Host::default();
        host.failing.store(true, Ordering::SeqCst);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new().fallback(answer).with_state(host.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (host, base)
    }
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// Subscribers and events through `api`; the host fails, then recovers; every delivery ends.
async fn run(api: &str) {
    let (host, base) = Host::start().await;
    let http = reqwest::Client::new();
    let bodies = (0..SUBSCRIBERS)
        .map(|i| json!({"id": format!("sub-{i}"), "url": format!("{base}/hooks/{i}")}))
        .collect();
    hookline_testkit::create_subscribers(&http, api, None, bodies, 16)
        .await
        .unwrap();
    for e in 0..EVENTS {
        let r = http
            .post(format!("{api}/v1/events"))
            .json(&json!({"id": format!("ev-{e}"), "type": "t", "payload": {"e": e}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    // Failing long enough for every subscriber's breaker to have opened, some more than once.
    let failures = SUBSCRIBERS * EVENTS * 2;
    eventually("the host to have failed many attempts", async || {
        (host.received.load(Ordering::SeqCst) >= failures).then_some(())
    })
    .await;
    host.failing.store(false, Ordering::SeqCst);
    for e in 0..EVENTS {
        eventually("every delivery to end", async || {
            let ev = get(&http, format!("{api}/v1/events/ev-{e}")).await;
            let open = ev["counts"]["scheduled"].as_u64().unwrap()
                + ev["counts"]["in_flight"].as_u64().unwrap();
            (open == 0).then_some(())
        })
        .await;
    }
    let mut delivered = 0;
    for e in 0..EVENTS {
        let page = get(
            &http,
            format!("{api}/v1/deliveries?event_id=ev-{e}&limit=1000"),
        )
        .await;
        let items = page["items"].as_array().unwrap();
        assert_eq!(items.len(), SUBSCRIBERS);
        for d in items {
            match d["state"].as_str().unwrap() {
                "delivered" => delivered += 1,
                "dead" => assert!(d["dead_reason"].is_string(), "dead without a reason: {d}"),
                other => panic!("delivery {} ended {other}", d["id"]),
            }
        }
    }
    assert!(delivered > 0, "the host recovered: deliveries went through");
    let most = host.most.load(Ordering::SeqCst);
    assert!(
        most <= HOST_CAP,
        "the host had {most} attempts in flight at once, above its cap of {HOST_CAP}"
    );
    assert!(
        most > 1,
        "attempts never overlapped: the test shows nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_holds_a_shared_host_to_its_cap_while_it_fails_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("hookline.db").display());
    let server = Process::spawn(dir.path(), "all", &config(&database), "all").await;
    run(&server.base).await;
    assert!(server.terminate().await.unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_workers_share_a_hosts_cap_while_it_fails_and_recovers() {
    let Some(schema) = PgSchema::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(&schema.url());
    let api = Process::spawn(dir.path(), "api", &config, "api").await;
    let mut workers = Vec::new();
    for n in 0..2 {
        workers.push(Process::spawn(dir.path(), &format!("worker{n}"), &config, "worker").await);
    }
    run(&api.base).await;
    for w in workers {
        assert!(w.terminate().await.unwrap().success());
    }
    assert!(api.terminate().await.unwrap().success());
    schema.drop_schema().await;
}
