//! Several hookline processes on one PostgreSQL: one `api` process and three `worker` processes
//! share a 2,000-subscriber fan-out with failing destinations, and one worker is killed with
//! SIGKILL mid-run. Then: a full restart of every process changes no `run_at`, attempt count or
//! first-seen time.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use hookline_store::testing::PgSchema;
use serde_json::{json, Value};

const SUBSCRIBERS: usize = 2_000;

/// Which destination a subscriber has: most answer 200, some never recover, some reject
/// everything, some fail once and then succeed.
fn path_of(i: usize) -> &'static str {
    match i % 20 {
        0 => "/down",
        1 => "/bad",
        2 => "/flaky",
        _ => "/ok",
    }
}

fn behaviour(path: &str, nth: u32) -> u16 {
    match path {
        "/down" => 503,
        "/bad" => 400,
        "/flaky" if nth == 1 => 503,
        _ => 200,
    }
}

/// One local receiver stands in for 2,000 subscribers' destinations, so the cap per host is
/// off: it would hold the whole run to one host's share (`tests/it/host_cap.rs` tests the cap).
/// Admission is not what these tests are about: its floor (64 slots at a 1 s timeout, 64/s)
/// projects 4,000 deliveries past half of this 60 s window, so the drain limit is widened.
fn config(schema: &PgSchema) -> String {
    format!(
        "database = \"{}\"\nallow_private_destinations = true\n\
         [delivery]\nconcurrency = 64\nattempt_timeout = \"1s\"\nmax_in_flight_per_subscriber = 2\nmax_in_flight_per_host = 0\n\
         [retry]\nbase_delay = \"200ms\"\nmax_delay = \"400ms\"\nmax_attempts = 3\ndelivery_window = \"60s\"\n\
         [admission]\nmax_projected_drain = \"1h\"\n",
        schema.url()
    )
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

async fn create_subscribers(http: &reqwest::Client, base: &str, rx: &Receiver) {
    let bodies = (0..SUBSCRIBERS)
        .map(|i| json!({"id": format!("sub-{i}"), "url": rx.url(path_of(i))}))
        .collect();
    hookline_testkit::create_subscribers(http, base, None, bodies, 16)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_one_killed_lose_nothing_and_never_overlap() {
    let Some(schema) = PgSchema::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start_slow(Duration::from_millis(20), behaviour).await;
    let config = config(&schema);
    let api = Process::spawn(dir.path(), "api", &config, "api").await;
    let mut workers = Vec::new();
    for n in 0..3 {
        workers.push(Process::spawn(dir.path(), &format!("worker{n}"), &config, "worker").await);
    }
    let http = reqwest::Client::new();
    // A worker serves its health and nothing else.
    let r = http
        .get(format!("{}/v1/subscribers", workers[0].base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    create_subscribers(&http, &api.base, &rx).await;
    let events = ["SHP-1", "SHP-2"];
    for id in events {
        let r = http
            .post(format!("{}/v1/events", api.base))
            .json(&json!({"id": id, "type": "shipment.out_for_delivery", "payload": {"id": id}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    eventually("the fan-out to be under way", async || {
        (rx.received().len() >= 800).then_some(())
    })
    .await;
    workers[0].kill_9();
    let at_kill = rx.received().len();

    // Every delivery ends: the survivors rescue what the dead worker held once its leases expire.
    for id in events {
        eventually("every delivery to end", async || {
            let e = get(&http, format!("{}/v1/events/{id}", api.base)).await;
            let open = e["counts"]["scheduled"].as_u64().unwrap()
                + e["counts"]["in_flight"].as_u64().unwrap();
            (open == 0).then_some(())
        })
        .await;
    }
    assert!(
        at_kill < rx.received().len(),
        "the kill came after everything was sent"
    );

    let mut reasons: HashMap<(String, String), usize> = HashMap::new();
    for id in events {
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{}/v1/deliveries?event_id={id}&limit=1000", api.base);
            if let Some(c) = &cursor {
                url += &format!("&cursor={c}");
            }
            let page = get(&http, url).await;
            for d in page["items"].as_array().unwrap() {
                let sub: usize = d["subscriber_id"].as_str().unwrap()[4..].parse().unwrap();
                let outcome = match d["state"].as_str().unwrap() {
                    "delivered" => "delivered".to_owned(),
                    "dead" => d["dead_reason"].as_str().unwrap().to_owned(),
                    other => panic!("delivery {} ended {other}", d["id"]),
                };
                *reasons
                    .entry((path_of(sub).to_owned(), outcome))
                    .or_default() += 1;
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
    }
    let per_path =
        |path: &str| SUBSCRIBERS / 20 * events.len() * if path == "/ok" { 17 } else { 1 };
    let expected: HashMap<(String, String), usize> = [
        ("/ok", "delivered"),
        ("/flaky", "delivered"),
        ("/down", "attempts_exhausted"),
        ("/bad", "permanent_failure"),
    ]
    .into_iter()
    .map(|(p, o)| ((p.to_owned(), o.to_owned()), per_path(p)))
    .collect();
    assert_eq!(
        reasons, expected,
        "every delivery ended the way its destination dictates"
    );

    eprintln!(
        "killed a worker after {at_kill} requests; {} requests in all, {} webhook-ids answered 2xx twice",
        rx.received().len(),
        rx.duplicated_ids().len()
    );
    assert_eq!(
        rx.overlaps(),
        0,
        "a delivery was in flight in two processes at once"
    );
    // A subscriber sees a webhook-id succeed twice only when a lost lease explains it.
    for id in rx.duplicated_ids() {
        let d = get(&http, format!("{}/v1/deliveries/{id}", api.base)).await;
        let lost = d["attempt_history"].as_array().unwrap().iter().any(|a| {
            a["outcome"] == "lost"
                && a["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("lease expired"))
        });
        assert!(lost, "duplicate without a lost lease: {d}");
    }
    for w in workers.into_iter().skip(1) {
        assert!(w.terminate().await.unwrap().success());
    }
    assert!(api.terminate().await.unwrap().success());
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_restart_changes_no_run_at_attempt_count_or_first_seen() {
    let Some(schema) = PgSchema::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(|_, _| 503).await;
    // Retries an hour apart: nothing moves while the processes are down and up again.
    let config = format!(
        "database = \"{}\"\nallow_private_destinations = true\n\
         [retry]\nbase_delay = \"1h\"\nmax_delay = \"1h\"\ndelivery_window = \"24h\"\n",
        schema.url()
    );
    let http = reqwest::Client::new();
    let api = Process::spawn(dir.path(), "api", &config, "api").await;
    let worker = Process::spawn(dir.path(), "worker", &config, "worker").await;
    for i in 0..20 {
        let r = http
            .post(format!("{}/v1/subscribers", api.base))
            .json(&json!({"id": format!("sub-{i}"), "url": rx.url("/down")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    for e in 0..5 {
        let r = http
            .post(format!("{}/v1/events", api.base))
            .json(&json!({"id": format!("e{e}"), "type": "t", "payload": {}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    let list = |base: String| {
        let http = http.clone();
        async move {
            get(&http, format!("{base}/v1/deliveries?limit=1000")).await["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    json!({"id": d["id"], "next_attempt_at": d["next_attempt_at"],
                           "attempts": d["attempts"], "first_seen": d["first_seen"], "state": d["state"]})
                })
                .collect::<Vec<Value>>()
        }
    };
    let before = eventually("every delivery to fail once", async || {
        let all = list(api.base.clone()).await;
        all.iter()
            .all(|d| d["attempts"] == 1 && d["state"] == "scheduled")
            .then_some(all)
    })
    .await;
    assert_eq!(before.len(), 100);

    assert!(worker.terminate().await.unwrap().success());
    assert!(api.terminate().await.unwrap().success());
    let api = Process::spawn(dir.path(), "api", &config, "api").await;
    let worker = Process::spawn(dir.path(), "worker", &config, "worker").await;
    assert_eq!(list(api.base.clone()).await, before);
    assert_eq!(
        rx.received().len(),
        100,
        "no attempt was made or lost by the restart"
    );
    assert!(worker.terminate().await.unwrap().success());
    assert!(api.terminate().await.unwrap().success());
    schema.drop_schema().await;
}

fn hookline(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_and_prune_from_the_command_line() {
    let Some(schema) = PgSchema::create().await else {
        return;
    };
    let url = schema.url();
    // Prune is refused on a database with no hookline store, and creates none.
    let refused = hookline(&["prune", "--database", &url, "--delivered-before", "7d"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("no hookline store"),
        "{said}"
    );
    let status = hookline(&["migrate", "--status", "--database", &url]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("schema version:           0"), "{said}");
    // Several processes migrating at once: one applies, the others find it done.
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || hookline(&["migrate", "--database", &url]))
        })
        .collect();
    for run in runs {
        let out = run.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let rx = Receiver::start(|_, _| 200).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!("database = \"{url}\"\nallow_private_destinations = true\n");
    let p = Process::spawn(dir.path(), "all", &config, "all").await;
    let http = reqwest::Client::new();
    for i in 0..10 {
        http.post(format!("{}/v1/subscribers", p.base))
            .json(&json!({"id": format!("s{i}"), "url": rx.url("/ok")}))
            .send()
            .await
            .unwrap();
    }
    for e in 0..3 {
        http.post(format!("{}/v1/events", p.base))
            .json(&json!({"id": format!("e{e}"), "type": "t", "payload": {}}))
            .send()
            .await
            .unwrap();
    }
    eventually("30 deliveries", async || {
        let page = get(&http, format!("{}/v1/deliveries?state=delivered", p.base)).await;
        (page["items"].as_array().unwrap().len() == 30).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(5)).await; // let "delivered before 1ms" cover them all
    let out = hookline(&[
        "prune",
        "--database",
        &url,
        "--delivered-before",
        "1ms",
        "--batch",
        "7",
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("pruned 30 "),
        "{said}"
    );
    let page = get(&http, format!("{}/v1/deliveries", p.base)).await;
    assert_eq!(page["items"], json!([]));
    let event = get(&http, format!("{}/v1/events/e0", p.base)).await;
    assert_eq!(event["deliveries"], 10, "the event keeps its record");
    let bad = hookline(&["prune", "--database", &url, "--delivered-before", "soon"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--delivered-before"));
    // Roles that split the work need the shared database.
    let refused = hookline(&["serve", "--role", "worker", "--database", "sqlite://x.db"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("PostgreSQL"));
    assert!(p.terminate().await.unwrap().success());
    schema.drop_schema().await;
}

/// Pause, resume, publish, claim and complete race on one subscriber across three processes:
/// whatever the interleaving, no delivery is left held for an active subscriber (or waiting
/// for nothing): once it is resumed for good, every delivery ends delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipping_a_subscriber_between_paused_and_active_strands_nothing() {
    const EVENTS: usize = 300;
    let Some(schema) = PgSchema::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(|_, _| 200).await;
    let config = config(&schema);
    let api = Process::spawn(dir.path(), "api", &config, "api").await;
    let mut workers = Vec::new();
    for n in 0..2 {
        workers.push(Process::spawn(dir.path(), &format!("worker{n}"), &config, "worker").await);
    }
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/subscribers", api.base))
        .json(&json!({"id": "flip", "url": rx.url("/ok")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let flipper = tokio::spawn({
        let (http, base) = (http.clone(), api.base.clone());
        async move {
            for i in 0..400 {
                let status = if i % 2 == 0 { "paused" } else { "active" };
                let r = http
                    .patch(format!("{base}/v1/subscribers/flip"))
                    .json(&json!({"status": status}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
            }
        }
    });
    let mut publishers = tokio::task::JoinSet::new();
    for p in 0..4 {
        let (http, base) = (http.clone(), api.base.clone());
        publishers.spawn(async move {
            for e in (p..EVENTS).step_by(4) {
                let r = http
                    .post(format!("{base}/v1/events"))
                    .json(&json!({"id": format!("flip-{e}"), "type": "t", "payload": {"e": e}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 202);
            }
        });
    }
    while publishers.join_next().await.is_some() {}
    flipper.await.unwrap();
    let r = http
        .patch(format!("{}/v1/subscribers/flip", api.base))
        .json(&json!({"status": "active"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    eventually("every delivery to be delivered", async || {
        let page = get(
            &http,
            format!(
                "{}/v1/deliveries?subscriber_id=flip&state=delivered&limit=1000",
                api.base
            ),
        )
        .await;
        (page["items"].as_array().unwrap().len() == EVENTS).then_some(())
    })
    .await;
    assert_eq!(rx.state_changes().len(), EVENTS);
    for w in workers {
        assert!(w.terminate().await.unwrap().success());
    }
    assert!(api.terminate().await.unwrap().success());
    schema.drop_schema().await;
}
