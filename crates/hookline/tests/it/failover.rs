//! PostgreSQL failover under load: a primary and a synchronous streaming standby
//! (`ReplicatedPostgres`), one `api` and one `worker` process connected through the multi-host
//! URL with `target_session_attrs=read-write`, events published continuously and delivered to a
//! local receiver; then the primary is killed (`pg_ctl stop -m immediate`), `/healthz` must say
//! 503, and the standby is promoted (`pg_ctl promote`) 5 s after the kill. hookline must find
//! the new primary by itself, acknowledge nothing while there is none, deliver every event it
//! answered 202 (before and after), send nothing twice except attempts whose completion the
//! failover cut (a lost attempt in their history), and report the gap. `docs/RUNBOOK.md`,
//! "PostgreSQL failover", quotes the gap measured here.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use hookline_store::testing::ReplicatedPostgres;
use serde_json::{json, Value};

const SUBSCRIBERS: usize = 8;
/// Delivery slots of the worker: at most this many attempts can be in flight at the kill, so at
/// most this many deliveries can be sent twice.
const CONCURRENCY: usize = 64;
/// How long the database is down: as long as a quick operator or failover manager takes, and
/// longer than the worker retries a failed commit of completions (about 3 s), so attempts in
/// flight at the kill lose their completion and are sent again once their leases run out.
const OUTAGE: Duration = Duration::from_secs(5);

/// The worker's slots are fixed (the bound on duplicates); the receiver is one host for every
/// subscriber, so the cap per host is off; retries are quick and the window wide, so nothing
/// here waits on a retry policy or dies of one.
fn config(url: &str) -> String {
    format!(
        "database = \"{url}\"\nallow_private_destinations = true\n\
         [delivery]\nconcurrency = {CONCURRENCY}\nattempt_timeout = \"2s\"\nmax_in_flight_per_host = 0\n\
         [retry]\nbase_delay = \"200ms\"\nmax_delay = \"1s\"\ndelivery_window = \"10m\"\n\
         [admission]\nmax_projected_drain = \"1h\"\n"
    )
}

/// One `POST /v1/events`: when it was sent, when it was answered, and how.
struct Publish {
    event: String,
    sent: Instant,
    answered: Instant,
    status: u16,
}

/// Publishes `evt-N`, N = 0, 1, ..., every 20 ms until `stop` is set, recording each answer.
async fn publish_until(
    http: reqwest::Client,
    api: String,
    log: Arc<Mutex<Vec<Publish>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0.. {
        tick.tick().await;
        if stop.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let event = format!("evt-{n}");
        let sent = Instant::now();
        let answer = http
            .post(format!("{api}/v1/events"))
            .json(&json!({"id": event, "type": "shipment.out_for_delivery", "payload": {"n": n}}))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let status = answer.map_or(0, |r| r.status().as_u16());
        log.lock().unwrap().push(Publish {
            event,
            sent,
            answered: Instant::now(),
            status,
        });
    }
}

