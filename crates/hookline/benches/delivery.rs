//! hookline's delivery benchmark: fixed workloads against the release binary on the embedded
//! SQLite store, delivering to a fast local receiver (hyper, via axum) on 127.0.0.1.
//!
//!     cargo bench -p hookline --bench delivery               # every workload
//!     cargo bench -p hookline --bench delivery -- throughput  # or raw, sustained, single, fanout,
//!                                                             # accept, backlog, pg-throughput,
//!                                                             # pg-sustained, pg-backlog, isolation
//!
//! - raw: the receiver's own limit, measured in the same run: 64 keep-alive connections POSTing
//!   a delivery-sized body to it for 3 s, nothing else running; what the figures below compare to.
//! - throughput: 200 subscribers x 100 events (20,000 deliveries) from 16 concurrent
//!   publishers; deliveries/s from the first publish to the last receipt, and how many are missing.
//! - sustained: the same with 1,000 events (200,000 deliveries), and the serving process's
//!   peak RSS.
//! - single: 1 subscriber x 5,000 events: one subscriber within its default in-flight cap.
//! - fanout: one event to 2,000 subscribers, 30 times; how long `POST /v1/events` takes to
//!   answer 202 (the event and its 2,000 deliveries durably committed): each on its own, then
//!   every 100 ms while a background publisher keeps 200 other subscribers busy.
//! - accept: one event to 2,000 subscribers (beside 2,000 of another type) straight to the store,
//!   60 times, for subscribers listing every type, the exact type and `shipment.*`: deliveries
//!   written per CPU-second (SQLite) and per second (PostgreSQL).
//! - backlog: 1,000,000 delayed deliveries in the store; the serving process's RSS, and the time
//!   to claim due deliveries with that backlog versus an empty store.
//! - pg-throughput: the throughput workload on PostgreSQL, one api process publishing, with 1
//!   and then 2 worker processes delivering.
//! - pg-sustained: the sustained workload on PostgreSQL, one api and one worker process; the
//!   first and the last 50,000 deliveries' rates.
//! - pg-backlog: PostgreSQL claim latency with 1,000,000 delayed deliveries versus none.
//! - isolation: a healthy subscriber's first-attempt latency (publish to receipt, p99 of 100
//!   publishes 40 ms apart) on its own, then with N subscribers hanging at once (a local server
//!   that accepts and never answers; one event each), for N = 200, 1,000, 2,000 and 5,000,
//!   each in a process of its own, side by side with the baseline measured in the same run;
//!   with the serving process's RSS per hanging attempt.
//!
//! Each delivery workload also prints how many deliveries hookline's processes made per
//! CPU-second (their user and system time, from `/proc`). At the end it prints each target of
//! issue 16 with its figure and PASS or FAIL.
//!
//! The PostgreSQL workloads use a schema of their own in `HOOKLINE_TEST_POSTGRES` (required:
//! the tests' throwaway server runs without fsync, which would flatter the figures) and drop it
//! afterwards.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hookline_store::testing::PgSchema;
use hookline_store::{ClaimRequest, Completion, NewEvent, NewSubscriber, Store, Transition};
use hookline_testkit::process::Process;
use hookline_testkit::{now_ms, percentile};
use serde_json::json;

/// Counts distinct webhook-ids and remembers when the last new one arrived.
#[derive(Default)]
struct Tally {
    /// Each webhook-id, and when it first arrived.
    seen: HashMap<String, Instant>,
    last: Option<Instant>,
}

#[derive(Clone)]
struct Receiver {
    addr: SocketAddr,
    tally: Arc<Mutex<Tally>>,
}

async fn receive(State(t): State<Arc<Mutex<Tally>>>, headers: HeaderMap) -> StatusCode {
    if let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) {
        let mut t = t.lock().unwrap();
        if !t.seen.contains_key(id) {
            let now = Instant::now();
            t.seen.insert(id.to_owned(), now);
            t.last = Some(now);
        }
    }
    StatusCode::OK
}

impl Receiver {
    fn start() -> Self {
        let tally: Arc<Mutex<Tally>> = Default::default();
        let t = tally.clone();
        let addr = serve_on_own_thread(|listener| async move {
            let app = axum::Router::new().fallback(receive).with_state(t);
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, tally }
    }

    fn count(&self) -> usize {
        self.tally.lock().unwrap().seen.len()
    }

    fn arrived(&self, webhook_id: &str) -> Option<Instant> {
        self.tally.lock().unwrap().seen.get(webhook_id).copied()
    }

    fn reset(&self) {
        *self.tally.lock().unwrap() = Tally::default();
    }
}

struct Hookline {
    process: Process,
    base: String,
    http: reqwest::Client,
}

impl Hookline {
    async fn start(dir: &Path) -> Self {
        let database = format!("sqlite://{}", db_path(dir).display());
        Self::start_with(dir, &database, "all", "bench").await
    }

