//! Fair share across tenants (issue 36): tenant A publishes 20 events to 1,000 subscribers
//! whose endpoints answer in 50 ms while tenant B publishes one event every 250 ms to 10
//! subscribers that answer at once. B's first attempts must wait no longer than in its own
//! baseline, measured in the same run without A's burst: p99 at most 1.25x the baseline's plus
//! 50 ms. Real time and real sockets: latency is publish to receipt, on the receiver.
//!
//! What it guards: before the fair share, B's deliveries waited behind A's 20,000 in due order
//! (p99 18.1 s against a baseline of 16 ms). With shares alone, B waited for one of A's attempts
//! to end whenever A held every slot: up to the 50 ms A's endpoints take, the whole of the
//! slack, so B's p99 sat at the bound (53 to 59 ms against 59 to 61 on a quiet machine). With
//! lending (`ClaimRequest::lend`), B starts at once: 10 to 12 ms against baselines of 6 to 7.
//!
//! On SQLite. On PostgreSQL (tried by hand, debug build, on two cores shared with another
//! build) B's deliveries are taken by the first claim after each publish as here, but a claim
//! there took 5 to 60 ms beside A's burst against about 5 ms idle, and B's baseline alone ran
//! from 16 to 109 ms: it passed 5 of 6 runs (B's p99 59 to 70 ms, once 151), which measures
//! the machine more than the sharing. The conformance cases in `hookline-store` hold the
//! sharing on both backends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::json;

const A_SUBSCRIBERS: usize = 1_000;
const A_EVENTS: usize = 20;
const B_SUBSCRIBERS: usize = 10;
const B_GAP: Duration = Duration::from_millis(250);
/// B's events in its baseline, and at most during A's burst (it stops early once A's burst has
/// drained: what is measured is B beside the burst).
const B_EVENTS: usize = 20;
/// A's 20,000 deliveries take 50 ms each on 64 slots: about 16 s of burst, most of it on slots
/// the share leaves A, and a load the machine's two cores keep up with in a debug build (what
/// is measured is the slots' sharing, not the machine's speed). A's 1,000 subscribers are
/// paths of one local server: the cap per host is off (`tests/it/host_cap.rs` tests it).
const CONFIG: &str = "[delivery]\nconcurrency = 64\nmax_in_flight_per_host = 0";