/// Polls `GET /healthz` of `base` every 50 ms until `stop` is set: (when, status).
async fn watch_health(
    http: reqwest::Client,
    base: String,
    log: Arc<Mutex<Vec<(Instant, u16)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        let answer = http
            .get(format!("{base}/healthz"))
            .timeout(Duration::from_secs(6))
            .send()
            .await;
        let status = answer.map_or(0, |r| r.status().as_u16());
        log.lock().unwrap().push((Instant::now(), status));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The event each request announced, by subscriber path.
fn event_of(r: &Received) -> String {
    r.json()["id"].as_str().unwrap().to_owned()
}

/// Waits, up to `limit` of real time, for `check`: the system making progress.
async fn within<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_takes_over_and_nothing_acknowledged_is_lost() {
    let Some(pg) = tokio::task::block_in_place(ReplicatedPostgres::start) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Answers take a while, so attempts are in flight when the primary dies.
    let rx = Receiver::start_slow(Duration::from_millis(20), |_, _| 200).await;
    let config = config(&pg.url());
    let api = Process::spawn(dir.path(), "api", &config, "api").await;
    let worker = Process::spawn(dir.path(), "worker", &config, "worker").await;
    let http = reqwest::Client::new();
    let bodies = (0..SUBSCRIBERS)
        .map(|i| json!({"id": format!("sub-{i}"), "url": rx.url(&format!("/sub-{i}"))}))
        .collect();
    hookline_testkit::create_subscribers(&http, &api.base, None, bodies, 4)
        .await
        .unwrap();

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publishes = Arc::new(Mutex::new(Vec::new()));
    let health = Arc::new(Mutex::new(Vec::new()));
    let publisher = tokio::spawn(publish_until(
        http.clone(),
        api.base.clone(),
        publishes.clone(),
        stop.clone(),
    ));
    let worker_health = Arc::new(Mutex::new(Vec::new()));
    let watchers = [(&api, &health), (&worker, &worker_health)].map(|(process, log)| {
        tokio::spawn(watch_health(
            http.clone(),
            process.base.clone(),
            log.clone(),
            stop.clone(),
        ))
    });
    within(
        Duration::from_secs(30),
        "deliveries to be under way",
        || (rx.received().len() >= 400).then_some(()),
    )
    .await;

    tokio::task::block_in_place(|| pg.kill_primary());
    let killed = Instant::now();
    within(Duration::from_secs(30), "/healthz to say 503", || {
        let health = health.lock().unwrap();
        health
            .iter()
            .any(|(at, status)| *at > killed && *status == 503)
            .then_some(())
    })
    .await;
    tokio::time::sleep(OUTAGE.saturating_sub(killed.elapsed())).await;
    let promoted = Instant::now();
    tokio::task::block_in_place(|| pg.promote_standby());

    // The first publish sent after the kill that is acknowledged, and the first of those events
    // to reach the receiver.
    let first_acknowledged = within(Duration::from_secs(60), "a publish to succeed", || {
        let log = publishes.lock().unwrap();
        log.iter()
            .find(|p| p.sent > killed && p.status == 202)
            .map(|p| (p.event.clone(), p.answered))
    })
    .await;
    let first_delivered = within(
        Duration::from_secs(60),
        "a delivery after the failover",
        || {
            let log = publishes.lock().unwrap();
            let after: HashSet<&str> = log
                .iter()
                .filter(|p| p.sent > killed && p.status == 202)
                .map(|p| p.event.as_str())
                .collect();
            rx.received()
                .iter()
                .any(|r| after.contains(event_of(r).as_str()))
                .then(Instant::now)
        },
    )
    .await;
    // Publishing goes on for a while on the new primary.
    within(
        Duration::from_secs(60),
        "publishes on the new primary",
        || {
            let log = publishes.lock().unwrap();
            (log.iter()
                .filter(|p| p.sent > promoted && p.status == 202)
                .count()
                >= 100)
                .then_some(())
        },
    )
    .await;
    let healthy_again = within(Duration::from_secs(60), "/healthz to say 200 again", || {
        let health = health.lock().unwrap();
        health
            .iter()
            .find(|(at, status)| *at > promoted && *status == 200)
            .map(|(at, _)| *at)
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    publisher.await.unwrap();
    for watcher in watchers {
        watcher.await.unwrap();
    }
    let said_503_without_a_primary = |log: &Mutex<Vec<(Instant, u16)>>| {
        log.lock()
            .unwrap()
            .iter()
            .any(|(at, status)| (killed..promoted).contains(at) && *status == 503)
    };
    assert!(
        said_503_without_a_primary(&worker_health),
        "the worker's /healthz never said 503 while there was no primary"
    );

    let publishes = std::mem::take(&mut *publishes.lock().unwrap());
    let acknowledged: Vec<&str> = publishes
        .iter()
        .filter(|p| p.status == 202)
        .map(|p| p.event.as_str())
        .collect();
    let mut refused: HashMap<u16, usize> = HashMap::new();
    for p in publishes.iter().filter(|p| p.status != 202) {
        *refused.entry(p.status).or_default() += 1;
    }
    // Without a primary a publish is told to come back (503 storage_unavailable, Retry-After),
    // not that the store failed (500). (0: no answer within the client's 10 s, which a loaded
    // machine may see.)
    assert!(
        refused.keys().all(|status| matches!(*status, 503 | 0)),
        "refused publishes by status: {refused:?}"
    );
    // Every acknowledged event reaches every subscriber; lost leases are rescued once they run
    // out (attempt timeout + 5 s).
    let expected: HashSet<(String, String)> = acknowledged
        .iter()
        .flat_map(|e| (0..SUBSCRIBERS).map(move |i| (format!("/sub-{i}"), e.to_string())))
        .collect();
    within(
        Duration::from_secs(60),
        "every acknowledged event delivered",
        || {
            let got: HashSet<(String, String)> = rx
                .received()
                .iter()
                .map(|r| (r.path.clone(), event_of(r)))
                .collect();
            expected.is_subset(&got).then_some(())
        },
    )
    .await;
    for state in ["scheduled", "in_flight", "dead"] {
        let url = format!("{}/v1/deliveries?state={state}", api.base);
        let page: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        assert_eq!(
            page["items"].as_array().unwrap().len(),
            0,
            "deliveries left {state}: {page}"
        );
    }

    // One webhook-id per delivery, kept on every attempt; an event's fan-out is all or nothing
    // (an unacknowledged publish whose commit reached the standby is delivered to everyone).
    let received = rx.received();
    let mut delivery_of: HashMap<String, (String, String)> = HashMap::new();
    for r in &received {
        let delivery = (r.path.clone(), event_of(r));
        let first = delivery_of
            .entry(r.webhook_id.clone())
            .or_insert(delivery.clone());
        assert_eq!(*first, delivery, "one webhook-id on two deliveries");
    }
    let delivered: HashSet<&(String, String)> = delivery_of.values().collect();
    assert_eq!(
        delivered.len(),
        delivery_of.len(),
        "a delivery under two webhook-ids"
    );
    let mut per_event: HashMap<&str, usize> = HashMap::new();
    for (_, event) in &delivered {
        *per_event.entry(event.as_str()).or_default() += 1;
    }
    assert!(
        per_event.values().all(|n| *n == SUBSCRIBERS),
        "an event reached only some of its subscribers"
    );
    // Sent twice only when the failover cut the attempt's completion: the lease ran out and the
    // attempt was recorded as lost.
    let resent = received.len() - delivery_of.len();
    let duplicated = rx.duplicated_ids();
    assert!(
        duplicated.len() <= CONCURRENCY,
        "{} deliveries sent twice, more than were in flight",
        duplicated.len()
    );
    for id in &duplicated {
        let url = format!("{}/v1/deliveries/{id}", api.base);
        let d: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        let lost = d["attempt_history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["outcome"] == "lost");
        assert!(lost, "sent twice without a lost attempt: {d}");
    }

    let (event, acknowledged_at) = first_acknowledged;
    assert!(
        acknowledged_at > promoted,
        "{event} was acknowledged while there was no primary"
    );
    let gap = |at: Instant| at.duration_since(killed).as_secs_f64();
    let after_promotion = |at: Instant| at.duration_since(promoted).as_secs_f64();
    let _ = writeln!(
        std::io::stderr().lock(),
        "failover: standby promoted (pg_ctl promote) {:.2} s after the primary was killed; first publish \
         acknowledged {:.2} s after the kill ({:.2} s after the promotion, {event}), first \
         delivery of an event published after the kill {:.2} s ({:.2} s); /healthz 200 again \
         {:.2} s ({:.2} s); {} events acknowledged, refused or failed by status: {refused:?}; \
         {} requests to the receiver, {resent} of them repeats ({} webhook-ids sent twice)",
        gap(promoted),
        gap(acknowledged_at),
        after_promotion(acknowledged_at),
        gap(first_delivered),
        after_promotion(first_delivered),
        gap(healthy_again),
        after_promotion(healthy_again),
        acknowledged.len(),
        received.len(),
        duplicated.len(),
    );
    assert!(
        gap(first_delivered) < 120.0,
        "hookline took more than 120 s to deliver again after the failover"
    );
    assert!(worker.terminate().await.unwrap().success());
    assert!(api.terminate().await.unwrap().success());
}