    async fn start_with(dir: &Path, database: &str, role: &str, name: &str) -> Self {
        Self::start_configured(dir, database, role, name, "").await
    }

    /// With `extra` TOML after the bench's own settings, which end inside `[delivery]`.
    async fn start_configured(
        dir: &Path,
        database: &str,
        role: &str,
        name: &str,
        extra: &str,
    ) -> Self {
        // The receiver stands for every subscriber's host: the cap per host (which would hold
        // one host to 64 attempts in flight) is off, as it would not bind hundreds of hosts.
        let config = format!(
            "database = \"{database}\"\nallow_private_destinations = true\n\
             [delivery]\nmax_in_flight_per_host = 0\n{extra}"
        );
        let binary = Path::new(env!("CARGO_BIN_EXE_hookline"));
        let process = Process::start(binary, dir, name, &config, role)
            .await
            .unwrap();
        Hookline {
            base: process.base.clone(),
            process,
            http: reqwest::Client::new(),
        }
    }

    /// Creates `n` subscribers pointing at the receiver, 16 requests at a time.
    async fn subscribers(&self, n: usize, rx: &Receiver) {
        let url = format!("http://{}/hook", rx.addr);
        let bodies = (0..n)
            .map(|i| json!({"id": format!("sub-{i}"), "url": url}))
            .collect();
        hookline_testkit::create_subscribers(&self.http, &self.base, None, bodies, 16)
            .await
            .unwrap();
    }

    async fn publish(&self, id: &str) -> Duration {
        self.publish_as(id, "shipment.out_for_delivery").await
    }