/// Tenant A's endpoints: answer 200 after 50 ms, counted.
async fn slow_endpoints() -> (String, Arc<AtomicUsize>) {
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = answered.clone();
    let app = axum::Router::new().route(
        "/{id}",
        post(move || {
            let counter = counter.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                counter.fetch_add(1, Ordering::SeqCst);
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), answered)
}

/// Tenant B's endpoints: answer at once, noting when each webhook-id first arrived.
#[derive(Clone, Default)]
struct Arrivals(Arc<Mutex<HashMap<String, Instant>>>);

impl Arrivals {
    async fn start(&self) -> String {
        let arrivals = self.clone();
        let app = axum::Router::new().route(
            "/{id}",
            post(move |headers: HeaderMap| {
                let arrivals = arrivals.clone();
                async move {
                    let id = headers["webhook-id"].to_str().unwrap().to_owned();
                    arrivals
                        .0
                        .lock()
                        .unwrap()
                        .entry(id)
                        .or_insert_with(Instant::now);
                    ""
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    /// The time from each publish (`sent`: event id and when its publish began) to the arrival
    /// of each of its B_SUBSCRIBERS deliveries, sorted; waits for them all.
    async fn latencies(&self, sent: &[(String, Instant)]) -> Vec<Duration> {
        let webhook_ids: Vec<(String, Instant)> = sent
            .iter()
            .flat_map(|(event, at)| {
                (0..B_SUBSCRIBERS).map(move |i| (format!("{event}:b-{i}"), *at))
            })
            .collect();
        eventually("every one of B's deliveries", async || {
            let arrived = self.0.lock().unwrap();
            let mut taken: Vec<Duration> = webhook_ids
                .iter()
                .map(|(id, at)| arrived.get(id).map(|got| got.duration_since(*at)))
                .collect::<Option<_>>()?;
            taken.sort();
            Some(taken)
        })
        .await
    }
}

async fn create_tenant(app: &TestApp, id: &str) {
    let (code, body) = app
        .call("POST", "/v1/tenants", Some(json!({"id": id})))
        .await;
    assert_eq!(code, 201, "{body}");
}

/// Creates `n` subscribers of `tenant` to `event_type`, `<tenant>-<i>` at `<url>/<id>`, 50
/// requests at a time.
async fn create_subscribers(app: &TestApp, tenant: &str, n: usize, url: &str, event_type: &str) {
    let ids: Vec<String> = (0..n).map(|i| format!("{tenant}-{i}")).collect();
    for chunk in ids.chunks(50) {
        let mut creates = tokio::task::JoinSet::new();
        for id in chunk {
            let (http, to) = (app.http.clone(), format!("{}/v1/subscribers", app.base()));
            let body = json!({"id": id, "url": format!("{url}/{id}"), "event_types": [event_type],
                              "tenant_id": tenant});
            creates.spawn(async move { http.post(to).json(&body).send().await.unwrap().status() });
        }
        while let Some(status) = creates.join_next().await {
            assert_eq!(status.unwrap(), 201);
        }
    }
}

async fn publish(app: &TestApp, tenant: &str, id: &str, event_type: &str) {
    let body = json!({"id": id, "type": event_type, "payload": {"n": id}, "tenant_id": tenant});
    let (code, receipt) = app.call("POST", "/v1/events", Some(body)).await;
    assert_eq!(code, 202, "{receipt}");
}

/// B's events `<phase>-<i>`, B_GAP apart, while `go_on` says so, at most B_EVENTS: each with
/// the time its publish began.
async fn b_events(app: &TestApp, phase: &str, go_on: impl Fn() -> bool) -> Vec<(String, Instant)> {
    let mut sent = Vec::new();
    while sent.len() < B_EVENTS && go_on() {
        let id = format!("{phase}-{}", sent.len());
        let at = Instant::now();
        publish(app, "b", &id, "ping").await;
        sent.push((id, at));
        tokio::time::sleep(B_GAP).await;
    }
    sent
}

async fn a_burst_does_not_delay_another_tenant_s_first_attempts(app: &TestApp) {
    let (a_url, a_answered) = slow_endpoints().await;
    let arrivals = Arrivals::default();
    let b_url = arrivals.start().await;
    create_tenant(app, "a").await;
    create_tenant(app, "b").await;
    create_subscribers(app, "a", A_SUBSCRIBERS, &a_url, "burst").await;
    create_subscribers(app, "b", B_SUBSCRIBERS, &b_url, "ping").await;
    // B's subscribers answer once before anything is measured (a subscriber that never
    // answered holds a slot only from a small share of them: not what is measured here).
    let warm_up = [("warm-up".to_owned(), Instant::now())];
    publish(app, "b", "warm-up", "ping").await;
    arrivals.latencies(&warm_up).await;

    let baseline = arrivals
        .latencies(&b_events(app, "baseline", || true).await)
        .await;
    for i in 0..A_EVENTS {
        publish(app, "a", &format!("a-{i}"), "burst").await;
    }
    let burst = A_EVENTS * A_SUBSCRIBERS;
    let sent = b_events(app, "beside", || a_answered.load(Ordering::SeqCst) < burst).await;
    let a_done_when_b_ended = a_answered.load(Ordering::SeqCst);
    let during = arrivals.latencies(&sent).await;

    let p99 = |sorted: &[Duration]| hookline_testkit::percentile(sorted, 0.99).unwrap();
    let (base, beside) = (p99(&baseline), p99(&during));
    let bound = base.mul_f64(1.25) + Duration::from_millis(50);
    eprintln!(
        "tenant B's first attempt p99: baseline {base:?}, beside A's burst {beside:?} (bound \
         {bound:?}); {} of B's events beside it, A's burst {a_done_when_b_ended} of {burst} \
         answered by then",
        sent.len()
    );
    assert_eq!(
        sent.len(),
        B_EVENTS,
        "A's burst drained before B's phase ended: nothing to measure beside"
    );
    assert!(
        beside <= bound,
        "p99 {beside:?} beside A's burst, against a baseline of {base:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let _alone = MEASURING.lock().await;
    let app = TestApp::start(CONFIG).await;
    a_burst_does_not_delay_another_tenant_s_first_attempts(&app).await;
    app.stop().await;
}