    async fn publish_as(&self, id: &str, event_type: &str) -> Duration {
        let started = Instant::now();
        let r = self
            .http
            .post(format!("{}/v1/events", self.base))
            .json(&json!({"id": id, "type": event_type,
                          "payload": {"shipment": id, "status": "out_for_delivery", "eta": "2026-08-15T17:00:00Z"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        started.elapsed()
    }

    fn rss_kib(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.process.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// The CPU time (user and system) the process has used so far: what a delivery costs in
    /// core-seconds, steadier than wall-clock rates on a shared machine.
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.process.pid())).unwrap();
        // The fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // USER_HZ is 100 on every Linux architecture this runs on.
        ticks as f64 / 100.0
    }

    async fn stop(self) {
        self.process.terminate().await.unwrap();
    }
}

fn db_path(dir: &Path) -> PathBuf {
    dir.join("hookline.db")
}

async fn wait_for(rx: &Receiver, n: usize, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while rx.count() < n {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

/// A delivery workload: `subscribers x events`, published by 16 concurrent publishers.
#[derive(Clone, Copy)]
struct Workload {
    subscribers: usize,
    events: usize,
}

/// The workload of `throughput`: 200 x 100.
const THROUGHPUT: Workload = Workload {
    subscribers: 200,
    events: 100,
};
/// The sustained workload: 200 x 1,000.
const SUSTAINED: Workload = Workload {
    subscribers: 200,
    events: 1_000,
};
/// One subscriber: 1 x 5,000.
const SINGLE: Workload = Workload {
    subscribers: 1,
    events: 5_000,
};

/// What a workload measured: deliveries/s from the first publish to the last receipt, the
/// deliveries missing at the end, the rates of the first and last 50,000 (sustained runs), and
/// deliveries per CPU-second of hookline's processes.
struct Delivered {
    per_second: f64,
    missing: usize,
    first_and_last: Option<(f64, f64)>,
    per_cpu_second: f64,
}

/// Runs `load` from 16 publishers against `api`; `workers` are the other hookline processes
/// whose CPU time the workload also costs.
async fn throughput(
    api: Hookline,
    workers: &[Hookline],
    rx: &Receiver,
    label: &str,
    load: Workload,
) -> (Hookline, Delivered) {
    let Workload {
        subscribers,
        events,
    } = load;
    let total = subscribers * events;
    api.subscribers(subscribers, rx).await;
    rx.reset();
    let cpu =
        |api: &Hookline| api.cpu_seconds() + workers.iter().map(Hookline::cpu_seconds).sum::<f64>();
    let cpu_before = cpu(&api);
    let started = Instant::now();
    let mut publishers = tokio::task::JoinSet::new();
    let api = Arc::new(api);
    for p in 0..16 {
        let api = api.clone();
        publishers.spawn(async move {
            for e in (p..events).step_by(16) {
                api.publish(&format!("tp-{e}")).await;
            }
            Instant::now()
        });
    }
    // The receipt times of the 50,000th and of the last 50,000 before the end.
    let (mut first_50k, mut last_50k_start) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(60 + total as u64 / 500);
    while rx.count() < total && Instant::now() < deadline {
        let n = rx.count();
        if first_50k.is_none() && n >= 50_000 {
            first_50k = Some(started.elapsed());
        }
        if last_50k_start.is_none() && total >= 100_000 && n >= total - 50_000 {
            last_50k_start = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut published = started;
    while let Some(done) = publishers.join_next().await {
        published = published.max(done.unwrap());
    }
    let cpu_used = cpu(&api) - cpu_before;
    let complete = rx.count() >= total;
    let last = rx.tally.lock().unwrap().last.unwrap();
    let elapsed = last - started;
    let got = rx.count();
    let per_second = got as f64 / elapsed.as_secs_f64();
    let per_cpu_second = got as f64 / cpu_used;
    let first_and_last = match (first_50k, last_50k_start) {
        (Some(first), Some(from)) if complete => Some((
            50_000.0 / first.as_secs_f64(),
            50_000.0 / (elapsed - from).as_secs_f64(),
        )),
        _ => None,
    };
    println!(
        "{label}: {got} of {total} deliveries in {:.3} s = {per_second:.0} deliveries/s \
         (the {events} events published in {:.3} s); missing {}{}{}; hookline used {cpu_used:.2} \
         CPU-s = {per_cpu_second:.0} deliveries per CPU-second",
        elapsed.as_secs_f64(),
        (published - started).as_secs_f64(),
        total - got,
        if complete { "" } else { " (timed out)" },
        first_and_last.map_or(String::new(), |(f, l)| format!(
            "; first 50,000 at {f:.0}/s, last 50,000 at {l:.0}/s"
        )),
    );
    let delivered = Delivered {
        per_second,
        missing: total - got,
        first_and_last,
        per_cpu_second,
    };
    (Arc::into_inner(api).unwrap(), delivered)
}

/// The receiver's own limit: 64 keep-alive connections POSTing a delivery-sized body for 3 s.
async fn raw_limit(rx: &Receiver) -> f64 {
    let url = format!("http://{}/hook", rx.addr);
    let body = json!({"id": "raw", "type": "shipment.out_for_delivery",
                      "payload": {"shipment": "SHP-20418", "status": "out_for_delivery",
                                  "eta": "2026-08-15T17:00:00Z"}})
    .to_string();
    let until = Instant::now() + Duration::from_secs(3);
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..64 {
        let (url, body) = (url.clone(), body.clone());
        clients.spawn(async move {
            let http = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .unwrap();
            let mut answered = 0u64;
            while Instant::now() < until {
                let sent = http
                    .post(&url)
                    .header("webhook-id", format!("raw-{c}-{answered}"))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                if sent.is_ok_and(|r| r.status().is_success()) {
                    answered += 1;
                }
            }
            answered
        });
    }
    let started = Instant::now();
    let mut total = 0;
    while let Some(n) = clients.join_next().await {
        total += n.unwrap();
    }
    let per_second = total as f64 / started.elapsed().as_secs_f64();
    println!("raw: the receiver answers {per_second:.0} POST/s (64 connections, 3 s)");
    rx.reset();
    per_second
}

/// A target of issue 16: its figure, and whether it was met.
struct Target {
    what: String,
    figure: String,
    passed: bool,
}

/// The median, 95th percentile and longest of `took`, in ms.
fn spread(mut took: Vec<Duration>) -> (f64, f64, f64) {
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        ms(percentile(&took, 0.5).unwrap_or_default()),
        ms(percentile(&took, 0.95).unwrap_or_default()),
        ms(took.last().copied().unwrap_or_default()),
    )
}

/// One event to 2,000 subscribers, 30 times: time to a durable 202. First each on its own
/// (the previous fan-out drained), then every 100 ms while a background publisher keeps 200
/// other subscribers busy (an event to them every 10 ms): deliveries run throughout. Answers
/// the median under load, ms.
async fn fanout(dir: &Path, rx: &Receiver) -> f64 {
    const SUBS: usize = 2_000;
    const BACKGROUND_SUBS: usize = 200;
    const EVENTS: usize = 30;
    let h = Arc::new(Hookline::start(dir).await);
    let subscribers = |prefix: &str, n: usize, event_type: &str| -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| {
                json!({"id": format!("{prefix}-{i}"), "url": format!("http://{}/hook", rx.addr),
                       "event_types": [event_type]})
            })
            .collect()
    };
    let mut bodies = subscribers("fo", SUBS, "shipment.out_for_delivery");
    bodies.extend(subscribers("bg", BACKGROUND_SUBS, "background"));
    hookline_testkit::create_subscribers(&h.http, &h.base, None, bodies, 16)
        .await
        .unwrap();
    rx.reset();
    let mut alone = Vec::new();
    for e in 0..EVENTS {
        alone.push(h.publish(&format!("fo-{e}")).await);
        wait_for(rx, (e + 1) * SUBS, Duration::from_secs(60)).await;
    }
    let (p50, p95, max) = spread(alone);
    println!(
        "fanout: accept of 1 event x {SUBS} subscribers, each on its own, over {EVENTS} runs: p50 {p50:.1} ms, p95 {p95:.1} ms, max {max:.1} ms"
    );
    rx.reset();
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let background = {
        let (h, running) = (h.clone(), running.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while running.load(std::sync::atomic::Ordering::Relaxed) {
                h.publish_as(&format!("bg-{n}"), "background").await;
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            n
        })
    };
    // Let the background load reach the dispatcher first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut loaded = Vec::new();
    for e in 0..EVENTS {
        loaded.push(h.publish(&format!("fo-load-{e}")).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.store(false, std::sync::atomic::Ordering::Relaxed);
    let background_events = background.await.unwrap();
    let expected = EVENTS * SUBS + background_events * BACKGROUND_SUBS;
    let complete = wait_for(rx, expected, Duration::from_secs(120)).await;
    let (p50, p95, max) = spread(loaded);
    println!(
        "fanout: the same every 100 ms while {background_events} background events to {BACKGROUND_SUBS} subscribers were published: p50 {p50:.1} ms, p95 {p95:.1} ms, max {max:.1} ms; delivered {} of {expected}{}",
        rx.count(),
        if complete { "" } else { " (timed out)" }
    );
    Arc::into_inner(h).unwrap().stop().await;
    p50
}

fn completion(c: &hookline_store::ClaimedDelivery, transition: Transition, now: i64) -> Completion {
    let (outcome, status) = match transition {
        Transition::Delivered => (hookline_policy::Outcome::Success, 200),
        _ => (hookline_policy::Outcome::Retryable, 503),
    };
    Completion {
        key: c.key,
        lease: c.lease,
        record: hookline_store::AttemptRecord {
            ordinal: c.attempt,
            started_at: now,
            duration_ms: 1,
            outcome,
            status: Some(status),
            error: None,
            response_body: None,
            policy: Some("default".into()),
        },
        transition,
        revoke_subscriber: false,
        // Breakers that never open: an open breaker would defer its subscriber's deliveries
        // to the half-open time, half a minute ahead, instead of letting them be parked.
        breaker: hookline_policy::BreakerConfig {
            failures: u32::MAX,
            cool_down: std::time::Duration::from_secs(30),
            max_cool_down: std::time::Duration::from_secs(300),
        },
    }
}

/// `subscribers` subscribers to the event type `tag` and `events` events of it, published at
/// `now`: `subscribers x events` due deliveries.
async fn fill(store: &Arc<dyn Store>, tag: &str, subscribers: usize, events: usize, now: i64) {
    for s in 0..subscribers {
        let subscriber = NewSubscriber {
            tenant_id: None,
            id: format!("{tag}-{s}"),
            url: "http://127.0.0.1:9/unused".into(),
            event_types: vec![tag.into()],
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            max_in_flight: None,
            rate_limit_per_second: None,
            payload_version: None,
            headers: Default::default(),
        };
        store.create_subscriber(subscriber, now).await.unwrap();
    }
    for e in 0..events {
        let event = NewEvent::single(&format!("{tag}-{e}"), tag, "{}", 1);
        store.publish(event, now).await.unwrap();
    }
}

/// The CPU time (user and system) this process has used so far.
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// One event to 2,000 subscribers, straight to the store in this process: what the fan-out
/// costs per delivery it writes when its subscribers list every type (`[]`), the exact type,
/// or a wildcard (`shipment.*`), beside 2,000 subscribers of another type it must pass over;
/// each shape in a store of its own, side by side in one run. On SQLite, deliveries written
/// per CPU-second of this process (the store runs in it); on PostgreSQL (when
/// `HOOKLINE_TEST_POSTGRES` is set), per wall-second (its work is in the server's processes).
/// Compare shapes within a run, and runs of two builds alternated.
async fn accept() {
    const SUBS: usize = 2_000;
    const EVENTS: usize = 60;
    let shapes: [(&str, &[&str]); 3] = [
        ("every type", &[]),
        ("exact type", &["shipment.out_for_delivery"]),
        ("wildcard", &["shipment.*"]),
    ];
    for (shape, types) in shapes {
        let dir = tempfile::tempdir().unwrap();
        let mut stores = vec![(
            "SQLite",
            format!("sqlite://{}", dir.path().join("accept.db").display()),
            None,
        )];
        if std::env::var_os("HOOKLINE_TEST_POSTGRES").is_some() {
            let schema = PgSchema::create().await.unwrap();
            stores.push(("PostgreSQL", schema.url(), Some(schema)));
        }
        for (backend, url, schema) in stores {
            let store = hookline_store::open(&url).await.unwrap();
            let now = now_ms();
            for (prefix, types) in [("fo", types), ("other", &["invoice.paid"][..])] {
                for s in 0..SUBS {
                    let subscriber = NewSubscriber {
                        tenant_id: None,
                        id: format!("{prefix}-{s}"),
                        url: "http://127.0.0.1:9/unused".into(),
                        event_types: types.iter().map(|t| t.to_string()).collect(),
                        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                        max_in_flight: None,
                        rate_limit_per_second: None,
                        payload_version: None,
                        headers: Default::default(),
                    };
                    store.create_subscriber(subscriber, now).await.unwrap();
                }
            }
            let publish = |e: String| {
                let store = store.clone();
                async move {
                    let event = NewEvent::single(&e, "shipment.out_for_delivery", "{}", 1);
                    match store.publish(event, now).await.unwrap() {
                        hookline_store::PublishOutcome::Accepted(r) => r.deliveries,
                        other => panic!("{other:?}"),
                    }
                }
            };
            for e in 0..5 {
                publish(format!("warm-{e}")).await;
            }
            let (cpu, wall) = (own_cpu_seconds(), Instant::now());
            let mut written = 0;
            for e in 0..EVENTS {
                written += publish(format!("accept-{e}")).await;
            }
            let (cpu, wall) = (own_cpu_seconds() - cpu, wall.elapsed().as_secs_f64());
            println!(
                "accept ({backend}, {shape}): {written} deliveries from {EVENTS} events: {:.0} per CPU-second of this process, {:.0} per second",
                written as f64 / cpu,
                written as f64 / wall
            );
            if let Some(schema) = schema {
                schema.drop_schema().await;
            }
        }
    }
}

/// A claim of up to `limit` due deliveries that no per-subscriber cap or retry budget holds back:
/// the benchmarks measure the store, not the isolation limits.
fn unbounded_claim(now: i64, limit: usize) -> ClaimRequest {
    ClaimRequest {
        now,
        limit,
        slots: limit,
        lend: 0,
        lease_ms: 60_000,
        max_in_flight_per_subscriber: u32::MAX,
        max_in_flight_per_host: 0,
        max_retries: usize::MAX,
        exclude_subscribers: Vec::new(),
        window_ended_for_start: i64::MIN,
    }
}

/// Fills the store at `url` with `events x subscribers` deliveries and parks them all an hour
/// ahead, through the store's own operations (what failed attempts would do, minus the HTTP).
/// With breakers that never open (see [`completion`]).
async fn seed_delayed(url: &str, subscribers: usize, events: usize) {
    let store = hookline_store::open(url).await.unwrap();
    let now = now_ms();
    fill(&store, "parked", subscribers, events, now).await;
    loop {
        let claimed = store.claim_due(unbounded_claim(now, 20_000)).await.unwrap();
        if claimed.is_empty() {
            break;
        }
        let done = claimed
            .iter()
            .map(|c| {
                completion(
                    c,
                    Transition::Reschedule {
                        run_at: now + 3_600_000,
                    },
                    now,
                )
            })
            .collect();
        store.complete(done, now).await.unwrap();
    }
}

/// One claim of up to 256 due deliveries, timed; the batch is then completed (untimed) before
/// the next claim, as the dispatcher does, so in flight stays bounded. None once nothing is due.
async fn timed_claim(store: &Arc<dyn Store>, now: i64) -> Option<(Duration, usize)> {
    let started = Instant::now();
    let batch = store.claim_due(unbounded_claim(now, 256)).await.unwrap();
    let took = started.elapsed();
    if batch.is_empty() {
        return None;
    }
    let done = batch
        .iter()
        .map(|c| completion(c, Transition::Delivered, now))
        .collect();
    store.complete(done, now).await.unwrap();
    Some((took, batch.len()))
}

/// Claim latency on two stores, compared fairly: each round fills both with the same 20,000 due
/// deliveries, then they take turns claiming, the one that went second going first next, so
/// the machine's drift (fsync stalls, other load) hits both alike. The schema, on PostgreSQL,
/// gets its statistics brought up to date after filling, as autovacuum would in a running
/// system: a table analyzed while empty is planned for as if it still were, and the comparison
/// would measure the statistics instead of the table. Returns the median claim of each.
async fn compare_claims(stores: [(&Arc<dyn Store>, Option<&PgSchema>); 2]) -> [Duration; 2] {
    let mut times: [Vec<Duration>; 2] = Default::default();
    for round in 0..5 {
        let (now, tag) = (now_ms(), format!("due{round}"));
        for (store, schema) in stores {
            fill(store, &tag, 200, 100, now).await;
            if let Some(schema) = schema {
                schema.sql(&["ANALYZE deliveries"]).await;
            }
        }
        let (mut claimed, mut drained, mut first) = ([0usize; 2], [false; 2], 0);
        while drained != [true, true] {
            for i in [first, 1 - first] {
                if drained[i] {
                    continue;
                }
                match timed_claim(stores[i].0, now).await {
                    Some((took, n)) => {
                        times[i].push(took);
                        claimed[i] += n;
                    }
                    None => drained[i] = true,
                }
            }
            first = 1 - first;
        }
        assert_eq!(claimed, [20_000, 20_000]);
    }
    times.map(median)
}

/// Prints the comparison of `compare_claims`.
fn report_claims(bench: &str, [empty, full]: [Duration; 2]) {
    println!(
        "{bench}: claim of 256 due deliveries (median of 5 x 79 claims, taking turns): {:.2} ms \
         empty, {:.2} ms with 1,000,000 delayed ({:.2}x)",
        empty.as_secs_f64() * 1e3,
        full.as_secs_f64() * 1e3,
        full.as_secs_f64() / empty.as_secs_f64()
    );
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    percentile(&v, 0.5).unwrap_or_default()
}

async fn backlog(dir: &Path, rx: &Receiver) {
    let seeding = Instant::now();
    let url = |d: &Path| format!("sqlite://{}", db_path(d).display());
    seed_delayed(&url(dir), 2_000, 500).await;
    println!(
        "backlog: seeded 1,000,000 delayed deliveries in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    // Let the seeding's writeback finish so it does not slow the fsyncs being measured.
    let _ = Command::new("sync").status();

    let empty_dir = tempfile::tempdir().unwrap();
    let empty = hookline_store::open(&url(empty_dir.path())).await.unwrap();
    let full = hookline_store::open(&url(dir)).await.unwrap();
    report_claims(
        "backlog",
        compare_claims([(&empty, None), (&full, None)]).await,
    );
    drop((empty, full));

    // The serving process on that store, idle and then delivering 20,000 on top of the backlog.
    let h = Hookline::start(dir).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle, _) = h.rss_kib();
    let (h, _) = throughput(
        h,
        &[],
        rx,
        "backlog: throughput with 1,000,000 delayed",
        THROUGHPUT,
    )
    .await;
    let (rss, peak) = h.rss_kib();
    println!(
        "backlog: serving with 1,000,000 delayed: RSS idle {} MiB, after 20,000 deliveries {} MiB, peak {} MiB",
        idle / 1024,
        rss / 1024,
        peak / 1024,
    );
    h.stop().await;
}

/// Claim latency on PostgreSQL with 1,000,000 delayed deliveries in the table versus none.
async fn pg_backlog() {
    let empty = PgSchema::create()
        .await
        .expect("HOOKLINE_TEST_POSTGRES is set");
    let full = PgSchema::create()
        .await
        .expect("HOOKLINE_TEST_POSTGRES is set");
    let empty_store = hookline_store::open(&empty.url()).await.unwrap();
    let full_store = hookline_store::open(&full.url()).await.unwrap();
    let seeding = Instant::now();
    // The rows failed first attempts leave behind, written in one statement: what matters here
    // is the table the claim runs against, not how it got that way.
    let now = now_ms();
    let seed = format!(
        "INSERT INTO deliveries (event_id, subscriber_id, state, held, attempts, first_seen,
                                 window_start, run_at, updated_at)
         SELECT 'parked-' || g, 'p' || (g % 2000), 'scheduled',
                FALSE, 1, {now}, {now}, {now} + 3600000 + g, {now}
         FROM generate_series(1, 1000000) AS g"
    );
    // As for SQLite: let the seeding's writes reach the disk before timing fsyncs.
    full.sql(&[&seed, "VACUUM ANALYZE deliveries", "CHECKPOINT"])
        .await;
    empty.sql(&["VACUUM ANALYZE deliveries"]).await;
    println!(
        "pg-backlog: seeded 1,000,000 delayed deliveries in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let claims = compare_claims([(&empty_store, Some(&empty)), (&full_store, Some(&full))]);
    report_claims("pg-backlog", claims.await);
    drop((empty_store, full_store));
    empty.drop_schema().await;
    full.drop_schema().await;
}

/// Runs `load` on a fresh SQLite hookline; its figures and the process's peak RSS (MiB).
async fn on_sqlite(rx: &Receiver, label: &str, load: Workload) -> (Delivered, u64) {
    let dir = tempfile::tempdir().unwrap();
    let h = Hookline::start(dir.path()).await;
    let (h, delivered) = throughput(h, &[], rx, label, load).await;
    let (_, peak) = h.rss_kib();
    h.stop().await;
    (delivered, peak / 1024)
}

/// Runs `load` on PostgreSQL with one api process and `workers` worker processes.
async fn on_postgres(rx: &Receiver, workers: usize, load: Workload) -> Delivered {
    let schema = PgSchema::create()
        .await
        .expect("HOOKLINE_TEST_POSTGRES is set");
    let dir = tempfile::tempdir().unwrap();
    let api = Hookline::start_with(dir.path(), &schema.url(), "api", "api").await;
    let mut running = Vec::new();
    for w in 0..workers {
        running.push(
            Hookline::start_with(dir.path(), &schema.url(), "worker", &format!("worker{w}")).await,
        );
    }
    let label = format!(
        "PostgreSQL, 1 api + {workers} worker processes, {} x {}",
        load.subscribers, load.events
    );
    let (api, delivered) = throughput(api, &running, rx, &label, load).await;
    api.stop().await;
    for w in running {
        w.stop().await;
    }
    schema.drop_schema().await;
    delivered
}

/// Hanging subscribers the isolation workload runs with, one process each.
const HANGING: [usize; 4] = [200, 1_000, 2_000, 5_000];

/// The isolation workload's settings: one attempt (the hanging ones end dead at their timeout),
/// a 4 s timeout so that the measured phase covers the attempts' start, their turn to suspects
/// and their timeouts, and admission wide enough that only the slots matter.
const ISOLATION_CONFIG: &str = "attempt_timeout = \"4s\"\n[retry]\nmax_attempts = 1\n\
                                [admission]\nmax_projected_drain = \"1h\"\n";

/// Serves `serve` on a loopback port of its own, on its own thread and runtime, like a separate
/// server would; answers the port.
fn serve_on_own_thread<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            serve(listener).await
        });
    });
    rx.recv().unwrap()
}

/// Accepts connections and never answers; counts what it accepted.
fn hanging_host() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let addr = serve_on_own_thread(|listener| async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut sink = [0u8; 4096];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    (addr, accepted)
}

/// The p99 of 100 healthy publishes 40 ms apart, each timed from its publish to its receipt.
async fn healthy_p99(h: &Hookline, rx: &Receiver, phase: &str) -> Duration {
    let mut took = Vec::with_capacity(100);
    for i in 0..100 {
        let id = format!("{phase}-{i}");
        let sent = Instant::now();
        h.publish_as(&id, "healthy.ping").await;
        let webhook_id = format!("{id}:healthy");
        let arrived = loop {
            if let Some(at) = rx.arrived(&webhook_id) {
                break at;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(60),
                "{id} never arrived"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        took.push(arrived.duration_since(sent));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    took.sort();
    percentile(&took, 0.99).unwrap()
}

/// What one isolation run measured.
struct Isolation {
    hanging: usize,
    baseline: Duration,
    storm: Duration,
    /// The serving process's RSS growth per hanging attempt, KiB.
    kib_per_hanging: f64,
}

async fn isolation(rx: &Receiver, hanging: usize) -> Isolation {
    let (hang_addr, accepted) = hanging_host();
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", db_path(dir.path()).display());
    let h =
        Hookline::start_configured(dir.path(), &database, "all", "bench", ISOLATION_CONFIG).await;
    let healthy = json!({"id": "healthy", "url": format!("http://{}/hook", rx.addr),
                         "event_types": ["healthy.ping"]});
    let hangs = (0..hanging).map(|i| {
        json!({"id": format!("hangs-{i}"), "url": format!("http://{hang_addr}/h/{i}"),
               "event_types": ["storm"]})
    });
    let bodies = std::iter::once(healthy).chain(hangs).collect();
    hookline_testkit::create_subscribers(&h.http, &h.base, None, bodies, 16)
        .await
        .unwrap();
    let baseline = healthy_p99(&h, rx, &format!("baseline{hanging}")).await;
    let (rss_before, _) = h.rss_kib();
    h.publish_as(&format!("storm{hanging}"), "storm").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while accepted.load(std::sync::atomic::Ordering::SeqCst) < hanging && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (rss_storm, _) = h.rss_kib();
    let storm = healthy_p99(&h, rx, &format!("storm{hanging}")).await;
    let open = accepted.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "isolation, {hanging} hanging ({open} in flight at once): healthy p99 first attempt \
         {:.1} ms against {:.1} ms alone (ratio {:.2}; bound 1.25x + 50 ms = {:.1} ms); \
         RSS {} -> {} MiB",
        storm.as_secs_f64() * 1e3,
        baseline.as_secs_f64() * 1e3,
        storm.as_secs_f64() / baseline.as_secs_f64(),
        (baseline.mul_f64(1.25) + Duration::from_millis(50)).as_secs_f64() * 1e3,
        rss_before / 1024,
        rss_storm / 1024,
    );
    h.stop().await;
    Isolation {
        hanging,
        baseline,
        storm,
        kib_per_hanging: rss_storm.saturating_sub(rss_before) as f64 / open.max(1) as f64,
    }
}

fn report_targets(targets: &[Target]) {
    if targets.is_empty() {
        return;
    }
    println!("\ntargets (issues 16 and 32):");
    for t in targets {
        let verdict = if t.passed { "PASS" } else { "FAIL" };
        println!("  {verdict}  {}: {}", t.what, t.figure);
    }
}

fn main() {
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let run = |name: &str| which.is_empty() || which.iter().any(|w| w == name || w == "all");
    assert!(
        !(run("pg-throughput") || run("pg-sustained") || run("pg-backlog"))
            || std::env::var_os("HOOKLINE_TEST_POSTGRES").is_some(),
        "the PostgreSQL workloads need HOOKLINE_TEST_POSTGRES (a durable server)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rx = Receiver::start();
    let mut targets = Vec::new();
    rt.block_on(async {
        let raw = if run("raw") || run("sustained") {
            Some(raw_limit(&rx).await)
        } else {
            None
        };
        if run("throughput") {
            on_sqlite(&rx, "throughput (SQLite, one process)", THROUGHPUT).await;
        }
        if run("sustained") {
            let (d, peak_mib) = on_sqlite(&rx, "sustained (SQLite, one process)", SUSTAINED).await;
            let raw = raw.unwrap_or(f64::INFINITY);
            targets.push(Target {
                what: "SQLite 200 x 1,000 sustained >= 35,000/s and >= 30% of the receiver's raw limit, 0 missing, RSS < 150 MB".into(),
                figure: format!(
                    "{:.0}/s ({:.0}% of the receiver's {raw:.0}/s; {:.0} per CPU-second), {} missing, peak RSS {peak_mib} MiB",
                    d.per_second,
                    100.0 * d.per_second / raw,
                    d.per_cpu_second,
                    d.missing
                ),
                passed: d.per_second >= 35_000.0
                    && d.per_second >= 0.3 * raw
                    && d.missing == 0
                    && peak_mib < 150,
            });
        }
        if run("single") {
            let (d, _) = on_sqlite(&rx, "single (SQLite, 1 subscriber)", SINGLE).await;
            targets.push(Target {
                what: "1 subscriber x 5,000 >= 10,000/s within its default cap".into(),
                figure: format!("{:.0}/s, {} missing", d.per_second, d.missing),
                passed: d.per_second >= 10_000.0 && d.missing == 0,
            });
        }
        if run("fanout") {
            let dir = tempfile::tempdir().unwrap();
            let p50_ms = fanout(dir.path(), &rx).await;
            targets.push(Target {
                what: "one event to 2,000 subscribers accepted in < 10 ms p50 while deliveries run"
                    .into(),
                figure: format!("p50 {p50_ms:.1} ms"),
                passed: p50_ms < 10.0,
            });
        }
        if run("accept") {
            accept().await;
        }
        if run("backlog") {
            let dir = tempfile::tempdir().unwrap();
            backlog(dir.path(), &rx).await;
        }
        if run("pg-throughput") {
            for workers in [1, 2] {
                on_postgres(&rx, workers, THROUGHPUT).await;
            }
        }
        if run("pg-sustained") {
            let d = on_postgres(&rx, 1, SUSTAINED).await;
            let (first, last) = d.first_and_last.unwrap_or((0.0, 0.0));
            targets.push(Target {
                what: "PostgreSQL 200 x 1,000 sustained, 1 api + 1 worker: >= 12,000/s, the last 50,000 no slower than the first 50,000".into(),
                figure: format!(
                    "{:.0}/s, {} missing; first 50,000 at {first:.0}/s, last 50,000 at {last:.0}/s",
                    d.per_second, d.missing
                ),
                passed: d.per_second >= 12_000.0 && d.missing == 0 && last >= first && first > 0.0,
            });
        }
        if run("pg-backlog") {
            pg_backlog().await;
        }
        if run("isolation") {
            for hanging in HANGING {
                let i = isolation(&rx, hanging).await;
                let bound = i.baseline.mul_f64(1.25) + Duration::from_millis(50);
                targets.push(Target {
                    what: format!(
                        "{} subscribers hanging at once: healthy p99 first attempt <= 1.25x its baseline + 50 ms",
                        i.hanging
                    ),
                    figure: format!(
                        "{:.1} ms against {:.1} ms (ratio {:.2}); {:.0} KiB of RSS per hanging attempt",
                        i.storm.as_secs_f64() * 1e3,
                        i.baseline.as_secs_f64() * 1e3,
                        i.storm.as_secs_f64() / i.baseline.as_secs_f64(),
                        i.kib_per_hanging
                    ),
                    passed: i.storm <= bound,
                });
            }
        }
    });
    report_targets(&targets);
}
